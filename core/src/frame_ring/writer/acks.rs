//! Who must ACK a frame before its slot is rewritten ([`RequiredAcks`], asked of an
//! [`AckAuthority`]), and the STRICT_WAIT wait for those ACKs (R11, R27) with its budget of
//! wake-ups (`WakeBudget`), so that a subscriber's wake-ups cannot make the publisher spin.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::frame_ring::ack_page::AckPage;
use crate::frame_ring::publication::Publication;
use crate::frame_ring::shm_region::FrameShm;
use crate::futex;
use crate::wire::MAX_SUBSCRIBER_SLOTS;

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

/// Stop counting on subscriber `bit` in `shm`: its bit leaves the header's
/// `subscriber_bitmap` so that operators and v4 peers see it gone.
pub(super) fn forget_subscriber(shm: &FrameShm, bit: usize) {
    shm.subscriber_bitmap()
        .fetch_and(!(1u64 << bit), Ordering::AcqRel);
}

/// One ring's side of the STRICT_WAIT waits: its SHM (the ACK bitmaps), where the waits are
/// counted, its size (the wake-up budget) and its ACK timeout.
pub(super) struct AckWait<'a> {
    pub shm: &'a FrameShm,
    pub publication: &'a Publication,
    pub ring_size: usize,
    pub ack_timeout: Duration,
}

impl AckWait<'_> {
    /// Wait, at most the ACK timeout, while readers sent away by a replacement are still
    /// expected back (the replacement's own wait gives up on them at its deadline).
    pub(super) fn wait_for_returns(&self, acks: &dyn AckAuthority) {
        let start = Instant::now();
        while acks.returns_awaited() && start.elapsed() < self.ack_timeout {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub(super) fn wait_for_acks(&self, index: usize, old_seq: u64, acks: &dyn AckAuthority) {
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
                    forget_subscriber(self.shm, bit);
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
