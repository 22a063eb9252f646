//! The operator inspection layer (`cuframes_core::inspect`) against live publishers and
//! subscribers in this process, a packet ring, a SIGKILLed child publisher, stale sockets and
//! corrupt objects. Children are this test binary re-executed with `CUFRAMES_CHILD_ROLE`.

use cuframes_test_support as common;

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixListener;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{child, frame_shm_name, packet_shm_name, shm_path, Children, TestEnv};
use cuframes_core::inspect::{self, Liveness, SocketState};
use cuframes_core::packet_ring::{PacketRingConfig, PacketRingWriter};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::{
    Format, MemoryKind, Policy, SubscriberState, CODEC_ID_H264, PACKET_FLAG_KEY,
};
use cuframes_core::{ErrorCode, Key};

fn publish(p: &Publisher) -> u64 {
    let layout = p.frame_layout().unwrap().clone();
    let planes: Vec<Vec<u8>> = layout
        .planes()
        .iter()
        .map(|pl| vec![7u8; pl.row_bytes * pl.rows])
        .collect();
    let refs: Vec<&[u8]> = planes.iter().map(|v| v.as_slice()).collect();
    let strides: Vec<usize> = layout.planes().iter().map(|pl| pl.row_bytes).collect();
    p.publish_host_planes(&refs, &strides, None).unwrap()
}

fn key(env: &TestEnv) -> Key {
    Key::new(&env.key).unwrap()
}

fn shm_exists(name: &str) -> bool {
    std::path::Path::new("/dev/shm").join(name).exists()
}

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    match role.as_str() {
        "publisher" => {
            // Frames and packets under one key, publishing until killed.
            let p = Publisher::create(&key, Default::default()).unwrap();
            p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
                .unwrap();
            let cfg = PacketRingConfig {
                codec_id: CODEC_ID_H264,
                extradata: vec![0, 0, 0, 1, 0x67],
                ring_slots: 16,
                data_size: 64 * 1024,
            };
            let mut w = PacketRingWriter::create(&Key::new(&key).unwrap(), cfg, 0o660).unwrap();
            println!("READY");
            use std::io::Write;
            std::io::stdout().flush().unwrap();
            let mut n = 0u64;
            loop {
                publish(&p);
                let flags = if n % 10 == 0 { PACKET_FLAG_KEY } else { 0 };
                w.publish(
                    &[1u8; 100],
                    n as i64 * 1_000_000,
                    n as i64 * 1_000_000,
                    flags,
                )
                .unwrap();
                n += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        other => panic!("unknown role {other}"),
    }
}

fn spawn_publisher(env: &TestEnv) -> Child {
    let mut child = child::role_command("publisher", env).spawn().unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child publisher exited before READY"
        );
        if line.contains("READY") {
            break;
        }
    }
    child
}

#[test]
fn live_publisher_with_subscribers() {
    let env = TestEnv::new("insp-live");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 48);
    cfg.ring_size = 8;
    p.enable_frames(cfg).unwrap();
    let mut alpha = Subscriber::connect(&env.key, &env.subscriber_options("alpha")).unwrap();
    let mut beta = Subscriber::connect(&env.key, &env.subscriber_options("beta")).unwrap();
    // Fewer frames than slots: nobody is lapped.
    for _ in 0..6 {
        publish(&p);
    }
    for _ in 0..6 {
        alpha.next_frame(Some(Duration::from_secs(5))).unwrap();
    }
    for _ in 0..2 {
        beta.next_frame(Some(Duration::from_secs(5))).unwrap();
    }

    // Subscribers with ACK pages report to the publisher, which copies their counters into
    // the header for operators every 250 ms: wait for this round of reads to show.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let info = loop {
        let info = inspect::inspect(&env.dir, &key(&env)).unwrap();
        let shown = info.frame_snapshot().is_some_and(|f| {
            let delivered: u64 = f.subscribers.iter().map(|s| s.delivered).sum();
            delivered == 8 && f.subscribers.iter().all(|s| s.ack_age.is_some())
        });
        if shown || std::time::Instant::now() > deadline {
            break info;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(info.liveness.is_alive(), "{:?}", info.liveness);
    assert_eq!(info.socket_path, p.socket_path());
    match info.socket {
        SocketState::Listening { connections } => assert_eq!(connections, 2),
        ref other => panic!("socket {other:?}"),
    }
    assert!(info.packets.is_none());
    let f = info.frame_snapshot().expect("frame snapshot");
    assert_eq!(f.shm_name, frame_shm_name(&env.key));
    assert_eq!(f.producer_pid, std::process::id() as u64);
    assert_eq!((f.format, f.width, f.height), (Format::Nv12, 64, 48));
    assert_eq!(f.ring_size, 8);
    assert_eq!(f.policy, Policy::DropOldest);
    assert_eq!(f.memory_kind, Some(MemoryKind::HostMemfd));
    assert_eq!(f.global_seq, 6);
    assert!(!f.shutdown);
    assert!(f.warnings.is_empty(), "{:?}", f.warnings);
    assert_eq!(info.subscriber_count(), Some(2));
    let by_name = |n: &str| f.subscribers.iter().find(|s| s.name == n).unwrap();
    let (a, b) = (by_name("alpha"), by_name("beta"));
    assert_eq!(a.bit, alpha.bit());
    assert_eq!(b.bit, beta.bit());
    for s in [a, b] {
        assert_eq!(s.state, SubscriberState::Active);
        assert_eq!(s.pid, std::process::id() as u64);
        assert!(s.pid_alive && s.reads_frames);
        assert!(s.ack_age.unwrap() < Duration::from_secs(30));
        assert_eq!(s.drops(), 0);
    }
    assert_eq!((a.lag, a.last_seen_seq, a.delivered), (0, 6, 6));
    assert_eq!((b.lag, b.last_seen_seq, b.delivered), (4, 2, 2));

    // Same answer in the full listing; the publisher is undisturbed: same subscribers, and
    // both still read.
    let all = inspect::list(&env.dir, None).unwrap();
    assert!(all
        .iter()
        .any(|i| i.key == env.key && i.liveness.is_alive()));
    assert_eq!(p.subscriber_count(), 2);
    publish(&p);
    assert_eq!(
        alpha.next_frame(Some(Duration::from_secs(5))).unwrap().seq,
        7
    );
    assert_eq!(
        beta.next_frame(Some(Duration::from_secs(5))).unwrap().seq,
        3
    );

    // Rates: sample while a thread publishes at ~200 fps.
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                publish(&p);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let sampled =
            inspect::sample(&env.dir, Some(&[key(&env)]), Duration::from_millis(300)).unwrap();
        stop.store(true, Ordering::Relaxed);
        let fps = sampled[0].rates.frames_per_sec.expect("fps");
        assert!(fps > 10.0 && fps < 1000.0, "fps {fps}");
        assert!(sampled[0].rates.packets_per_sec.is_none());
    });

    // A subscriber that leaves frees its slot.
    drop(beta);
    let t = std::time::Instant::now();
    loop {
        let info = inspect::inspect(&env.dir, &key(&env)).unwrap();
        if info.frame_snapshot().unwrap().subscribers.len() == 1 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "slot not freed");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn packet_ring_snapshot_and_keyframe_age() {
    let env = TestEnv::new("insp-pkt");
    let cfg = PacketRingConfig {
        codec_id: CODEC_ID_H264,
        extradata: vec![0, 0, 0, 1, 0x67, 0x42],
        ring_slots: 8,
        data_size: 4096,
    };
    let mut w = PacketRingWriter::create(&key(&env), cfg, 0o660).unwrap();
    let ms = 1_000_000i64;
    for seq in 1..=6u64 {
        let flags = if seq == 2 { PACKET_FLAG_KEY } else { 0 };
        w.publish(
            &[seq as u8; 50],
            seq as i64 * 40 * ms,
            seq as i64 * 40 * ms,
            flags,
        )
        .unwrap();
    }
    let info = inspect::inspect(&env.dir, &key(&env)).unwrap();
    assert_eq!(info.socket, SocketState::Missing);
    assert!(info.frames.is_none());
    assert!(info.liveness.is_alive(), "{:?}", info.liveness);
    let p = info.packet_snapshot().expect("packet snapshot");
    assert_eq!(p.shm_name, packet_shm_name(&env.key));
    assert_eq!(p.codec_name(), "h264");
    assert_eq!((p.ring_slots, p.data_size, p.extradata_size), (8, 4096, 6));
    assert_eq!(
        (p.global_seq, p.last_keyframe_seq, p.write_offset),
        (6, 2, 300)
    );
    assert_eq!(p.producer_pid, std::process::id() as u64);
    assert_eq!(p.keyframe_age_packets(), Some(4));
    assert_eq!(p.keyframe_age(), Some(Duration::from_millis(160)));
    assert!(p.keyframe_in_ring && !p.shutdown);
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);

    // More packets than slots without a keyframe: the keyframe has left the ring.
    for seq in 7..=20u64 {
        w.publish(&[1; 10], seq as i64 * 40 * ms, seq as i64 * 40 * ms, 0)
            .unwrap();
    }
    let p = inspect::read_packet_shm(&packet_shm_name(&env.key)).unwrap();
    assert_eq!(p.global_seq, 20);
    assert!(!p.keyframe_in_ring);
    assert_eq!(p.keyframe_age(), None);
    assert_eq!(p.keyframe_age_packets(), Some(18));

    // Rates from two snapshots.
    let a = inspect::inspect(&env.dir, &key(&env)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    for seq in 21..=30u64 {
        w.publish(&[1; 100], seq as i64, seq as i64, 0).unwrap();
    }
    let b = inspect::inspect(&env.dir, &key(&env)).unwrap();
    let r = inspect::Rates::between(&a, &b);
    assert!(r.packets_per_sec.unwrap() > 0.0);
    let bps = r.packet_bytes_per_sec.unwrap();
    let pps = r.packets_per_sec.unwrap();
    assert!((bps / pps - 100.0).abs() < 1e-6, "{bps} / {pps}");
    assert!(r.frames_per_sec.is_none());
}

#[test]
fn sigkilled_publisher_is_dead_and_cleaned() {
    let env = TestEnv::new("insp-kill");
    let mut kids = Children(vec![spawn_publisher(&env)]);
    let child_pid = kids.0[0].id() as u64;
    let k = key(&env);

    let info = inspect::inspect(&env.dir, &k).unwrap();
    assert!(info.liveness.is_alive(), "{:?}", info.liveness);
    assert_eq!(info.pid(), Some(child_pid));
    assert_eq!(info.packet_snapshot().unwrap().producer_pid, child_pid);
    assert!(
        inspect::clean(&env.dir, Some(std::slice::from_ref(&k)), false)
            .unwrap()
            .removed
            .is_empty()
    );

    kids.0[0].kill().unwrap(); // SIGKILL: nothing is unlinked
    kids.0[0].wait().unwrap();

    let info = inspect::inspect(&env.dir, &k).unwrap();
    assert!(info.liveness.is_dead(), "{:?}", info.liveness);
    assert_eq!(info.socket, SocketState::NotListening);
    assert_eq!(info.frame_snapshot().unwrap().producer_pid, child_pid);
    assert!(info.liveness.reason().contains(&child_pid.to_string()));

    let frame_shm = frame_shm_name(&env.key);
    let packet_shm = packet_shm_name(&env.key);
    let dry = inspect::clean(&env.dir, Some(std::slice::from_ref(&k)), true).unwrap();
    assert!(dry.dry_run);
    let mut what: Vec<_> = dry.removed.iter().map(|r| r.what).collect();
    what.sort();
    assert_eq!(what, ["frame SHM", "packet SHM", "socket"]);
    assert!(shm_exists(&frame_shm) && shm_exists(&packet_shm));
    assert!(info.socket_path.exists(), "dry run removed the socket");

    let done = inspect::clean(&env.dir, Some(std::slice::from_ref(&k)), false).unwrap();
    assert_eq!(done.removed.len(), 3, "{done:?}");
    assert!(done.failed.is_empty(), "{done:?}");
    assert!(!shm_exists(&frame_shm) && !shm_exists(&packet_shm));
    assert!(!info.socket_path.exists());
    assert!(inspect::inspect(&env.dir, &k).unwrap_err().code() == ErrorCode::NotFound);
    let again = inspect::clean(&env.dir, Some(&[k]), false).unwrap();
    assert!(again.removed.is_empty() && again.kept.is_empty());

    // The key is free again: a new publisher starts without recovery.
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    drop(p);
}

#[test]
fn clean_keeps_live_publishers_and_removes_stale_sockets() {
    let live = TestEnv::new("insp-keep");
    let stale = TestEnv::new("insp-stale");
    let p = Publisher::create(&live.key, live.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Rgba, 16, 16))
        .unwrap();
    let _sub = Subscriber::connect(&live.key, &live.subscriber_options("watcher")).unwrap();
    // A socket file nobody listens on, in the live publisher's directory.
    let stale_path = live.dir.join(format!("{}.sock", stale.key));
    drop(UnixListener::bind(&stale_path).unwrap());
    let keys = [key(&live), Key::new(&stale.key).unwrap()];

    // Another test of this binary that spawns a child at the moment of the bind gives the child
    // a copy of the listening socket until it execs (close-on-exec acts only then): for those
    // milliseconds the socket accepts. It is asked again until nobody listens, within 5 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let infos = loop {
        let infos = inspect::list(&live.dir, Some(&keys)).unwrap();
        let st = infos.iter().find(|i| i.key == stale.key).unwrap();
        if st.socket == SocketState::NotListening || std::time::Instant::now() >= deadline {
            break infos;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(infos.len(), 2);
    let st = infos.iter().find(|i| i.key == stale.key).unwrap();
    assert_eq!(st.socket, SocketState::NotListening);
    assert!(st.liveness.is_dead(), "{:?}", st.liveness);

    for dry_run in [true, false] {
        let r = inspect::clean(&live.dir, Some(&keys), dry_run).unwrap();
        assert_eq!(r.removed.len(), 1, "{r:?}");
        assert_eq!(r.removed[0].key, stale.key);
        assert_eq!(r.removed[0].what, "socket");
        assert_eq!(r.kept.len(), 1);
        assert_eq!(r.kept[0].0, live.key);
        assert_eq!(stale_path.exists(), dry_run);
    }
    assert!(p.socket_path().exists());
    assert!(shm_exists(&frame_shm_name(&live.key)));
    assert_eq!(p.subscriber_count(), 1);
    publish(&p);
}

/// Write `bytes` as `/dev/shm/<name>` (mode 0600).
fn raw_shm(name: &str, bytes: &[u8]) {
    let (_fd, map) = cuframes_core::shm::create(name, bytes.len(), 0o600).unwrap();
    // SAFETY: `map` is a writable mapping of our own test object, `bytes.len()` long, that
    // `bytes` does not overlap.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), map.as_ptr(), bytes.len()) };
}

#[test]
fn corrupt_objects_are_reported_not_panicked_on() {
    let env = TestEnv::new("insp-bad");
    let frame = frame_shm_name(&env.key);
    let packets = packet_shm_name(&env.key);
    let k = key(&env);

    let check = |name: &str, bytes: Vec<u8>, packet: bool, want: &str| {
        let _ = cuframes_core::shm::unlink(name);
        raw_shm(name, &bytes);
        let e = if packet {
            inspect::read_packet_shm(name).unwrap_err()
        } else {
            inspect::read_frame_shm(name).unwrap_err()
        };
        assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
        assert!(e.message().contains(name), "{e}");
        assert!(e.message().contains(want), "{e} lacks {want:?}");
        cuframes_core::shm::unlink(name).unwrap();
    };
    let mut hdr = vec![0u8; 7424];
    check(&frame, vec![0xAB; 7424], false, "magic");
    check(&frame, vec![0; 100], false, "100 bytes");
    hdr[0..4].copy_from_slice(&0xCC7C_1DCCu32.to_le_bytes());
    check(&frame, hdr.clone(), false, "v1");
    hdr[0..4].copy_from_slice(&0xCC7C_1DCEu32.to_le_bytes());
    hdr[4..8].copy_from_slice(&4u32.to_le_bytes());
    hdr[0x20..0x28].copy_from_slice(&99u64.to_le_bytes());
    check(&frame, hdr.clone(), false, "ring_size 99");
    hdr[0x20..0x28].copy_from_slice(&4u64.to_le_bytes());
    hdr[0x30..0x38].copy_from_slice(&7u64.to_le_bytes());
    check(&frame, hdr.clone(), false, "policy 7");
    hdr[0x30..0x38].copy_from_slice(&0u64.to_le_bytes());
    hdr[0x40..0x44].copy_from_slice(&77u32.to_le_bytes());
    check(&frame, hdr.clone(), false, "format 77");

    let mut ph = vec![0u8; 0x1040 + 64 * 4 + 256];
    ph[0..4].copy_from_slice(&0xCC7C_1DCDu32.to_le_bytes());
    ph[4..8].copy_from_slice(&4u32.to_le_bytes());
    check(&packets, ph.clone(), true, "ring_slots 0");
    ph[8..12].copy_from_slice(&4u32.to_le_bytes());
    ph[12..16].copy_from_slice(&1_000_000u32.to_le_bytes());
    check(&packets, ph.clone(), true, "need");
    ph[12..16].copy_from_slice(&256u32.to_le_bytes());
    ph[0x14..0x18].copy_from_slice(&5000u32.to_le_bytes());
    check(&packets, ph.clone(), true, "extradata");
    check(&packets, vec![0; 0x100], true, "magic");

    // A well-formed frame header with odd subscriber slots: warnings, not errors.
    hdr[0x40..0x44].copy_from_slice(&1u32.to_le_bytes()); // nv12
    hdr[0x44..0x48].copy_from_slice(&8u32.to_le_bytes());
    hdr[0x48..0x4C].copy_from_slice(&8u32.to_le_bytes());
    hdr[0x38..0x40].copy_from_slice(&32u64.to_le_bytes());
    hdr[0x18..0x20].copy_from_slice(&u64::MAX.to_le_bytes()); // pid nobody can have
    hdr[0xC8..0xD0].copy_from_slice(&(1u64 << 5 | 1 << 40).to_le_bytes());
    let sub3 = 0x0D00 + 3 * 128;
    hdr[sub3..sub3 + 8].copy_from_slice(&9u64.to_le_bytes());
    raw_shm(&frame, &hdr);
    let f = inspect::read_frame_shm(&frame).unwrap();
    assert!(f.subscribers.is_empty());
    let w = f.warnings.join("\n");
    assert!(w.contains("outside 1..=31"), "{w}");
    assert!(w.contains("bit 5"), "{w}");
    assert!(w.contains("unknown state 9"), "{w}");
    // Its producer is dead: the key is dead, and clean removes it.
    let info = inspect::inspect(&env.dir, &k).unwrap();
    assert!(info.liveness.is_dead(), "{:?}", info.liveness);
    let r = inspect::clean(&env.dir, Some(std::slice::from_ref(&k)), false).unwrap();
    assert_eq!(r.removed.len(), 1, "{r:?}");
    assert!(!shm_exists(&frame));

    // A fresh object without a valid header may be one being created: kept.
    raw_shm(&frame, &[0u8; 7424]);
    let info = inspect::inspect(&env.dir, &k).unwrap();
    assert!(
        matches!(info.liveness, Liveness::Unknown(_)),
        "{:?}",
        info.liveness
    );
    let r = inspect::clean(&env.dir, Some(&[k]), false).unwrap();
    assert!(r.removed.is_empty() && r.kept.len() == 1, "{r:?}");
    assert!(shm_exists(&frame));
}

/// Every /dev/shm object of `key` (its names and generation names, anyone's), removed when
/// the test ends, passed or failed (root may unlink other uids' objects).
struct KeyObjects(String);

impl KeyObjects {
    fn names(&self) -> Vec<String> {
        let key = Key::new(&self.0).unwrap();
        std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| key.is_frame_shm(n) || key.is_packet_shm(n))
            .collect()
    }
}

impl Drop for KeyObjects {
    fn drop(&mut self) {
        for n in self.names() {
            let _ = cuframes_core::shm::unlink(&n);
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A frame SHM with a valid header naming `pid` as its producer, owned by `uid`.
fn planted_ring(name: &str, pid: u64, uid: u32) {
    use std::os::fd::AsFd;
    let (fd, map) = cuframes_core::shm::create(name, 7424, 0o644).unwrap();
    let shm = cuframes_core::testing::FrameShm::new(map).unwrap();
    shm.initialise(
        &cuframes_core::format::FrameGeometry::new(Format::Nv12, 64, 32)
            .unwrap()
            .to_meta(),
        2,
        Policy::DropOldest,
        MemoryKind::HostMemfd,
        u32::try_from(pid).unwrap(),
    );
    nix::unistd::fchown(fd.as_fd(), Some(nix::unistd::Uid::from_raw(uid)), None).unwrap();
}

/// A pid that was just ours and is gone (reaped).
fn gone_pid() -> u64 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    u64::from(pid)
}

/// A ring owned by a uid outside the group, with a valid header and producer pid 1, is
/// refused by publishers, and the inspector (behind `ls`, `stat` and the exporter's
/// `cuframes_publisher_alive`) must not call it an alive publisher either. Its owner does not
/// match the uid its producer runs as: "foreign", not alive, and `clean` keeps it.
#[test]
fn a_ring_whose_owner_is_not_its_producers_is_foreign() {
    if !is_root() {
        eprintln!("SKIPPED (needs root to create an object owned by another uid)");
        return;
    }
    let env = TestEnv::new("insp-fake");
    let _objects = KeyObjects(env.key.clone());
    let frame = frame_shm_name(&env.key);
    planted_ring(&frame, 1, 65534);
    let info = inspect::inspect(&env.dir, &key(&env)).unwrap();
    assert!(
        matches!(info.liveness, Liveness::Foreign(_)),
        "{:?}",
        info.liveness
    );
    assert!(!info.liveness.is_alive());
    assert_eq!(info.liveness.name(), "foreign");
    assert_eq!(info.owner_mismatch.len(), 1, "{:?}", info.owner_mismatch);
    let m = &info.owner_mismatch[0];
    assert!(
        m.contains("uid 65534") && m.contains("pid 1 runs as uid 0"),
        "{m}"
    );
    let report = inspect::clean(&env.dir, Some(&[key(&env)]), false).unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(shm_exists(&frame));

    // The same against a socket: a listening socket of uid 0 and a ring of uid 65534.
    let _listener = UnixListener::bind(env.dir.join(format!("{}.sock", env.key))).unwrap();
    let info = inspect::inspect(&env.dir, &key(&env)).unwrap();
    assert_eq!(info.liveness.name(), "foreign", "{:?}", info.liveness);
    assert!(
        info.owner_mismatch
            .iter()
            .any(|m| m.contains("its socket to uid 0")),
        "{:?}",
        info.owner_mismatch
    );
}

/// While another uid holds `cuframes-KEY`, a publisher's ring lives under its generation name
/// `cuframes-KEY.<16 hex>`. The inspector must not take that for no key at all (a '.' is not
/// in a key) nor show the squatter's object as KEY's ring: it shows the publisher's ring,
/// alive, with the squatter's object among the key's others.
#[test]
fn a_generation_named_ring_is_its_keys() {
    if !is_root() {
        eprintln!("SKIPPED (needs root to create an object owned by another uid)");
        return;
    }
    let env = TestEnv::new("insp-gen");
    let _objects = KeyObjects(env.key.clone());
    let frame = frame_shm_name(&env.key);
    planted_ring(&frame, 1, 65534);
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 80, 32))
        .unwrap();
    publish(&p);
    let ring = p.frame_shm_name().unwrap();
    assert_ne!(ring, frame);
    let info = inspect::inspect(&env.dir, &key(&env)).unwrap();
    assert!(info.liveness.is_alive(), "{:?}", info.liveness);
    assert!(info.owner_mismatch.is_empty(), "{:?}", info.owner_mismatch);
    let f = info.frames.as_ref().unwrap();
    assert_eq!(f.name, ring);
    assert_eq!(info.frame_snapshot().unwrap().global_seq, 1);
    let others: Vec<&str> = info.others.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(others, [frame.as_str()]);
    // Listed once, under its key.
    let all = inspect::list(&env.dir, None).unwrap();
    assert_eq!(all.iter().filter(|i| i.key == env.key).count(), 1);
    assert!(!all.iter().any(|i| i.key.contains('.')));
    // A live publisher's objects are never cleaned, nor the squatter's.
    let report = inspect::clean(&env.dir, Some(&[key(&env)]), false).unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(shm_exists(&ring) && shm_exists(&frame));
}

/// `clean` removes a dead publisher's rings under generation names (kept there while
/// another uid held the key's name, or staged when it died mid-replacement), but never
/// another uid's object, at the key's name or at a generation name.
#[test]
fn clean_removes_dead_generation_rings_of_ours_only() {
    if !is_root() {
        eprintln!("SKIPPED (needs root to create an object owned by another uid)");
        return;
    }
    let env = TestEnv::new("insp-gclean");
    let _objects = KeyObjects(env.key.clone());
    let frame = frame_shm_name(&env.key);
    let (ours, staged, theirs) = (
        cuframes_core::paths::generation_name(&frame, 0x1111),
        cuframes_core::paths::generation_name(&frame, 0x2222),
        cuframes_core::paths::generation_name(&frame, 0x3333),
    );
    planted_ring(&frame, 1, 65534);
    let dead = gone_pid();
    planted_ring(&ours, dead, 0);
    planted_ring(&staged, dead, 0);
    planted_ring(&theirs, dead, 65534);
    // The other uid's object is the newest: only who owns what may decide what is cleaned.
    let newer = std::time::SystemTime::now() + Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(shm_path(&theirs))
        .unwrap()
        .set_modified(newer)
        .unwrap();
    let info = inspect::inspect(&env.dir, &key(&env)).unwrap();
    assert!(info.liveness.is_dead(), "{:?}", info.liveness);
    let report = inspect::clean(&env.dir, Some(&[key(&env)]), false).unwrap();
    let mut removed: Vec<&str> = report.removed.iter().map(|r| r.path.as_str()).collect();
    removed.sort_unstable();
    let mut want = vec![shm_path(&ours), shm_path(&staged)];
    want.sort_unstable();
    assert_eq!(removed, want, "{report:?}");
    assert!(!shm_exists(&ours) && !shm_exists(&staged));
    assert!(shm_exists(&frame) && shm_exists(&theirs));
}
