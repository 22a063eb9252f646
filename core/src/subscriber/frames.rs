//! Frames handed to the user: the subscriber's side of the frame ring above
//! [`crate::frame_ring::reader`], which decides what to read; here the bytes are copied or
//! borrowed and released (R12).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::colour::ColourInfo;
use crate::cuda::{DeviceBuffer, Stream};

use crate::format::FrameLayout;
pub use crate::frame_ring::reader::FrameStats;
use crate::frame_ring::reader::{Attempt, FrameReader, RingView};
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
    pub stream: Stream,
    pub pool: BufferPool,
}

/// A frame handed to the user.
pub struct Frame {
    pub seq: u64,
    pub pts_ns: i64,
    pub layout: Arc<FrameLayout>,
    /// Colour range, primaries, transfer, matrix, chroma siting and sample aspect ratio, as
    /// the publisher announced them for its ring (None: a publisher that records none). Use
    /// [`ColourInfo::rgb_matrix`] and [`ColourInfo::rgb_range`] to pick a conversion.
    pub colour: Option<ColourInfo>,
    pub(crate) data: FrameData,
    /// The process that read the frame: a copy inherited through fork neither ACKs nor
    /// makes CUDA calls (see `Drop`).
    origin: Origin,
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
    /// [`Self::copy_plane_to`] or, under its contract, [`Self::bytes_unchecked`]) and for
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
    /// goes to `out[r * row_bytes..]`; `out` must be exactly `row_bytes * rows` long. Host
    /// frames only; the same caveat about rewrites as [`Self::copy_to`].
    pub fn copy_plane_to(&self, i: usize, out: &mut [u8]) -> crate::Result<()> {
        let p = *self
            .layout
            .planes()
            .get(i)
            .ok_or_else(|| crate::Error::invalid(format!("the frame has no plane {i}")))?;
        let (src, avail) = self.host_source().ok_or_else(|| self.not_host())?;
        if out.len() != p.row_bytes * p.rows || !plane_end(&p).is_some_and(|end| end <= avail) {
            return Err(crate::Error::invalid(format!(
                "copy_plane_to: plane {i} is {} rows of {} bytes, the buffer {} bytes",
                p.rows,
                p.row_bytes,
                out.len()
            )));
        }
        for (r, row) in out.chunks_exact_mut(p.row_bytes.max(1)).enumerate() {
            let from = p.offset + r * p.pitch;
            // SAFETY: r < rows, so from + row_bytes <= plane_end <= avail (checked above), and `src` is valid for reads of `avail` bytes as in
            // `copy_to`; `row` is a unique borrow of other memory.
            unsafe { std::ptr::copy_nonoverlapping(src.add(from), row.as_mut_ptr(), row.len()) };
        }
        Ok(())
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

/// A subscriber's frames: the mapped ring, what to read next, and how to hand it out.
pub(crate) struct FrameSource {
    pub ring: Arc<RingView>,
    pub layout: Arc<FrameLayout>,
    /// The stream's colour description as the publisher announced it (None: not recorded).
    pub colour: Option<ColourInfo>,
    pub reader: FrameReader,
    pub zero_copy: bool,
    /// Present for CUDA rings: the stream COPY mode copies on, and its buffers.
    pub cuda: Option<CudaReader>,
    /// Set when the connection ends: the seq published then. Frames after it are not for this
    /// subscriber (the publisher no longer counts it), so none is handed out.
    pub until: Option<u64>,
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
                // R10 re-check in `try_copy` throws such a copy away.
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
            }),
            Attempt::Empty => Got::Empty,
            Attempt::Skipped => Got::Skipped,
            Attempt::Failed(e) => Got::Failed(e),
        }
    }
}

impl Frame {
    /// Release after the CUDA work queued on `stream` (a `CUstream`) has finished (R12).
    ///
    /// - A zero-copy CUDA frame whose `stream` is idle (`cuStreamQuery`: all work queued on
    ///   it has completed) is ACKed now, with nothing queued on the GPU.
    /// - Otherwise a host function enqueued on `stream` ACKs it behind the last reader, and
    ///   only ACKs: its reference to the ring goes to the subscriber's release
    ///   thread ([`super::deferred`]), so that a ring whose subscriber was destroyed meanwhile
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
