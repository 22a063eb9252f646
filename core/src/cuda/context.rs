//! Which context is current: the library never changes the caller's.
//!
//! Every driver call of this crate that needs a context runs under a [`ContextGuard`]: it
//! pushes the context onto the calling thread's context stack (`cuCtxPushCurrent`) unless it
//! is current already, and pops it again when dropped (`cuCtxPopCurrent`). Whatever context
//! the caller had current (FFmpeg's `cuCtxPushCurrent(hwctx->cuda_ctx)`, a context of its
//! own, or none) is current again when the call returns.
//!
//! Calls on a caller's stream whose device is unknown ([`Stream::from_raw`]) bind nothing:
//! such a stream (and `CU_STREAM_LEGACY`, the legacy default stream *of the current context*)
//! is the caller's, in the caller's current context.
//!
//! [`Stream::from_raw`]: super::Stream::from_raw

use std::ffi::c_void;
use std::marker::PhantomData;

use cudarc::driver::sys;

use super::driver::{call, release_failed};
use crate::error::Result;

/// A context made current for the life of the guard, on this thread only (the guard is not
/// `Send`: the context stack is per thread). Dropping it restores the thread's previous
/// current context. Guards nest; drop them in reverse order (scopes do).
#[must_use = "the context is popped again when the guard is dropped"]
pub struct ContextGuard {
    /// True when `push` pushed (the context was not current yet), so drop pops.
    pushed: bool,
    _per_thread: PhantomData<*const ()>,
}

impl std::fmt::Debug for ContextGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextGuard")
            .field("pushed", &self.pushed)
            .finish()
    }
}

impl ContextGuard {
    /// Makes `ctx` current until the guard is dropped: nothing to do when it is current
    /// already, else `cuCtxPushCurrent` now and `cuCtxPopCurrent` on drop.
    pub(crate) fn push(ctx: sys::CUcontext) -> Result<ContextGuard> {
        if current_raw()? == ctx {
            return Ok(ContextGuard::none());
        }
        // SAFETY: `ctx` is a live context: every caller passes the context of a CudaDevice it
        // borrows (a retained primary context, or one the caller of `from_context` keeps
        // alive for the device's life).
        call("cuCtxPushCurrent", || unsafe {
            sys::cuCtxPushCurrent_v2(ctx)
        })?;
        Ok(ContextGuard {
            pushed: true,
            _per_thread: PhantomData,
        })
    }

    /// A guard that binds nothing (calls on a caller's stream in the caller's context).
    pub(crate) fn none() -> ContextGuard {
        ContextGuard {
            pushed: false,
            _per_thread: PhantomData,
        }
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        if !self.pushed {
            return;
        }
        let mut popped: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `popped` is a valid out-pointer; the guard pushed a context on this thread
        // (it is not Send) and guards drop in reverse order, so the top is ours.
        if let Err(e) = call("cuCtxPopCurrent", || unsafe {
            sys::cuCtxPopCurrent_v2(&mut popped)
        }) {
            release_failed(&e);
        }
    }
}

fn current_raw() -> Result<sys::CUcontext> {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: `ctx` is a valid out-pointer.
    call("cuCtxGetCurrent", || unsafe {
        sys::cuCtxGetCurrent(&mut ctx)
    })?;
    Ok(ctx)
}

/// The calling thread's current `CUcontext` (`cuCtxGetCurrent`; null when none is).
pub fn current_context() -> Result<*mut c_void> {
    Ok(current_raw()? as *mut c_void)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::driver_available;
    use crate::error::ErrorCode;

    #[test]
    fn guards_fail_cleanly_without_a_driver() {
        if driver_available().is_ok() {
            return;
        }
        assert_eq!(current_context().unwrap_err().code(), ErrorCode::Cuda);
        let mut fake = 0u8;
        let e = ContextGuard::push(&mut fake as *mut u8 as sys::CUcontext).unwrap_err();
        assert_eq!(e.code(), ErrorCode::Cuda);
        drop(ContextGuard::none()); // pops nothing
    }
}
