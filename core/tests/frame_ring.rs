//! Frame ring on host memory: publisher and subscribers in one process (threads).

use cuframes_test_support as common;

use std::time::Duration;

use common::TestEnv;
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::{Format, Policy, SubscriberMode};
use cuframes_core::ErrorCode;

fn publish(p: &Publisher, seq: u64) -> Vec<Vec<u8>> {
    let (published, planes) = common::publish_pattern(p, seq, Some(seq as i64 * 1000)).unwrap();
    assert_eq!(published, seq);
    planes
}

#[test]
fn one_subscriber_receives_every_frame_in_order() {
    let env = TestEnv::new("basic");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 48))
        .unwrap();
    let mut s = Subscriber::connect(&env.key, &env.subscriber_options("basic")).unwrap();
    assert_eq!(p.subscriber_count(), 1);
    for seq in 1..=3 {
        let planes = publish(&p, seq);
        let f = s.next_frame(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(f.seq, seq);
        assert_eq!(f.pts_ns, seq as i64 * 1000);
        assert!(common::verify_frame(&f, &planes));
    }
    let e = s.next_frame(Some(Duration::from_millis(50))).err().unwrap();
    assert_eq!(e.code(), ErrorCode::Timeout);
    drop(p);
    let e = s.next_frame(Some(Duration::from_secs(2))).err().unwrap();
    assert_eq!(e.code(), ErrorCode::Disconnected);
}

#[test]
fn zero_copy_under_strict_wait_blocks_until_released() {
    let env = TestEnv::new("zc");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Rgba, 32, 32);
    cfg.policy = Policy::StrictWait;
    cfg.ring_size = 2;
    cfg.ack_timeout = Duration::from_secs(5);
    p.enable_frames(cfg).unwrap();
    let mut opts = env.subscriber_options("zc");
    opts.mode = SubscriberMode::ZeroCopy;
    let mut s = Subscriber::connect(&env.key, &opts).unwrap();
    assert!(s.is_zero_copy());
    publish(&p, 1);
    publish(&p, 2);
    let f1 = s.next_frame(Some(Duration::from_secs(1))).unwrap();
    assert!(f1.is_zero_copy());
    // Slot of seq 1 is needed for seq 3: the publisher must wait for the release.
    let t = std::time::Instant::now();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        f1.release();
    });
    publish(&p, 3);
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "publish did not wait for the ACK"
    );
    releaser.join().unwrap();
    assert_eq!(s.next_frame(Some(Duration::from_secs(1))).unwrap().seq, 2);
    assert_eq!(s.next_frame(Some(Duration::from_secs(1))).unwrap().seq, 3);
}

#[test]
fn create_refuses_a_live_key_and_packets_are_not_found() {
    let env = TestEnv::new("dup");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    assert_eq!(
        Publisher::create(&env.key, env.publisher_options())
            .err()
            .unwrap()
            .code(),
        ErrorCode::AlreadyExists
    );
    // No frame ring yet: a frame subscriber is refused with NOT_FOUND (R5).
    let e = Subscriber::connect(&env.key, &env.subscriber_options("x"))
        .err()
        .unwrap();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    drop(p);
    let e = Subscriber::connect(&env.key, &env.subscriber_options("x"))
        .err()
        .unwrap();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
}

/// `spin`: a spinning subscriber still gets every frame, in order and intact, whether a frame
/// arrives during the spin or after it (then it sleeps as usual), and the spin never outlasts
/// next_frame's timeout nor hides the end of the stream.
#[test]
fn a_spinning_subscriber_gets_every_frame_and_keeps_its_timeout() {
    let env = TestEnv::new("spin");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 48);
    cfg.policy = Policy::StrictWait;
    cfg.ring_size = 2;
    cfg.ack_timeout = Duration::from_secs(5);
    p.enable_frames(cfg).unwrap();
    let mut opts = env.subscriber_options("spin");
    opts.spin = Duration::from_millis(20);
    let mut s = Subscriber::connect(&env.key, &opts).unwrap();
    // The timeout bounds the spin: 30 ms of timeout with a 1 s spin.
    s.set_spin(Duration::from_secs(1));
    let t = std::time::Instant::now();
    let e = s.next_frame(Some(Duration::from_millis(30))).err().unwrap();
    assert_eq!(e.code(), ErrorCode::Timeout);
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    s.set_spin(Duration::from_millis(20));
    let frames = 60u64;
    let publisher = std::thread::spawn(move || {
        let mut planes = Vec::new();
        for seq in 1..=frames {
            // Gaps below and above the 20 ms spin: frames found while spinning and after a
            // sleep.
            std::thread::sleep(Duration::from_millis(if seq % 3 == 0 {
                35
            } else {
                seq % 7
            }));
            planes.push(publish(&p, seq));
        }
        (p, planes)
    });
    // COPY frames: each is the subscriber's own, checked once the publisher says what it sent.
    let got: Vec<_> = (0..frames)
        .map(|_| s.next_frame(Some(Duration::from_secs(10))).unwrap())
        .collect();
    let (p, planes) = publisher.join().unwrap();
    for (i, f) in got.iter().enumerate() {
        assert_eq!(f.seq, i as u64 + 1, "frames out of order");
        assert!(
            common::verify_frame(f, &planes[i]),
            "frame {} differs",
            f.seq
        );
    }
    drop(p);
    let e = s.next_frame(Some(Duration::from_secs(2))).err().unwrap();
    assert_eq!(e.code(), ErrorCode::Disconnected);
}
