//! The subscriber's side of the frame ring above [`crate::frame_ring::reader`], which decides
//! what to read: here a slot becomes a [`Frame`], its bytes copied out (COPY) or borrowed
//! (ZERO_COPY) per the mode granted at the handshake (R12).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::colour::ColourInfo;
use crate::cuda::DeviceBuffer;
use crate::format::FrameGeometry;
use crate::frame_ring::reader::{Attempt, FrameReader, RingView};

use super::frame_handle::{CudaReader, DownloadStream, Frame, FrameData};

/// A subscriber's frames: the mapped ring, what to read next, and how to hand it out.
pub(crate) struct FrameSource {
    /// The ring's SHM and slots, as mapped at the handshake.
    pub ring: Arc<RingView>,
    /// The geometry of every frame of this ring.
    pub layout: Arc<FrameGeometry>,
    /// The stream's colour description as the publisher announced it (None: not recorded).
    pub colour: Option<ColourInfo>,
    /// What to read next, and the counters.
    pub reader: FrameReader,
    /// ZERO_COPY granted: frames borrow the ring's slots.
    pub zero_copy: bool,
    /// Present for CUDA rings: the stream COPY mode copies on, and its buffers.
    pub cuda: Option<CudaReader>,
    /// Set when the connection ends: the seq published then. Frames after it are not for this
    /// subscriber (the publisher no longer counts it), so none is handed out.
    pub until: Option<u64>,
    /// Shared by this ring's frames for [`Frame::download_plane`].
    pub downloads: DownloadStream,
}

/// What one attempt to read found, for the user.
pub(crate) enum Got {
    /// A frame to hand out.
    Frame(Frame),
    /// Nothing new (or nothing before the end).
    Empty,
    /// A frame was lost (lapped or torn): try again at once.
    Skipped,
    /// The ring is in error.
    Failed(crate::Error),
}

/// COPY mode: copy slot `k` into memory this subscriber owns (host, or a pooled device buffer
/// for CUDA rings; the copy has completed when this returns).
fn copy_out(
    ring: &RingView,
    layout: &FrameGeometry,
    cuda: Option<&CudaReader>,
    k: usize,
) -> crate::Result<FrameData> {
    let src = ring.slots.slot_address(k);
    match cuda {
        None => {
            // Fallible: the size comes from the publisher (bounded by the layout checks, but
            // still up to ~1.1 GiB); running out of memory is an error, not an abort.
            let mut buf = Vec::new();
            buf.try_reserve_exact(layout.frame_size).map_err(|_| {
                crate::Error::new(
                    crate::ErrorCode::NoMemory,
                    format!("cannot allocate a {}-byte frame copy", layout.frame_size),
                )
            })?;
            buf.resize(layout.frame_size, 0);
            // SAFETY: the import maps at least mapped_size >= frame_size bytes of slot k
            // for as long as `ring` lives. The publisher may be rewriting them: the
            // copy goes through raw pointers (no reference to shared bytes is formed) and
            // the seqlock re-check in `try_copy` throws a torn copy away.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, buf.as_mut_ptr(), buf.len()) };
            Ok(FrameData::Owned(buf))
        }
        Some(c) => {
            let dev = ring.slots.cuda_device().expect("CUDA ring");
            // The ring's context for the allocation and the copies, popped on return: the
            // caller's current context is left as it was.
            let _current = dev.push_current()?;
            let buf = match c.pool.lock().unwrap_or_else(|p| p.into_inner()).pop() {
                Some(b) => b,
                None => DeviceBuffer::new(dev, layout.frame_size)?,
            };
            for p in layout.planes() {
                let off = p.offset as u64;
                // SAFETY: both regions are plane `p` of a frame_size layout: in `buf` (a
                // device buffer of at least frame_size bytes, ours) and in slot k (a VMM
                // mapping of at least mapped_size >= frame_size bytes, alive while `ring`
                // is). The copy completes before either can go (synchronize below); the
                // stream is our own. The publisher may be rewriting the slot meanwhile: the
                // seqlock re-check in `try_copy` (R10) throws such a copy away.
                unsafe {
                    crate::cuda::copy_2d_async(
                        buf.device_ptr() + off,
                        p.pitch,
                        src + off,
                        p.pitch,
                        p.row_bytes,
                        p.rows,
                        &c.stream,
                    )
                }?;
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
    /// The connection ended: frames published from now on are not read. The first call
    /// decides (the end is when it was first seen).
    pub fn end_here(&mut self) {
        if self.until.is_none() {
            self.until = Some(self.ring.shm.global_seq().load(Ordering::Acquire));
        }
    }

    /// The next frame of this ring (`Empty` past the end set by [`Self::end_here`]).
    pub fn try_read(&mut self) -> Got {
        if self
            .until
            .is_some_and(|until| self.reader.last_seq >= until)
        {
            return Got::Empty;
        }
        match self.read() {
            // Lapped past the end (DROP_OLDEST): the frame it jumped to came after it.
            Got::Frame(f) if self.until.is_some_and(|until| f.seq > until) => Got::Empty,
            got => got,
        }
    }

    fn read(&mut self) -> Got {
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
                colour: self.colour,
                data,
                origin: ring.origin,
                downloads: self.downloads.clone(),
            }),
            Attempt::Empty => Got::Empty,
            Attempt::Skipped => Got::Skipped,
            Attempt::Failed(e) => Got::Failed(e),
        }
    }
}
