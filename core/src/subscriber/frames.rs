//! Frames handed to the user: the subscriber's side of the frame ring above
//! [`crate::frames::reader`], which decides what to read; here the bytes are copied or
//! borrowed and released (R12).

use std::sync::{Arc, Mutex};

use crate::cuda::{DeviceBuffer, Stream};

use crate::format::FrameLayout;
pub use crate::frames::reader::FrameStats;
use crate::frames::reader::{Attempt, FrameReader, RingView};
use crate::wire::MemoryKind;

/// Where a frame's bytes are.
pub(crate) enum FrameData {
    /// COPY mode, host: the subscriber's own buffer.
    Owned(Vec<u8>),
    /// COPY mode, CUDA: a device buffer of the subscriber's, back to its pool on drop.
    Device {
        buf: Option<DeviceBuffer>,
        pool: BufferPool,
    },
    /// ZERO_COPY: the ring's slot, ACKed when the frame is released (R12).
    Borrowed {
        ring: Arc<RingView>,
        index: usize,
        acked: bool,
    },
}

/// Device buffers of one subscription, reused: freeing device memory waits for the whole
/// device (cuMemFree), so buffers live as long as the subscription.
pub(crate) type BufferPool = Arc<Mutex<Vec<DeviceBuffer>>>;

/// CUDA state of a reader of a CUDA ring.
pub(crate) struct CudaReader {
    pub stream: Stream,
    pub pool: BufferPool,
}

/// A frame handed to the user.
pub struct Frame {
    pub seq: u64,
    pub pts_ns: i64,
    pub layout: Arc<FrameLayout>,
    pub(crate) data: FrameData,
}

impl Frame {
    /// True when the bytes are the ring's own (ZERO_COPY), not a copy.
    pub fn is_zero_copy(&self) -> bool {
        matches!(self.data, FrameData::Borrowed { .. })
    }

    /// Memory kind of the bytes.
    pub fn memory_kind(&self) -> MemoryKind {
        match &self.data {
            FrameData::Owned(_) => MemoryKind::HostMemfd,
            FrameData::Device { .. } => MemoryKind::CudaVmm,
            FrameData::Borrowed { ring, .. } => ring.slots.kind(),
        }
    }

    /// Address of plane 0 (host pointer, or device pointer for CUDA frames).
    pub fn address(&self) -> u64 {
        match &self.data {
            FrameData::Owned(v) => v.as_ptr() as u64,
            FrameData::Device { buf, .. } => buf.as_ref().map_or(0, DeviceBuffer::device_ptr),
            FrameData::Borrowed { ring, index, .. } => ring.slots.slot_address(*index),
        }
    }

    /// The whole frame as host bytes (host memory only).
    pub fn bytes(&self) -> Option<&[u8]> {
        match &self.data {
            FrameData::Owned(v) => Some(v),
            FrameData::Borrowed { ring, index, .. }
                if ring.slots.kind() == MemoryKind::HostMemfd =>
            {
                // SAFETY: the import maps at least frame_size bytes read-only for as long as
                // `ring` lives, and this frame holds it.
                Some(unsafe {
                    std::slice::from_raw_parts(
                        ring.slots.slot_address(*index) as *const u8,
                        self.layout.frame_size,
                    )
                })
            }
            FrameData::Borrowed { .. } | FrameData::Device { .. } => None,
        }
    }

    /// Plane `i` as host bytes: (bytes from the plane's start, pitch).
    pub fn plane(&self, i: usize) -> Option<(&[u8], usize)> {
        let p = *self.layout.planes().get(i)?;
        let bytes = self.bytes()?;
        Some((
            &bytes[p.offset..p.offset + p.pitch * (p.rows - 1) + p.row_bytes],
            p.pitch,
        ))
    }

    /// Release the frame: a zero-copy frame is ACKed now. (Dropping does the same.)
    pub fn release(mut self) {
        self.ack_now();
    }

    fn ack_now(&mut self) {
        if let FrameData::Borrowed { ring, index, acked } = &mut self.data {
            if !*acked {
                ring.ack(*index, self.seq);
                *acked = true;
            }
        }
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        self.ack_now();
        if let FrameData::Device { buf, pool } = &mut self.data {
            if let Some(b) = buf.take() {
                pool.lock().unwrap_or_else(|p| p.into_inner()).push(b);
            }
        }
    }
}

/// A subscriber's frames: the mapped ring, what to read next, and how to hand it out.
pub(crate) struct FrameSource {
    pub ring: Arc<RingView>,
    pub layout: Arc<FrameLayout>,
    pub reader: FrameReader,
    pub zero_copy: bool,
    /// Present for CUDA rings: the stream COPY mode copies on, and its buffers.
    pub cuda: Option<CudaReader>,
}

/// What one attempt to read found, for the user.
pub(crate) enum Got {
    Frame(Frame),
    Empty,
    Skipped,
    Failed(crate::Error),
}

/// COPY mode: copy slot `k` into memory this subscriber owns (host, or a pooled device buffer
/// for CUDA rings; the copy has completed when this returns).
fn copy_out(
    ring: &RingView,
    layout: &FrameLayout,
    cuda: Option<&CudaReader>,
    k: usize,
) -> crate::Result<FrameData> {
    let src = ring.slots.slot_address(k);
    match cuda {
        None => {
            let mut buf = vec![0u8; layout.frame_size];
            // SAFETY: the import maps at least mapped_size >= frame_size bytes of slot k
            // for as long as `ring` lives. The publisher may be rewriting them: the
            // copy goes through raw pointers (no reference to shared bytes is formed) and
            // the seqlock re-check in `try_copy` throws a torn copy away.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, buf.as_mut_ptr(), buf.len()) };
            Ok(FrameData::Owned(buf))
        }
        Some(c) => {
            let dev = ring.slots.cuda_device().expect("CUDA ring");
            dev.make_current()?;
            let buf = match c.pool.lock().unwrap_or_else(|p| p.into_inner()).pop() {
                Some(b) => b,
                None => DeviceBuffer::new(dev, layout.frame_size)?,
            };
            for p in layout.planes() {
                let off = p.offset as u64;
                crate::cuda::copy_2d_async(
                    buf.device_ptr() + off,
                    p.pitch,
                    src + off,
                    p.pitch,
                    p.row_bytes,
                    p.rows,
                    &c.stream,
                )?;
            }
            c.stream.synchronize()?;
            Ok(FrameData::Device {
                buf: Some(buf),
                pool: c.pool.clone(),
            })
        }
    }
}

impl FrameSource {
    pub fn try_read(&mut self) -> Got {
        let ring = self.ring.clone();
        let attempt = if self.zero_copy {
            match self.reader.try_borrow(&ring) {
                Attempt::Frame {
                    seq,
                    index,
                    pts_ns,
                    data: (),
                } => Attempt::Frame {
                    seq,
                    index,
                    pts_ns,
                    data: FrameData::Borrowed {
                        ring: ring.clone(),
                        index,
                        acked: false,
                    },
                },
                Attempt::Empty => Attempt::Empty,
                Attempt::Skipped => Attempt::Skipped,
                Attempt::Failed(e) => Attempt::Failed(e),
            }
        } else {
            let (layout, cuda) = (&self.layout, self.cuda.as_ref());
            self.reader
                .try_copy(&ring, |k| copy_out(&ring, layout, cuda, k))
        };
        match attempt {
            Attempt::Frame {
                seq, pts_ns, data, ..
            } => Got::Frame(Frame {
                seq,
                pts_ns,
                layout: self.layout.clone(),
                data,
            }),
            Attempt::Empty => Got::Empty,
            Attempt::Skipped => Got::Skipped,
            Attempt::Failed(e) => Got::Failed(e),
        }
    }
}

impl Frame {
    /// Release after the CUDA work queued on `stream` (a `CUstream`) has finished (R12): a
    /// host function enqueued on the stream ACKs behind the last reader. Host frames, copies,
    /// and a null stream release now.
    ///
    /// # Safety
    /// `stream` must be null or a live CUstream of the frame's device.
    pub unsafe fn release_after_stream(mut self, stream: *mut std::ffi::c_void) {
        if let FrameData::Borrowed { ring, index, acked } = &mut self.data {
            if !*acked && !stream.is_null() && ring.slots.kind() == MemoryKind::CudaVmm {
                let pending = Box::new(PendingAck {
                    ring: ring.clone(),
                    index: *index,
                    seq: self.seq,
                });
                let raw = Box::into_raw(pending);
                // SAFETY: the caller hands us its live stream; on success the callback takes
                // the box (once), on failure we take it back.
                if unsafe { crate::cuda::launch_host_func(stream, ack_from_stream, raw.cast()) }
                    .is_ok()
                {
                    *acked = true;
                } else if let Some(dev) = {
                    // SAFETY: not enqueued, so still ours.
                    drop(unsafe { Box::from_raw(raw) });
                    ring.slots.cuda_device()
                } {
                    // Could not enqueue: wait for the stream here, then ACK below.
                    let _ = dev.make_current();
                    let _ = crate::cuda::Stream::from_raw(stream).synchronize();
                }
            }
        }
        if let FrameData::Device { .. } = &self.data {
            // A COPY frame's buffer goes back to the pool (and is rewritten by the next copy)
            // when dropped: the reads queued on the caller's stream must have finished first.
            // The caller's context is current (as for any call with its stream).
            if !stream.is_null() {
                let _ = crate::cuda::Stream::from_raw(stream).synchronize();
            }
        }
        drop(self);
    }
}

/// What the stream callback needs to ACK a zero-copy frame.
struct PendingAck {
    ring: Arc<RingView>,
    index: usize,
    seq: u64,
}

/// Runs on a driver thread once the stream's earlier work is complete: only atomics and a
/// futex wake here, no CUDA calls (the driver forbids them in host functions).
extern "C" fn ack_from_stream(data: *mut std::ffi::c_void) {
    // SAFETY: `data` is the Box<PendingAck> leaked by release_after_stream, passed once.
    let pending = unsafe { Box::from_raw(data.cast::<PendingAck>()) };
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pending.ring.ack(pending.index, pending.seq)
    }));
}
