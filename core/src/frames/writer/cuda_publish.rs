//! The writer's CUDA publications: a slot written by GPU work published after the caller's
//! stream (synchronised here) or on it (a host function queued behind the work makes it
//! visible, §5), and the copies of a frame from device memory on the caller's stream or the
//! ring's own.

use super::config::AcquiredSlot;
use super::frame_writer::{check_publishable, FrameWriter};
use super::host_planes::check_plane_count;
use crate::error::{Error, Result};

impl FrameWriter {
    /// CUDA: publish a slot once the work queued so far on `stream` (the slot's writes) has
    /// completed, without waiting for it: a host function queued on the stream makes the frame
    /// visible (§5). The caller goes on at once; the next `acquire` of this slot, a `publish`
    /// and the ring's teardown wait for it. Publications queued on one stream run in order; a
    /// publication on another stream than the pending ones first waits for those, so frames
    /// still become visible in seq order.
    ///
    /// # Safety
    /// `stream` is a live `CUstream` of the current context, or null / `CU_STREAM_LEGACY`
    /// with a context of the ring's device current.
    pub(crate) unsafe fn publish_on_stream(
        &self,
        slot: AcquiredSlot,
        stream: *mut std::ffi::c_void,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let mut st = self.lock();
        check_publishable(&mut st, slot.seq)?;
        // Which stream the handle names on this thread: CU_STREAM_PER_THREAD from two
        // threads, or the legacy stream of two contexts, are different streams.
        let identity = crate::cuda::StreamIdentity::of(stream)?;
        if st.pending_stream != Some(identity) {
            self.wait_published(st.last_seq)?;
        }
        let k = self.slot_of(slot.seq);
        // The slot's pts and size before the host function is queued: it may run at once,
        // and readers read them as soon as it has made the seq valid. (They were stored after
        // the queueing at first: a fast stream published frames with the previous frame's pts,
        // and FFmpeg readers dropped them as out of order.)
        self.store_slot_fields(k, pts_ns);
        // SAFETY: our contract is enqueue's.
        unsafe { self.publication.enqueue(stream, k, slot.seq) }?;
        self.record(&mut st, &slot);
        st.pending_stream = Some(identity);
        Ok(slot.seq)
    }

    /// §5: wait until the caller's work on `stream` (a raw `CUstream`; null = the legacy
    /// default stream of the ring's device) has finished, so that the frame is complete before
    /// it is published. A caller's stream belongs to the caller's context, which must be
    /// current on this thread (FFmpeg: `cuCtxPushCurrent(hwctx->cuda_ctx)`); only for a null
    /// stream is the ring's own context pushed, for the synchronize, and popped again.
    ///
    /// # Safety
    /// `stream` is null or a live `CUstream` of the current context.
    pub(crate) unsafe fn sync_stream(&self, stream: *mut std::ffi::c_void) -> Result<()> {
        let (dev, _) = self.cuda()?;
        let _current = if stream.is_null() {
            dev.push_current()?
        } else {
            crate::cuda::ContextGuard::none()
        };
        // SAFETY: null is the legacy default stream (of the ring's context, pushed above);
        // otherwise a live CUstream of the current context: this function's contract.
        let stream = unsafe { crate::cuda::Stream::from_raw(stream) };
        stream.synchronize()
    }

    /// Copy a frame from device memory (plane pointers and pitches) into a CUDA slot on
    /// `stream` (null: the ring's own stream), ordered after the caller's earlier work on it,
    /// and wait for the copy. With a caller's stream, the caller's context must be current on
    /// this thread (VMM memory is addressable from every context of the device).
    ///
    /// # Safety
    /// `stream` is null or a live `CUstream` of the current context; each `planes[i]` is
    /// device memory of this device, readable for plane i's rows at `pitches[i]` until this
    /// returns.
    pub(crate) unsafe fn write_device_planes(
        &self,
        slot: &AcquiredSlot,
        planes: &[u64],
        pitches: &[usize],
        stream: *mut std::ffi::c_void,
    ) -> Result<()> {
        // SAFETY: our contract, with the copy complete before we return (synchronize below).
        let used = unsafe { self.queue_device_copy(slot, planes, pitches, stream) }?;
        used.synchronize()
    }

    /// The copy of `write_device_planes`, queued and not waited for; returns the stream it
    /// runs on (the caller's, borrowed, or the ring's own).
    ///
    /// # Safety
    /// `stream` is null or a live `CUstream` of the current context; each `planes[i]` is
    /// device memory of this device, readable for plane i's rows at `pitches[i]` until the
    /// copy has run on the stream.
    pub(crate) unsafe fn queue_device_copy(
        &self,
        slot: &AcquiredSlot,
        planes: &[u64],
        pitches: &[usize],
        stream: *mut std::ffi::c_void,
    ) -> Result<StreamRef<'_>> {
        let (_, own) = self.cuda()?;
        let layout = &self.layout;
        check_plane_count(layout, planes.len(), pitches.len())?;
        // The caller's stream runs in the caller's (current) context; our own stream pushes
        // ours for each call and pops it again.
        let stream = if stream.is_null() {
            StreamRef::Own(own)
        } else {
            // SAFETY: a live CUstream of the current context: this function's contract.
            StreamRef::Caller(unsafe { crate::cuda::Stream::from_raw(stream) })
        };
        let base = self.slots.slot_address(self.slot_of(slot.seq));
        for (i, (p, (src, pitch))) in layout
            .planes()
            .iter()
            .zip(planes.iter().zip(pitches))
            .enumerate()
        {
            if *src == 0 || *pitch < p.row_bytes {
                return Err(Error::invalid(format!(
                    "plane {i}: NULL or pitch below {} bytes",
                    p.row_bytes
                )));
            }
            // SAFETY: the destination is plane `p` of the acquired slot (a VMM mapping of ours
            // that outlives the copy: the ring's teardown waits for the publications queued
            // behind it, and the synchronous callers wait for the copy). The source planes are
            // the caller's device memory, valid for their rows at `pitch` until the copy has
            // run: this function's contract.
            unsafe {
                crate::cuda::copy_2d_async(
                    base + p.offset as u64,
                    p.pitch,
                    *src,
                    *pitch,
                    p.row_bytes,
                    p.rows,
                    stream.get(),
                )
            }?;
        }
        Ok(stream)
    }

    /// The ring's context pushed: what a publication queued on the ring's own stream needs
    /// (cuLaunchHostFunc binds no context of its own).
    pub(crate) fn push_ring_context(&self) -> Result<crate::cuda::ContextGuard> {
        self.cuda()?.0.push_current()
    }
}

/// The stream a device copy was queued on.
pub(crate) enum StreamRef<'a> {
    /// The ring's own copy stream (it pushes the ring's context for each call).
    Own(&'a crate::cuda::Stream),
    /// The caller's stream, borrowed (the caller's context is current).
    Caller(crate::cuda::Stream),
}

impl StreamRef<'_> {
    pub(crate) fn get(&self) -> &crate::cuda::Stream {
        match self {
            StreamRef::Own(s) => s,
            StreamRef::Caller(s) => s,
        }
    }

    pub(crate) fn synchronize(&self) -> Result<()> {
        self.get().synchronize()
    }
}
