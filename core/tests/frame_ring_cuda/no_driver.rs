//! A CUDA ring where there is no CUDA driver: a clean error, and nothing left behind.

use cuframes_test_support as common;

use common::{frame_shm_name, TestEnv};
use cuframes_core::cuda::{self};
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher};
use cuframes_core::wire::Format;
use cuframes_core::ErrorCode;

#[test]
fn a_cuda_ring_without_a_driver_is_a_clean_error() {
    if cuda::driver_available().is_ok() {
        eprintln!("SKIPPED (a CUDA driver is present): this test checks the no-driver error");
        return;
    }
    let env = TestEnv::new("nogpu");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 64);
    cfg.memory = MemoryChoice::Cuda { device: 0 };
    let e = p.enable_frames(cfg).err().unwrap();
    assert_eq!(e.code(), ErrorCode::Cuda);
    assert!(e.message().contains("libcuda"), "{e}");
    // Nothing was left behind by the failed enable.
    assert!(cuframes_core::shm::open(&frame_shm_name(&env.key), 0, false).is_err());
}
