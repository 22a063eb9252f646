//! The CUDA tests' fixture: the GPU taken for one test at a time (or the test skipped with
//! the reason), a publisher with a CUDA ring on device 0 and a subscriber on the same device.

use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cuframes_core::cuda::{self, Stream};
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::testing;
use cuframes_core::wire::{Format, Policy, SubscriberMode};

use crate::TestEnv;

/// `CU_STREAM_LEGACY` of cuda.h: the legacy default stream of the current context (what the
/// FFmpeg glue passes when its hwcontext has no stream).
pub const CU_STREAM_LEGACY: *mut c_void = 0x1 as *mut c_void;

/// `CU_STREAM_PER_THREAD` of cuda.h: the calling thread's default stream of the current
/// context (torch's and CuPy's default stream in per-thread mode).
pub const CU_STREAM_PER_THREAD: *mut c_void = 0x2 as *mut c_void;

/// One GPU test at a time in this process: the release and mapping counters and
/// cuMemGetInfo are process- or device-wide.
static GPU: Mutex<()> = Mutex::new(());

/// The GPU for one test: this process's GPU lock, held while the guard lives; `None` where
/// there is no CUDA device, after printing why (`SKIPPED (no CUDA device): …` or
/// `SKIPPED (no CUDA driver): …`), so that the test returns.
pub fn gpu_or_skip() -> Option<MutexGuard<'static, ()>> {
    let guard = GPU.lock().unwrap_or_else(|e| e.into_inner());
    match cuda::driver_available().and_then(|_| cuda::device_count()) {
        Ok(n) if n > 0 => Some(guard),
        Ok(_) => {
            eprintln!("SKIPPED (no CUDA device): the driver reports 0 devices");
            None
        }
        Err(e) => {
            eprintln!("SKIPPED (no CUDA driver): {e}");
            None
        }
    }
}

/// A small NV12 ring (256×144) of `ring_size` slots on CUDA device 0 under `policy`, with an
/// ack timeout (60 s) that no test reaches.
pub fn cuda_ring(ring_size: usize, policy: Policy) -> FrameRingConfig {
    let mut cfg = FrameRingConfig::new(Format::Nv12, 256, 144);
    cfg.ring_size = ring_size;
    cfg.policy = policy;
    cfg.ack_timeout = Duration::from_secs(60);
    cfg.memory = MemoryChoice::Cuda { device: 0 };
    cfg
}

/// A COPY subscriber named `name` whose frames land on device 0.
pub fn cuda_copy_options(env: &TestEnv, name: &str) -> SubscriberOptions {
    SubscriberOptions {
        mode: SubscriberMode::Copy,
        cuda_device: 0,
        ..env.subscriber_options(name)
    }
}

/// A ZERO_COPY subscriber named `name` on device 0 (zero-copy only where the policy gives
/// it: STRICT_WAIT).
pub fn cuda_zero_copy_options(env: &TestEnv, name: &str) -> SubscriberOptions {
    SubscriberOptions {
        mode: SubscriberMode::ZeroCopy,
        cuda_device: 0,
        ..env.subscriber_options(name)
    }
}

/// A ZERO_COPY subscriber named `name` on device 0 that accepts a frame being overwritten
/// while held, so that it maps the slots under every policy.
pub fn cuda_zero_copy_accepting_overwrite(env: &TestEnv, name: &str) -> SubscriberOptions {
    SubscriberOptions {
        accept_zero_copy_overwrite: true,
        ..cuda_zero_copy_options(env, name)
    }
}

/// A publisher of `env`'s key with the frame ring `ring` enabled.
pub fn cuda_publisher(env: &TestEnv, ring: FrameRingConfig) -> Publisher {
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(ring).unwrap();
    p
}

/// A fresh environment tagged `tag`, its publisher with the frame ring `ring` enabled, and a
/// subscriber named `tag` connected with the options `subscriber` makes (one of
/// [`cuda_copy_options`], [`cuda_zero_copy_options`], [`cuda_zero_copy_accepting_overwrite`]).
/// Bind them in this order (`let (env, p, mut s) = …`), so that the subscriber goes first,
/// then the publisher, then the environment.
pub fn cuda_pair(
    tag: &str,
    ring: FrameRingConfig,
    subscriber: fn(&TestEnv, &str) -> SubscriberOptions,
) -> (TestEnv, Publisher, Subscriber) {
    let env = TestEnv::new(tag);
    let p = cuda_publisher(&env, ring);
    let s = Subscriber::connect(&env.key, &subscriber(&env, tag)).unwrap();
    (env, p, s)
}

/// Iterations of `testing::busy` that keep `stream` busy for about `target` (timed here: the
/// kernel's speed depends on the GPU and its clocks).
pub fn busy_iterations_for(stream: &Stream, target: Duration) -> u64 {
    testing::busy(stream, 1000).unwrap(); // module JIT and first launch
    stream.synchronize().unwrap();
    let probe = 20_000_000u64;
    let t = Instant::now();
    testing::busy(stream, probe).unwrap();
    stream.synchronize().unwrap();
    let took = t.elapsed().as_secs_f64().max(1e-6);
    ((probe as f64 * target.as_secs_f64() / took) as u64).clamp(1000, 1 << 40)
}
