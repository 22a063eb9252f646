//! The frame ring, writer side: creation of the slots and the SHM, slot acquisition, the R24
//! publish order, STRICT_WAIT (R11, R27) and the convenience copies into a slot.
//!
//! Who must ACK is not the writer's business: it asks an [`AckAuthority`] (the publisher's
//! subscriber table), which answers with the owners of the bits it counts on, so that a kick
//! names the subscriber it meant and never the next owner of its bit.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};
use crate::format::FrameLayout;
use crate::frame_ring::ack_page::AckPage;
use crate::frame_ring::publication::Publication;
use crate::frame_ring::shm_region::FrameShm;
use crate::frame_ring::wait_stats::WaitStats;
use crate::futex;
use crate::memory::host::HostSlots;
use crate::memory::SlotStore;
use crate::paths::Key;
use crate::shm;
use crate::util::monotonic_ns;
use crate::wire::frame::{FrameMeta, FRAME_SHM_SIZE};
use crate::wire::meta_ext::MetaExt;
use crate::wire::{Format, MemoryKind, Policy, INVALID_SEQ, MAX_RING_SIZE, MAX_SUBSCRIBER_SLOTS};

/// Where the publisher allocates its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryChoice {
    /// Host memfds (R14): CPU-only machines and tests.
    Host,
    /// CUDA VMM on this device ordinal.
    Cuda { device: i32 },
}

/// What a publisher's frame ring carries.
#[derive(Debug, Clone)]
pub struct FrameRingConfig {
    pub format: Format,
    pub width: u32,
    pub height: u32,
    /// 1..=16 slots.
    pub ring_size: usize,
    pub policy: Policy,
    /// STRICT_WAIT: how long a publish waits for a subscriber's ACK before declaring it dead.
    /// Both policies: how long a ring replacement (STRICT_WAIT) and the publisher's end wait
    /// for the subscribers a replacement sent away to subscribe again.
    pub ack_timeout: Duration,
    pub memory: MemoryChoice,
    /// The stream's colour description and sample aspect ratio, announced to subscribers
    /// (frame meta extension, `wire::meta_ext`); None = not recorded.
    pub colour: Option<crate::colour::ColourInfo>,
}

impl FrameRingConfig {
    pub fn new(format: Format, width: u32, height: u32) -> FrameRingConfig {
        FrameRingConfig {
            format,
            width,
            height,
            ring_size: 4,
            policy: Policy::DropOldest,
            ack_timeout: Duration::from_millis(1000),
            memory: MemoryChoice::Host,
            colour: None,
        }
    }

    pub fn validate(&self) -> Result<FrameLayout> {
        if self.ring_size == 0 || self.ring_size > MAX_RING_SIZE {
            return Err(Error::invalid(format!(
                "ring_size {} is not in 1..={MAX_RING_SIZE}",
                self.ring_size
            )));
        }
        if self.ack_timeout.is_zero() {
            return Err(Error::invalid("consumer_ack_timeout must be positive"));
        }
        FrameLayout::new(self.format, self.width, self.height)
    }
}

/// A slot the caller is writing; give it back with `publish`.
#[derive(Debug)]
pub struct AcquiredSlot {
    pub index: usize,
    pub seq: u64,
    /// Host pointer or CUDA device pointer of plane 0.
    pub address: u64,
    pub memory_kind: MemoryKind,
}

pub(crate) struct WriterState {
    last_seq: u64,
    acquired: Option<u64>,
    /// The writer's own record of the frame in each slot (0 = none): what STRICT_WAIT waits
    /// on is decided from this, never from the SHM, which others may be able to write.
    slot_seq: [u64; MAX_RING_SIZE],
    /// The stream the last publication was queued on (`publish_on_stream`): one queued on
    /// the same stream runs after it; on any other, it waits for it first.
    pending_stream: Option<crate::cuda::StreamIdentity>,
    /// A newer ring took this one's place ([`FrameWriter::retire`]): nothing more is
    /// acquired or published here.
    retired: bool,
}

/// How long the writer waits for a publication queued on a stream (the GPU work before it)
/// when it needs it: to reuse its slot, to publish after it, or to tear the ring down. A
/// stream that has not finished a frame's copy in this long has failed or hangs.
const STREAM_PUBLICATION_TIMEOUT: Duration = Duration::from_secs(10);

/// The publisher's frame ring: the SHM, the slots and the writer state.
pub struct FrameWriter {
    pub layout: FrameLayout,
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

/// The subscribers whose ACK of one frame a STRICT_WAIT publish waits for: a mask of bits
/// and, for each bit, the connection that owned it when the set was computed and where its
/// ACK is found (its ACK page, or the header's bitmap for a plain v4 subscriber).
#[derive(Clone)]
pub struct RequiredAcks {
    pub mask: u64,
    pub owners: [u64; MAX_SUBSCRIBER_SLOTS],
    pub pages: [Option<Arc<AckPage>>; MAX_SUBSCRIBER_SLOTS],
}

impl Default for RequiredAcks {
    fn default() -> Self {
        RequiredAcks {
            mask: 0,
            owners: [0; MAX_SUBSCRIBER_SLOTS],
            pages: std::array::from_fn(|_| None),
        }
    }
}

/// Who to ask about subscribers during a STRICT_WAIT wait.
pub(crate) trait AckAuthority {
    /// Who must ACK frame `seq` before its slot may be rewritten.
    fn required_acks(&self, seq: u64) -> RequiredAcks;
    /// Give up on the bits of `missing` (a subset of `required.mask`) that are still owned
    /// by the connection `required` names for them (R11, R27); returns the bits given up on.
    /// Called with the waiting ring's writer state held, so it takes no lock above the
    /// subscriber table (the publisher's lock hierarchy).
    fn declare_dead(&self, required: &RequiredAcks, missing: u64) -> u64;
    /// Readers that a ring replacement sent away are still expected back (they subscribe
    /// to this ring after draining the old one).
    fn returns_awaited(&self) -> bool;
}

/// The budget index of the header's bitmap word (bits are 1..=31).
const HEADER_WORD: usize = 0;

/// Wake-ups of one ACK wait that ended a sleep early and brought no ACK, per word slept on.
/// An honest subscriber's page wakes the publisher once per ACK: at most once per frame it
/// reads before the one waited for (fewer than a ring's worth), and then with its ACK. One
/// that wakes it more, for nothing, is slept on no more in this wait: the publisher
/// re-checks that subscriber only once per slice (the other words keep their prompt
/// wake-ups), so a peer's wake-ups cannot make it spin.
struct WakeBudget {
    fruitless: [u32; MAX_SUBSCRIBER_SLOTS],
    allowed: u32,
    /// The word the last sleep was on, when it ended before its slice.
    woken_early: Option<usize>,
}

impl WakeBudget {
    fn new(ring_size: usize) -> WakeBudget {
        WakeBudget {
            fruitless: [0; MAX_SUBSCRIBER_SLOTS],
            // A ring's worth of ACKs of earlier frames, and some slack (spurious wake-ups).
            allowed: ring_size as u32 + 4,
            woken_early: None,
        }
    }

    fn trusts(&self, word: usize) -> bool {
        self.fruitless[word] < self.allowed
    }

    fn slept_on(&mut self, word: Option<usize>, early: bool) {
        self.woken_early = word.filter(|_| early);
    }

    /// After the re-check that followed a sleep: `progress` = fewer ACKs missing.
    fn after_check(&mut self, progress: bool) {
        if let Some(word) = self.woken_early.take() {
            if !progress {
                self.fruitless[word] += 1;
            }
        }
    }
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
        self.shm
            .subscriber_bitmap()
            .fetch_and(!(1u64 << bit), Ordering::AcqRel);
    }

    fn lock(&self) -> MutexGuard<'_, WriterState> {
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
                self.wait_for_returns(acks);
            }
            // Before who must ACK is computed (see `first_lap_over`).
            self.first_lap_over.store(true, Ordering::SeqCst);
            if strict {
                self.wait_for_acks(index, old_seq, acks);
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

    /// Wait, at most the ACK timeout, while readers sent away by a replacement are still
    /// expected back (the replacement's own wait gives up on them at its deadline).
    fn wait_for_returns(&self, acks: &dyn AckAuthority) {
        let start = Instant::now();
        while acks.returns_awaited() && start.elapsed() < self.ack_timeout {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn wait_for_acks(&self, index: usize, old_seq: u64, acks: &dyn AckAuthority) {
        let start = Instant::now();
        let mut slept = false;
        let counted = |slept: bool| {
            if slept {
                self.publication.waits.ack_wait(start);
            }
        };
        // Subscribers can wake the words this sleeps on at will (their own page's counter,
        // the header's bitmap word), and bump the counter so that a sleep on it returns at
        // once: each word gets a budget of wake-ups that end a sleep early and bring no
        // ACK, per wait (see `WakeBudget`); a word past it is slept on no more.
        let mut budget = WakeBudget::new(self.ring_size);
        let mut last_missing = u64::MAX;
        loop {
            let required = acks.required_acks(old_seq);
            // The whole 64-bit field, as the subscribers store it (never a 32-bit atomic view
            // of a 64-bit field: mixed-size atomics); its low half is only the futex address.
            let seen = self.shm.slot_ack(index).load(Ordering::Acquire);
            let mut missing = 0u64;
            // The first page subscriber still missing whose wake-ups are still trusted, with
            // its ACK counter read before its ACK was looked at: sleeping on that value
            // cannot miss its ACK.
            let mut wait_on: Option<(usize, &AckPage, u32)> = None;
            let mut header_missing = false;
            for bit in 1..MAX_SUBSCRIBER_SLOTS {
                if required.mask & (1u64 << bit) == 0 {
                    continue;
                }
                let acked = match &required.pages[bit] {
                    Some(page) => {
                        let count = page.ack_count();
                        let acked = page.has_acked(index, old_seq);
                        if !acked && wait_on.is_none() && budget.trusts(bit) {
                            wait_on = Some((bit, page, count));
                        }
                        acked
                    }
                    None => {
                        let acked = seen & (1u64 << bit) != 0;
                        header_missing |= !acked;
                        acked
                    }
                };
                if !acked {
                    missing |= 1u64 << bit;
                }
            }
            if missing == 0 {
                return counted(slept);
            }
            // Progress is an ACK of this frame (or a subscriber gone): fewer missing.
            budget.after_check(last_missing & !missing != 0);
            last_missing = missing;
            let elapsed = start.elapsed();
            if elapsed >= self.ack_timeout {
                let kicked = acks.declare_dead(&required, missing);
                for bit in (1..MAX_SUBSCRIBER_SLOTS).filter(|b| kicked & (1u64 << b) != 0) {
                    self.forget_subscriber(bit);
                }
                return counted(true);
            }
            slept = true;
            // Subscribers wake their page's counter (or, plain v4 peers, the bitmap word)
            // after each ACK under STRICT_WAIT; the slice bounds the wait for peers that only
            // poll, and lets removals be noticed.
            let slice = (self.ack_timeout - elapsed).min(Duration::from_millis(5));
            let asleep = Instant::now();
            let word = match wait_on {
                Some((bit, page, count)) => {
                    page.wait_for_ack(count, slice);
                    Some(bit)
                }
                // Every usable bit (1..31) is in the low half the futex compares.
                None if header_missing && budget.trusts(HEADER_WORD) => {
                    futex::wait(self.shm.slot_ack_word(index), seen as u32, Some(slice));
                    Some(HEADER_WORD)
                }
                // Only words past their budget: a plain sleep of the slice, which nobody
                // else can cut short.
                None => {
                    std::thread::sleep(slice);
                    None
                }
            };
            budget.slept_on(word, asleep.elapsed() < slice);
        }
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

    /// The writer's side of a publication: the slot's pts and size, then our own record;
    /// returns the slot index.
    fn commit(&self, st: &mut WriterState, slot: &AcquiredSlot, pts_ns: Option<i64>) -> usize {
        // The seq was checked against our own record; `slot.index` is the caller's copy.
        let k = self.slot_of(slot.seq);
        self.store_slot_fields(k, pts_ns);
        self.record(st, slot);
        k
    }

    /// The slot's pts and size, read by subscribers only once its seq is valid (it is invalid
    /// from the acquire on), so stored before the seq is.
    fn store_slot_fields(&self, k: usize, pts_ns: Option<i64>) {
        self.shm.slot_pts(k).store(
            pts_ns.unwrap_or_else(monotonic_ns) as u64,
            Ordering::Relaxed,
        );
        self.shm
            .slot_written(k)
            .store(self.layout.frame_size as u64, Ordering::Relaxed);
    }

    /// Our own record of a published (or queued) frame.
    fn record(&self, st: &mut WriterState, slot: &AcquiredSlot) {
        st.slot_seq[self.slot_of(slot.seq)] = slot.seq;
        st.last_seq = slot.seq;
        st.acquired = None;
    }

    /// Wait until frame `seq` (0: none) is visible, when a stream still holds its publication.
    fn wait_published(&self, seq: u64) -> Result<()> {
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

    /// Copy a host frame (planes with their own strides) into a host slot.
    pub(crate) fn write_host_planes(
        &self,
        slot: &AcquiredSlot,
        planes: &[&[u8]],
        strides: &[usize],
    ) -> Result<()> {
        let layout = &self.layout;
        check_plane_count(layout, planes.len(), strides.len())?;
        if slot.memory_kind == MemoryKind::CudaVmm {
            // Our own stream, in the ring's context: pushed for the copies, popped after (the
            // caller's current context is current again when this returns).
            let (dev, stream) = self.cuda()?;
            let _current = dev.push_current()?;
            let base = self.slots.slot_address(self.slot_of(slot.seq));
            for (p, (src, stride)) in layout.planes().iter().zip(planes.iter().zip(strides)) {
                // SAFETY: the destination is plane `p` of the acquired slot, a VMM mapping of
                // ours of at least frame_size bytes (the layout keeps the plane inside it)
                // that lives as long as `self`; the copy completes before this returns (the
                // synchronize below); `stream` is our own.
                unsafe {
                    crate::cuda::copy_htod_2d_async(
                        base + p.offset as u64,
                        p.pitch,
                        src,
                        *stride,
                        p.row_bytes,
                        p.rows,
                        stream,
                    )
                }?;
            }
            return stream.synchronize();
        }
        let base = self.slots.slot_address(self.slot_of(slot.seq)) as *mut u8;
        for (i, (p, (src, stride))) in layout
            .planes()
            .iter()
            .zip(planes.iter().zip(strides))
            .enumerate()
        {
            let span = p
                .span_at(*stride)
                .map_err(|e| Error::invalid(format!("plane {i}: {}", e.message())))?;
            if src.len() < span {
                return Err(Error::invalid(format!(
                    "plane {i}: buffer of {} bytes too small for {} rows of {} bytes at \
                     stride {stride} ({span} bytes)",
                    src.len(),
                    p.rows,
                    p.row_bytes
                )));
            }
            for row in 0..p.rows {
                let s = &src[row * stride..row * stride + p.row_bytes];
                // SAFETY: the slot mapping is writable and at least frame_size bytes; the
                // layout keeps offset + row * pitch + row_bytes within it.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        s.as_ptr(),
                        base.add(p.offset + row * p.pitch),
                        p.row_bytes,
                    )
                }
            }
        }
        Ok(())
    }
}

impl FrameWriter {
    fn cuda(
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
fn replaced() -> Error {
    Error::new(
        ErrorCode::Disconnected,
        "the frame ring was replaced (a new size or format): a slot acquired before that \
         is not published; acquire a slot of the new ring",
    )
}

/// A publish is of the slot that is out, on a ring still in place; a slot of a replaced
/// ring is given back (it is not out any more).
fn check_publishable(st: &mut WriterState, seq: u64) -> Result<()> {
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
    layout: &FrameLayout,
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

/// The caller must give one pointer and one stride per plane of the ring's format.
fn check_plane_count(layout: &FrameLayout, planes: usize, strides: usize) -> Result<()> {
    if planes != layout.planes().len() || strides != planes {
        return Err(Error::new(
            ErrorCode::Format,
            format!(
                "{} has {} planes; {planes} given",
                layout.format.name(),
                layout.planes().len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A word is slept on until it has ended `ring_size + 4` sleeps early without bringing
    /// an ACK, in one wait; the other words keep their own budgets.
    #[test]
    fn a_word_is_trusted_until_its_fruitless_early_wake_ups_reach_the_budget() {
        let page = 3;
        let mut b = WakeBudget::new(4);
        for i in 0..8 {
            assert!(b.trusts(page), "after {i} fruitless early wake-ups");
            b.slept_on(Some(page), true);
            b.after_check(false);
        }
        assert!(!b.trusts(page), "past its budget of ring_size + 4");
        assert!(
            b.trusts(HEADER_WORD) && b.trusts(page + 1),
            "the others keep theirs"
        );
    }

    /// Only a sleep cut short that brought no ACK counts, and once: an early wake-up with
    /// progress, a sleep of the whole slice and a plain sleep (no word) are what an honest
    /// subscriber causes.
    #[test]
    fn only_early_wake_ups_without_progress_count_against_a_word() {
        let page = 3;
        let mut b = WakeBudget::new(0);
        for _ in 0..10 {
            b.slept_on(Some(page), true);
            b.after_check(true);
            b.slept_on(Some(page), false);
            b.after_check(false);
            b.slept_on(None, true);
            b.after_check(false);
        }
        assert!(b.trusts(page));
        for _ in 0..3 {
            b.slept_on(Some(page), true);
            b.after_check(false);
            b.after_check(false);
        }
        assert!(
            b.trusts(page),
            "three sleeps, each counted once, of a budget of four"
        );
    }
}
