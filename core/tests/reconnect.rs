//! Reconnect: subscribers with `reconnect` keep running across publisher
//! restarts under the same key. The publisher is a child process (this test binary
//! re-executed), SIGKILLed and started again three times; its clock starts at 0 each time.
//! A frame subscriber and a packet subscriber read on: every frame and packet is intact,
//! timestamps keep increasing, packets resume on a keyframe flagged DISCONTINUITY, and the
//! subscribers count three restarts. Without `reconnect` the same subscriber ends with
//! DISCONNECTED at the first kill.

use cuframes_test_support as common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{child, planes_for, publish_pattern, verify_frame, Children, TestEnv};
use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::{Format, CODEC_ID_H264, PACKET_FLAG_DISCONTINUITY, PACKET_FLAG_KEY};
use cuframes_core::ErrorCode;

const STEP_NS: i64 = 40_000_000;

fn payload(n: u64) -> Vec<u8> {
    n.to_le_bytes().repeat(8)
}

#[test]
fn reconnect_child() {
    if child::role().is_none() {
        return;
    }
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let p = Publisher::create(&key, PublisherOptions::default()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 48))
        .unwrap();
    p.enable_packets(PacketRingConfig {
        codec_id: CODEC_ID_H264,
        ring_slots: 64,
        data_size: 1 << 16,
        ..Default::default()
    })
    .unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    for n in 1u64.. {
        let ts = n as i64 * STEP_NS;
        publish_pattern(&p, n, Some(ts)).unwrap();
        let flags = if n % 5 == 1 { PACKET_FLAG_KEY } else { 0 };
        p.publish_packet(&payload(n), ts, ts, flags).unwrap();
        std::thread::sleep(Duration::from_millis(4));
    }
}

fn start_publisher(env: &TestEnv) -> Child {
    let mut cmd = child::command_for("reconnect_child", "publisher");
    let mut c = child::in_env(&mut cmd, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "publisher died early"
        );
        if line.contains("READY") {
            break;
        }
    }
    c
}

fn options(env: &TestEnv, name: &str, frames: bool) -> SubscriberOptions {
    SubscriberOptions {
        want_frames: frames,
        want_packets: !frames,
        reconnect: Some(Duration::from_secs(20)),
        ..env.subscriber_options(name)
    }
}

/// What a reader thread has done so far, published for the main thread to wait on.
#[derive(Default)]
struct Progress {
    restarts: AtomicU64,
    good: AtomicU64,
}

/// What a reader saw: items, bad items, timestamps that did not increase, restarts counted,
/// and (packets) the DISCONTINUITY packets and whether each was a keyframe.
#[derive(Debug, Default)]
struct Seen {
    good: u64,
    bad: u64,
    not_increasing: u64,
    restarts: u64,
    gaps: Vec<bool>,
    end: Option<ErrorCode>,
}

#[test]
fn subscribers_follow_a_publisher_restarted_three_times() {
    let env = TestEnv::new("reconnect");
    let mut kids = Children(vec![start_publisher(&env)]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));

    let mut frames = Subscriber::connect(&env.key, &options(&env, "rc-frames", true)).unwrap();
    let mut packets = Subscriber::connect(&env.key, &options(&env, "rc-packets", false)).unwrap();
    let mut plain = Subscriber::connect(
        &env.key,
        &SubscriberOptions {
            want_frames: false,
            want_packets: true,
            ..env.subscriber_options("rc-plain")
        },
    )
    .unwrap();
    let (fp, pp) = (Arc::new(Progress::default()), Arc::new(Progress::default()));
    let (fp1, pp1) = (fp.clone(), pp.clone());
    let s1 = stop.clone();
    let frame_reader = std::thread::spawn(move || {
        let layout = frames.frame_layout().unwrap().clone();
        let mut seen = Seen::default();
        let mut last = i64::MIN;
        while !s1.load(std::sync::atomic::Ordering::SeqCst) {
            match frames.next_frame(Some(Duration::from_millis(200))) {
                Ok(f) => {
                    if verify_frame(&f, &planes_for(&layout, f.seq)) {
                        seen.good += 1;
                    } else {
                        seen.bad += 1;
                    }
                    seen.not_increasing += u64::from(f.pts_ns <= last);
                    last = f.pts_ns;
                }
                Err(e) if e.code() == ErrorCode::Timeout => {}
                Err(e) => {
                    seen.end = Some(e.code());
                    break;
                }
            }
            fp1.restarts.store(frames.restarts(), Ordering::SeqCst);
            fp1.good.store(seen.good, Ordering::SeqCst);
        }
        seen.restarts = frames.restarts();
        seen
    });
    let s2 = stop.clone();
    let packet_reader = std::thread::spawn(move || {
        let mut seen = Seen::default();
        let (mut last_pts, mut last_dts) = (i64::MIN, i64::MIN);
        let mut buf = Vec::new();
        while !s2.load(std::sync::atomic::Ordering::SeqCst) {
            match packets.next_packet(Some(Duration::from_millis(200)), &mut buf) {
                Ok(info) => {
                    if buf == payload(info.seq) {
                        seen.good += 1;
                    } else {
                        seen.bad += 1;
                    }
                    seen.not_increasing +=
                        u64::from(info.pts_ns <= last_pts || info.dts_ns <= last_dts);
                    (last_pts, last_dts) = (info.pts_ns, info.dts_ns);
                    if info.flags & PACKET_FLAG_DISCONTINUITY != 0 {
                        seen.gaps.push(info.flags & PACKET_FLAG_KEY != 0);
                    }
                }
                Err(e) if e.code() == ErrorCode::Timeout => {}
                Err(e) => {
                    seen.end = Some(e.code());
                    break;
                }
            }
            pp1.restarts.store(packets.restarts(), Ordering::SeqCst);
            pp1.good.store(seen.good, Ordering::SeqCst);
        }
        seen.restarts = packets.restarts();
        seen
    });

    // Before each kill and at the end: both readers follow publisher `round` (0 = the first)
    // and have read 20 more items. Waiting for that, not for a fixed time, matters: a reader
    // that comes back only after the next kill counts a restart too few.
    let following = |round: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        for (what, pr) in [("frames", &fp), ("packets", &pp)] {
            while pr.restarts.load(Ordering::SeqCst) < round
                || pr.good.load(Ordering::SeqCst) < 20 * (round + 1)
            {
                assert!(
                    Instant::now() < deadline,
                    "{what} reader not following publisher {round}: {} restarts, {} good",
                    pr.restarts.load(Ordering::SeqCst),
                    pr.good.load(Ordering::SeqCst)
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    for round in 0..3 {
        following(round);
        let mut old = kids.0.pop().unwrap();
        old.kill().unwrap(); // SIGKILL
        old.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        kids.0.push(start_publisher(&env));
    }
    following(3);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let f = frame_reader.join().unwrap();
    let p = packet_reader.join().unwrap();

    // Without reconnect: the stream ends at the first kill.
    let mut buf = Vec::new();
    let end = loop {
        match plain.next_packet(Some(Duration::from_secs(5)), &mut buf) {
            Ok(_) => continue,
            Err(e) => break e.code(),
        }
    };
    assert_eq!(end, ErrorCode::Disconnected);

    assert_eq!(f.end, None, "frames: {f:?}");
    assert_eq!(
        (f.restarts, f.bad, f.not_increasing),
        (3, 0, 0),
        "frames: {f:?}"
    );
    assert!(
        f.good >= 4 * 20,
        "frames from each of the 4 publishers: {f:?}"
    );
    assert_eq!(p.end, None, "packets: {p:?}");
    assert_eq!(
        (p.restarts, p.bad, p.not_increasing),
        (3, 0, 0),
        "packets: {p:?}"
    );
    assert!(p.good >= 4 * 20, "packets: {p:?}");
    assert_eq!(
        p.gaps, [true; 3],
        "one DISCONTINUITY per restart, each on a keyframe: {p:?}"
    );
}
