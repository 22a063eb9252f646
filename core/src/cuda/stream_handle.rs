//! [`CudaStream`]: the stream a caller names to the publish API, with the promise that makes
//! a raw `CUstream` usable stated once, at [`CudaStream::from_raw`].

use std::ffi::c_void;
use std::marker::PhantomData;

use super::stream::{Stream, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD};

/// A CUDA stream named by the caller: where the GPU work that writes a frame is queued, so
/// that a publication is ordered after it (protocol v4 §5, a frame is never visible before
/// its data). It is a handle, not an owner: nothing is created or destroyed through it.
///
/// The special handles need no promise ([`CudaStream::LEGACY`], [`CudaStream::PER_THREAD`]);
/// a [`Stream`] lends itself for as long as the borrow lasts ([`Stream::as_cuda_stream`]); any
/// other `CUstream`, as a C or Python caller hands it
/// over, comes in through the one `unsafe` constructor, [`CudaStream::from_raw`].
///
/// Which stream a special handle names is decided where it is used: the legacy default stream
/// (null or `CU_STREAM_LEGACY`) of the context current on the calling thread, the per-thread
/// default stream of that context and thread (`CU_STREAM_PER_THREAD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaStream<'a> {
    raw: usize,
    _live: PhantomData<&'a Stream>,
}

impl CudaStream<'static> {
    /// The legacy default stream of the context current where the handle is used
    /// (`CU_STREAM_LEGACY`).
    pub const LEGACY: CudaStream<'static> = CudaStream {
        raw: CU_STREAM_LEGACY,
        _live: PhantomData,
    };

    /// The calling thread's default stream of the current context (`CU_STREAM_PER_THREAD`):
    /// another thread naming it names another stream.
    pub const PER_THREAD: CudaStream<'static> = CudaStream {
        raw: CU_STREAM_PER_THREAD,
        _live: PhantomData,
    };

    /// A caller's raw `CUstream`. Null names the legacy default stream, as
    /// `CU_STREAM_LEGACY` does, wherever a call takes a `CudaStream` (calls that give null a
    /// meaning of their own, "the ring's own stream", take an `Option` and read `None` so).
    ///
    /// # Safety
    /// `raw` is null, one of the driver's special handles (`CU_STREAM_LEGACY`,
    /// `CU_STREAM_PER_THREAD`), or a `CUstream` that stays live (not destroyed) until every
    /// call given this handle, or a copy of it, has returned: the driver dereferences it on
    /// each of them. Whoever passes it to a call has the stream's context current on the
    /// calling thread (the publish calls say which context they push themselves).
    pub unsafe fn from_raw(raw: *mut c_void) -> CudaStream<'static> {
        CudaStream {
            raw: raw as usize,
            _live: PhantomData,
        }
    }

    /// [`CudaStream::from_raw`] for the calls whose null means "no stream of the caller's":
    /// `None` for null, the handle otherwise.
    ///
    /// # Safety
    /// As for [`CudaStream::from_raw`].
    pub unsafe fn from_raw_or_none(raw: *mut c_void) -> Option<CudaStream<'static>> {
        // SAFETY: this function's contract is from_raw's.
        (!raw.is_null()).then(|| unsafe { CudaStream::from_raw(raw) })
    }
}

impl CudaStream<'_> {
    /// The raw `CUstream` (null, a special handle, or a stream's handle).
    pub fn raw(self) -> *mut c_void {
        self.raw as *mut c_void
    }
}

impl Stream {
    /// This stream as the publish API names it, for as long as the borrow: a stream of this
    /// process's own ([`Stream::new`]) or one borrowed under [`Stream::from_raw`]'s promise.
    pub fn as_cuda_stream(&self) -> CudaStream<'_> {
        CudaStream {
            raw: self.raw() as usize,
            _live: PhantomData,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_special_handles_are_the_drivers() {
        assert_eq!(CudaStream::LEGACY.raw() as usize, CU_STREAM_LEGACY);
        assert_eq!(CudaStream::PER_THREAD.raw() as usize, CU_STREAM_PER_THREAD);
        // SAFETY: null is the legacy default stream; nothing dereferences it here.
        let null = unsafe { CudaStream::from_raw_or_none(std::ptr::null_mut()) };
        assert_eq!(null, None);
        // SAFETY: a special handle; nothing dereferences it here.
        let legacy = unsafe { CudaStream::from_raw_or_none(CU_STREAM_LEGACY as *mut c_void) };
        assert_eq!(legacy, Some(CudaStream::LEGACY));
    }

    #[test]
    fn a_handle_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<CudaStream<'static>>();
    }
}
