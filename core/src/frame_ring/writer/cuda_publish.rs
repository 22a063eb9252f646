//! The writer's CUDA publications, whole: "copy and publish on this stream" is decided here,
//! and the publisher only picks the ring and the slot. A slot written by GPU work is published
//! after the caller's stream (synchronised here) or on it (a host function queued behind the
//! work makes it visible, §5); a frame in other device memory is copied into a slot on the
//! caller's stream or the ring's own, then published the one way or the other. Every
//! failure gives the slot back.

use super::acks::AckAuthority;
use super::config::AcquiredSlot;
use super::frame_writer::{check_publishable, FrameWriter};
use super::host_planes::check_plane_count;
use crate::cuda::{ContextGuard, CudaStream, Stream, StreamIdentity};
use crate::error::{Error, Result};

impl FrameWriter {
    /// Publish `slot`, written by GPU work on `stream`, once that work has finished: the
    /// stream is synchronised on this thread first, so the frame is complete before it is
    /// visible (§5). A caller's stream belongs to the caller's context, which is current on
    /// this thread (FFmpeg: `cuCtxPushCurrent(hwctx->cuda_ctx)`); `None` is the legacy
    /// default stream of the ring's own context, pushed for the synchronize and popped again.
    /// A failed synchronize gives the slot back unpublished.
    pub(crate) fn publish_after_stream(
        &self,
        slot: AcquiredSlot,
        stream: Option<CudaStream<'_>>,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        if let Err(e) = self.sync_stream(stream) {
            self.abandon(slot);
            return Err(e);
        }
        self.publish(slot, pts_ns)
    }

    /// Wait for the caller's work on `stream` (`None`: the legacy default stream of the
    /// ring's context, pushed here).
    fn sync_stream(&self, stream: Option<CudaStream<'_>>) -> Result<()> {
        let (dev, _) = self.cuda()?;
        let _current = match stream {
            None => dev.push_current()?,
            Some(_) => ContextGuard::none(),
        };
        let raw = stream.map_or(std::ptr::null_mut(), CudaStream::raw);
        // SAFETY: null is the legacy default stream (of the ring's context, pushed above);
        // otherwise the caller's stream, live and of the current context (CudaStream's
        // contract), and the borrow ends with this call.
        let stream = unsafe { Stream::from_raw(raw) };
        stream.synchronize()
    }

    /// Publish `slot` once the work queued so far on `stream` (the slot's writes) has
    /// completed, without waiting for it: a host function queued on the stream makes the
    /// frame visible (§5). The caller goes on at once; the next `acquire` of this slot, a
    /// `publish` and the ring's teardown wait for it. Publications queued on one stream run
    /// in order; a publication on another stream than the pending ones first waits for
    /// those, so frames still become visible in seq order. The legacy and per-thread default
    /// streams are those of the current context, which is then one of the ring's device. On
    /// error the slot is given back.
    pub(crate) fn publish_on_stream(
        &self,
        slot: AcquiredSlot,
        stream: CudaStream<'_>,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let seq = slot.seq;
        // SAFETY: the caller's stream is live and of the current context (CudaStream's
        // contract), or a special handle of the current context.
        unsafe { self.queue_publication(slot, stream.raw(), pts_ns) }
            .inspect_err(|_| self.abandon_seq(seq))
    }

    /// The publication of `publish_on_stream`, queued on a raw stream; the slot stays out on
    /// error.
    ///
    /// # Safety
    /// `stream` is a live `CUstream` of the current context, or null / a special handle with
    /// a context of the ring's device current.
    unsafe fn queue_publication(
        &self,
        slot: AcquiredSlot,
        stream: *mut std::ffi::c_void,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let mut st = self.lock();
        check_publishable(&mut st, slot.seq)?;
        // Which stream the handle names on this thread: CU_STREAM_PER_THREAD from two
        // threads, or the legacy stream of two contexts, are different streams.
        let identity = StreamIdentity::of(stream)?;
        if st.pending_stream != Some(identity) {
            self.wait_published(st.last_seq)?;
        }
        let k = self.slot_of(slot.seq);
        // The slot's pts and size before the host function is queued: it may run at once,
        // and readers read them as soon as it has made the seq valid (a frame visible with
        // the previous frame's pts looks out of order to FFmpeg readers, which drop it).
        self.store_slot_fields(k, pts_ns);
        // SAFETY: our contract is enqueue's.
        unsafe { self.publication.enqueue(stream, k, slot.seq) }?;
        self.record(&mut st, &slot);
        st.pending_stream = Some(identity);
        Ok(slot.seq)
    }

    /// Take the next slot (waiting for ACKs under STRICT_WAIT, asked of `acks`), copy a frame
    /// from device memory into it on `stream` (`None`: the ring's own stream), ordered after
    /// the caller's earlier work on it, wait for the copy and publish the slot. With a
    /// caller's stream, the caller's context is current on this thread (VMM memory is
    /// addressable from every context of the device). On error the slot is given back.
    ///
    /// # Safety
    /// Each `planes[i]` is device memory of this device, readable for plane i's rows at
    /// `pitches[i]` until this returns.
    pub(crate) unsafe fn publish_device_planes(
        &self,
        acks: &dyn AckAuthority,
        planes: &[u64],
        pitches: &[usize],
        stream: Option<CudaStream<'_>>,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let slot = self.acquire(acks)?;
        // SAFETY: our contract, with the copy complete before we return (synchronize).
        let copied = unsafe { self.queue_device_copy(&slot, planes, pitches, stream) }
            .and_then(|used| used.get().synchronize());
        if let Err(e) = copied {
            self.abandon(slot);
            return Err(e);
        }
        self.publish(slot, pts_ns)
    }

    /// `publish_device_planes` without waiting: the copy and then the publication are queued
    /// on `stream` (`None`: the ring's own stream, ordered after nothing of the caller's),
    /// and this returns at once. On error the slot is given back.
    ///
    /// # Safety
    /// Each `planes[i]` is device memory of this device, holding plane i's rows at
    /// `pitches[i]` unchanged until the stream has run the copy (work queued later on the
    /// same stream may reuse it, as FFmpeg's frame pools do).
    pub(crate) unsafe fn publish_device_planes_on_stream(
        &self,
        acks: &dyn AckAuthority,
        planes: &[u64],
        pitches: &[usize],
        stream: Option<CudaStream<'_>>,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let slot = self.acquire(acks)?;
        let seq = slot.seq;
        // SAFETY: our contract is queue_device_copy's (the source stays valid until the
        // stream has run the copy).
        let queued =
            unsafe { self.queue_device_copy(&slot, planes, pitches, stream) }.and_then(|used| {
                // The publication goes behind the copy, on the stream the copy runs on; the
                // ring's own stream needs the ring's context current for cuLaunchHostFunc
                // (it binds no context of its own).
                let _current = match &used {
                    StreamRef::Own(_) => Some(self.cuda()?.0.push_current()?),
                    StreamRef::Caller(_) => None,
                };
                // SAFETY: `used` is the caller's live stream (its context current) or our
                // own stream with our context pushed.
                unsafe { self.queue_publication(slot, used.get().raw(), pts_ns) }
            });
        queued.inspect_err(|_| self.abandon_seq(seq))
    }

    /// Copy a frame from device memory (plane pointers and pitches) into `slot` on `stream`
    /// (`None`: the ring's own stream), queued and not waited for; returns the stream it runs
    /// on (the caller's, borrowed, or the ring's own).
    ///
    /// # Safety
    /// Each `planes[i]` is device memory of this device, readable for plane i's rows at
    /// `pitches[i]` until the copy has run on the stream.
    unsafe fn queue_device_copy(
        &self,
        slot: &AcquiredSlot,
        planes: &[u64],
        pitches: &[usize],
        stream: Option<CudaStream<'_>>,
    ) -> Result<StreamRef<'_>> {
        let (_, own) = self.cuda()?;
        let layout = &self.layout;
        check_plane_count(layout, planes.len(), pitches.len())?;
        // The caller's stream runs in the caller's (current) context; our own stream pushes
        // ours for each call and pops it again.
        let stream = match stream {
            None => StreamRef::Own(own),
            // SAFETY: a live CUstream of the current context, or a special handle
            // (CudaStream's contract).
            Some(caller) => StreamRef::Caller(unsafe { Stream::from_raw(caller.raw()) }),
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
}

/// The stream a device copy was queued on.
enum StreamRef<'a> {
    /// The ring's own copy stream (it pushes the ring's context for each call).
    Own(&'a Stream),
    /// The caller's stream, borrowed (the caller's context is current).
    Caller(Stream),
}

impl StreamRef<'_> {
    fn get(&self) -> &Stream {
        match self {
            StreamRef::Own(s) => s,
            StreamRef::Caller(s) => s,
        }
    }
}
