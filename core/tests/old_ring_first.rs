//! A subscriber of frames *and* packets delivers what the ring it leaves still holds before
//! the frames of the next one (docs/protocol.md, ring replacement), whichever read notices
//! the end first: a packet read that sees SHUTDOWN(NEW_RING), or a publisher restart under
//! `reconnect`, must not open the next ring at once and throw the old ring's unread frames
//! away, nor a frame read that notices a restart first throw away the old packet ring's
//! unread packets.

use cuframes_test_support as common;

use std::time::Duration;

use common::TestEnv;
use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::{Frame, Subscriber, SubscriberOptions};
use cuframes_core::wire::{
    Format, Policy, CODEC_ID_H264, PACKET_FLAG_DISCONTINUITY, PACKET_FLAG_KEY,
};
use cuframes_core::ErrorCode;

const STEP_NS: i64 = 40_000_000;
const WAIT: Option<Duration> = Some(Duration::from_secs(5));

/// A frame as the assertions compare it: its ring's geometry, its seq, whether its bytes are
/// the pattern of that seq, and its pts.
fn seen(f: &Frame) -> (Format, u32, u32, u64, bool, i64) {
    let l = &*f.layout;
    let ok = common::verify_frame(f, &common::planes_for(l, f.seq));
    (l.format, l.width, l.height, f.seq, ok, f.pts_ns)
}

/// DROP_OLDEST: a replacement waits for nobody, so the test thread can both publish and read.
fn ring(format: Format, w: u32, h: u32) -> FrameRingConfig {
    let mut c = FrameRingConfig::new(format, w, h);
    c.policy = Policy::DropOldest;
    c.ring_size = 8;
    c
}

fn publisher(env: &TestEnv, format: Format, w: u32, h: u32) -> Publisher {
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(ring(format, w, h)).unwrap();
    p.enable_packets(PacketRingConfig {
        codec_id: CODEC_ID_H264,
        ring_slots: 64,
        data_size: 1 << 16,
        ..Default::default()
    })
    .unwrap();
    p
}

fn payload(publisher: u8, n: u64) -> Vec<u8> {
    let mut v = vec![publisher];
    v.extend_from_slice(&n.to_le_bytes());
    v
}

fn publish_frames(p: &Publisher, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        let (published, _) = common::publish_pattern(p, seq, Some(seq as i64 * STEP_NS)).unwrap();
        assert_eq!(published, seq);
    }
}

fn options(env: &TestEnv, name: &str, reconnect: bool) -> SubscriberOptions {
    SubscriberOptions {
        want_frames: true,
        want_packets: true,
        reconnect: reconnect.then_some(Duration::from_secs(10)),
        ..env.subscriber_options(name)
    }
}

/// Packets as the assertions compare them: publisher tag, seq, DISCONTINUITY.
fn read_packets(s: &mut Subscriber, n: usize) -> Vec<(u8, u64, bool)> {
    let mut buf = Vec::new();
    (0..n)
        .map(|_| {
            let info = s.next_packet(WAIT, &mut buf).unwrap();
            assert_eq!(buf.len(), 9, "{buf:?}");
            let disc = info.flags & PACKET_FLAG_DISCONTINUITY != 0;
            (
                buf[0],
                u64::from_le_bytes(buf[1..].try_into().unwrap()),
                disc,
            )
        })
        .collect()
}

#[test]
fn a_new_ring_noticed_by_a_packet_read_delivers_the_old_rings_frames_first() {
    let env = TestEnv::new("oldring");
    let p = publisher(&env, Format::Nv12, 64, 48);
    let mut s = Subscriber::connect(&env.key, &options(&env, "oldring", false)).unwrap();
    publish_frames(&p, 1..=3);
    p.replace_frames(ring(Format::Rgba, 32, 16)).unwrap();
    // The packet reads notice the new ring (SHUTDOWN comes from the server thread: read until
    // the subscriber has followed it).
    let mut buf = Vec::new();
    let mut n = 0u64;
    common::wait_until(
        "a packet read to follow the new ring",
        Duration::from_secs(10),
        || {
            n += 1;
            let flags = if n == 1 { PACKET_FLAG_KEY } else { 0 };
            let ts = n as i64 * STEP_NS;
            p.publish_packet(&payload(1, n), ts, ts, flags).unwrap();
            let info = s.next_packet(WAIT, &mut buf).unwrap();
            assert_eq!((info.seq, buf.as_slice()), (n, payload(1, n).as_slice()));
            s.ring_generations() == 1
        },
    );
    publish_frames(&p, 1..=2);
    let got: Vec<_> = (0..5).map(|_| seen(&s.next_frame(WAIT).unwrap())).collect();
    let old = |seq: u64| (Format::Nv12, 64, 48, seq, true, seq as i64 * STEP_NS);
    let new = |seq: u64| (Format::Rgba, 32, 16, seq, true, seq as i64 * STEP_NS);
    assert_eq!(
        got,
        [old(1), old(2), old(3), new(1), new(2)],
        "the old ring's frames first, then the new ring's"
    );
    let e = s.next_frame(Some(Duration::from_millis(50))).err().unwrap();
    assert_eq!(e.code(), ErrorCode::Timeout, "{e}");
}

/// `reconnect`, the restart noticed by the packet reads: the old publisher's frames come
/// before the new publisher's, timestamps still increasing.
#[test]
fn a_restart_noticed_by_a_packet_read_delivers_the_old_publishers_frames_first() {
    let env = TestEnv::new("oldpub-p");
    let p1 = publisher(&env, Format::Nv12, 64, 48);
    let mut s = Subscriber::connect(&env.key, &options(&env, "oldpub-p", true)).unwrap();
    publish_frames(&p1, 1..=3);
    for n in 1..=3u64 {
        let flags = if n == 1 { PACKET_FLAG_KEY } else { 0 };
        let ts = n as i64 * STEP_NS;
        p1.publish_packet(&payload(1, n), ts, ts, flags).unwrap();
    }
    drop(p1);
    let p2 = publisher(&env, Format::Rgba, 32, 16);
    p2.publish_packet(&payload(2, 1), STEP_NS, STEP_NS, PACKET_FLAG_KEY)
        .unwrap();
    assert_eq!(
        read_packets(&mut s, 4),
        [(1, 1, false), (1, 2, false), (1, 3, false), (2, 1, true)]
    );
    assert_eq!(s.restarts(), 1);
    // Frames the new publisher publishes once this subscriber is its subscriber (R26).
    publish_frames(&p2, 1..=2);
    let got: Vec<_> = (0..5).map(|_| seen(&s.next_frame(WAIT).unwrap())).collect();
    let geometry: Vec<_> = got.iter().map(|g| (g.0, g.1, g.2, g.3, g.4)).collect();
    assert_eq!(
        geometry,
        [
            (Format::Nv12, 64, 48, 1, true),
            (Format::Nv12, 64, 48, 2, true),
            (Format::Nv12, 64, 48, 3, true),
            (Format::Rgba, 32, 16, 1, true),
            (Format::Rgba, 32, 16, 2, true),
        ],
        "the old publisher's frames first: {got:?}"
    );
    assert!(
        got.windows(2).all(|w| w[0].5 < w[1].5),
        "timestamps keep increasing across the restart: {got:?}"
    );
}

/// `reconnect`, the restart noticed by the frame reads: the old publisher's packets come
/// before the new publisher's (the first of which is flagged DISCONTINUITY).
#[test]
fn a_restart_noticed_by_a_frame_read_delivers_the_old_publishers_packets_first() {
    let env = TestEnv::new("oldpub-f");
    let p1 = publisher(&env, Format::Nv12, 64, 48);
    let mut s = Subscriber::connect(&env.key, &options(&env, "oldpub-f", true)).unwrap();
    publish_frames(&p1, 1..=3);
    for n in 1..=3u64 {
        let flags = if n == 1 { PACKET_FLAG_KEY } else { 0 };
        let ts = n as i64 * STEP_NS;
        p1.publish_packet(&payload(1, n), ts, ts, flags).unwrap();
    }
    drop(p1);
    let p2 = publisher(&env, Format::Rgba, 32, 16);
    p2.publish_packet(&payload(2, 1), STEP_NS, STEP_NS, PACKET_FLAG_KEY)
        .unwrap();
    for seq in 1..=3 {
        assert_eq!(s.next_frame(WAIT).unwrap().seq, seq);
    }
    // Drained: this read follows the new publisher, then waits for its first frame.
    let e = s
        .next_frame(Some(Duration::from_millis(300)))
        .err()
        .unwrap();
    assert_eq!(e.code(), ErrorCode::Timeout, "{e}");
    assert_eq!(s.restarts(), 1);
    publish_frames(&p2, 1..=1);
    let f = s.next_frame(WAIT).unwrap();
    assert_eq!((f.layout.width, f.seq), (32, 1));
    assert_eq!(
        read_packets(&mut s, 4),
        [(1, 1, false), (1, 2, false), (1, 3, false), (2, 1, true)],
        "the old publisher's packets first"
    );
}
