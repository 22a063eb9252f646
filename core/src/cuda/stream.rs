//! Streams and events: the ordering tools of the device-frame discipline (acquire before
//! read: a stream waits on the producer's event; release after the last reader: an event
//! recorded where the frame is released, cf. R12).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys;

use super::context::ContextGuard;
use super::device::CudaDevice;
use super::driver::{call, call_raw, cuda_error, release, release_failed};
use crate::error::Result;

/// A CUDA stream: created here ([`Stream::new`], destroyed on drop) or borrowed from the
/// caller ([`Stream::from_raw`], never destroyed here).
///
/// Calls on a stream that knows its device run under that device's [`ContextGuard`]; calls on
/// a borrowed stream without a device run in the caller's current context and change nothing
/// (`CU_STREAM_LEGACY` and null then name the legacy default stream of that context).
pub struct Stream {
    raw: sys::CUstream,
    dev: Option<Arc<CudaDevice>>,
    owned: bool,
}

// SAFETY: CUDA streams are driver handles usable from any thread.
unsafe impl Send for Stream {}
// SAFETY: no interior mutability; the driver synchronises concurrent calls on one stream.
unsafe impl Sync for Stream {}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("raw", &self.raw)
            .field("owned", &self.owned)
            .field("device", &self.dev.as_ref().map(|d| d.ordinal()))
            .finish()
    }
}

/// The driver's special handle of the legacy default stream (null names it too).
pub const CU_STREAM_LEGACY: usize = 0x1;
/// The driver's special handle of the calling thread's per-thread default stream.
pub const CU_STREAM_PER_THREAD: usize = 0x2;

/// The stream a raw `CUstream` handle names where it is used. A created stream is the same
/// stream wherever its handle goes; the special handles are not: null and
/// `CU_STREAM_LEGACY` name the legacy default stream of the current context, and
/// `CU_STREAM_PER_THREAD` the default stream of the current context *and thread*. Two
/// publications are ordered by their stream only when their identities are equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamIdentity {
    /// A stream made by `cuStreamCreate`: its handle.
    Created(usize),
    /// The legacy default stream of a context.
    Legacy {
        /// The context's handle.
        context: usize,
    },
    /// The per-thread default stream of a context on one thread (a token unique to the
    /// thread for the process's lifetime: thread ids are reused, streams of dead threads
    /// may still hold work).
    PerThread {
        /// The context's handle.
        context: usize,
        /// The thread's token.
        thread: u64,
    },
}

impl StreamIdentity {
    /// What `raw` names on the calling thread (the current context is asked of the driver
    /// for the special handles only).
    pub fn of(raw: *mut c_void) -> Result<StreamIdentity> {
        StreamIdentity::resolve(
            raw as usize,
            || super::context::current_context().map(|c| c as usize),
            thread_token(),
        )
    }

    /// `of` with the current context and the thread given.
    pub fn resolve(
        raw: usize,
        context: impl FnOnce() -> Result<usize>,
        thread: u64,
    ) -> Result<StreamIdentity> {
        Ok(match raw {
            0 | CU_STREAM_LEGACY => StreamIdentity::Legacy {
                context: context()?,
            },
            CU_STREAM_PER_THREAD => StreamIdentity::PerThread {
                context: context()?,
                thread,
            },
            created => StreamIdentity::Created(created),
        })
    }
}

/// A number of the calling thread that no other thread of the process ever gets.
pub fn thread_token() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TOKEN: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TOKEN.with(|t| *t)
}

impl Stream {
    /// A new non-blocking stream (`CU_STREAM_NON_BLOCKING`: no implicit ordering with the
    /// legacy default stream) in `dev`'s context.
    pub fn new(dev: &Arc<CudaDevice>) -> Result<Stream> {
        let _current = dev.push_current()?;
        let mut raw: sys::CUstream = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the device's context is current.
        call("cuStreamCreate", || unsafe {
            sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
        Ok(Stream {
            raw,
            dev: Some(Arc::clone(dev)),
            owned: true,
        })
    }

    /// Borrows a caller's `CUstream` (null and `CU_STREAM_LEGACY` are the legacy default
    /// stream of the current context). It is never destroyed here. Calls on it bind no
    /// context: they run in the caller's current context. The test kernels (feature `testing`)
    /// need a stream that knows its device ([`Stream::from_raw_with_device`]).
    ///
    /// # Safety
    /// `ptr` must be null, one of the driver's special stream handles (`CU_STREAM_LEGACY`,
    /// `CU_STREAM_PER_THREAD`), or a live `CUstream` that outlives the returned `Stream`; the
    /// driver dereferences it on every call. Its context must be current on the threads that
    /// call methods of the returned stream.
    pub unsafe fn from_raw(ptr: *mut c_void) -> Stream {
        Stream {
            raw: ptr as sys::CUstream,
            dev: None,
            owned: false,
        }
    }

    /// Borrows a caller's `CUstream` that lives in `dev`'s context; calls on it make that
    /// context current for their duration ([`CudaDevice::push_current`]).
    ///
    /// # Safety
    /// As for [`Stream::from_raw`], and the stream belongs to `dev`'s context.
    pub unsafe fn from_raw_with_device(dev: &Arc<CudaDevice>, ptr: *mut c_void) -> Stream {
        Stream {
            raw: ptr as sys::CUstream,
            dev: Some(Arc::clone(dev)),
            owned: false,
        }
    }

    /// The raw `CUstream`.
    pub fn raw(&self) -> *mut c_void {
        self.raw as *mut c_void
    }

    pub(crate) fn cu(&self) -> sys::CUstream {
        self.raw
    }

    /// The device the stream belongs to, when known.
    pub fn device(&self) -> Option<&Arc<CudaDevice>> {
        self.dev.as_ref()
    }

    /// Makes the stream's context current until the guard drops, when the stream knows its
    /// device; otherwise binds nothing (the caller's context is current).
    pub(crate) fn bind(&self) -> Result<ContextGuard> {
        match &self.dev {
            Some(dev) => dev.push_current(),
            None => Ok(ContextGuard::none()),
        }
    }

    /// Blocks until all work queued on the stream has finished (`cuStreamSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        let _current = self.bind()?;
        let raw = self.raw;
        // SAFETY: `raw` is live (owned, or the borrower's promise in `from_raw`).
        call("cuStreamSynchronize", || unsafe {
            sys::cuStreamSynchronize(raw)
        })
    }

    /// True when all work queued on the stream so far has completed, false while some is
    /// pending (`cuStreamQuery`, with CUDA's default-stream semantics for the special
    /// handles). Never blocks and queues nothing on the GPU.
    pub fn is_idle(&self) -> Result<bool> {
        let _current = self.bind()?;
        let raw = self.raw;
        // SAFETY: `raw` is live (owned, or the borrower's promise in `from_raw`).
        let res = call_raw("cuStreamQuery", || unsafe { sys::cuStreamQuery(raw) })?;
        match res {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(cuda_error("cuStreamQuery", other)),
        }
    }

    /// Work queued on this stream after this call waits until `event` has completed
    /// (`cuStreamWaitEvent`): the acquire side of a fence. The host does not wait.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        let _current = self.bind()?;
        let (raw, ev) = (self.raw, event.raw);
        // SAFETY: the stream is live (as in `synchronize`) and the event is owned by `event`.
        call("cuStreamWaitEvent", || unsafe {
            sys::cuStreamWaitEvent(raw, ev, 0)
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let current = self.bind();
        if let Err(e) = &current {
            release_failed(e);
        }
        let raw = self.raw;
        // SAFETY: an owned stream, created by `new` and destroyed once, here.
        release("cuStreamDestroy", || unsafe {
            sys::cuStreamDestroy_v2(raw)
        });
        drop(current);
    }
}

/// A CUDA event without timing (`CU_EVENT_DISABLE_TIMING`), for ordering only.
pub struct Event {
    raw: sys::CUevent,
    dev: Arc<CudaDevice>,
}

// SAFETY: CUDA events are driver handles usable from any thread.
unsafe impl Send for Event {}
// SAFETY: no interior mutability; the driver synchronises concurrent calls on one event.
unsafe impl Sync for Event {}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event").field("raw", &self.raw).finish()
    }
}

impl Event {
    /// An event of `dev`, made with its context current (timing disabled).
    pub fn new(dev: &Arc<CudaDevice>) -> Result<Event> {
        let _current = dev.push_current()?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the device's context is current.
        call("cuEventCreate", || unsafe {
            sys::cuEventCreate(&mut raw, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
        })?;
        Ok(Event {
            raw,
            dev: Arc::clone(dev),
        })
    }

    /// Records the event behind the work queued so far on `stream` (`cuEventRecord`).
    pub fn record(&self, stream: &Stream) -> Result<()> {
        let _current = self.dev.push_current()?;
        let (ev, raw) = (self.raw, stream.cu());
        // SAFETY: an owned event and a live stream (see `Stream::synchronize`).
        call("cuEventRecord", || unsafe { sys::cuEventRecord(ev, raw) })
    }

    /// True when the work the event was recorded behind has completed (or the event was never
    /// recorded), false while it is pending (`cuEventQuery`). Never blocks.
    pub fn query(&self) -> Result<bool> {
        let _current = self.dev.push_current()?;
        let ev = self.raw;
        // SAFETY: an owned event.
        let res = call_raw("cuEventQuery", || unsafe { sys::cuEventQuery(ev) })?;
        match res {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(cuda_error("cuEventQuery", other)),
        }
    }

    /// Blocks until the event has completed (`cuEventSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        let _current = self.dev.push_current()?;
        let ev = self.raw;
        // SAFETY: an owned event.
        call("cuEventSynchronize", || unsafe {
            sys::cuEventSynchronize(ev)
        })
    }

    /// The raw `CUevent`.
    pub fn raw(&self) -> *mut c_void {
        self.raw as *mut c_void
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let current = self.dev.push_current();
        if let Err(e) = &current {
            release_failed(e);
        }
        let ev = self.raw;
        // SAFETY: an owned event, created by `new` and destroyed once, here.
        release("cuEventDestroy", || unsafe { sys::cuEventDestroy_v2(ev) });
        drop(current);
    }
}

/// Enqueue `f(data)` on `stream` (a raw `CUstream`; null and `CU_STREAM_LEGACY` are the
/// legacy default stream of the current context): the driver runs it on one of its threads
/// once all earlier work on the stream has completed. `f` must not call CUDA, nor drop
/// anything whose `Drop` does (hand such values to a thread of yours). On error `f` is never
/// called and `data` stays the caller's.
///
/// # Safety
/// `stream` must be a live CUstream (or null / a special handle, with a context current) and
/// `data` what `f` expects, passed once.
pub unsafe fn launch_host_func(
    stream: *mut c_void,
    f: extern "C" fn(*mut c_void),
    data: *mut c_void,
) -> Result<()> {
    // SAFETY: an `extern "C" fn(*mut c_void)` has the ABI of `CUhostFn`'s function.
    let hostfn: sys::CUhostFn = Some(unsafe {
        std::mem::transmute::<extern "C" fn(*mut c_void), unsafe extern "C" fn(*mut c_void)>(f)
    });
    // SAFETY: the caller guarantees a live stream and that `data` is what `f` expects.
    call("cuLaunchHostFunc", || unsafe {
        sys::cuLaunchHostFunc(stream as sys::CUstream, hostfn, data)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::driver_available;
    use crate::error::ErrorCode;

    #[test]
    fn borrowed_streams_fail_cleanly_without_a_driver() {
        if driver_available().is_ok() {
            return;
        }
        // SAFETY: null is the legacy default stream; without a driver no call reaches it.
        let s = unsafe { Stream::from_raw(std::ptr::null_mut()) };
        assert!(s.raw().is_null());
        assert_eq!(s.synchronize().unwrap_err().code(), ErrorCode::Cuda);
        drop(s); // borrowed: no driver call on drop
    }

    #[test]
    fn stream_and_event_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Stream>();
        check::<Event>();
    }
}

#[cfg(test)]
mod identity_tests {
    use super::*;

    fn of(raw: usize, context: usize, thread: u64) -> StreamIdentity {
        StreamIdentity::resolve(raw, || Ok(context), thread).unwrap()
    }

    /// The special handles name a stream per context (legacy) or per context and thread
    /// (per-thread): the same handle from two threads or contexts is not one stream, and a
    /// publication on one is not ordered behind work on the other.
    #[test]
    fn special_handles_name_a_stream_per_context_and_thread() {
        let per_thread = CU_STREAM_PER_THREAD;
        assert_ne!(of(per_thread, 7, 1), of(per_thread, 7, 2));
        assert_ne!(of(per_thread, 7, 1), of(per_thread, 8, 1));
        assert_eq!(of(per_thread, 7, 1), of(per_thread, 7, 1));
        assert_eq!(
            of(0, 7, 1),
            of(CU_STREAM_LEGACY, 7, 2),
            "null is the legacy stream"
        );
        assert_ne!(of(0, 7, 1), of(0, 8, 1));
        assert_ne!(of(0, 7, 1), of(per_thread, 7, 1));
        assert_eq!(of(0xdead_b000, 7, 1), of(0xdead_b000, 8, 2));
    }

    #[test]
    fn thread_tokens_differ_between_threads() {
        let here = thread_token();
        assert_eq!(here, thread_token());
        let there = std::thread::spawn(thread_token).join().unwrap();
        assert_ne!(here, there);
    }

    /// The context is asked only for the special handles (a created stream needs no
    /// driver call), and a failure to ask is an error, not a guess.
    #[test]
    fn only_special_handles_ask_for_the_context() {
        let refuse = || Err(crate::Error::new(crate::ErrorCode::Cuda, "no driver"));
        assert!(StreamIdentity::resolve(0x1000, refuse, 1).is_ok());
        assert!(StreamIdentity::resolve(0, refuse, 1).is_err());
        assert!(StreamIdentity::resolve(CU_STREAM_PER_THREAD, refuse, 1).is_err());
    }
}
