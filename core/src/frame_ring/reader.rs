//! The frame ring, reader side: which frame to read next (§6 with R10 and lapping), the
//! seqlock check around a copy, and the ACK (R12, R23) behind a gate.
//!
//! The gate exists because a bit is not a subscriber's forever. Once this subscriber is given
//! up on (ERROR from the publisher) or is closing, its bit may be handed to someone else, and an
//! ACK from us would then count as the new owner's ACK of a frame it never read: STRICT_WAIT
//! would rewrite a slot the new owner still holds. So every ACK passes the gate under a lock,
//! and [`RingView::revoke_acks`] closes it: when it returns, no ACK of ours is in flight and
//! none will follow. The publisher keeps a given-up bit quarantined until our socket closes,
//! and the subscriber closes its socket only after revoking.

use crate::sync::{fence, Mutex, Ordering};
use std::os::fd::OwnedFd;

use crate::error::{Error, Result};
use crate::frame_ring::ack_page::{AckPage, Counter};
use crate::frame_ring::shm_region::FrameShm;
use crate::futex;
use crate::memory::SlotImport;
use crate::util::{realtime_ns, Origin};
use crate::wire::{Policy, INVALID_SEQ};

/// The mapped ring, shared by the reader and the zero-copy frames it hands out.
pub(crate) struct RingView {
    pub shm: FrameShm,
    pub _shm_fd: OwnedFd,
    pub slots: Box<dyn SlotImport>,
    pub bit: usize,
    pub policy: Policy,
    pub ring_size: usize,
    /// Our ACK page (extension): ACKs and counters go there, and the header is read-only to
    /// us. None against a plain v4 publisher: then we ACK in the header as v4 says.
    pub page: Option<AckPage>,
    /// True once ACKs are revoked (see the module documentation).
    revoked: Mutex<bool>,
    /// The process that mapped the ring. A child forked from it has a copy of the mapping,
    /// but the ACK page and the slots are still the parent's: its ACKs and counts would be
    /// taken for the parent's (STRICT_WAIT would rewrite a slot the parent still reads).
    pub origin: Origin,
}

impl RingView {
    pub fn new(
        shm: FrameShm,
        shm_fd: OwnedFd,
        slots: Box<dyn SlotImport>,
        bit: usize,
        policy: Policy,
        ring_size: usize,
        page: Option<AckPage>,
    ) -> RingView {
        RingView {
            shm,
            _shm_fd: shm_fd,
            slots,
            bit,
            policy,
            ring_size,
            page,
            revoked: Mutex::new(false),
            origin: Origin::here(),
        }
    }

    /// ACK `seq` in slot `k` (§6 steps 3–4, R23), unless the slot already moved on or ACKs
    /// are revoked. Only atomics and a futex wake: this also runs inside CUDA host functions.
    pub fn ack(&self, k: usize, seq: u64) -> bool {
        // Checked before the lock: a thread of the parent may have held it at the fork.
        if !self.origin.is_here() {
            return false;
        }
        let revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        if *revoked || self.shm.slot_seq(k).load(Ordering::Acquire) != seq {
            return false;
        }
        if let Some(page) = &self.page {
            page.record_ack(k, seq, self.policy == Policy::StrictWait);
            return true;
        }
        self.shm
            .slot_ack(k)
            .fetch_or(1u64 << self.bit, Ordering::Release);
        drop(revoked);
        self.shm
            .sub_last_seen(self.bit)
            .fetch_max(seq, Ordering::AcqRel);
        self.shm
            .sub_last_ack_ns(self.bit)
            .store(realtime_ns() as u64, Ordering::Release);
        if self.policy == Policy::StrictWait {
            futex::wake_all(self.shm.slot_ack_word(k));
        }
        true
    }

    /// Close the ACK gate for good. When this returns, no ACK of this subscriber is in flight
    /// (an `ack` holds the lock while it writes the bitmap) and none will be written again.
    pub fn revoke_acks(&self) {
        *self.revoked.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }

    fn count(&self, which: Counter, n: u64) {
        if !self.origin.is_here() {
            return;
        }
        match &self.page {
            Some(page) => page.count(which, n),
            None => {
                self.shm
                    .sub_counter(self.bit, which.header_offset())
                    .fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// May this subscriber count itself in the header's R28 waiter count? Not with an ACK
    /// page (the header is read-only to it; the publisher then always wakes).
    pub fn counts_waiters(&self) -> bool {
        self.page.is_none()
    }
}

/// Counters of one subscriber (also visible to operators in its SHM slot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameStats {
    /// Frames handed to this subscriber.
    pub delivered: u64,
    /// Frames overwritten before this subscriber read them (DROP_OLDEST lapping).
    pub dropped_overrun: u64,
    /// Frames rewritten while they were being copied (seqlock mismatch, R10).
    pub dropped_torn: u64,
}

/// What one attempt to read found.
pub(crate) enum Attempt<T> {
    /// Frame `seq` in slot `index`, with what the copy produced (`()` for a zero-copy borrow,
    /// which is not ACKed yet: the frame's release does it).
    Frame {
        seq: u64,
        index: usize,
        pts_ns: i64,
        data: T,
    },
    /// Nothing new.
    Empty,
    /// A frame was lost (lapped or torn); try again at once.
    Skipped,
    /// The copy failed, or the header is inconsistent (a crashed or hostile writer).
    Failed(Error),
}

/// Which frame comes next, and the counters.
pub(crate) struct FrameReader {
    pub last_seq: u64,
    pub stats: FrameStats,
}

/// Where the next frame is, if anywhere.
enum Next {
    At { seq: u64, index: usize },
    Empty,
    Skipped,
    Failed(Error),
}

impl FrameReader {
    pub fn new(initial_seq: u64) -> FrameReader {
        FrameReader {
            last_seq: initial_seq,
            stats: FrameStats::default(),
        }
    }

    /// ZERO_COPY: the next frame, still in its slot and not yet ACKed.
    pub fn try_borrow(&mut self, ring: &RingView) -> Attempt<()> {
        match self.next(ring) {
            Next::At { seq, index } => {
                let pts_ns = ring.shm.slot_pts(index).load(Ordering::Acquire) as i64;
                self.delivered(ring, seq);
                Attempt::Frame {
                    seq,
                    index,
                    pts_ns,
                    data: (),
                }
            }
            Next::Empty => Attempt::Empty,
            Next::Skipped => Attempt::Skipped,
            Next::Failed(e) => Attempt::Failed(e),
        }
    }

    /// COPY: `copy(index)` copies the slot into memory of the subscriber's; the R10 seqlock
    /// re-check afterwards rejects a copy the publisher rewrote meanwhile. A good copy is ACKed
    /// at once.
    pub fn try_copy<T>(
        &mut self,
        ring: &RingView,
        copy: impl FnOnce(usize) -> Result<T>,
    ) -> Attempt<T> {
        let (seq, index) = match self.next(ring) {
            Next::At { seq, index } => (seq, index),
            Next::Empty => return Attempt::Empty,
            Next::Skipped => return Attempt::Skipped,
            Next::Failed(e) => return Attempt::Failed(e),
        };
        let pts_ns = ring.shm.slot_pts(index).load(Ordering::Acquire) as i64;
        let data = match copy(index) {
            Ok(d) => d,
            Err(e) => return Attempt::Failed(e),
        };
        fence(Ordering::Acquire);
        if ring.shm.slot_seq(index).load(Ordering::Acquire) != seq {
            // R10: the publisher rewrote the slot while we copied it.
            self.last_seq = seq;
            self.stats.dropped_torn += 1;
            ring.count(Counter::DroppedTorn, 1);
            return Attempt::Skipped;
        }
        ring.ack(index, seq);
        self.delivered(ring, seq);
        Attempt::Frame {
            seq,
            index,
            pts_ns,
            data,
        }
    }

    fn delivered(&mut self, ring: &RingView, seq: u64) {
        self.last_seq = seq;
        self.stats.delivered += 1;
        ring.count(Counter::Delivered, 1);
    }

    /// §6 step 1 with lapping, and the checks that a crashed or hostile writer cannot get
    /// past: `global_seq` never moves backwards, and a slot never holds an older frame than
    /// `global_seq` promises (R24 stores a slot's seq before `global_seq`).
    fn next(&mut self, ring: &RingView) -> Next {
        let g = ring.shm.global_seq().load(Ordering::Acquire);
        if g < self.last_seq {
            return Next::Failed(Error::protocol(format!(
                "the frame ring's global_seq moved backwards from {} to {g}",
                self.last_seq
            )));
        }
        if g == self.last_seq {
            return Next::Empty;
        }
        let mut want = self.last_seq + 1;
        let n = ring.ring_size as u64;
        if g - want >= n {
            // Lapped (DROP_OLDEST): everything older than the newest frame is being
            // overwritten. Jump to the newest.
            let lost = g - want;
            self.stats.dropped_overrun += lost;
            ring.count(Counter::DroppedOverrun, lost);
            want = g;
        }
        let index = (want % n) as usize;
        let s1 = ring.shm.slot_seq(index).load(Ordering::Acquire);
        if s1 == want {
            return Next::At { seq: want, index };
        }
        if s1 != INVALID_SEQ && s1 < want {
            return Next::Failed(Error::protocol(format!(
                "frame slot {index} holds seq {s1} although global_seq {g} says frame {want} \
                 was published there: the frame ring is corrupt"
            )));
        }
        // Being rewritten, or rewritten already: frame `want` is gone.
        self.last_seq = want;
        self.stats.dropped_overrun += 1;
        ring.count(Counter::DroppedOverrun, 1);
        Next::Skipped
    }
}
