//! What admission (`server::subscribe`) does to a bit's state before handing it on: the new
//! owner starts without anything the previous owner of the bit left behind in the header.
//! Host memory, one process, plain v4 peers (their ACKs live in the header's bitmaps, where a
//! stale bit can be left; ACK-page subscribers cannot leave one there).

use cuframes_test_support as common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{frame_shm_name, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::{Format, Policy, SubscriberMode};

/// `ack_bitmap` of slot k: the slots start at 0x100, 64 bytes each; the bitmap is at 0x10.
fn ack_bitmap_offset(k: usize) -> usize {
    0x100 + 64 * k + 0x10
}

fn plain_v4(env: &TestEnv, name: &str) -> SubscriberOptions {
    SubscriberOptions {
        mode: SubscriberMode::Copy,
        plain_v4_acks: true,
        ..env.subscriber_options(name)
    }
}

/// An ACK of a bit's previous owner that was in flight when the owner left lands in the bitmap
/// of a frame acquired after that; the next owner of the bit is admitted before the frame is
/// published, so it owes that frame, and the stale bit would count as its ACK, letting
/// STRICT_WAIT rewrite the slot of a frame the new owner has not read. Admission clears the bit
/// from every slot (the `clear_ack_bit` call of `server::subscribe`, which this test catches
/// removed), so the publisher waits for the new owner's own ACK.
#[test]
fn a_stale_ack_of_a_bits_previous_owner_does_not_count_for_the_next() {
    let env = TestEnv::new("admitclr");
    let p = Publisher::create(
        &env.key,
        PublisherOptions {
            allow_legacy_subscribers: true,
            ..env.publisher_options()
        },
    )
    .unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 32);
    cfg.policy = Policy::StrictWait;
    cfg.ring_size = 1;
    // Far longer than the test: a wait that ends does so because of an ACK, never a timeout.
    cfg.ack_timeout = Duration::from_secs(30);
    p.enable_frames(cfg).unwrap();
    let (_fd, header) = cuframes_core::shm::open(&frame_shm_name(&env.key), 0, true).unwrap();

    let a = Subscriber::connect(&env.key, &plain_v4(&env, "A")).unwrap();
    let bit = a.bit();
    // Frame 1 is acquired (slot 0 invalid, its bitmap cleared), and A's ACK in flight lands in
    // the bitmap now, as a `fetch_or` that passed its seq check before the acquire would.
    let slot = p.acquire().unwrap();
    assert_eq!((slot.index, slot.seq), (0, 1));
    header
        .atomic_u64(ack_bitmap_offset(0))
        .fetch_or(1u64 << bit, Ordering::SeqCst);
    drop(a);
    common::wait_until("A's bit to be freed", Duration::from_secs(10), || {
        p.subscriber_count() == 0
    });

    // B gets A's bit before frame 1 is published: it owes frame 1.
    let mut b = Subscriber::connect(&env.key, &plain_v4(&env, "B")).unwrap();
    assert_eq!(b.bit(), bit, "the lowest free bit is A's old one");
    assert_eq!(
        header
            .atomic_u64(ack_bitmap_offset(0))
            .load(Ordering::SeqCst)
            & (1u64 << bit),
        0,
        "admission left the previous owner's ACK in slot 0's bitmap"
    );
    // What the slot holds does not matter here: only who must ACK it.
    assert_eq!(p.publish(slot, None).unwrap(), 1);

    std::thread::scope(|s| {
        // Frame 2 reuses slot 0: its acquire must wait for B's ACK of frame 1.
        let writer = s.spawn(|| {
            let slot = p.acquire().unwrap();
            let at = Instant::now();
            p.abandon(slot);
            at
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !writer.is_finished(),
            "frame 2 took slot 0 although B had not ACKed frame 1 there"
        );
        let acked_at = Instant::now();
        let f = b.next_frame(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(f.seq, 1);
        drop(f);
        let acquired_at = writer.join().unwrap();
        assert!(
            acquired_at >= acked_at,
            "frame 2's acquire returned before B read frame 1"
        );
    });
}
