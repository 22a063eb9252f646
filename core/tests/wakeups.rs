//! R13/R28: a subscriber sleeping in `next_frame` is woken by the publish, not by the end of
//! its 100 ms sleep slice. Both ways a publisher decides that somebody may sleep: ACK-page
//! subscribers (which cannot count themselves in the header's waiter count, so every publish
//! wakes while one is connected) and plain v4 peers (counted in the R28 waiter count).

use cuframes_test_support as common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::TestEnv;
use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::Format;

/// Frames published one at a time, each once the subscriber has surely gone to sleep; the
/// median delay from publish to delivery. Without the wake-up each delay is where in its
/// 100 ms slice the sleeper happened to be (a median near 50 ms); with it, well under 1 ms on
/// an idle machine.
fn median_wake_delay(plain_v4: bool) -> Duration {
    const FRAMES: u64 = 12;
    let env = TestEnv::new(if plain_v4 { "wakev4" } else { "wakepage" });
    let p = Publisher::create(
        &env.key,
        PublisherOptions {
            allow_legacy_subscribers: plain_v4,
            ..env.publisher_options()
        },
    )
    .unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let mut sub = Subscriber::connect(
        &env.key,
        &SubscriberOptions {
            plain_v4_acks: plain_v4,
            ..env.subscriber_options("sleeper")
        },
    )
    .unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for _ in 0..FRAMES {
            let f = sub.next_frame(Some(Duration::from_secs(5))).unwrap();
            tx.send((f.seq, Instant::now())).unwrap();
        }
    });
    let mut delays = Vec::new();
    for seq in 1..=FRAMES {
        // Long enough for the reader to be asleep again, not a multiple of its slice.
        std::thread::sleep(Duration::from_millis(130));
        let published = Instant::now();
        common::publish_pattern(&p, seq, None).unwrap();
        let (got, at) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(got, seq);
        delays.push(at.duration_since(published));
    }
    reader.join().unwrap();
    delays.sort();
    delays[delays.len() / 2]
}

#[test]
fn a_publish_wakes_a_sleeping_ack_page_subscriber() {
    let median = median_wake_delay(false);
    assert!(
        median < Duration::from_millis(25),
        "median delay {median:?}: the publish did not wake the subscriber"
    );
}

#[test]
fn a_publish_wakes_a_sleeping_plain_v4_subscriber() {
    let median = median_wake_delay(true);
    assert!(
        median < Duration::from_millis(25),
        "median delay {median:?}: the publish did not wake the subscriber"
    );
}
