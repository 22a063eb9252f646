//! [`FrameWriter`]: the publisher's frame ring. Its creation (slots, SHM under a private name)
//! and installation at the key's name, slot acquisition with the R24 invalidation, the
//! publish of a complete slot, the writer's own record of each slot's frame, the wait for
//! publications still queued on a stream, retirement when a newer ring takes its place, and
//! the teardown. The copies into a slot and the CUDA publications build on this
//! (`host_planes`, `cuda_publish`).

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::acks::{forget_subscriber, AckAuthority, AckWait};
use super::config::{AcquiredSlot, FrameRingConfig, MemoryChoice};
use crate::error::{Error, ErrorCode, Result};
use crate::format::FrameGeometry;
use crate::frame_ring::publication::Publication;
use crate::frame_ring::shm_region::FrameShm;
use crate::frame_ring::wait_stats::WaitStats;
use crate::memory::host::HostSlots;
use crate::memory::SlotStore;
use crate::paths::Key;
use crate::shm;
use crate::util::monotonic_ns;
use crate::wire::frame::{FrameMeta, FRAME_SHM_SIZE};
use crate::wire::meta_ext::MetaExt;
use crate::wire::{Policy, INVALID_SEQ, MAX_RING_SIZE};

/// What the writer's mutex guards: its own record of the ring.
pub(crate) struct WriterState {
    pub(super) last_seq: u64,
    pub(super) acquired: Option<u64>,
    /// The writer's own record of the frame in each slot (0 = none): what STRICT_WAIT waits
    /// on is decided from this, never from the SHM, which others may be able to write.
    pub(super) slot_seq: [u64; MAX_RING_SIZE],
    /// The stream the last publication was queued on (`publish_on_stream`): one queued on
    /// the same stream runs after it; on any other, it waits for it first.
    pub(super) pending_stream: Option<crate::cuda::StreamIdentity>,
    /// A newer ring took this one's place ([`FrameWriter::retire`]): nothing more is
    /// acquired or published here.
    pub(super) retired: bool,
}

/// How long the writer waits for a publication queued on a stream (the GPU work before it)
/// when it needs it: to reuse its slot, to publish after it, or to tear the ring down. A
/// stream that has not finished a frame's copy in this long has failed or hangs.
const STREAM_PUBLICATION_TIMEOUT: Duration = Duration::from_secs(10);

/// The publisher's frame ring: the SHM, the slots and the writer state.
pub struct FrameWriter {
    pub layout: FrameGeometry,
    /// The meta subscribers get (HELLO_RESP, SHM header): the layout's, with the extension
    /// (colour, GPU UUID) in its reserved bytes.
    pub meta: FrameMeta,
    pub ring_size: usize,
    pub policy: Policy,
    pub ack_timeout: Duration,
    pub shm: Arc<FrameShm>,
    /// Where the frame SHM is: the key's name once installed, its generation name before
    /// (and for good when another user holds the key's name).
    pub shm_name: String,
    installed: bool,
    _shm_fd: OwnedFd,
    pub slots: Box<dyn SlotStore>,
    writer: Mutex<WriterState>,
    /// What publishing touches (the published seq, the readers to wake), shared with the
    /// publications queued on CUDA streams.
    pub(crate) publication: Arc<Publication>,
    /// CUDA rings: the stream the convenience copies run on.
    copy_stream: Option<crate::cuda::Stream>,
    /// The writer has started to overwrite published frames (its first lap is over). Set
    /// before the acquire that first reuses a slot computes who must ACK, so a subscriber
    /// admitted while it is false (and so started at frame 1) is in that computation.
    first_lap_over: std::sync::atomic::AtomicBool,
}

impl FrameWriter {
    /// Allocate `config.ring_size` slots and create the frame SHM of `key` with `file_mode`,
    /// under a private name: nothing is visible at the key's name until
    /// [`FrameWriter::install`], so a failure here (slots, memory, descriptors) leaves the
    /// ring in place untouched.
    pub(crate) fn create_staged(
        key: &Key,
        config: &FrameRingConfig,
        file_mode: u32,
    ) -> Result<FrameWriter> {
        let layout = config.validate()?;
        let slots: Box<dyn SlotStore> = match config.memory {
            MemoryChoice::Host => Box::new(HostSlots::create(config.ring_size, layout.frame_size)?),
            MemoryChoice::Cuda { device } => {
                crate::memory::create_cuda_slots(device, config.ring_size, layout.frame_size)?
            }
        };
        let copy_stream = match slots.cuda_device() {
            Some(dev) => Some(crate::cuda::Stream::new(dev)?),
            None => None,
        };
        let meta = announced_meta(&layout, config, slots.as_ref());
        let (shm_name, fd, map) =
            shm::create_staged(&key.frame_shm_name(), FRAME_SHM_SIZE, file_mode)?;
        let shm = match FrameShm::new(map) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                let _ = shm::unlink(&shm_name);
                return Err(e);
            }
        };
        shm.initialise(
            &meta,
            config.ring_size,
            config.policy,
            slots.kind(),
            std::process::id(),
        );
        Ok(FrameWriter {
            layout,
            meta,
            ring_size: config.ring_size,
            policy: config.policy,
            ack_timeout: config.ack_timeout,
            shm_name,
            installed: false,
            _shm_fd: fd,
            copy_stream,
            slots,
            writer: Mutex::new(WriterState {
                last_seq: 0,
                acquired: None,
                slot_seq: [0; MAX_RING_SIZE],
                pending_stream: None,
                retired: false,
            }),
            publication: Publication::new(Arc::clone(&shm)),
            shm,
            first_lap_over: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Put the frame SHM at the key's name, in one step, over the previous ring's (whose
    /// readers keep theirs; without `replacing`, an object of ours there is left alone and
    /// the answer is `AlreadyExists`). When another user holds that name, the ring keeps its own
    /// generation name (HELLO_RESP announces it, R19), and is removed with the ring. On
    /// error nothing changed: the SHM is still private (and removed with the ring).
    pub(crate) fn install(&mut self, key: &Key, replacing: bool) -> Result<()> {
        let name = key.frame_shm_name();
        match shm::place(&self.shm_name, &name, replacing)? {
            shm::Placement::AtName => {
                self.shm_name = name;
                self.installed = true;
            }
            shm::Placement::Kept { holder_uid } => crate::util::diag!(
                "/dev/shm/{name} is held by uid {holder_uid}, not by this publisher: the \
                 frame ring of key {key:?} is /dev/shm/{} instead (subscribers follow \
                 HELLO_RESP there); remove /dev/shm/{name} as root or uid {holder_uid}",
                self.shm_name
            ),
        }
        Ok(())
    }

    /// Whether the frame SHM is at the key's name (else under its generation name).
    pub(crate) fn at_key_name(&self) -> bool {
        self.installed
    }

    /// The slot that frame `seq` lives in. Always derived from the seq, never taken from a
    /// caller: an index from outside could point past the ring into the subscriber slots.
    pub fn slot_of(&self, seq: u64) -> usize {
        (seq % self.ring_size as u64) as usize
    }

    /// Stop counting on subscriber `bit` (it was given up on, or left): its bit leaves the
    /// header's `subscriber_bitmap` so that operators and v4 peers see it gone.
    pub fn forget_subscriber(&self, bit: usize) {
        forget_subscriber(&self.shm, bit);
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, WriterState> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn last_seq(&self) -> u64 {
        self.lock().last_seq
    }

    /// The last published seq, without taking the writer's lock.
    /// Where this ring's frames waited so far ([`WaitStats`]).
    pub fn wait_stats(&self) -> WaitStats {
        self.publication.waits.snapshot()
    }

    pub fn published_seq(&self) -> u64 {
        self.publication.published()
    }

    /// Whether every frame this ring published is still in its slot (no slot reused yet):
    /// a subscriber admitted now may start at frame 1 (see `first_lap_over`).
    pub fn first_lap_intact(&self) -> bool {
        !self.first_lap_over.load(Ordering::SeqCst)
    }

    /// Take the next slot for writing. Under STRICT_WAIT this waits until every subscriber
    /// that must see the frame in that slot has ACKed it, or declares the late ones dead.
    pub(crate) fn acquire(&self, acks: &dyn AckAuthority) -> Result<AcquiredSlot> {
        let mut st = self.lock();
        if st.retired {
            return Err(replaced());
        }
        if st.acquired.is_some() {
            return Err(Error::invalid(
                "a slot is already acquired: publish it before acquiring another",
            ));
        }
        let seq = st.last_seq + 1;
        let index = self.slot_of(seq);
        // The slot's previous frame may still wait for its GPU work (publish_on_stream): it
        // is published (or its stream declared failed) before the slot is invalidated.
        self.wait_published(st.slot_seq[index])?;
        let old_seq = st.slot_seq[index];
        if old_seq != 0 {
            let strict = self.policy == Policy::StrictWait;
            if strict {
                // A replacement ring keeps its first frames for the old ring's readers, who
                // come back only once they have drained the old one: its first lap waits
                // for them (bounded) before overwriting, whichever thread publishes.
                self.ack_wait().wait_for_returns(acks);
            }
            // Before who must ACK is computed (see `first_lap_over`).
            self.first_lap_over.store(true, Ordering::SeqCst);
            if strict {
                self.ack_wait().wait_for_acks(index, old_seq, acks);
            }
        }
        st.slot_seq[index] = 0;
        // R24/R10: invalidate the slot and clear its ACKs before a single byte is written.
        self.shm
            .slot_seq(index)
            .store(INVALID_SEQ, Ordering::Release);
        self.shm.slot_ack(index).store(0, Ordering::Release);
        std::sync::atomic::fence(Ordering::SeqCst);
        st.acquired = Some(seq);
        Ok(AcquiredSlot {
            index,
            seq,
            address: self.slots.slot_address(index),
            memory_kind: self.slots.kind(),
        })
    }

    /// Make the acquired slot visible with `pts_ns` (R25: None = CLOCK_MONOTONIC now).
    /// The caller has finished writing (for CUDA: its stream was synchronised, §5).
    pub(crate) fn publish(&self, slot: AcquiredSlot, pts_ns: Option<i64>) -> Result<u64> {
        let mut st = self.lock();
        check_publishable(&mut st, slot.seq)?;
        // Frames become visible in seq order: the ones still queued on a stream first.
        self.wait_published(st.last_seq)?;
        let k = self.commit(&mut st, &slot, pts_ns);
        // Visible in seq order whichever threads publish: the stores under the lock, the
        // wake (a system call when readers sleep) after it.
        self.publication.store_visible(k, slot.seq);
        drop(st);
        self.publication.wake_readers();
        Ok(slot.seq)
    }

    /// The writer's side of a publication: the slot's pts and size, then our own record;
    /// returns the slot index.
    pub(super) fn commit(
        &self,
        st: &mut WriterState,
        slot: &AcquiredSlot,
        pts_ns: Option<i64>,
    ) -> usize {
        // The seq was checked against our own record; `slot.index` is the caller's copy.
        let k = self.slot_of(slot.seq);
        self.store_slot_fields(k, pts_ns);
        self.record(st, slot);
        k
    }

    /// The slot's pts and size, read by subscribers only once its seq is valid (it is invalid
    /// from the acquire on), so stored before the seq is.
    pub(super) fn store_slot_fields(&self, k: usize, pts_ns: Option<i64>) {
        self.shm.slot_pts(k).store(
            pts_ns.unwrap_or_else(monotonic_ns) as u64,
            Ordering::Relaxed,
        );
        self.shm
            .slot_written(k)
            .store(self.layout.frame_size as u64, Ordering::Relaxed);
    }

    /// Our own record of a published (or queued) frame.
    pub(super) fn record(&self, st: &mut WriterState, slot: &AcquiredSlot) {
        st.slot_seq[self.slot_of(slot.seq)] = slot.seq;
        st.last_seq = slot.seq;
        st.acquired = None;
    }

    /// Wait until frame `seq` (0: none) is visible, when a stream still holds its publication.
    pub(super) fn wait_published(&self, seq: u64) -> Result<()> {
        if seq == 0 || self.publication.pending() == 0 {
            return Ok(());
        }
        if self
            .publication
            .wait_published(seq, STREAM_PUBLICATION_TIMEOUT)
        {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::Cuda,
            format!(
                "frame {seq} is still not published after {} s: the GPU work queued before it \
                 on its stream has not completed (the stream failed or hangs)",
                STREAM_PUBLICATION_TIMEOUT.as_secs()
            ),
        ))
    }

    /// Give an acquired slot back unpublished (the write failed). The slot stays invalid.
    pub(crate) fn abandon(&self, slot: AcquiredSlot) {
        self.abandon_seq(slot.seq);
    }

    /// `abandon` by seq, for callers that handed the slot on to a call that failed.
    pub(crate) fn abandon_seq(&self, seq: u64) {
        let mut st = self.lock();
        if st.acquired == Some(seq) {
            st.acquired = None;
        }
    }

    /// The STRICT_WAIT side of this ring ([`AckWait`]).
    fn ack_wait(&self) -> AckWait<'_> {
        AckWait {
            shm: &self.shm,
            publication: &self.publication,
            ring_size: self.ring_size,
            ack_timeout: self.ack_timeout,
        }
    }

    /// A CUDA ring's device and the ring's own stream (the one its copies run on when the
    /// caller names none).
    pub(super) fn cuda(
        &self,
    ) -> Result<(
        &std::sync::Arc<crate::cuda::CudaDevice>,
        &crate::cuda::Stream,
    )> {
        match (self.slots.cuda_device(), &self.copy_stream) {
            (Some(d), Some(s)) => Ok((d, s)),
            _ => Err(Error::invalid("this operation needs a CUDA ring")),
        }
    }
}

/// The slots must outlive the GPU work queued on them: a publication still pending on a
/// stream means its copy may still write the slot, so the teardown waits for it (bounded; a
/// failed stream runs no more work). The host function itself owns what it touches.
impl Drop for FrameWriter {
    fn drop(&mut self) {
        self.flush_publications();
        // A ring never installed, or kept under its generation name, leaves no name behind
        // (an installed one's name is the key's, removed by the publisher's end or taken
        // over by the next ring).
        if !self.installed {
            let _ = shm::unlink(&self.shm_name);
        }
    }
}

impl FrameWriter {
    /// Wait (bounded) until every publication queued on a stream has run: before the
    /// shutdown flag (readers must see those frames) and before the teardown.
    pub(crate) fn flush_publications(&self) {
        let st = self.lock();
        self.flush_locked(&st);
    }

    fn flush_locked(&self, st: &WriterState) {
        if self.wait_published(st.last_seq).is_err() {
            crate::util::diag!(
                "{} frame publications still queued on a stream that does not \
                 finish; shutting the ring down without them",
                self.publication.pending()
            );
        }
    }

    /// A newer ring takes this one's place: its publications queued on streams become
    /// visible, then nothing more is acquired or published here (a slot acquired before
    /// stays mapped for as long as its holder keeps the ring, and fails to publish). The
    /// flag and the flush happen under the writer's lock, so no frame is published after
    /// the flush and before the flag.
    pub(crate) fn retire(&self) {
        let mut st = self.lock();
        self.flush_locked(&st);
        st.retired = true;
    }

    /// Whether a newer ring took this one's place.
    pub(crate) fn is_retired(&self) -> bool {
        self.lock().retired
    }
}

/// The error of a call on a ring that a newer one replaced.
pub(super) fn replaced() -> Error {
    Error::new(
        ErrorCode::Disconnected,
        "the frame ring was replaced (a new size or format): a slot acquired before that \
         is not published; acquire a slot of the new ring",
    )
}

/// A publish is of the slot that is out, on a ring still in place; a slot of a replaced
/// ring is given back (it is not out any more).
pub(super) fn check_publishable(st: &mut WriterState, seq: u64) -> Result<()> {
    if st.acquired != Some(seq) {
        return Err(Error::invalid("publish of a slot that was not acquired"));
    }
    if st.retired {
        st.acquired = None;
        return Err(replaced());
    }
    Ok(())
}

/// The meta of a new ring: the layout's, plus what the extension announces (R7 compatible:
/// old peers ignore reserved bytes). The GPU UUID is the ring's device's, read from the
/// driver here (our own state); a driver too old to tell is announced as no UUID.
fn announced_meta(
    layout: &FrameGeometry,
    config: &FrameRingConfig,
    slots: &dyn SlotStore,
) -> FrameMeta {
    let mut meta = layout.to_meta();
    MetaExt {
        colour: config.colour,
        gpu_uuid: slots
            .cuda_device()
            .and_then(|d| crate::cuda::device_uuid(d.ordinal()).ok())
            .map(|u| u.0),
    }
    .write(&mut meta);
    meta
}
