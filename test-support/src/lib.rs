//! What the tests of every package share (`core/tests`, the root package's `tests/`): one
//! copy of the scaffolding, so that a fix to cleanup or to the frame pattern reaches them all.
//!
//! - [`TestEnv`]: a private runtime directory and key per test, cleaned up also on failure;
//! - the frame pattern ([`planes_for`], [`publish_pattern`], [`verify_frame`]);
//! - [`Rng`] (replayable), [`RunDelay`] (CPU starvation), [`Children`] (reaped children);
//! - CUDA: [`no_cuda`], [`CudaCheck`], [`verify_any`];
//! - [`ffmpeg`]: the FFmpeg end-to-end tests' world (finding the build, children, framemd5);
//! - [`OperatorScene`]: the live publisher the operator-tool tests read;
//! - [`squat_never_accepting`]: a planted socket whose backlog is full.
//!
//! Test code only: never a dependency of a production crate.

mod children;
mod cuda;
mod env;
pub mod ffmpeg;
mod pattern;
mod rng;
mod run_delay;
mod scene;
mod sockets;
mod wait;

pub use children::{role_command, run_role, wait_for_result, Children, ROLE_ENV};
pub use cuda::{no_cuda, verify_any, CudaCheck};
pub use env::TestEnv;
pub use pattern::{fill_pattern, pattern_byte, planes_for, publish_pattern, verify_frame};
pub use rng::Rng;
pub use run_delay::RunDelay;
pub use scene::{publish_filler, OperatorScene, WEIRD_NAME};
pub use sockets::squat_never_accepting;
pub use wait::wait_until;
