//! What the tests of every package share (`core/tests`, the root package's `tests/`): one
//! copy of the scaffolding, so that a fix to cleanup or to the frame pattern reaches them all.
//!
//! - [`TestEnv`]: a private runtime directory and key per test, cleaned up also on failure;
//! - the frame pattern ([`planes_for`], [`publish_pattern`], [`verify_frame`]);
//! - [`Rng`] (replayable), [`RunDelay`] (CPU starvation);
//! - [`child`]: the test binary re-executed in a role, and [`Children`] reaped when a test ends;
//! - the names of a key's SHM objects ([`frame_shm_name`], [`packet_shm_name`], [`shm_path`]);
//! - CUDA: [`no_cuda`], [`CudaCheck`], [`verify_any`]; the CUDA tests' fixture ([`cuda_pair()`]:
//!   the GPU or a skip, a publisher with a CUDA ring and a subscriber on its device);
//! - [`ffmpeg`]: the FFmpeg end-to-end tests' world (finding the build, children, framemd5);
//! - [`OperatorScene`]: the live publisher the operator-tool tests read;
//! - [`squat_never_accepting`]: a planted socket whose backlog is full.
//!
//! Test code only: never a dependency of a production crate.

pub mod child;
mod cuda;
mod cuda_pair;
mod env;
pub mod ffmpeg;
mod pattern;
mod process;
mod rng;
mod run_delay;
mod scene;
mod shm_names;
mod sockets;
mod wait;

pub use child::Children;
pub use cuda::{no_cuda, verify_any, CudaCheck};
pub use cuda_pair::{
    busy_iterations_for, cuda_copy_options, cuda_pair, cuda_publisher, cuda_ring,
    cuda_zero_copy_accepting_overwrite, cuda_zero_copy_options, gpu_or_skip, CU_STREAM_LEGACY,
    CU_STREAM_PER_THREAD,
};
pub use env::TestEnv;
pub use pattern::{fill_pattern, pattern_byte, planes_for, publish_pattern, verify_frame};
pub use process::{count_fds, count_maps};
pub use rng::Rng;
pub use run_delay::RunDelay;
pub use scene::{publish_filler, OperatorScene, WEIRD_NAME};
pub use shm_names::{frame_shm_name, packet_shm_name, shm_path};
pub use sockets::squat_never_accepting;
pub use wait::{wait_published, wait_until};
