//! The frame SHM's typed view (`FrameShm`) against the wire layout: every field handle is the
//! field §2 puts there, the futex words are the low halves the protocol names (R13, the
//! STRICT_WAIT ACK wake-ups), and the publisher's per-bit operations touch that bit's state
//! and nothing else. Our own publisher and subscriber share the view, so a wrong offset would
//! go unnoticed between them; a third-party peer reads the wire offsets.
// Under `--cfg loom` the field handles are loom's (`crate::sync`), which have no address.
#![cfg(not(loom))]

use std::mem::offset_of;
use std::sync::atomic::Ordering;

use cuframes_core::testing::FrameShm;
use cuframes_core::wire::frame::{
    slot_offset, subscriber_offset, SharedHeader, SlotDescriptor, SubscriberSlot, FRAME_SHM_SIZE,
    SUB_DELIVERED_OFFSET, SUB_DROPPED_OVERRUN_OFFSET, SUB_DROPPED_TORN_OFFSET,
};
use cuframes_core::wire::{MAX_RING_SIZE, MAX_SUBSCRIBERS};

/// A frame SHM object of our own, unlinked at once (the mapping keeps it alive): nothing is
/// left in /dev/shm, also when the test fails.
fn frame_shm() -> FrameShm {
    let name = format!(
        "cuframes-layouttest-{}-{:x}",
        std::process::id(),
        cuframes_core::testing::unique_suffix()
    );
    let (_fd, map) = cuframes_core::shm::create(&name, FRAME_SHM_SIZE, 0o600).unwrap();
    cuframes_core::shm::unlink(&name).unwrap();
    FrameShm::new(map).unwrap()
}

fn offset_in(shm: &FrameShm, field: *const u8) -> usize {
    field as usize - shm.mapping().as_ptr() as usize
}

#[test]
fn every_field_handle_is_at_its_wire_offset() {
    let shm = frame_shm();
    let at64 = |f: cuframes_core::shm::Shared64<'_>| offset_in(&shm, f.as_ptr().cast());
    let at32 = |f: cuframes_core::shm::Shared32<'_>| offset_in(&shm, f.as_ptr().cast());
    let global_seq = offset_of!(SharedHeader, global_seq);
    assert_eq!(at64(shm.global_seq()), global_seq);
    // R13: the futex word is the low half of global_seq (little-endian: the same address).
    assert_eq!(at32(shm.global_seq_word()), global_seq);
    assert_eq!(
        at64(shm.subscriber_bitmap()),
        offset_of!(SharedHeader, subscriber_bitmap)
    );
    assert_eq!(
        at64(shm.shutdown_flag()),
        offset_of!(SharedHeader, shutdown_flag)
    );
    assert_eq!(at32(shm.waiters()), 0xD8, "R28 waiter count");
    for k in 0..MAX_RING_SIZE {
        let slot = slot_offset(k);
        assert_eq!(
            at64(shm.slot_seq(k)),
            slot + offset_of!(SlotDescriptor, seq)
        );
        assert_eq!(
            at64(shm.slot_pts(k)),
            slot + offset_of!(SlotDescriptor, pts_ns)
        );
        let ack = slot + offset_of!(SlotDescriptor, ack_bitmap);
        assert_eq!(at64(shm.slot_ack(k)), ack, "slot {k}");
        // STRICT_WAIT ACK wake-ups: the low half of the slot's ack_bitmap, which a plain v4
        // peer wakes after its ACK.
        assert_eq!(at32(shm.slot_ack_word(k)), ack, "slot {k}'s ACK futex word");
        assert_eq!(
            at64(shm.slot_written(k)),
            slot + offset_of!(SlotDescriptor, written_bytes)
        );
    }
    for i in 1..=MAX_SUBSCRIBERS {
        let sub = subscriber_offset(i);
        assert_eq!(
            at64(shm.sub_state(i)),
            sub + offset_of!(SubscriberSlot, state)
        );
        assert_eq!(
            at64(shm.sub_pid(i)),
            sub + offset_of!(SubscriberSlot, consumer_pid)
        );
        assert_eq!(
            at64(shm.sub_last_seen(i)),
            sub + offset_of!(SubscriberSlot, last_seen_seq)
        );
        assert_eq!(
            at64(shm.sub_last_ack_ns(i)),
            sub + offset_of!(SubscriberSlot, last_ack_ns)
        );
        for counter in [
            SUB_DELIVERED_OFFSET,
            SUB_DROPPED_OVERRUN_OFFSET,
            SUB_DROPPED_TORN_OFFSET,
        ] {
            assert_eq!(at64(shm.sub_counter(i, counter)), sub + counter);
        }
    }
}

/// SUBSCRIBE (R23): the new peer's slot gets its pid, name, initial seq and state, and the
/// counters of the slot's previous owner are reset; its neighbours are untouched.
#[test]
fn fill_subscriber_writes_that_slot_and_resets_its_counters() {
    let shm = frame_shm();
    for i in [1, 2, 3] {
        for counter in [SUB_DELIVERED_OFFSET, SUB_DROPPED_TORN_OFFSET] {
            shm.sub_counter(i, counter).store(7, Ordering::Relaxed);
        }
    }
    shm.fill_subscriber(2, 4242, "reader-two", 99);
    assert_eq!(shm.sub_name(2), "reader-two");
    assert_eq!(shm.sub_pid(2).load(Ordering::Relaxed), 4242);
    assert_eq!(shm.sub_last_seen(2).load(Ordering::Relaxed), 99);
    assert_eq!(shm.sub_last_ack_ns(2).load(Ordering::Relaxed), 0);
    assert_eq!(shm.sub_state(2).load(Ordering::Relaxed), 2, "active");
    let mut name = [0u8; 32];
    shm.mapping().read_bytes(
        subscriber_offset(2) + offset_of!(SubscriberSlot, consumer_name),
        &mut name,
    );
    assert_eq!(&name[..11], b"reader-two\0", "the name at its wire offset");
    for counter in [SUB_DELIVERED_OFFSET, SUB_DROPPED_TORN_OFFSET] {
        assert_eq!(shm.sub_counter(2, counter).load(Ordering::Relaxed), 0);
        for neighbour in [1, 3] {
            assert_eq!(
                shm.sub_counter(neighbour, counter).load(Ordering::Relaxed),
                7,
                "subscriber {neighbour}'s counters are not the new peer's"
            );
        }
    }
    for neighbour in [1, 3] {
        assert_eq!(shm.sub_name(neighbour), "");
        assert_eq!(shm.sub_state(neighbour).load(Ordering::Relaxed), 0);
    }
}

/// Admission of a new owner of bit i clears bit i, and only it, from every slot's bitmap.
#[test]
fn clear_ack_bit_clears_that_bit_in_every_slot_and_nothing_else() {
    let shm = frame_shm();
    for k in 0..MAX_RING_SIZE {
        shm.slot_ack(k).store(0b1110, Ordering::Relaxed);
    }
    shm.clear_ack_bit(2);
    for k in 0..MAX_RING_SIZE {
        assert_eq!(shm.slot_ack(k).load(Ordering::Relaxed), 0b1010, "slot {k}");
    }
}

/// Freeing bit i takes it out of `subscriber_bitmap` and marks its slot free; the other bits
/// stay.
#[test]
fn clear_subscriber_frees_that_bit_only() {
    let shm = frame_shm();
    shm.fill_subscriber(1, 11, "one", 0);
    shm.fill_subscriber(3, 33, "three", 0);
    shm.subscriber_bitmap().store(0b1010, Ordering::Relaxed);
    shm.clear_subscriber(3);
    assert_eq!(shm.subscriber_bitmap().load(Ordering::Relaxed), 0b0010);
    assert_eq!(shm.sub_state(3).load(Ordering::Relaxed), 0, "free");
    assert_eq!(shm.sub_pid(3).load(Ordering::Relaxed), 0);
    assert_eq!(shm.sub_state(1).load(Ordering::Relaxed), 2, "still active");
    assert_eq!(shm.sub_pid(1).load(Ordering::Relaxed), 11);
}
