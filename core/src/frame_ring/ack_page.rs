//! A subscriber's ACK page (`wire::ack_page`): created and sealed by the publisher, written by
//! that one subscriber, read by the publisher. It is what lets the frame SHM be read-only for
//! subscribers: a subscriber's ACKs, its wake-ups of a waiting publisher and its counters go
//! here instead of into the shared header, so a subscriber can at worst misreport itself.

use std::os::fd::{AsFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, SealFlag};

use crate::error::{Error, Result};
use crate::futex;
use crate::shm;
use crate::sync::{Mapping, Ordering};
use crate::util::realtime_ns;
use crate::wire::ack_page::*;
use crate::wire::MAX_RING_SIZE;

/// One mapped ACK page.
pub struct AckPage {
    map: Mapping,
}

impl std::fmt::Debug for AckPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AckPage")
            .field("last_seen_seq", &self.last_seen_seq())
            .finish()
    }
}

/// Which counter of the page.
#[derive(Debug, Clone, Copy)]
pub enum Counter {
    Delivered,
    DroppedOverrun,
    DroppedTorn,
}

impl Counter {
    pub const ALL: [Counter; 3] = [
        Counter::Delivered,
        Counter::DroppedOverrun,
        Counter::DroppedTorn,
    ];

    /// Where the same counter lives in a subscriber slot of the frame header (the v4 path,
    /// and the operators' copy of page counters).
    pub fn header_offset(self) -> usize {
        use crate::wire::frame::*;
        match self {
            Counter::Delivered => SUB_DELIVERED_OFFSET,
            Counter::DroppedOverrun => SUB_DROPPED_OVERRUN_OFFSET,
            Counter::DroppedTorn => SUB_DROPPED_TORN_OFFSET,
        }
    }

    fn offset(self) -> usize {
        match self {
            Counter::Delivered => ACK_PAGE_DELIVERED_OFFSET,
            Counter::DroppedOverrun => ACK_PAGE_DROPPED_OVERRUN_OFFSET,
            Counter::DroppedTorn => ACK_PAGE_DROPPED_TORN_OFFSET,
        }
    }
}

impl AckPage {
    /// Publisher: a fresh page, sealed against shrinking and growing (so that neither side's
    /// mapping can ever fault) and mapped read-write; returns it with the descriptor to send.
    pub fn create() -> Result<(AckPage, OwnedFd)> {
        let fd = shm::sealable_memfd("cuframes-ack-page", ACK_PAGE_SIZE)?;
        fcntl(
            fd.as_fd(),
            FcntlArg::F_ADD_SEALS(
                SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL,
            ),
        )
        .map_err(|e| Error::os("seal ACK page", e))?;
        let map = Mapping::map(fd.as_fd(), ACK_PAGE_SIZE, true, "ACK page")?;
        map.atomic_u32(0x04)
            .store(ACK_PAGE_VERSION, Ordering::Relaxed);
        map.atomic_u32(0x00)
            .store(ACK_PAGE_MAGIC, Ordering::Release);
        Ok((AckPage { map }, fd))
    }

    /// Subscriber: map the page the publisher sent, after checking that it cannot shrink
    /// under us and is the page we expect.
    pub fn import(fd: OwnedFd) -> Result<AckPage> {
        let seals = fcntl(fd.as_fd(), FcntlArg::F_GET_SEALS).map_err(|e| {
            Error::protocol(format!("ACK page is not a sealable memfd: {}", e.desc()))
        })?;
        if !SealFlag::from_bits_truncate(seals).contains(SealFlag::F_SEAL_SHRINK) {
            return Err(Error::protocol("ACK page is not sealed against shrinking"));
        }
        let size = shm::file_size(fd.as_fd())?;
        if size < ACK_PAGE_SIZE {
            return Err(Error::protocol(format!(
                "ACK page is {size} bytes; {ACK_PAGE_SIZE} expected"
            )));
        }
        let map = Mapping::map(fd.as_fd(), ACK_PAGE_SIZE, true, "ACK page")?;
        let magic = map.atomic_u32(0x00).load(Ordering::Acquire);
        let version = map.atomic_u32(0x04).load(Ordering::Relaxed);
        if magic != ACK_PAGE_MAGIC || version != ACK_PAGE_VERSION {
            return Err(Error::protocol(format!(
                "ACK page has magic 0x{magic:08X} version {version}; expected 0x{ACK_PAGE_MAGIC:08X} version {ACK_PAGE_VERSION}"
            )));
        }
        Ok(AckPage { map })
    }

    /// Loom models: a page of loom-tracked memory (zeroed: no magic), and another view of it
    /// (the other side's mapping) with [`AckPage::share`].
    #[cfg(loom)]
    pub fn model() -> AckPage {
        AckPage {
            map: Mapping::model(ACK_PAGE_SIZE),
        }
    }

    #[cfg(loom)]
    pub fn share(&self) -> AckPage {
        AckPage {
            map: self.map.share(),
        }
    }

    fn acked_seq_offset(k: usize) -> usize {
        assert!(k < MAX_RING_SIZE, "slot {k} outside the ring");
        ACK_PAGE_ACKED_SEQ_OFFSET + 8 * k
    }

    /// Publisher: has this subscriber ACKed frame `seq` in slot `k`?
    pub fn has_acked(&self, k: usize, seq: u64) -> bool {
        self.map
            .atomic_u64(Self::acked_seq_offset(k))
            .load(Ordering::Acquire)
            == seq
    }

    /// Publisher: the futex word to sleep on while waiting for this subscriber, and its value
    /// now (read before re-checking [`Self::has_acked`], so that no ACK is missed).
    pub fn ack_count(&self) -> u32 {
        self.map
            .atomic_u32(ACK_PAGE_ACK_COUNT_OFFSET)
            .load(Ordering::Acquire)
    }

    /// Publisher: sleep until this subscriber ACKs something after `seen` was read, at most
    /// `timeout`.
    pub fn wait_for_ack(&self, seen: u32, timeout: std::time::Duration) {
        futex::wait(
            self.map.atomic_u32(ACK_PAGE_ACK_COUNT_OFFSET),
            seen,
            Some(timeout),
        );
    }

    /// Subscriber: the ring's slots are mapped, frames can be read (§3.7's READY).
    pub fn mark_ready(&self) {
        self.map
            .atomic_u32(ACK_PAGE_READY_OFFSET)
            .store(1, Ordering::Release);
    }

    /// Publisher: has this subscriber said it is ready? A hint for waits, nothing more.
    pub fn is_ready(&self) -> bool {
        self.map
            .atomic_u32(ACK_PAGE_READY_OFFSET)
            .load(Ordering::Acquire)
            != 0
    }

    /// Subscriber: record the ACK of frame `seq` in slot `k` and, if the publisher may be
    /// waiting for it (STRICT_WAIT), wake it.
    pub fn record_ack(&self, k: usize, seq: u64, wake: bool) {
        self.map
            .atomic_u64(Self::acked_seq_offset(k))
            .store(seq, Ordering::Release);
        self.map
            .atomic_u64(ACK_PAGE_LAST_SEEN_OFFSET)
            .fetch_max(seq, Ordering::AcqRel);
        self.map
            .atomic_u64(ACK_PAGE_LAST_ACK_NS_OFFSET)
            .store(realtime_ns() as u64, Ordering::Release);
        let count = self.map.atomic_u32(ACK_PAGE_ACK_COUNT_OFFSET);
        count.fetch_add(1, Ordering::AcqRel);
        if wake {
            futex::wake_all(count);
        }
    }

    /// Both sides: the last ACKed seq and the time of the last ACK (R23, for operators).
    pub fn last_seen_seq(&self) -> u64 {
        self.map
            .atomic_u64(ACK_PAGE_LAST_SEEN_OFFSET)
            .load(Ordering::Acquire)
    }

    pub fn last_ack_ns(&self) -> i64 {
        self.map
            .atomic_u64(ACK_PAGE_LAST_ACK_NS_OFFSET)
            .load(Ordering::Acquire) as i64
    }

    pub fn counter(&self, which: Counter) -> u64 {
        self.map.atomic_u64(which.offset()).load(Ordering::Relaxed)
    }

    /// Subscriber: count `n` more of `which`.
    pub fn count(&self, which: Counter, n: u64) {
        self.map
            .atomic_u64(which.offset())
            .fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_round_trips_between_publisher_and_subscriber() {
        let (publisher_side, fd) = AckPage::create().unwrap();
        let subscriber_side = AckPage::import(fd.try_clone().unwrap()).unwrap();
        assert!(!publisher_side.has_acked(3, 7));
        let before = publisher_side.ack_count();
        subscriber_side.record_ack(3, 7, true);
        subscriber_side.count(Counter::Delivered, 2);
        assert!(publisher_side.has_acked(3, 7));
        assert!(!publisher_side.has_acked(3, 8));
        assert_ne!(publisher_side.ack_count(), before);
        assert_eq!(publisher_side.last_seen_seq(), 7);
        assert_eq!(publisher_side.counter(Counter::Delivered), 2);
        // The subscriber cannot shrink or grow it: its mapping never faults.
        assert!(nix::unistd::ftruncate(fd.as_fd(), 0).is_err());
    }

    /// A page is read by peers that know only the wire layout (`wire::ack_page`,
    /// `cuframes_ack_page_t`): an ACK of slot k lands in `acked_seq[k]` and nowhere else (not
    /// over the magic, not in another slot's entry).
    #[test]
    fn an_ack_lands_at_its_wire_offset() {
        let (page, fd) = AckPage::create().unwrap();
        let raw = shm::Mapping::map(fd.as_fd(), ACK_PAGE_SIZE, false, "ACK page").unwrap();
        for k in 0..MAX_RING_SIZE {
            page.record_ack(k, 100 + k as u64, false);
        }
        for k in 0..MAX_RING_SIZE {
            let at = ACK_PAGE_ACKED_SEQ_OFFSET + 8 * k;
            assert_eq!(
                raw.load_u64(at, Ordering::Acquire),
                100 + k as u64,
                "slot {k}"
            );
            assert!(page.has_acked(k, 100 + k as u64));
        }
        assert_eq!(raw.load_u32(0x00, Ordering::Acquire), ACK_PAGE_MAGIC);
        assert_eq!(raw.load_u32(0x04, Ordering::Acquire), ACK_PAGE_VERSION);
        assert_eq!(
            raw.load_u32(ACK_PAGE_ACK_COUNT_OFFSET, Ordering::Acquire),
            MAX_RING_SIZE as u32
        );
        assert_eq!(
            raw.load_u64(ACK_PAGE_LAST_SEEN_OFFSET, Ordering::Acquire),
            100 + MAX_RING_SIZE as u64 - 1
        );
    }

    #[test]
    fn a_page_without_seals_or_magic_is_refused() {
        let fd = shm::memfd("not-a-page", ACK_PAGE_SIZE).unwrap();
        let e = AckPage::import(fd).err().unwrap();
        assert!(e.message().contains("seal"), "{}", e.message());
        let fd = shm::sealable_memfd("not-a-page", ACK_PAGE_SIZE).unwrap();
        fcntl(fd.as_fd(), FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK)).unwrap();
        let e = AckPage::import(fd).err().unwrap();
        assert!(e.message().contains("magic"), "{}", e.message());
    }
}
