//! The `extern "C"` functions of `include/cuframes.h`, one file per handle or sub-API; each
//! runs its body under a wrapper of [`crate::ffi`].

pub(crate) mod codec;
pub(crate) mod cuda;
pub(crate) mod cuda_publish;
pub(crate) mod frame;
pub(crate) mod frame_ring;
pub(crate) mod library;
pub(crate) mod packet;
pub(crate) mod publisher;
pub(crate) mod subscriber;
pub(crate) mod types;
