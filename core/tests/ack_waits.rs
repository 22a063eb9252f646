//! Which publishes wait for ACKs (only STRICT_WAIT's, R11), and what giving up on a subscriber
//! leaves in the header for operators and v4 peers (its bit out of `subscriber_bitmap`, the
//! others' bits kept). Host memory, one process.

use cuframes_test_support as common;

use std::mem::offset_of;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{frame_shm_name, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::frame::SharedHeader;
use cuframes_core::wire::{Format, Policy};
use cuframes_core::ErrorCode;

const SUBSCRIBER_BITMAP_OFFSET: usize = offset_of!(SharedHeader, subscriber_bitmap);

fn ring(p: &Publisher, policy: Policy, ack_timeout: Duration) {
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 32);
    cfg.policy = policy;
    cfg.ring_size = 1;
    cfg.ack_timeout = ack_timeout;
    p.enable_frames(cfg).unwrap();
}

/// DROP_OLDEST never waits: a subscriber that reads nothing does not slow the publisher down,
/// whatever the ACK timeout.
#[test]
fn drop_oldest_publishes_without_waiting_for_acks() {
    let env = TestEnv::new("dropnowait");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    ring(&p, Policy::DropOldest, Duration::from_secs(10));
    let _idle = Subscriber::connect(&env.key, &env.subscriber_options("idle")).unwrap();
    let t = Instant::now();
    for seq in 1..=4 {
        common::publish_pattern(&p, seq, None).unwrap();
    }
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "4 frames into one slot took {:?}: a DROP_OLDEST publish waited for ACKs",
        t.elapsed()
    );
}

/// STRICT_WAIT waits for the subscribers that owe a frame and for nobody else: with every
/// subscriber ACKing at once, a publish into a reused slot returns long before the ACK timeout.
#[test]
fn strict_wait_goes_on_as_soon_as_every_subscriber_acked() {
    let env = TestEnv::new("strictgo");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    ring(&p, Policy::StrictWait, Duration::from_secs(20));
    let mut reader = Subscriber::connect(&env.key, &env.subscriber_options("reader")).unwrap();
    let t = Instant::now();
    for seq in 1..=3 {
        common::publish_pattern(&p, seq, None).unwrap();
        assert_eq!(
            reader.next_frame(Some(Duration::from_secs(5))).unwrap().seq,
            seq
        );
    }
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "3 frames took {:?}: a publish waited for an ACK nobody owed",
        t.elapsed()
    );
}

/// STRICT_WAIT gives up on a subscriber that does not ACK in time: its bit leaves the
/// header's `subscriber_bitmap`; the bit of the one that ACKs stays.
#[test]
fn a_subscriber_given_up_on_leaves_the_header_bitmap_and_the_others_stay() {
    let env = TestEnv::new("kickbitmap");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    ring(&p, Policy::StrictWait, Duration::from_millis(300));
    let (_fd, header) = cuframes_core::shm::open(&frame_shm_name(&env.key), 0, false).unwrap();
    let bitmap = || header.load_u64(SUBSCRIBER_BITMAP_OFFSET, Ordering::Acquire);
    let mut reader = Subscriber::connect(&env.key, &env.subscriber_options("reader")).unwrap();
    let mut stalled = Subscriber::connect(&env.key, &env.subscriber_options("stalled")).unwrap();
    let (r, s) = (1u64 << reader.bit(), 1u64 << stalled.bit());
    assert_eq!(bitmap(), r | s);

    common::publish_pattern(&p, 1, None).unwrap();
    assert_eq!(
        reader.next_frame(Some(Duration::from_secs(5))).unwrap().seq,
        1
    );
    // Frame 2 reuses the slot: the reader ACKed frame 1, the stalled one never does.
    common::publish_pattern(&p, 2, None).unwrap();
    assert_eq!(
        bitmap(),
        r,
        "the stalled subscriber's bit must leave the header, the reader's stay"
    );
    let e = loop {
        match stalled.next_frame(Some(Duration::from_secs(5))) {
            Ok(_) => continue, // what it was owed before it was given up on
            Err(e) => break e,
        }
    };
    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
}
