//! A COPY reader whose every copy the publisher tears (frames published faster than a copy
//! takes, as a flooding or hostile publisher does) still returns within `next_frame`'s
//! timeout: a lost frame is tried again only while the deadline has not passed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::{Format, SubscriberMode};
use cuframes_core::ErrorCode;
use cuframes_test_support::TestEnv;

#[test]
fn a_publisher_that_tears_every_copy_cannot_hold_next_frame_past_its_timeout() {
    let env = TestEnv::new("copytear");
    let publisher = Publisher::create(&env.key, env.publisher_options()).unwrap();
    // 64 MiB frames in 2 slots: a copy takes milliseconds, a publication of an unwritten slot
    // microseconds, so each copy is overwritten before its check.
    let mut config = FrameRingConfig::new(Format::Rgba, 4096, 4096);
    config.ring_size = 2;
    publisher.enable_frames(config).unwrap();
    let mut opts = env.subscriber_options("torn");
    opts.mode = SubscriberMode::Copy;
    let mut sub = Subscriber::connect(&env.key, &opts).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut published = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let slot = publisher.acquire().unwrap();
                publisher.publish(slot, None).unwrap();
                published += 1;
            }
            (publisher, published)
        })
    };
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let started = Instant::now();
        let got = sub.next_frame(Some(Duration::from_millis(300)));
        let _ = tx.send((got.map(|f| f.seq), started.elapsed()));
        sub
    });
    // Bounded: a reader stuck in the loop fails the test instead of hanging it (its thread
    // is then left behind, with the flood stopped).
    let outcome = rx.recv_timeout(Duration::from_secs(10));
    stop.store(true, Ordering::Relaxed);
    let (publisher, published) = flood.join().unwrap();
    let (got, took) = outcome.expect("next_frame(300 ms) still running after 10 s");
    drop(reader.join().unwrap());
    drop(publisher);
    assert!(published > 100, "the flood published {published} frames");
    assert!(took < Duration::from_secs(3), "next_frame took {took:?}");
    // A copy that won the race is a frame; otherwise the timeout, said as such.
    if let Err(e) = got {
        assert_eq!(e.code(), ErrorCode::Timeout, "{e}");
        assert!(e.message().contains("overwritten while it was read"), "{e}");
    }
}
