//! The [`Frame`] a subscriber hands to the user: where its bytes are (a copy of the
//! subscriber's own, or the ring's slot under ZERO_COPY, R12), the ways to read them from the
//! host, and its release (an ACK for a zero-copy frame, the buffer back to the pool for a
//! CUDA copy).

use std::sync::{Arc, Mutex};

use crate::colour::ColourInfo;
use crate::cuda::{CudaDevice, DeviceBuffer, Stream};
use crate::format::FrameGeometry;
pub use crate::frame_ring::reader::FrameStats;
use crate::frame_ring::reader::RingView;
pub use crate::memory::PrivateView;
use crate::util::Origin;
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
    /// The stream COPY mode copies slots on.
    pub stream: Stream,
    /// Its device buffers.
    pub pool: BufferPool,
}

/// The stream [`Frame::download_plane`] copies CUDA frames to the host on, one per
/// subscription, made by the first such download (host rings never need one). The lock
/// keeps one download at a time on it, so that each waits for its own copy only.
pub(crate) type DownloadStream = Arc<Mutex<Option<Stream>>>;

/// A frame handed to the user.
pub struct Frame {
    /// The frame's sequence number in its ring (1 for the first frame published).
    pub seq: u64,
    /// The presentation timestamp the publisher gave, in nanoseconds (kept increasing across
    /// a followed publisher restart).
    pub pts_ns: i64,
    /// The geometry of the frame's planes (format, size, pitches, offsets).
    pub layout: Arc<FrameGeometry>,
    /// Colour range, primaries, transfer, matrix, chroma siting and sample aspect ratio, as
    /// the publisher announced them for its ring (None: a publisher that records none). Use
    /// [`ColourInfo::rgb_matrix`] and [`ColourInfo::rgb_range`] to pick a conversion.
    pub colour: Option<ColourInfo>,
    pub(crate) data: FrameData,
    /// The process that read the frame: a copy inherited through fork neither ACKs nor
    /// makes CUDA calls (see `Drop`).
    pub(super) origin: Origin,
    /// The subscription's stream for [`Self::download_plane`] of CUDA frames.
    pub(super) downloads: DownloadStream,
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

    /// The device a CUDA frame's bytes are on (the ring's, or the copy buffer's); `None` for
    /// host frames.
    pub fn cuda_device(&self) -> Option<&Arc<crate::cuda::CudaDevice>> {
        match &self.data {
            FrameData::Owned(_) => None,
            FrameData::Device { buf, .. } => buf.as_ref().map(DeviceBuffer::device),
            FrameData::Borrowed { ring, .. } => ring.slots.cuda_device(),
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

    /// The whole frame as bytes, for frames whose bytes the subscriber owns: COPY-mode host
    /// frames. `None` for zero-copy frames (their bytes are the publisher's slot, which
    /// another process may rewrite while a `&[u8]` over it would live; use [`Self::copy_to`],
    /// [`Self::download_plane`] or, under its contract, [`Self::bytes_unchecked`]) and for
    /// device memory.
    pub fn bytes(&self) -> Option<&[u8]> {
        match &self.data {
            FrameData::Owned(v) => Some(v),
            FrameData::Borrowed { .. } | FrameData::Device { .. } => None,
        }
    }

    /// Plane `i` as bytes (from the plane's start to the end of its last row) and its pitch:
    /// COPY-mode host frames only, as [`Self::bytes`].
    pub fn plane(&self, i: usize) -> Option<(&[u8], usize)> {
        self.plane_of(i, self.bytes()?)
    }

    fn plane_of<'a>(&self, i: usize, bytes: &'a [u8]) -> Option<(&'a [u8], usize)> {
        let p = *self.layout.planes().get(i)?;
        Some((bytes.get(p.offset..plane_end(&p)?)?, p.pitch))
    }

    /// The host address of the frame's first byte (its own buffer, or a zero-copy slot) and
    /// how many bytes from there are mapped; `None` for device memory. (`layout` is a public
    /// field a caller may replace: the copies bound themselves by this length, not by it.)
    fn host_source(&self) -> Option<(*const u8, usize)> {
        match &self.data {
            FrameData::Owned(v) => Some((v.as_ptr(), v.len())),
            FrameData::Borrowed { ring, index, .. }
                if ring.slots.kind() == MemoryKind::HostMemfd =>
            {
                Some((
                    ring.slots.slot_address(*index) as *const u8,
                    ring.slots.mapped_size(),
                ))
            }
            FrameData::Borrowed { .. } | FrameData::Device { .. } => None,
        }
    }

    /// The device, the device address of the frame's first byte and how many bytes from
    /// there are the frame's, for CUDA frames; `None` for host memory.
    fn device_source(&self) -> Option<(&Arc<CudaDevice>, u64, usize)> {
        match &self.data {
            FrameData::Device { buf, .. } => {
                let b = buf.as_ref()?;
                Some((b.device(), b.device_ptr(), b.size()))
            }
            FrameData::Borrowed { ring, index, .. } => Some((
                ring.slots.cuda_device()?,
                ring.slots.slot_address(*index),
                ring.slots.mapped_size(),
            )),
            FrameData::Owned(_) => None,
        }
    }

    fn not_host(&self) -> crate::Error {
        crate::Error::invalid("the frame is in device memory: copy it with CUDA (address())")
    }

    /// Copy the whole frame (`layout.frame_size` bytes, planes at their offsets and pitches)
    /// into `out`, which must be exactly that long. Host frames only (COPY or zero-copy);
    /// `InvalidArg` for device memory or a wrong length.
    ///
    /// For a zero-copy frame the copy goes through raw pointers, no reference into the shared
    /// slot is formed. It is a stable snapshot when nobody rewrites the slot meanwhile
    /// (STRICT_WAIT, the frame held, this subscriber not given up on); under DROP_OLDEST with
    /// `accept_zero_copy_overwrite` the publisher may be rewriting it and the copy may mix two
    /// frames.
    pub fn copy_to(&self, out: &mut [u8]) -> crate::Result<()> {
        let (src, avail) = self.host_source().ok_or_else(|| self.not_host())?;
        let size = self.layout.frame_size;
        if out.len() != size {
            return Err(crate::Error::invalid(format!(
                "copy_to: the frame is {size} bytes, the buffer {}",
                out.len()
            )));
        }
        if size > avail {
            return Err(crate::Error::invalid(format!(
                "copy_to: layout.frame_size {size} exceeds the frame's {avail} bytes"
            )));
        }
        // SAFETY: `src` is valid for reads of `avail` >= size bytes while this frame lives:
        // its own Vec, or the slot of a host ring, which the import maps read-only
        // (mapped_size bytes) for as long as `ring` lives, and this frame holds `ring`. `out`
        // is a unique borrow of other memory, so the ranges do not overlap. Raw-pointer copy: a
        // concurrent write by the publisher can tear the bytes copied, never invalidate a
        // reference.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), size) };
        Ok(())
    }

    /// Copy plane `i` into `out` densely: row `r` (its `row_bytes`, without the pitch padding)
    /// goes to `out[r * row_bytes..]`; `out` must be exactly `row_bytes * rows` long
    /// (`InvalidArg` otherwise, and for a plane the layout does not have). The bytes are in
    /// `out` when this returns, from host and device memory alike:
    ///
    /// - host frames (COPY or zero-copy) are copied by the CPU, with the same caveat about
    ///   rewrites as [`Self::copy_to`];
    /// - CUDA frames by a synchronous pitched device-to-host copy on a stream of the
    ///   subscription's own, in the frame's device context, pushed for the copy and popped
    ///   after it (the caller's current context is left as it was). A zero-copy CUDA frame is
    ///   a stable snapshot under the same conditions as a host one.
    pub fn download_plane(&self, i: usize, out: &mut [u8]) -> crate::Result<()> {
        let p = *self
            .layout
            .planes()
            .get(i)
            .ok_or_else(|| crate::Error::invalid(format!("the frame has no plane {i}")))?;
        let fits = |avail: usize| {
            out.len() == p.row_bytes * p.rows && plane_end(&p).is_some_and(|end| end <= avail)
        };
        let wrong_size = |out: &[u8]| {
            crate::Error::invalid(format!(
                "download_plane: plane {i} is {} rows of {} bytes, the buffer {} bytes",
                p.rows,
                p.row_bytes,
                out.len()
            ))
        };
        if let Some((src, avail)) = self.host_source() {
            if !fits(avail) {
                return Err(wrong_size(out));
            }
            for (r, row) in out.chunks_exact_mut(p.row_bytes.max(1)).enumerate() {
                let from = p.offset + r * p.pitch;
                // SAFETY: r < rows, so from + row_bytes <= plane_end <= avail (checked above),
                // and `src` is valid for reads of `avail` bytes as in `copy_to`; `row` is a
                // unique borrow of other memory.
                unsafe {
                    std::ptr::copy_nonoverlapping(src.add(from), row.as_mut_ptr(), row.len())
                };
            }
            return Ok(());
        }
        let (dev, src, avail) = self
            .device_source()
            .ok_or_else(|| crate::Error::invalid("download_plane: the frame has no memory"))?;
        if !fits(avail) {
            return Err(wrong_size(out));
        }
        let mut stream = self.downloads.lock().unwrap_or_else(|p| p.into_inner());
        let stream = match &mut *stream {
            Some(s) => s,
            empty => empty.insert(Stream::new(dev)?),
        };
        // SAFETY: the plane (rows of row_bytes at pitch, from src + offset) ends within the
        // `avail` bytes of device memory this frame holds (checked above): the ring's slot,
        // mapped while the frame holds `ring`, or its own pooled buffer, held until its drop.
        // The copy has completed when `copy_dtoh_2d` returns (it synchronises the stream), on
        // a stream of the frame's device, which binds its context for the copy.
        unsafe {
            crate::cuda::copy_dtoh_2d(
                out,
                p.row_bytes,
                src + p.offset as u64,
                p.pitch,
                p.row_bytes,
                p.rows,
                stream,
            )
        }
    }

    /// A private copy-on-write view of `len` bytes of a zero-copy host frame from `offset`
    /// (a plane): the slot's bytes, not copied, at an address where writes land in this
    /// process's own pages and never reach the slot (see [`PrivateView`]). For handing the
    /// frame to consumers that may write through what they are given. `None` for frames
    /// whose bytes are their own (COPY) or in device memory; `InvalidArg` for a range outside
    /// the slot. Hold the frame while the view is used: its unwritten pages are the slot's.
    pub fn private_host_view(
        &self,
        offset: usize,
        len: usize,
    ) -> Option<crate::Result<PrivateView>> {
        match &self.data {
            FrameData::Borrowed { ring, index, .. } => ring.slots.private_view(*index, offset, len),
            FrameData::Owned(_) | FrameData::Device { .. } => None,
        }
    }

    /// The whole frame as bytes, zero-copy host frames included (`None` for device memory).
    ///
    /// # Safety
    /// For a zero-copy frame the slice is the publisher's slot. The caller guarantees that
    /// nobody writes those bytes while the slice lives: the publisher runs STRICT_WAIT (it
    /// rewrites a slot only once every subscriber ACKed it), this frame is held (not released
    /// or dropped) for the whole life of the slice, and the publisher has not given up on this
    /// subscriber (an ACK timeout or a kick lets it rewrite the slot). Under DROP_OLDEST with
    /// `accept_zero_copy_overwrite` this cannot be guaranteed: use [`Self::copy_to`]. A COPY
    /// frame's bytes are its own: for it this is [`Self::bytes`].
    pub unsafe fn bytes_unchecked(&self) -> Option<&[u8]> {
        let (src, avail) = self.host_source()?;
        let size = self.layout.frame_size;
        if size > avail {
            return None;
        }
        // SAFETY: `src` is valid for reads of `avail` >= size bytes while `self` (holding the
        // Vec or the ring mapping) lives, as in `copy_to`; the caller guarantees that nothing
        // writes them while the returned borrow of `self` lives.
        Some(unsafe { std::slice::from_raw_parts(src, size) })
    }

    /// Plane `i` as bytes and its pitch, zero-copy host frames included.
    ///
    /// # Safety
    /// As for [`Self::bytes_unchecked`].
    pub unsafe fn plane_unchecked(&self, i: usize) -> Option<(&[u8], usize)> {
        // SAFETY: the caller upholds bytes_unchecked's contract, which is this function's.
        self.plane_of(i, unsafe { self.bytes_unchecked() }?)
    }

    /// Release the frame: a zero-copy frame is ACKed now, for a CUDA ring once the work in
    /// the device's primary context has finished (see `ack_now`). Dropping does the same.
    pub fn release(mut self) {
        self.ack_now();
    }

    /// ACK a zero-copy frame that is still held. For a CUDA ring the device's primary
    /// context is synchronised first (`cuCtxSynchronize`, under a `ContextGuard`), so that no
    /// work queued there still reads the slot when the publisher may rewrite it (R12). That
    /// is a host wait for *all* work of the context (every stream of this process in it), and
    /// it does not cover work in other contexts: such readers release with
    /// [`Frame::release_after_stream`] instead.
    fn ack_now(&mut self) {
        if !self.origin.is_here() {
            return;
        }
        if let FrameData::Borrowed { ring, index, acked } = &mut self.data {
            if !*acked {
                if let Some(dev) = ring.slots.cuda_device() {
                    if let Err(e) = dev.synchronize() {
                        // A context in error runs no more work; ACK regardless, or the
                        // publisher would wait on this frame forever (STRICT_WAIT).
                        crate::util::diag!("releasing frame {}: {e}", self.seq);
                    }
                }
                ring.ack(*index, self.seq);
                *acked = true;
            }
        }
    }
}

/// One past the last byte of plane `p`'s last row, from the frame's start (`None` on
/// overflow); its first row starts at `p.offset`.
fn plane_end(p: &crate::format::Plane) -> Option<usize> {
    match p.rows.checked_sub(1) {
        None => Some(p.offset),
        Some(last) => p
            .offset
            .checked_add(last.checked_mul(p.pitch)?)?
            .checked_add(p.row_bytes),
    }
}

/// Dropping a frame releases it. A CUDA frame that was not released with
/// [`Frame::release_after_stream`] waits for all work in the device's primary context first
/// (`cuCtxSynchronize`): a zero-copy frame before its ACK, a COPY frame before its buffer
/// returns to the subscriber's pool, where the next copy rewrites it. Dropping costs a host
/// wait as long as the longest work queued in that context, and GPU work in other contexts is
/// not waited for (release those frames with `release_after_stream` and the reading stream).
///
/// A frame inherited by a child forked from the reading process is the parent's: dropping
/// it there neither ACKs it (the parent may still read the slot) nor calls CUDA (unusable
/// after a fork; a device buffer is leaked).
impl Drop for Frame {
    fn drop(&mut self) {
        if !self.origin.is_here() {
            if let FrameData::Device { buf, .. } = &mut self.data {
                std::mem::forget(buf.take());
            }
            return;
        }
        self.ack_now();
        if let FrameData::Device { buf, pool } = &mut self.data {
            if let Some(b) = buf.take() {
                match b.device().synchronize() {
                    Ok(()) => pool.lock().unwrap_or_else(|p| p.into_inner()).push(b),
                    // A context in error runs no more work; freeing the buffer is the safe
                    // way out (it is not handed to another frame).
                    Err(e) => {
                        crate::util::diag!("releasing frame {}: {e}", self.seq);
                        drop(b);
                    }
                }
            }
        }
    }
}
