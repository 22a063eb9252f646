//! Packets through the control plane: HELLO flags (R3), the HELLO_RESP tail (R4),
//! packets-only publishers (R5), keyframe-aligned starts (§10.8, R26), clean end of stream.

use cuframes_test_support as common;

use std::time::Duration;

use common::{packet_shm_name, TestEnv};
use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::{Format, Policy, SubscriberMode, CODEC_ID_HEVC, PACKET_FLAG_KEY};
use cuframes_core::ErrorCode;

fn packets_only(env: &TestEnv, name: &str) -> SubscriberOptions {
    let mut o = env.subscriber_options(name);
    o.want_frames = false;
    o.want_packets = true;
    o
}

fn config() -> PacketRingConfig {
    PacketRingConfig {
        codec_id: CODEC_ID_HEVC,
        extradata: vec![0, 0, 0, 1, 0x40, 1],
        ring_slots: 16,
        data_size: 1 << 16,
    }
}

#[test]
fn packets_only_publisher_serves_packets_and_refuses_frames() {
    let env = TestEnv::new("po");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_packets(config()).unwrap();
    let e = Subscriber::connect(&env.key, &env.subscriber_options("frames"))
        .err()
        .unwrap();
    assert_eq!(e.code(), ErrorCode::NotFound, "{e}");

    for i in 0..5u8 {
        let flags = if i == 0 || i == 3 { PACKET_FLAG_KEY } else { 0 };
        p.publish_packet(&[i; 100], i as i64 * 40, i as i64 * 40, flags)
            .unwrap();
    }
    // A late subscriber starts on the newest keyframe (seq 4).
    let mut s = Subscriber::connect(&env.key, &packets_only(&env, "late")).unwrap();
    assert_eq!(s.packet_codec_id(), Some(CODEC_ID_HEVC));
    assert_eq!(s.packet_extradata().unwrap(), vec![0, 0, 0, 1, 0x40, 1]);
    let mut buf = Vec::new();
    let info = s
        .next_packet(Some(Duration::from_secs(1)), &mut buf)
        .unwrap();
    assert_eq!(
        (info.seq, info.flags & PACKET_FLAG_KEY),
        (4, PACKET_FLAG_KEY)
    );
    assert_eq!(buf, vec![3u8; 100]);
    assert_eq!(
        s.next_packet(Some(Duration::from_secs(1)), &mut buf)
            .unwrap()
            .seq,
        5
    );
    assert_eq!(
        s.next_packet(Some(Duration::from_millis(30)), &mut buf)
            .err()
            .unwrap()
            .code(),
        ErrorCode::Timeout
    );
    p.publish_packet(&[9; 10], 1, 1, 0).unwrap();
    drop(p);
    // Everything published is still delivered, then the end of the stream.
    assert_eq!(
        s.next_packet(Some(Duration::from_secs(1)), &mut buf)
            .unwrap()
            .seq,
        6
    );
    assert_eq!(
        s.next_packet(Some(Duration::from_secs(2)), &mut buf)
            .err()
            .unwrap()
            .code(),
        ErrorCode::Disconnected
    );
}

#[test]
fn a_subscriber_before_any_keyframe_waits_for_the_first() {
    let env = TestEnv::new("wk");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_packets(config()).unwrap();
    p.publish_packet(&[1; 10], 0, 0, 0).unwrap(); // not a keyframe
    let mut s = Subscriber::connect(&env.key, &packets_only(&env, "early")).unwrap();
    p.publish_packet(&[2; 10], 1, 1, 0).unwrap();
    p.publish_packet(&[3; 10], 2, 2, PACKET_FLAG_KEY).unwrap();
    // More GOPs before the subscriber reads: it must still start at the first keyframe.
    p.publish_packet(&[4; 10], 3, 3, 0).unwrap();
    p.publish_packet(&[5; 10], 4, 4, PACKET_FLAG_KEY).unwrap();
    let mut buf = Vec::new();
    let info = s
        .next_packet(Some(Duration::from_secs(1)), &mut buf)
        .unwrap();
    assert_eq!(info.seq, 3, "R26: starts at the first KEY");
    assert!(info.is_key());
    assert_eq!(
        s.next_packet(Some(Duration::from_secs(1)), &mut buf)
            .unwrap()
            .seq,
        4
    );
    assert_eq!(
        s.next_packet(Some(Duration::from_secs(1)), &mut buf)
            .unwrap()
            .seq,
        5
    );
}

/// Who may lend a frame's bytes as a slice (the soundness of `Frame::bytes`): a COPY frame
/// lends its own buffer; a zero-copy host frame's bytes are the publisher's slot, so the safe
/// accessors lend nothing and copy out instead, and a slice comes only from the unsafe
/// accessors under their contract.
#[test]
fn frame_bytes_are_lent_only_when_the_subscriber_owns_them() {
    let env = TestEnv::new("fbytes");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 32);
    cfg.policy = Policy::StrictWait;
    cfg.ack_timeout = Duration::from_secs(30);
    p.enable_frames(cfg).unwrap();
    let mut zo = env.subscriber_options("zc");
    zo.mode = SubscriberMode::ZeroCopy;
    let mut zc = Subscriber::connect(&env.key, &zo).unwrap();
    let mut cp = Subscriber::connect(&env.key, &env.subscriber_options("copy")).unwrap();
    let (_, planes) = common::publish_pattern(&p, 1, None).unwrap();
    let layout = p.frame_layout().unwrap().clone();

    let c = cp.next_frame(Some(Duration::from_secs(2))).unwrap();
    assert!(!c.is_zero_copy());
    assert!(common::verify_frame(&c, &planes));
    let owned = c.bytes().expect("a COPY host frame lends its own bytes");
    assert_eq!(owned.len(), layout.frame_size);
    let (y, pitch) = c.plane(0).unwrap();
    assert_eq!(
        (pitch, &y[..64]),
        (layout.planes()[0].pitch, &planes[0][..64])
    );

    let z = zc.next_frame(Some(Duration::from_secs(2))).unwrap();
    assert!(z.is_zero_copy());
    assert!(z.bytes().is_none() && z.plane(0).is_none());
    let mut whole = vec![0u8; layout.frame_size];
    z.copy_to(&mut whole).unwrap();
    assert_eq!(whole, owned);
    assert!(common::verify_frame(&z, &planes));
    assert_eq!(
        z.copy_to(&mut whole[1..]).err().unwrap().code(),
        ErrorCode::InvalidArg
    );
    let mut short = vec![0u8; planes[1].len() - 1];
    assert_eq!(
        z.download_plane(1, &mut short).err().unwrap().code(),
        ErrorCode::InvalidArg
    );
    assert!(z.download_plane(7, &mut short).is_err());
    // SAFETY: nobody writes the slot while these slices live: the ring is STRICT_WAIT, `z`
    // is held until after their last use, the 30 s ACK timeout cannot expire first (so the
    // publisher does not give up on the subscriber), and this test publishes nothing more
    // until `z` is released.
    let (slot, slot_plane) =
        unsafe { (z.bytes_unchecked().unwrap(), z.plane_unchecked(0).unwrap()) };
    assert_eq!(slot, owned);
    assert_eq!(slot_plane, c.plane(0).unwrap());
    z.release();
    drop(c);
}

#[test]
fn frames_and_packets_from_one_publisher() {
    let env = TestEnv::new("fp");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Rgba, 16, 16))
        .unwrap();
    p.enable_packets(config()).unwrap();
    let mut o = env.subscriber_options("both");
    o.want_packets = true;
    let mut s = Subscriber::connect(&env.key, &o).unwrap();
    let frame = vec![7u8; 16 * 16 * 4];
    p.publish_host_planes(&[&frame], &[64], Some(5)).unwrap();
    p.publish_packet(&[1, 2, 3], 5, 5, PACKET_FLAG_KEY).unwrap();
    let f = s.next_frame(Some(Duration::from_secs(1))).unwrap();
    assert_eq!(f.plane(0).unwrap().0[..64], frame[..64]);
    let mut buf = Vec::new();
    assert_eq!(
        s.next_packet(Some(Duration::from_secs(1)), &mut buf)
            .unwrap()
            .seq,
        1
    );
    assert_eq!(buf, vec![1, 2, 3]);
    // A packets-only subscriber of this publisher gets no VMM_FDS and no frames (R21).
    let mut po = Subscriber::connect(&env.key, &packets_only(&env, "po")).unwrap();
    assert!(po.frame_layout().is_none());
    assert_eq!(
        po.next_frame(Some(Duration::from_millis(10)))
            .err()
            .unwrap()
            .code(),
        ErrorCode::NotFound
    );
    assert_eq!(p.subscriber_count(), 2);
}

#[test]
fn oversized_packets_are_refused_without_damage() {
    let env = TestEnv::new("big");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_packets(config()).unwrap();
    p.publish_packet(&[5; 1000], 0, 0, PACKET_FLAG_KEY).unwrap();
    let e = p
        .publish_packet(&vec![0; (1 << 16) + 1], 1, 1, 0)
        .err()
        .unwrap();
    assert_eq!(e.code(), ErrorCode::InvalidArg);
    assert!(
        e.message().contains("65537") || e.message().to_lowercase().contains("larger"),
        "{e}"
    );
    let mut s = Subscriber::connect(&env.key, &packets_only(&env, "after")).unwrap();
    let mut buf = Vec::new();
    assert_eq!(
        s.next_packet(Some(Duration::from_secs(1)), &mut buf)
            .unwrap()
            .seq,
        1
    );
    assert_eq!(buf, vec![5; 1000]);
}

#[test]
fn a_publisher_pid_from_another_pid_namespace_does_not_end_the_stream() {
    // In a container the recorded producer_pid belongs to another PID namespace: it may name
    // no process here. The subscriber relies on its socket, not on that pid.
    let env = TestEnv::new("pidns");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_packets(config()).unwrap();
    p.publish_packet(&[1; 10], 0, 0, PACKET_FLAG_KEY).unwrap();
    let (_fd, map) = cuframes_core::shm::open(&packet_shm_name(&env.key), 0, true).unwrap();
    map.atomic_u64(0x18)
        .store(0x7FFF_FFF0, std::sync::atomic::Ordering::Release); // no such pid
    let mut s = Subscriber::connect(&env.key, &packets_only(&env, "ns")).unwrap();
    let mut buf = Vec::new();
    assert_eq!(
        s.next_packet(Some(Duration::from_secs(1)), &mut buf)
            .unwrap()
            .seq,
        1
    );
    // Idle for longer than the reader's liveness interval: a timeout, not the end.
    let e = s
        .next_packet(Some(Duration::from_millis(400)), &mut buf)
        .err()
        .unwrap();
    assert_eq!(e.code(), ErrorCode::Timeout, "{e}");
    p.publish_packet(&[2; 10], 1, 1, 0).unwrap();
    assert_eq!(
        s.next_packet(Some(Duration::from_secs(1)), &mut buf)
            .unwrap()
            .seq,
        2
    );
    drop(p);
    assert_eq!(
        s.next_packet(Some(Duration::from_secs(2)), &mut buf)
            .err()
            .unwrap()
            .code(),
        ErrorCode::Disconnected
    );
}

/// A publisher of both rings counts each ring's readers apart: a packet reader is no frame
/// reader for a frame publisher's `wait_subscribers`, and a frame reader no packet reader.
#[test]
fn each_ring_counts_its_own_readers() {
    let env = TestEnv::new("counts");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 48))
        .unwrap();
    p.enable_packets(config()).unwrap();
    let wait = |what: &str, cond: &dyn Fn() -> bool| {
        common::wait_until(what, Duration::from_secs(10), cond)
    };
    let packets = Subscriber::connect(&env.key, &packets_only(&env, "packets")).unwrap();
    wait("the packet reader", &|| p.subscriber_count() == 1);
    assert_eq!(p.ready_subscriber_count(), 1);
    assert_eq!(
        p.ready_frame_subscriber_count(),
        0,
        "a packet reader is no frame reader"
    );
    assert_eq!(p.packet_subscriber_count(), 1);

    let frames = Subscriber::connect(&env.key, &env.subscriber_options("frames")).unwrap();
    wait("the frame reader", &|| {
        p.ready_frame_subscriber_count() == 1
    });
    assert_eq!(
        p.packet_subscriber_count(),
        1,
        "a frame reader is no packet reader"
    );
    assert_eq!(p.ready_subscriber_count(), 2);
    drop(packets);
    wait("the packet reader's leave", &|| {
        p.packet_subscriber_count() == 0
    });
    assert_eq!(p.ready_frame_subscriber_count(), 1);
    drop(frames);
}
