//! Releasing a frame behind the CUDA work that reads it: [`Frame::release_after_stream`],
//! and the host function that ACKs a zero-copy frame once the reader's stream reaches it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::frame_ring::reader::RingView;
use crate::wire::MemoryKind;

use super::frame_handle::{Frame, FrameData};

impl Frame {
    /// Release after the CUDA work queued on `stream` (a `CUstream`) has finished (R12).
    ///
    /// - A zero-copy CUDA frame whose `stream` is idle (`cuStreamQuery`: all work queued on
    ///   it has completed) is ACKed now, with nothing queued on the GPU.
    /// - Otherwise a host function enqueued on `stream` ACKs it behind the last reader, and
    ///   only ACKs: its reference to the ring goes to the subscriber's release
    ///   thread (`subscriber::deferred`), so that a ring whose subscriber was destroyed meanwhile
    ///   is unmapped there, not inside the host function, where CUDA forbids driver calls.
    ///   When the host function cannot be enqueued, the stream is synchronised here, in the
    ///   caller's current context, then the frame is ACKed.
    /// - A COPY CUDA frame: `stream` is synchronised before the buffer goes back to the pool
    ///   (the next copy rewrites it).
    /// - Null: the caller's reads have finished; the frame is released now, without a wait.
    /// - Host frames are released now.
    ///
    /// `stream` is used in the calling thread's current context, which stays current (no
    /// context is pushed nor set here); `CU_STREAM_LEGACY` is that context's legacy default
    /// stream (what FFmpeg passes after `cuCtxPushCurrent(hwctx->cuda_ctx)`).
    ///
    /// # Safety
    /// `stream` must be null, `CU_STREAM_LEGACY` / `CU_STREAM_PER_THREAD` with a context of the
    /// frame's device current, or a live `CUstream` of a context of the frame's device. With
    /// null, no GPU work may still read the frame.
    pub unsafe fn release_after_stream(mut self, stream: *mut std::ffi::c_void) {
        let seq = self.seq;
        match &mut self.data {
            FrameData::Borrowed { ring, index, acked }
                if !*acked && ring.slots.kind() == MemoryKind::CudaVmm =>
            {
                if stream.is_null() {
                    // The caller's promise: nothing reads the frame any more.
                    ring.ack(*index, seq);
                    *acked = true;
                    return;
                }
                // SAFETY: this function's contract: a live stream of the current context.
                let caller = unsafe { crate::cuda::Stream::from_raw(stream) };
                if caller.is_idle().unwrap_or(false) {
                    // Everything queued on the stream so far, the reads of this frame
                    // included, has completed: ACK now. A host function would cost a GPU
                    // submission and a trip through the driver's callback thread per frame
                    // for nothing (FFmpeg's readers release after an idle legacy stream).
                    ring.ack(*index, seq);
                    *acked = true;
                    return;
                }
                let pending = PendingAck {
                    ring: ring.clone(),
                    index: *index,
                    seq,
                };
                // SAFETY: this function's contract: a live stream of the frame's device; `self`
                // holds another reference to the ring.
                if unsafe { pending.enqueue(stream) } {
                    *acked = true;
                    return;
                }
                // Could not enqueue: wait here for the caller's stream, in the caller's context
                // (not the ring's: CU_STREAM_LEGACY is the *current* context's legacy stream),
                // then ACK.
                // SAFETY: this function's contract: a live stream of the current context.
                let caller = unsafe { crate::cuda::Stream::from_raw(stream) };
                match caller.synchronize() {
                    Ok(()) => {
                        ring.ack(*index, seq);
                        *acked = true;
                    }
                    // Still not ACKed: the drop below waits for the ring's context.
                    Err(e) => crate::util::diag!("releasing frame {seq} after a stream: {e}"),
                }
            }
            FrameData::Device { buf, pool } if !stream.is_null() => {
                // A COPY frame's buffer goes back to the pool (and is rewritten by the next
                // copy): the reads queued on the caller's stream must have finished first.
                // The caller's context is current (as for any call with its stream); nothing
                // is pushed.
                // SAFETY: this function's contract: a live stream of the current context.
                let caller = unsafe { crate::cuda::Stream::from_raw(stream) };
                match caller.synchronize() {
                    // Its readers are done: pooled now, so the drop below need not wait for
                    // the whole context.
                    Ok(()) => {
                        if let Some(b) = buf.take() {
                            pool.lock().unwrap_or_else(|p| p.into_inner()).push(b);
                        }
                    }
                    Err(e) => {
                        // Not pooled: freeing the buffer (cuMemFree) waits for the device.
                        crate::util::diag!("releasing frame {seq} after a stream: {e}");
                        drop(buf.take());
                    }
                }
            }
            _ => {}
        }
        drop(self);
    }
}

/// Host functions queued on a reader's stream to ACK a zero-copy frame behind its reads.
static STREAM_ACKS_QUEUED: AtomicU64 = AtomicU64::new(0);

/// How many zero-copy CUDA frames this process released through a host function on the
/// reader's stream (work was still queued when `release_after_stream` was called); a release
/// after an idle stream ACKs at once and is not counted.
pub fn stream_acks_queued() -> u64 {
    STREAM_ACKS_QUEUED.load(Ordering::Relaxed)
}

/// What the stream callback needs to ACK a zero-copy frame.
struct PendingAck {
    ring: Arc<RingView>,
    index: usize,
    seq: u64,
}

impl PendingAck {
    /// Enqueues [`ack_from_stream`] with `self` on `stream`; false (and `self` dropped here,
    /// on the caller's thread) when that fails or the release thread cannot be started.
    ///
    /// # Safety
    /// `stream` is a live `CUstream` (or a special handle with a context current), and the
    /// caller holds another reference to the ring (so that dropping `self` here on failure is
    /// never the last).
    unsafe fn enqueue(self, stream: *mut std::ffi::c_void) -> bool {
        // The release thread must run before the callback can hand the ring to it.
        if super::deferred::start().is_err() {
            return false;
        }
        let raw = Box::into_raw(Box::new(self));
        // SAFETY: a live stream (the contract); on success the callback takes the box, once.
        match unsafe { crate::cuda::launch_host_func(stream, ack_from_stream, raw.cast()) } {
            Ok(()) => {
                STREAM_ACKS_QUEUED.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                // SAFETY: never enqueued, so still ours, and taken back once.
                drop(unsafe { Box::from_raw(raw) });
                false
            }
        }
    }
}

/// Runs on a driver thread once the stream's earlier work is complete. No CUDA call may run
/// here, directly or through a `Drop` (the driver refuses them in host functions): it ACKs
/// (atomics and a futex wake) and hands its reference to the ring to the release thread,
/// which may hold the last one (the subscriber destroyed meanwhile) and then unmaps the ring
/// there.
extern "C" fn ack_from_stream(data: *mut std::ffi::c_void) {
    // SAFETY: `data` is the Box<PendingAck> leaked by release_after_stream, passed once.
    let PendingAck { ring, index, seq } = *unsafe { Box::from_raw(data.cast::<PendingAck>()) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ring.ack(index, seq)));
    super::deferred::drop_later(ring);
}
