//! The reader's decisions one at a time, on a frame SHM of its own (no publisher, no socket):
//! the ACK gate (`RingView::ack`) and which frame `FrameReader` takes next. The protocol around
//! them is `publisher::ack_model`'s and the memory order `loom_models`'; these pin down the
//! checks themselves, which the end-to-end tests reach only on rare interleavings.

use std::sync::atomic::Ordering;

use super::ack_page::AckPage;
use super::reader::{Attempt, FrameReader, RingView};
use super::shm_region::FrameShm;
use crate::memory::SlotImport;
use crate::wire::frame::FRAME_SHM_SIZE;
use crate::wire::{MemoryKind, Policy, INVALID_SEQ};

struct NoSlots;

impl SlotImport for NoSlots {
    fn kind(&self) -> MemoryKind {
        MemoryKind::HostMemfd
    }

    fn mapped_size(&self) -> usize {
        0
    }

    fn slot_address(&self, _index: usize) -> u64 {
        0
    }
}

/// A frame SHM of our own, unlinked at once (the mapping keeps it), and a view of it as
/// subscriber bit 3 with `ring_size` slots, all invalid.
fn view(ring_size: usize, page: Option<AckPage>) -> RingView {
    let name = format!(
        "cuframes-readertest-{}-{:x}",
        std::process::id(),
        crate::util::unique_suffix()
    );
    let (fd, map) = crate::shm::create(&name, FRAME_SHM_SIZE, 0o600).unwrap();
    crate::shm::unlink(&name).unwrap();
    let shm = FrameShm::new(map).unwrap();
    for k in 0..ring_size {
        shm.slot_seq(k).store(INVALID_SEQ, Ordering::Relaxed);
    }
    RingView::new(
        shm,
        fd,
        Box::new(NoSlots),
        3,
        Policy::StrictWait,
        ring_size,
        page,
    )
}

/// The writer's publish of frame `seq`, as far as a reader looks: the slot's seq, then
/// global_seq.
fn publish(ring: &RingView, seq: u64) {
    let k = (seq % ring.ring_size as u64) as usize;
    ring.shm.slot_seq(k).store(seq, Ordering::Release);
    ring.shm.global_seq().store(seq, Ordering::Release);
}

/// A header ACK (plain v4) counts only for the frame the slot holds now, and never after the
/// gate closed: a bit set for another frame would be taken as an ACK of a frame this
/// subscriber never read.
#[test]
fn a_header_ack_lands_only_for_the_frame_in_the_slot_and_only_before_revocation() {
    let ring = view(2, None);
    publish(&ring, 5); // slot 1
    assert!(!ring.ack(1, 3), "frame 3 is no longer in slot 1");
    assert_eq!(ring.shm.slot_ack(1).load(Ordering::Relaxed), 0);
    assert!(ring.ack(1, 5));
    assert_eq!(ring.shm.slot_ack(1).load(Ordering::Relaxed), 1 << 3);
    assert_eq!(ring.shm.sub_last_seen(3).load(Ordering::Relaxed), 5);
    ring.shm.slot_ack(1).store(0, Ordering::Relaxed);
    ring.revoke_acks();
    assert!(!ring.ack(1, 5), "an ACK after revoke_acks");
    assert_eq!(ring.shm.slot_ack(1).load(Ordering::Relaxed), 0);
}

/// The same gate in front of an ACK page.
#[test]
fn a_page_ack_lands_only_for_the_frame_in_the_slot_and_only_before_revocation() {
    let (page, fd) = AckPage::create().unwrap();
    let publisher_side = AckPage::import(fd).unwrap();
    let ring = view(2, Some(page));
    publish(&ring, 4); // slot 0
    assert!(!ring.ack(0, 2));
    assert!(!publisher_side.has_acked(0, 2));
    assert!(ring.ack(0, 4));
    assert!(publisher_side.has_acked(0, 4));
    assert_eq!(
        ring.shm.slot_ack(0).load(Ordering::Relaxed),
        0,
        "a page subscriber never writes the header"
    );
    publish(&ring, 6); // slot 0 again
    ring.revoke_acks();
    assert!(!ring.ack(0, 6), "an ACK after revoke_acks");
    assert!(!publisher_side.has_acked(0, 6));
}

fn taken(a: Attempt<()>) -> Option<u64> {
    match a {
        Attempt::Frame { seq, .. } => Some(seq),
        Attempt::Empty | Attempt::Skipped => None,
        Attempt::Failed(e) => panic!("unexpected failure: {e}"),
    }
}

/// §6 with lapping: the next frame in order while the ring holds it; lapped (DROP_OLDEST:
/// the writer is a whole ring ahead), the newest, counting what was lost.
#[test]
fn the_reader_takes_frames_in_order_and_jumps_to_the_newest_when_lapped() {
    let ring = view(4, None);
    let mut reader = FrameReader::new(0);
    assert!(matches!(reader.try_borrow(&ring), Attempt::Empty));
    for seq in 1..=3 {
        publish(&ring, seq);
    }
    assert_eq!(taken(reader.try_borrow(&ring)), Some(1));
    assert_eq!(taken(reader.try_borrow(&ring)), Some(2));
    // Frames 4..=10 published: frames 3..=6 are overwritten; the reader wanted 3.
    for seq in 4..=10 {
        publish(&ring, seq);
    }
    assert_eq!(taken(reader.try_borrow(&ring)), Some(10));
    assert_eq!(reader.stats.dropped_overrun, 7, "frames 3..=9 lost");
    assert_eq!(reader.stats.delivered, 3);
    assert!(matches!(reader.try_borrow(&ring), Attempt::Empty));
    // Exactly a ring behind (4 frames: 11..=14 with 10 read) is not lapped.
    for seq in 11..=14 {
        publish(&ring, seq);
    }
    assert_eq!(taken(reader.try_borrow(&ring)), Some(11));
    assert_eq!(reader.stats.dropped_overrun, 7);
}

/// A slot being rewritten (INVALID) or already holding a later frame: the frame wanted is
/// gone, counted once, and the reader moves past it.
#[test]
fn a_frame_whose_slot_moved_on_is_skipped_and_counted() {
    let ring = view(2, None);
    let mut reader = FrameReader::new(0);
    publish(&ring, 1);
    publish(&ring, 2);
    ring.shm.slot_seq(1).store(INVALID_SEQ, Ordering::Relaxed); // frame 3 being written
    assert!(matches!(reader.try_borrow(&ring), Attempt::Skipped));
    assert_eq!(reader.last_seq, 1);
    assert_eq!(reader.stats.dropped_overrun, 1);
    assert_eq!(taken(reader.try_borrow(&ring)), Some(2));
    // R24 stores a slot's seq before global_seq: frame 5 is in slot 1 while global_seq still
    // says 4 (frames 3 and 4 published), so frame 3 is gone, not corrupt.
    publish(&ring, 3);
    publish(&ring, 4);
    ring.shm.slot_seq(1).store(5, Ordering::Release);
    assert!(matches!(reader.try_borrow(&ring), Attempt::Skipped));
    assert_eq!(reader.stats.dropped_overrun, 2);
    assert_eq!(taken(reader.try_borrow(&ring)), Some(4));
}

/// COPY: a copy the publisher rewrote meanwhile is dropped (R10) and not ACKed; an intact one
/// is delivered and ACKed.
#[test]
fn a_copy_rewritten_meanwhile_is_dropped_and_not_acked() {
    let ring = view(2, None);
    let mut reader = FrameReader::new(0);
    publish(&ring, 1);
    let torn = reader.try_copy(&ring, |k| {
        ring.shm.slot_seq(k).store(INVALID_SEQ, Ordering::Release);
        Ok(())
    });
    assert!(matches!(torn, Attempt::Skipped));
    assert_eq!(reader.stats.dropped_torn, 1);
    assert_eq!(ring.shm.slot_ack(1).load(Ordering::Relaxed), 0);
    publish(&ring, 2);
    assert!(matches!(
        reader.try_copy(&ring, |_| Ok(())),
        Attempt::Frame {
            seq: 2,
            index: 0,
            ..
        }
    ));
    assert_eq!(ring.shm.slot_ack(0).load(Ordering::Relaxed), 1 << 3);
    assert_eq!(reader.stats.delivered, 1);
}
