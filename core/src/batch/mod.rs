//! Many cameras, one inference batch: [`Batch`] reads N frame rings (any format and size,
//! host or CUDA) and makes one tensor per call, `[N, 3, H, W]` or `[N, H, W, 3]`, with each
//! camera's seq, pts, validity and letterbox placement ([`CameraInfo`]).
//!
//! One file per concept: the options and assembly policies (`options`), one camera's
//! connection and newest frame (`camera`), which frames go into a batch (`assemble`), the
//! conversion into the batch buffer (`convert`, on `rgb::batch`), the buffers' pool
//! (`pool`), and the reader itself (`reader`).

mod assemble;
mod camera;
mod convert;
mod options;
mod pool;
mod reader;

pub use options::{BatchOptions, BatchPolicy};
pub use pool::{BatchBuffer, BufferPool, POOL_KEEP};
pub use reader::{Batch, BatchOutput, CameraInfo};
