//! The GOP store through the control plane: a late subscriber to a stream whose GOP is longer
//! than the packet ring starts on the newest keyframe at once and then reads every packet in
//! order; hostile peers cannot change the store, grow what the publisher keeps, or make it
//! hand out a wrong keyframe; peers that do not ask get the v4 handshake unchanged; a
//! restarted publisher's store is its own.

use cuframes_test_support as common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::child::{self, Children};
use common::TestEnv;
use cuframes_core::packet_ring::{GopStoreConfig, PacketRingConfig, PacketRingWriter};
use cuframes_core::publisher::{Publisher, PublisherOptions};
use cuframes_core::shm::Mapping;
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::tlv::{HelloReq, Message};
use cuframes_core::wire::*;
use cuframes_core::ErrorCode;

const SLOTS: u32 = 16;
const GOP: u64 = 60;
const SEC: Option<Duration> = Some(Duration::from_secs(2));

fn packets_only(env: &TestEnv, name: &str) -> SubscriberOptions {
    let mut o = env.subscriber_options(name);
    o.want_frames = false;
    o.want_packets = true;
    o
}

fn publisher(env: &TestEnv) -> Publisher {
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_packets(PacketRingConfig {
        codec_id: CODEC_ID_H264,
        extradata: vec![0, 0, 0, 1, 0x67, 0x42],
        ring_slots: SLOTS,
        data_size: 1 << 20,
    })
    .unwrap();
    p
}

/// The bytes of packet `seq` of publisher `tag` (a restarted one sends other bytes).
fn payload(tag: u8, seq: u64) -> Vec<u8> {
    let len = if (seq - 1) % GOP == 0 { 20_000 } else { 1_200 };
    (0..len)
        .map(|i| (seq as usize * 13 + i * 3 + tag as usize * 101) as u8)
        .collect()
}

/// Publish packets up to seq `to` (a keyframe every GOP).
fn publish(p: &Publisher, tag: u8, to: u64) {
    let from = p.packet_stats().unwrap().packets + 1;
    for seq in from..=to {
        let flags = if (seq - 1) % GOP == 0 {
            PACKET_FLAG_KEY
        } else {
            0
        };
        let t = seq as i64 * 33_333_333;
        assert_eq!(
            p.publish_packet(&payload(tag, seq), t, t, flags).unwrap(),
            seq
        );
    }
}

/// Read a start on keyframe `from` and on to `to`, every one intact and in order; the first
/// returned within `first_within`.
fn read_in_order(s: &mut Subscriber, tag: u8, from: u64, to: u64, first_within: Duration) {
    assert_eq!((from - 1) % GOP, 0, "a start is on a keyframe");
    read_on(s, tag, from, to, first_within);
}

/// Packets `from..=to` of a stream already started, like `read_in_order`.
fn read_on(s: &mut Subscriber, tag: u8, from: u64, to: u64, first_within: Duration) {
    let mut buf = Vec::new();
    let t0 = Instant::now();
    for seq in from..=to {
        let info = s.next_packet(SEC, &mut buf).unwrap();
        if seq == from {
            assert!(
                t0.elapsed() < first_within,
                "first packet after {:?}",
                t0.elapsed()
            );
            assert_eq!(info.is_key(), (seq - 1) % GOP == 0, "packet {seq}");
        }
        assert_eq!(info.seq, seq);
        assert!(buf == payload(tag, seq), "payload of packet {seq}");
        assert!(!info.is_discontinuity() || seq == from, "packet {seq}");
    }
}

#[test]
fn a_late_subscriber_to_a_gop_longer_than_the_ring_starts_at_once_and_misses_nothing() {
    let env = TestEnv::new("gs-late");
    let p = publisher(&env);
    // One and a half GOPs: the newest keyframe (61) is 30 packets back, the ring holds 16.
    publish(&p, 0, GOP + GOP / 2);
    let mut s = Subscriber::connect(&env.key, &packets_only(&env, "late")).unwrap();
    read_in_order(
        &mut s,
        0,
        GOP + 1,
        GOP + GOP / 2,
        Duration::from_millis(200),
    );
    // What follows comes live, none lost.
    for seq in GOP + GOP / 2 + 1..=3 * GOP {
        publish(&p, 0, seq);
        read_on(&mut s, 0, seq, seq, Duration::from_secs(1));
    }
    let st = s.packet_stats().unwrap();
    assert_eq!(
        st.from_gop_store,
        GOP / 2 - SLOTS as u64,
        "61..=74: the ring held 75..=90"
    );
    assert_eq!(st.overruns, 0);
}

#[test]
fn without_the_store_the_same_late_subscriber_waits_for_the_next_keyframe() {
    let env = TestEnv::new("gs-base");
    let p = publisher(&env);
    p.set_gop_store(None).unwrap();
    publish(&p, 0, GOP + GOP / 2);
    let mut s = Subscriber::connect(&env.key, &packets_only(&env, "late")).unwrap();
    let e = s
        .next_packet(Some(Duration::from_millis(300)), &mut Vec::new())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Timeout);
    publish(&p, 0, 2 * GOP + 1);
    let info = s.next_packet(SEC, &mut Vec::new()).unwrap();
    assert_eq!((info.seq, info.is_key()), (2 * GOP + 1, true));
}

fn hello(flags: u32) -> Message {
    Message::HelloReq(HelloReq {
        proto_version: PROTOCOL_VERSION,
        consumer_name: "raw".into(),
        cuda_device: 0,
        mode: SubscriberMode::Copy as u32,
        subscribe_flags: flags,
    })
}

/// A raw handshake with `flags`; returns the socket (kept open) and what followed
/// SUBSCRIBE_RESP within 300 ms.
fn raw_subscribe(
    env: &TestEnv,
    flags: u32,
) -> (UnixStream, Option<(Message, Vec<std::os::fd::OwnedFd>)>) {
    let path = env.dir.join(format!("{}.sock", env.key));
    let s = UnixStream::connect(path).unwrap();
    let deadline = || Some(Instant::now() + Duration::from_secs(2));
    cuframes_core::testing::send(s.as_fd(), &hello(flags), &[]).unwrap();
    match cuframes_core::testing::recv(s.as_fd(), deadline())
        .unwrap()
        .0
    {
        Message::HelloResp(r) => {
            assert_eq!(r.result, 0);
            assert_ne!(r.publisher_flags & PUBLISHER_GOP_STORE, 0);
        }
        other => panic!("{other:?}"),
    }
    let sub = Message::SubscribeReq {
        proto_version: PROTOCOL_VERSION,
    };
    cuframes_core::testing::send(s.as_fd(), &sub, &[]).unwrap();
    match cuframes_core::testing::recv(s.as_fd(), deadline())
        .unwrap()
        .0
    {
        Message::SubscribeResp(r) => assert_eq!(r.result, 0),
        other => panic!("{other:?}"),
    }
    let soon = Some(Instant::now() + Duration::from_millis(300));
    let next = cuframes_core::testing::recv(s.as_fd(), soon).ok();
    (s, next)
}

#[test]
fn a_v4_peer_that_does_not_ask_gets_the_handshake_unchanged() {
    let env = TestEnv::new("gs-v4");
    let p = publisher(&env);
    publish(&p, 0, 5);
    let (_s, next) = raw_subscribe(&env, SUBSCRIBE_WANTS_PACKETS);
    assert!(next.is_none(), "nothing after SUBSCRIBE_RESP: {next:?}");
    // One that asks gets the store; a publisher without one says so with no descriptor.
    let (_s, next) = raw_subscribe(&env, SUBSCRIBE_WANTS_PACKETS | SUBSCRIBE_GOP_STORE);
    match next {
        Some((Message::GopStore(g), fds)) => assert_eq!((g.fd_count, fds.len()), (1, 1)),
        other => panic!("{other:?}"),
    }
    let env2 = TestEnv::new("gs-v4-none");
    let p2 = publisher(&env2);
    p2.set_gop_store(None).unwrap();
    let (_s, next) = raw_subscribe(&env2, SUBSCRIBE_WANTS_PACKETS | SUBSCRIBE_GOP_STORE);
    match next {
        Some((Message::GopStore(g), fds)) => assert_eq!((g.fd_count, fds.len()), (0, 0)),
        other => panic!("{other:?}"),
    }
}

/// Peers that ask again and again, keep every descriptor and try to write through them:
/// every descriptor is the one store (the publisher keeps no more), nothing they try changes
/// a byte, and a late subscriber afterwards gets the right keyframe and GOP.
#[test]
fn hostile_peers_cannot_grow_change_or_mislead_the_store() {
    let env = TestEnv::new("gs-hostile");
    let p = publisher(&env);
    publish(&p, 0, GOP + 10);
    let mut kept = Vec::new();
    let mut inode = None;
    // 25 kept open (the publisher serves 31 at most), 25 more that come and go.
    for round in 0..50 {
        let (s, next) = raw_subscribe(&env, SUBSCRIBE_WANTS_PACKETS | SUBSCRIBE_GOP_STORE);
        let Some((Message::GopStore(g), mut fds)) = next else {
            panic!("no GOP_STORE");
        };
        let fd = fds.pop().unwrap();
        let meta = std::fs::File::from(fd.try_clone().unwrap())
            .metadata()
            .unwrap();
        assert_eq!(meta.len(), g.store_size);
        assert_eq!(
            *inode.get_or_insert(meta.ino()),
            meta.ino(),
            "one store for all"
        );
        // Scribbling: a writable mapping, writes, resizing, a hole.
        let size = g.store_size as usize;
        assert!(Mapping::map(fd.as_fd(), size, true, "hostile").is_err());
        assert!(nix::sys::uio::pwrite(fd.as_fd(), &[0xFF; 4096], 0).is_err());
        assert!(nix::unistd::ftruncate(fd.as_fd(), 1).is_err());
        let punch = nix::fcntl::fallocate(
            fd.as_fd(),
            nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
                | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
            0,
            size as i64,
        );
        assert!(punch.is_err());
        if round % 2 == 0 {
            kept.push((s, fd));
        }
        // The publisher goes on meanwhile.
        publish(&p, 0, p.packet_stats().unwrap().packets + 1);
    }
    let published = p.packet_stats().unwrap().packets;
    assert_eq!(published, 2 * GOP, "still in the second GOP");
    let mut s = Subscriber::connect(&env.key, &packets_only(&env, "late")).unwrap();
    read_in_order(&mut s, 0, GOP + 1, published, Duration::from_millis(200));
    drop(kept);
}

/// A publisher restarted under the same key: a reconnecting subscriber and a new one start
/// on the new publisher's keyframe (from its store, its GOP is past its ring), never on the
/// old one's.
#[test]
fn a_restarted_publisher_serves_its_own_gop() {
    let env = TestEnv::new("gs-restart");
    let p = publisher(&env);
    publish(&p, 1, GOP + 10);
    let mut o = packets_only(&env, "rec");
    o.reconnect = Some(Duration::from_secs(5));
    let mut s = Subscriber::connect(&env.key, &o).unwrap();
    read_in_order(&mut s, 1, GOP + 1, GOP + 10, Duration::from_millis(200));
    drop(p);
    let p = publisher(&env);
    publish(&p, 2, GOP / 2); // 1..=30: keyframe 1 is past the ring of 16
    let mut buf = Vec::new();
    let info = s
        .next_packet(Some(Duration::from_secs(5)), &mut buf)
        .unwrap();
    assert!(info.is_key() && info.is_discontinuity(), "{info:?}");
    assert_eq!(buf, payload(2, 1), "the new publisher's keyframe");
    read_on(&mut s, 2, 2, GOP / 2, Duration::from_secs(1));
    let mut fresh = Subscriber::connect(&env.key, &packets_only(&env, "new")).unwrap();
    read_in_order(&mut fresh, 2, 1, GOP / 2, Duration::from_millis(200));
}

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    assert_eq!(role, "small_store_publisher");
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let p = Publisher::create(&key, PublisherOptions::default()).unwrap();
    p.enable_packets(PacketRingConfig {
        codec_id: CODEC_ID_H264,
        ring_slots: SLOTS,
        data_size: 1 << 20,
        ..Default::default()
    })
    .unwrap();
    // A GOP here is 20000 + 59 x 1200 bytes: neither GOP fits in 32 KiB.
    p.set_gop_store(Some(GopStoreConfig {
        bytes_per_gop: 32 << 10,
        packets_per_gop: 4096,
    }))
    .unwrap();
    publish(&p, 0, GOP + GOP / 2);
    println!("READY");
    std::io::stdout().flush().unwrap();
    // Until killed.
    std::thread::sleep(Duration::from_secs(60));
}

/// A publisher (another process) whose GOPs do not fit its store: a late subscriber waits
/// for the next keyframe as without a store (no partial GOP), and the publisher said so once
/// on stderr, naming the bound.
#[test]
fn a_gop_larger_than_the_store_falls_back_and_is_said_once() {
    let env = TestEnv::new("gs-small");
    let mut cmd = child::role_command("small_store_publisher", &env);
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let (out, err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let mut kids = Children(vec![child]);
    let mut out = BufReader::new(out);
    let mut line = String::new();
    while !line.contains("READY") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the publisher died");
    }
    let mut s = Subscriber::connect(&env.key, &packets_only(&env, "late")).unwrap();
    let e = s
        .next_packet(Some(Duration::from_millis(300)), &mut Vec::new())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Timeout, "waits for the next keyframe");
    for k in &mut kids.0 {
        k.kill().unwrap();
        k.wait().unwrap();
    }
    let mut text = String::new();
    BufReader::new(err).read_to_string(&mut text).unwrap();
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("more than the GOP store keeps"))
        .collect();
    assert_eq!(said.len(), 1, "said once:\n{text}");
    assert!(
        said[0].contains("the GOP from packet 1 ") && said[0].contains("32768 bytes"),
        "{}",
        said[0]
    );
}

/// Our subscriber against a plain v4 packet publisher (a scripted one that knows nothing of the
/// store: `publisher_flags` 0): it asks, gets no GOP_STORE, and reads the ring as before (a
/// start on a lost keyframe waits for the next one).
#[test]
fn against_a_plain_v4_publisher_the_subscriber_reads_as_before() {
    let env = TestEnv::new("gs-oldpub");
    let key = cuframes_core::Key::new(&env.key).unwrap();
    let mut ring = PacketRingWriter::create(
        &key,
        PacketRingConfig {
            codec_id: CODEC_ID_H264,
            extradata: vec![0, 0, 0, 1, 0x67, 0x42],
            ring_slots: SLOTS,
            data_size: 1 << 20,
        },
        0o600,
    )
    .unwrap();
    let publish_to = |ring: &mut PacketRingWriter, to: u64| {
        for seq in ring.seq() + 1..=to {
            let key = (seq - 1) % GOP == 0;
            let flags = if key { PACKET_FLAG_KEY } else { 0 };
            ring.publish(&payload(0, seq), 0, 0, flags).unwrap();
        }
    };
    publish_to(&mut ring, GOP + GOP / 2);
    let path = env.dir.join(format!("{}.sock", env.key));
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let (shm, initial) = (ring.shm_name().to_owned(), ring.last_keyframe_seq());
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let deadline = || Some(Instant::now() + Duration::from_secs(5));
        let (hello, _) = cuframes_core::testing::recv(s.as_fd(), deadline()).unwrap();
        let Message::HelloReq(h) = hello else {
            panic!("{hello:?}")
        };
        let asked = h.subscribe_flags & SUBSCRIBE_GOP_STORE != 0;
        let resp = Message::HelloResp(cuframes_core::tlv::HelloResp {
            result: 0,
            proto_version: PROTOCOL_VERSION,
            ring_size: 0,
            ownership_mode: 0,
            meta: Default::default(),
            shm_path: String::new(),
            publisher_flags: 0,
            packets: Some(cuframes_core::tlv::HelloRespPackets {
                packet_shm_path: shm,
                codec_id: CODEC_ID_H264,
                initial_packet_seq: initial,
            }),
        });
        cuframes_core::testing::send(s.as_fd(), &resp, &[]).unwrap();
        let (sub, _) = cuframes_core::testing::recv(s.as_fd(), deadline()).unwrap();
        assert!(matches!(sub, Message::SubscribeReq { .. }), "{sub:?}");
        let resp = Message::SubscribeResp(cuframes_core::tlv::SubscribeResp {
            result: 0,
            assigned_bit: 1,
            initial_seq: 0,
        });
        cuframes_core::testing::send(s.as_fd(), &resp, &[]).unwrap();
        // Open until the subscriber is done: its end is not what this test is about.
        let _ = done_rx.recv_timeout(Duration::from_secs(10));
        asked
    });
    let mut s = Subscriber::connect(&env.key, &packets_only(&env, "new")).unwrap();
    let e = s
        .next_packet(Some(Duration::from_millis(300)), &mut Vec::new())
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Timeout, "waits for the next keyframe");
    publish_to(&mut ring, 2 * GOP + 2);
    read_on(&mut s, 0, 2 * GOP + 1, 2 * GOP + 2, Duration::from_secs(1));
    assert_eq!(s.packet_stats().unwrap().from_gop_store, 0);
    done_tx.send(()).unwrap();
    assert!(
        server.join().unwrap(),
        "our subscriber offers the extension"
    );
    drop(s);
    let _ = std::fs::remove_file(&path);
}
