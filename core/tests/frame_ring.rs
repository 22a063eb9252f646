//! Frame ring on host memory: publisher and subscribers in one process (threads).

use cuframes_test_support as common;

use std::time::{Duration, Instant};

use common::TestEnv;
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::{Frame, Subscriber};
use cuframes_core::wire::{Format, Policy, SubscriberMode};
use cuframes_core::ErrorCode;

/// What a reader saw of a frame: its layout's format and size, its seq and pts, and whether
/// its bytes are the pattern published under that seq.
fn seen(f: &Frame) -> (Format, u32, u32, u64, i64, bool) {
    let l = &*f.layout;
    let ok = common::verify_frame(f, &common::planes_for(l, f.seq));
    (l.format, l.width, l.height, f.seq, f.pts_ns, ok)
}

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
    let t = Instant::now();
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
    let t = Instant::now();
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

/// A spin looks at the socket while it spins: a publisher that goes away during a long spin
/// ends the stream at once, not when the spin's budget runs out (a spin that watches only
/// `global_seq` would).
#[test]
fn a_long_spin_still_sees_the_publisher_leave() {
    let env = TestEnv::new("spinend");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 48))
        .unwrap();
    let mut opts = env.subscriber_options("spinend");
    opts.spin = Duration::from_secs(20);
    let mut s = Subscriber::connect(&env.key, &opts).unwrap();
    let leaving = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(p);
    });
    let t = Instant::now();
    let e = s.next_frame(Some(Duration::from_secs(30))).err().unwrap();
    let took = t.elapsed();
    leaving.join().unwrap();
    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
    assert!(
        took < Duration::from_secs(5),
        "the end of the stream was seen after {took:?} of a 20 s spin"
    );
}

/// Metadata downstream: the colour description and sample aspect ratio the
/// publisher gives its ring reach every subscriber and every frame, and a ring without one
/// says so (None, not a default that would pass for BT.601 limited).
#[test]
fn the_colour_description_travels_with_the_ring() {
    use cuframes_core::colour::{self, ColourInfo};
    use cuframes_core::rgb::{ColourMatrix, ColourRange};
    let env = TestEnv::new("colour");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let described = ColourInfo {
        range: colour::RANGE_FULL,
        primaries: colour::PRIMARIES_BT709,
        transfer: colour::TRANSFER_BT709,
        matrix: colour::MATRIX_BT709,
        chroma_location: 2,
        sar: (64, 45),
    };
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 48);
    cfg.colour = Some(described);
    p.enable_frames(cfg).unwrap();
    let mut s = Subscriber::connect(&env.key, &env.subscriber_options("colour")).unwrap();
    assert_eq!(s.colour(), Some(described));
    publish(&p, 1);
    let f = s.next_frame(Some(Duration::from_secs(2))).unwrap();
    let c = f.colour.expect("the frame carries the ring's description");
    assert_eq!(c, described);
    assert_eq!(c.rgb_matrix(), Some(ColourMatrix::Bt709));
    assert_eq!(c.rgb_range(), Some(ColourRange::Full));
    assert_eq!(c.sample_aspect_ratio(), Some((64, 45)));
    drop(f);
    drop(s);
    drop(p);

    let env = TestEnv::new("nocolour");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 48))
        .unwrap();
    let mut s = Subscriber::connect(&env.key, &env.subscriber_options("nocolour")).unwrap();
    assert_eq!(s.colour(), None);
    publish(&p, 1);
    let f = s.next_frame(Some(Duration::from_secs(2))).unwrap();
    assert_eq!(f.colour, None);
    // Host ring: no GPU, no device to resolve.
    assert_eq!(s.cuda_device(), None);
}

/// Size and format changes: the publisher replaces its ring (a camera switching resolution,
/// twice); the subscriber drains the old ring, follows the new one by itself and
/// delivers every frame with its own layout, never an old-size frame after a new one or the
/// reverse. Under STRICT_WAIT the publisher waits for the old ring's ACKs and for the
/// subscriber to come back, so no frame is lost. The reader is slow (it takes longer to drain
/// a ring than a fixed pause between replacements would allow), so that a reader that comes
/// back only after the next replacement is part of what is tested.
#[test]
fn a_replaced_ring_is_followed_frame_for_frame() {
    for policy in [Policy::StrictWait, Policy::DropOldest] {
        let env = TestEnv::new("regen");
        let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
        let geometry = [
            (Format::Nv12, 64u32, 48u32),
            (Format::Rgba, 32, 16),
            (Format::Yuv420p, 80, 40),
        ];
        let config = |(f, w, h): (Format, u32, u32)| {
            let mut c = FrameRingConfig::new(f, w, h);
            c.policy = policy;
            c.ring_size = 16;
            c.ack_timeout = Duration::from_secs(10);
            c
        };
        p.enable_frames(config(geometry[0])).unwrap();
        let mut opts = env.subscriber_options("regen");
        opts.connect_timeout = Duration::from_secs(10);
        let mut s = Subscriber::connect(&env.key, &opts).unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            while got.len() < 9 {
                match s.next_frame(Some(Duration::from_secs(10))) {
                    Ok(f) => {
                        got.push(seen(&f));
                        drop(f);
                        std::thread::sleep(SLOW_READER);
                    }
                    Err(e) => panic!(
                        "{policy:?}: after {got:?} (generations {}): {e}",
                        s.ring_generations()
                    ),
                }
            }
            (got, s.ring_generations())
        });
        let mut pts = 0i64;
        for (i, g) in geometry.iter().enumerate() {
            if i > 0 {
                p.replace_frames(config(*g)).unwrap();
                if policy == Policy::DropOldest {
                    // Nobody waits under DROP_OLDEST: a ring replaced before the reader came
                    // back to it is not for it (R26). Wait until it is back (no fixed sleep
                    // is long enough on a loaded CI machine).
                    common::wait_until(
                        "the reader to come back to the new ring",
                        Duration::from_secs(10),
                        || p.subscribers().iter().any(|s| s.wants_frames),
                    );
                }
            }
            assert_eq!(p.frame_layout().unwrap().width, g.1);
            for seq in 1..=3u64 {
                pts += 1;
                common::publish_pattern(&p, seq, Some(pts)).unwrap();
            }
        }
        let (got, generations) = reader.join().unwrap();
        assert_eq!(generations, 2, "{policy:?}");
        let want: Vec<_> = geometry
            .iter()
            .flat_map(|g| (1..=3u64).map(move |seq| (*g, seq)))
            .zip(1..)
            .map(|(((f, w, h), seq), pts)| (f, w, h, seq, pts, true))
            .collect();
        assert_eq!(
            got, want,
            "{policy:?}: every frame in order, each with its own layout"
        );
    }
}

/// A replacement between a subscriber's SUBSCRIBE and its opening of the frame SHM: opened by
/// its name at that point, the SHM would be the next generation's header beside the slots
/// VMM_FDS sent for the one the subscriber was admitted to (refused when the geometry
/// changed, read from the wrong slots when it did not). The replacement here comes at exactly
/// that point (a hook in `Subscriber::connect`); the subscriber must get every frame of the
/// new ring, each the one published under its seq, with its layout.
#[test]
fn a_replacement_during_the_handshake_is_followed_not_mixed_up() {
    use std::sync::Arc;
    for (policy, next) in [
        (Policy::DropOldest, (Format::Nv12, 64u32, 48u32)),
        (Policy::StrictWait, (Format::Yuv420p, 80, 40)),
        (Policy::DropOldest, (Format::Rgba, 32, 16)),
        (Policy::StrictWait, (Format::Nv12, 64, 48)),
    ] {
        let env = TestEnv::new("hsrace");
        let p = Arc::new(Publisher::create(&env.key, env.publisher_options()).unwrap());
        let config = move |(f, w, h): (Format, u32, u32)| {
            let mut c = FrameRingConfig::new(f, w, h);
            c.policy = policy;
            c.ring_size = 16;
            c.ack_timeout = Duration::from_secs(10);
            c
        };
        p.enable_frames(config((Format::Nv12, 64, 48))).unwrap();
        common::publish_pattern(&p, 1, Some(1)).unwrap();
        // The replacement and three frames of the new ring, from another thread (under
        // STRICT_WAIT the replacement waits for the subscriber to come back).
        let (go, went) = std::sync::mpsc::channel::<()>();
        let worker = {
            let p = p.clone();
            std::thread::spawn(move || {
                went.recv().unwrap();
                p.replace_frames(config(next)).unwrap();
                for seq in 1..=3u64 {
                    common::publish_pattern(&p, seq, Some(1 + seq as i64)).unwrap();
                }
            })
        };
        let hooked = p.clone();
        cuframes_core::testing::hooks::set_after_handshake(&env.key, move || {
            go.send(()).unwrap();
            // Until the replacement has retired us (then the new ring is in place: `subscribers`
            // reads the ring, which the replacement holds until it has made the new one).
            common::wait_until("the replacement", Duration::from_secs(10), || {
                !hooked.subscribers().iter().any(|s| s.wants_frames)
            });
        });
        let mut opts = env.subscriber_options("hsrace");
        opts.connect_timeout = Duration::from_secs(10);
        let mut s = Subscriber::connect(&env.key, &opts)
            .unwrap_or_else(|e| panic!("{policy:?} -> {next:?}: connect: {e}"));
        let mut got = Vec::new();
        while got.len() < 3 {
            match s.next_frame(Some(Duration::from_secs(10))) {
                Ok(f) => got.push(seen(&f)),
                Err(e) => panic!("{policy:?} -> {next:?}: after {got:?}: {e}"),
            }
        }
        worker.join().unwrap();
        let (f, w, h) = next;
        assert_eq!(
            got,
            [
                (f, w, h, 1, 2, true),
                (f, w, h, 2, 3, true),
                (f, w, h, 3, 4, true)
            ],
            "{policy:?} -> {next:?}: the new ring's frames, each as published"
        );
        assert_eq!(s.ring_generations(), 1, "{policy:?} -> {next:?}");
    }
}

/// How long the slow reader of `a_replaced_ring_is_followed_frame_for_frame` takes per frame:
/// three frames take longer than 300 ms, longer than any fixed time a test might give a reader
/// to follow.
const SLOW_READER: Duration = Duration::from_millis(120);

/// A publisher that replaces its ring and ends soon after must not go away before a reader
/// still draining the old ring has subscribed to the new one (which needs the publisher's
/// socket): that reader would lose the whole last generation although nothing overwrote it.
/// The publisher's end waits, up to the ring's ack timeout, for the readers its replacement
/// sent away; one that never comes back costs that bound, no more.
#[test]
fn a_publisher_ending_right_after_a_replacement_waits_for_its_readers() {
    let config = |w, h, ack_timeout| {
        let mut c = FrameRingConfig::new(Format::Nv12, w, h);
        c.policy = Policy::DropOldest;
        c.ring_size = 8;
        c.ack_timeout = ack_timeout;
        c
    };
    let env = TestEnv::new("regen-end");
    let mut opts = env.subscriber_options("regen-end");
    opts.connect_timeout = Duration::from_secs(2);

    // A reader that has read nothing when the stream ends gets both generations.
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(config(64, 48, Duration::from_secs(10)))
        .unwrap();
    let mut s = Subscriber::connect(&env.key, &opts).unwrap();
    for seq in 1..=3 {
        publish(&p, seq);
    }
    p.replace_frames(config(80, 40, Duration::from_secs(10)))
        .unwrap();
    for seq in 1..=3 {
        publish(&p, seq);
    }
    let ended = std::thread::spawn(move || {
        let t = Instant::now();
        drop(p);
        t.elapsed()
    });
    std::thread::sleep(Duration::from_millis(200)); // the publisher is ending meanwhile
    let mut got = Vec::new();
    let end = loop {
        match s.next_frame(Some(Duration::from_secs(10))) {
            Ok(f) => {
                let ok = common::verify_frame(&f, &common::planes_for(&f.layout, f.seq));
                got.push((f.layout.width, f.seq, ok));
            }
            Err(e) => break e,
        }
    };
    assert_eq!(end.code(), ErrorCode::Disconnected, "{end}");
    let want: Vec<_> = [64, 64, 64, 80, 80, 80]
        .into_iter()
        .zip([1, 2, 3, 1, 2, 3])
        .map(|(w, seq)| (w, seq, true))
        .collect();
    assert_eq!(got, want, "every frame of both generations ({end})");
    assert_eq!(s.ring_generations(), 1);
    let took = ended.join().unwrap();
    assert!(took < Duration::from_secs(5), "the end waited {took:?}");

    // A reader that leaves instead of coming back delays the end by the ack timeout at most.
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(config(64, 48, Duration::from_millis(300)))
        .unwrap();
    let s = Subscriber::connect(&env.key, &opts).unwrap();
    publish(&p, 1);
    p.replace_frames(config(80, 40, Duration::from_millis(300)))
        .unwrap();
    drop(s);
    let t = Instant::now();
    drop(p);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");

    // It costs one such wait, not one at every later replacement and again at the end: under
    // STRICT_WAIT the first replacement waits for it, the second only for the reader that
    // follows. (3 s: on 2 loaded CPUs a follower took more than 300 ms to come back.)
    let ack_timeout = Duration::from_secs(3);
    let strict = |w, h| {
        let mut c = config(w, h, ack_timeout);
        c.policy = Policy::StrictWait;
        c
    };
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(strict(64, 48)).unwrap();
    let leaver = Subscriber::connect(&env.key, &opts).unwrap();
    let mut follower = Subscriber::connect(&env.key, &opts).unwrap();
    let follow = std::thread::spawn(move || {
        let mut widths = Vec::new();
        while let Ok(f) = follower.next_frame(Some(Duration::from_secs(5))) {
            widths.push(f.layout.width);
        }
        widths
    });
    publish(&p, 1);
    p.replace_frames(strict(80, 40)).unwrap(); // the leaver never comes back
    drop(leaver);
    publish(&p, 1);
    let t = Instant::now();
    p.replace_frames(strict(96, 48)).unwrap();
    let second = t.elapsed();
    publish(&p, 1);
    let t = Instant::now();
    drop(p);
    let end = t.elapsed();
    assert_eq!(follow.join().unwrap(), [64, 80, 96]);
    assert!(
        second < ack_timeout * 2 / 3 && end < ack_timeout * 2 / 3,
        "the reader that left was waited for again: second replacement {second:?}, end {end:?}"
    );
}

/// With `reconnect`, a publisher that does not come back within the bound ends the stream as
/// a stream ends (DISCONNECTED, an end of file for FFmpeg), once and for good: later reads
/// do not wait again. While it waits, reads time out.
#[test]
fn reconnect_gives_up_after_its_bound_with_a_plain_end() {
    let env = TestEnv::new("rc-bound");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 48))
        .unwrap();
    let mut opts = env.subscriber_options("rc-bound");
    opts.reconnect = Some(Duration::from_millis(400));
    let mut s = Subscriber::connect(&env.key, &opts).unwrap();
    publish(&p, 1);
    drop(p);
    assert_eq!(s.next_frame(Some(Duration::from_secs(2))).unwrap().seq, 1);
    let t = Instant::now();
    let e = s
        .next_frame(Some(Duration::from_millis(100)))
        .err()
        .unwrap();
    assert_eq!(e.code(), ErrorCode::Timeout, "still waiting: {e}");
    let e = loop {
        match s.next_frame(Some(Duration::from_millis(100))) {
            Err(e) if e.code() == ErrorCode::Timeout => continue,
            other => break other.err().unwrap(),
        }
    };
    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
    assert!(e.message().contains("did not come back"), "{e}");
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "{:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let e = s.next_frame(Some(Duration::from_secs(2))).err().unwrap();
    assert_eq!(e.code(), ErrorCode::Disconnected);
    assert!(
        t.elapsed() < Duration::from_millis(50),
        "waited again: {:?}",
        t.elapsed()
    );
}

/// A caller's stride is not trusted: one whose rows do not fit in memory is refused with a
/// clear error, never wrapped around into a small span that the buffer's size passes.
#[test]
fn a_stride_whose_rows_overflow_is_refused() {
    let env = TestEnv::new("stride");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let (y, uv) = (vec![0u8; 64 * 32], vec![0u8; 64 * 16]);
    // 31 rows of this stride wrap around to 15 bytes.
    let stride = usize::MAX / 31 + 1;
    assert_eq!(stride.wrapping_mul(31), 15);
    let e = p
        .publish_host_planes(&[&y, &uv], &[stride, 64], None)
        .expect_err("refused");
    assert_eq!(e.code(), ErrorCode::InvalidArg, "{e}");
    assert!(e.message().contains("plane 0: stride"), "{e}");
    // The slot went back: the next frame publishes.
    assert_eq!(
        p.publish_host_planes(&[&y, &uv], &[64, 64], None).unwrap(),
        1
    );
}
