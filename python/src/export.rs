//! A frame's shared state and its exports: the rule of lib.rs (released when the last
//! export is gone) lives here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use cuframes_core::cuda::{Event, Stream};
use cuframes_core::subscriber::{Frame as CoreFrame, PrivateView};
use cuframes_core::wire::MemoryKind;
use cuframes_core::ErrorCode;
use pyo3::prelude::*;

use crate::exception::error;
use crate::values::lock;

/// A frame's state, shared by the Python `Frame`, its exports and the capsule deleters
/// (which may run on any thread, without the GIL).
pub struct FrameShared {
    pub(crate) state: Mutex<FrameState>,
    /// Set when the subscriber that delivered the frame is closed.
    pub(crate) subscriber_closed: Arc<AtomicBool>,
}

pub(crate) struct FrameState {
    /// The core frame, until it is released.
    pub(crate) frame: Option<CoreFrame>,
    /// Live exports (capsules, pinned planes).
    pub(crate) exports: usize,
    /// `release()` was called (or the Python frame is gone): no new exports.
    pub(crate) released: bool,
    /// Events behind the `to_rgb` conversions queued from this frame: the release waits for
    /// them (they may run on a stream the release is not told about).
    pub(crate) conversions: Vec<Arc<Event>>,
    /// The private views the exports of a zero-copy host frame point into, one per plane,
    /// shared by all of them ([`FrameState::private_view`]).
    pub(crate) views: ViewCache,
}

/// A zero-copy host frame's private views, by the range of the slot they map (a plane's).
///
/// The exports of a plane share one view: a view per export would let a process that exports
/// one plane 65,000 times run out of mappings (vm.max_map_count), and then NumPy, thread
/// starts and everything else that maps memory would fail. The cache holds the views weakly: a view is
/// unmapped when the last export using it is gone, which is before its frame is released
/// (an export's view drops before its guard, see `plane::Pinned`).
#[derive(Default)]
pub(crate) struct ViewCache(Vec<(usize, usize, Weak<PrivateView>)>);

/// What releasing a frame needs once nothing exports it any more.
pub(crate) struct Releasable {
    frame: CoreFrame,
    conversions: Vec<Arc<Event>>,
}

impl Releasable {
    /// Releases the core frame after the conversions queued from it; with `stream` (a CUDA
    /// frame's reader stream, read by crate::stream's rule: never null), after the work
    /// queued there too.
    pub(crate) fn release(self, stream: Option<usize>) {
        let Releasable { frame, conversions } = self;
        let cuda = frame.memory_kind() == MemoryKind::CudaVmm;
        let dev = frame.cuda_device().cloned();
        // The special handles (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) name a stream of the
        // *current* context, which the core's release_after_stream uses as it finds it: make
        // the frame's device's primary context (where torch's and CuPy's streams live)
        // current for it. A created stream names its own context; the push changes nothing
        // for it. Without the push, a thread where no context is current (one that never
        // touched CUDA through torch) could not query nor wait on the legacy stream.
        let _current = match (&stream, &dev) {
            (Some(_), Some(d)) if cuda => d.push_current().ok(),
            _ => None,
        };
        match (stream, dev) {
            (Some(s), Some(dev)) if cuda && frame.is_zero_copy() => {
                // The ACK follows `s`: make `s` wait for the conversions first (on the GPU).
                // SAFETY: Frame.release(stream)'s contract: a live stream of the frame's
                // device (or a special handle); borrowed, not destroyed.
                let st = unsafe { Stream::from_raw_with_device(&dev, s as *mut std::ffi::c_void) };
                for e in &conversions {
                    if st.wait_event(e).is_err() {
                        let _ = e.synchronize();
                    }
                }
                // SAFETY: as above; a special handle's context (the frame's device's primary
                // context) is current (pushed above).
                unsafe { frame.release_after_stream(s as *mut std::ffi::c_void) }
            }
            (s, _) => {
                // A zero-copy CUDA frame's release waits for its device's primary context,
                // where the conversions run; a copy's buffer goes back to the subscriber's pool
                // at once, so wait for them here.
                if !frame.is_zero_copy() {
                    for e in &conversions {
                        let _ = e.synchronize();
                    }
                }
                match s {
                    // SAFETY: as above.
                    Some(s) if cuda => unsafe {
                        frame.release_after_stream(s as *mut std::ffi::c_void)
                    },
                    _ => frame.release(),
                }
            }
        }
    }
}

impl Releasable {
    /// `release` without the GIL: it may wait for the GPU (the device's primary context, the
    /// conversions, a stream's idleness), and other Python threads run meanwhile. Callers
    /// hold the GIL (a Python method, or a `Frame`'s deallocation).
    ///
    /// While the interpreter is finalizing (`Py_IsInitialized()` is 0 from the start of
    /// `Py_FinalizeEx`), the release runs with the GIL kept: the frame may be dropped there,
    /// and no other Python thread can run any more anyway. The fork rule is the core frame's
    /// (it knows the process that read it): giving up the GIL changes nothing about it.
    pub(crate) fn release_without_gil(self, py: Python<'_>, stream: Option<usize>) {
        // SAFETY: Py_IsInitialized may be called at any time, with or without the GIL.
        if unsafe { pyo3::ffi::Py_IsInitialized() } == 0 {
            self.release(stream);
        } else {
            py.allow_threads(move || self.release(stream));
        }
    }
}

/// One live export of a frame: while it lives the frame is not released.
pub struct ExportGuard(pub(crate) Arc<FrameShared>);

impl Drop for ExportGuard {
    fn drop(&mut self) {
        let last = {
            let mut s = lock(&self.0.state);
            s.exports -= 1;
            if s.exports == 0 && s.released {
                s.take()
            } else {
                None
            }
        };
        // Released by the last export: ACKed now (for a CUDA ring after the device's
        // primary context finished its work, see the core's Frame::release).
        if let Some(f) = last {
            f.release(None);
        }
    }
}

impl FrameState {
    /// The private view of `len` bytes of the frame's slot from `offset`, shared with the
    /// live exports of the same range: mapped only when none of them is left. `None` for a
    /// frame without private views (COPY, CUDA), as `CoreFrame::private_host_view`, or once
    /// released.
    pub(crate) fn private_view(
        &mut self,
        offset: usize,
        len: usize,
    ) -> Option<cuframes_core::Result<Arc<PrivateView>>> {
        let ViewCache(views) = &mut self.views;
        // Forget the views whose exports are all gone (unmapped already).
        views.retain(|(_, _, v)| v.strong_count() > 0);
        if let Some(view) = views
            .iter()
            .find(|(o, l, _)| (*o, *l) == (offset, len))
            .and_then(|(_, _, v)| v.upgrade())
        {
            return Some(Ok(view));
        }
        let view = match self.frame.as_ref()?.private_host_view(offset, len)? {
            Ok(view) => Arc::new(view),
            Err(e) => return Some(Err(e)),
        };
        views.push((offset, len, Arc::downgrade(&view)));
        Some(Ok(view))
    }

    fn take(&mut self) -> Option<Releasable> {
        Some(Releasable {
            frame: self.frame.take()?,
            conversions: std::mem::take(&mut self.conversions),
        })
    }
}

impl FrameShared {
    pub(crate) fn check_usable(&self, s: &FrameState) -> PyResult<()> {
        if s.released || s.frame.is_none() {
            return Err(error(
                ErrorCode::InvalidArg,
                "the frame was released: its planes can no longer be exported",
            ));
        }
        if self.subscriber_closed.load(Ordering::Acquire) {
            return Err(error(
                ErrorCode::Disconnected,
                "the frame's subscriber is closed: its planes can no longer be exported",
            ));
        }
        Ok(())
    }

    pub(crate) fn export(self: &Arc<Self>) -> PyResult<ExportGuard> {
        let mut s = lock(&self.state);
        self.check_usable(&s)?;
        s.exports += 1;
        Ok(ExportGuard(self.clone()))
    }

    /// Mark released; the core frame if nothing exports it any more.
    pub(crate) fn mark_released(&self) -> Option<Releasable> {
        let mut s = lock(&self.state);
        s.released = true;
        if s.exports == 0 {
            s.take()
        } else {
            None
        }
    }
}
