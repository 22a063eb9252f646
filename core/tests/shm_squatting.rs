//! Names in /dev/shm that another user creates first. /dev/shm is sticky:
//! a name someone else made stays theirs, and our rename over it fails. A publisher is never
//! stopped by that: its ring keeps its own unguessable generation name
//! (`cuframes-KEY.<16 hex>`), which HELLO_RESP announces (R19), and subscribers follow it
//! there, opening it only if the publisher owns it.
//!
//! The squatter is real where it matters: a child running as uid 65534 (group 0, the SHM
//! objects' group here) that polls /dev/shm and tries to create every name it can guess or
//! see while the publisher replaces its ring again and again with subscribers reading. Every
//! object planted here is removed when the test ends, passed or failed (root may unlink
//! other uids' objects).

use cuframes_test_support as common;

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixListener;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{child, frame_shm_name, packet_shm_name, shm_path, Children, TestEnv};
use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::frame::FRAME_SHM_SIZE;
use cuframes_core::wire::{Format, MemoryKind, Policy};
use cuframes_core::ErrorCode;

const SQUATTER_UID: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Every /dev/shm object of `key` (its names and their generation names), removed when the
/// test ends, whoever owns it.
struct KeyObjects(String);

impl KeyObjects {
    fn names(&self) -> Vec<String> {
        let key = cuframes_core::paths::Key::new(&self.0).unwrap();
        std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| key.is_frame_shm(n) || key.is_packet_shm(n))
            .collect()
    }

    /// Generation-named objects of the key (ours or anyone's).
    fn generations(&self) -> Vec<String> {
        self.names()
            .into_iter()
            .filter(|n| cuframes_core::paths::split_generation(n).1.is_some())
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

fn owner(name: &str) -> Option<u32> {
    std::fs::symlink_metadata(shm_path(name))
        .ok()
        .map(|m| m.uid())
}

/// Plant `/dev/shm/<name>` as the squatter would: an object of uid 65534, mode 0644, with a
/// valid frame header that names pid 1 as its producer (as alive as a pid gets).
fn plant(name: &str) {
    let (fd, map) = cuframes_core::shm::create(name, FRAME_SHM_SIZE, 0o644).unwrap();
    let shm = cuframes_core::testing::FrameShm::new(map).unwrap();
    shm.initialise(
        &cuframes_core::format::FrameGeometry::new(Format::Nv12, 64, 32)
            .unwrap()
            .to_meta(),
        2,
        Policy::DropOldest,
        MemoryKind::HostMemfd,
        1,
    );
    nix::unistd::fchown(
        fd.as_fd(),
        Some(nix::unistd::Uid::from_raw(SQUATTER_UID)),
        None,
    )
    .unwrap();
}

fn options(env: &TestEnv) -> PublisherOptions {
    PublisherOptions {
        file_mode: 0o640,
        ..env.publisher_options()
    }
}

fn packets() -> PacketRingConfig {
    PacketRingConfig {
        codec_id: 27,
        extradata: vec![0, 0, 0, 1, 0x67, 1],
        ring_slots: 16,
        data_size: 1 << 16,
    }
}

fn run_child(role: &str, env: &TestEnv) -> (Option<i32>, String, String) {
    let out = child::role_command(role, env)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    match role.as_str() {
        "squatted_first_ring" => squatted_first_ring(&key),
        "squatter" => squatter(&key),
        other => panic!("unknown role {other}"),
    }
}

/// Both of the key's names are held by another uid before the publisher starts (stale
/// recovery meets them, then `enable_frames` and `enable_packets`): the publisher starts
/// anyway rather than failing with ALREADY_EXISTS, its rings keep their generation names with a diagnostic naming the squatter's uid, subscribers
/// follow HELLO_RESP there, a replacement works, and its end leaves nothing behind.
#[test]
fn names_held_by_another_uid_do_not_stop_the_publisher() {
    if !is_root() {
        eprintln!("SKIPPED (needs root to create objects owned by another uid)");
        return;
    }
    let env = TestEnv::new("sq-first");
    let objects = KeyObjects(env.key.clone());
    let (frame, packet) = (frame_shm_name(&env.key), packet_shm_name(&env.key));
    plant(&frame);
    plant(&packet);
    let (code, out, err) = run_child("squatted_first_ring", &env);
    assert_eq!(code, Some(0), "the child failed:\n{out}\n{err}");
    assert!(out.contains("RESULT ok"), "{out}\n{err}");
    // The diagnostic names the holder, for the frame ring and for the packet ring.
    for name in [&frame, &packet] {
        assert!(
            err.contains(&format!("/dev/shm/{name} is held by uid {SQUATTER_UID}")),
            "{err}"
        );
    }
    // The squatter's objects are untouched, ours are gone.
    assert_eq!(owner(&frame), Some(SQUATTER_UID));
    assert_eq!(owner(&packet), Some(SQUATTER_UID));
    assert_eq!(objects.generations(), Vec::<String>::new());
}

fn squatted_first_ring(key: &str) {
    let env_dir = std::env::var("CUFRAMES_RUNTIME_DIR").unwrap();
    let opts = PublisherOptions {
        file_mode: 0o640,
        runtime_dir: Some(env_dir.clone().into()),
        ..Default::default()
    };
    let p = Publisher::create(key, opts).expect("create with the key's names squatted");
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 80, 32))
        .expect("enable_frames with the frame SHM name squatted");
    p.enable_packets(packets())
        .expect("enable_packets with the packet SHM name squatted");
    let frame_name = p.frame_shm_name().unwrap();
    let packet_name = p.packet_shm_name().unwrap();
    let k = cuframes_core::paths::Key::new(key).unwrap();
    assert!(k.is_frame_shm(&frame_name) && frame_name != k.frame_shm_name());
    assert!(k.is_packet_shm(&packet_name) && packet_name != k.packet_shm_name());
    // SAFETY: geteuid has no preconditions.
    assert_eq!(owner(&frame_name), Some(unsafe { libc::geteuid() }));

    let sopts = SubscriberOptions {
        runtime_dir: Some(env_dir.into()),
        name: "reader".into(),
        want_packets: true,
        ..Default::default()
    };
    let mut s = Subscriber::connect(key, &sopts).expect("a subscriber follows HELLO_RESP");
    let (seq, planes) = common::publish_pattern(&p, 1, None).unwrap();
    let f = s.next_frame(Some(Duration::from_secs(5))).unwrap();
    assert_eq!((f.seq, common::verify_frame(&f, &planes)), (seq, true));
    drop(f);
    p.publish_packet(&[0, 0, 0, 1, 0x65, 9, 9], 0, 0, 1)
        .unwrap();
    let mut buf = Vec::new();
    let info = s
        .next_packet(Some(Duration::from_secs(5)), &mut buf)
        .unwrap();
    assert_eq!((info.seq, buf.len()), (1, 7));

    // A replacement: a new generation name; the old one is gone once replaced.
    p.replace_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .expect("a replacement with the key's name squatted");
    let second = p.frame_shm_name().unwrap();
    assert!(k.is_frame_shm(&second) && second != frame_name && second != k.frame_shm_name());
    assert!(owner(&frame_name).is_none(), "{frame_name} was left behind");
    let (seq, planes) = common::publish_pattern(&p, 2, None).unwrap();
    let f = loop {
        let f = s.next_frame(Some(Duration::from_secs(5))).unwrap();
        if f.layout.width == 64 {
            break f;
        }
    };
    assert_eq!((f.seq, common::verify_frame(&f, &planes)), (seq, true));
    drop(f);
    drop(s);
    drop(p);
    assert!(owner(&second).is_none() && owner(&packet_name).is_none());
    println!("RESULT ok=1");
}

/// The subscriber opens the frame SHM that HELLO_RESP names only if the publisher (the peer
/// of its socket, SO_PEERCRED) owns it: a name in /dev/shm is anyone's to create first, and
/// another uid's object at the key's name is never mapped nor followed by a SUBSCRIBE.
#[test]
fn a_subscriber_refuses_a_frame_shm_the_publisher_does_not_own() {
    if !is_root() {
        eprintln!("SKIPPED (needs root to create objects owned by another uid)");
        return;
    }
    let env = TestEnv::new("sq-owner");
    let _objects = KeyObjects(env.key.clone());
    plant(&frame_shm_name(&env.key));
    // A publisher of uid 0 (this process) that announces the planted object.
    let path = env.dir.join(format!("{}.sock", env.key));
    let listener = UnixListener::bind(&path).unwrap();
    let key = env.key.clone();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut h = [0u8; 8];
        s.read_exact(&mut h).unwrap();
        let (_, len) = cuframes_core::tlv::decode_header(&h).unwrap();
        let mut p = vec![0u8; len];
        s.read_exact(&mut p).unwrap();
        let resp = cuframes_core::tlv::HelloResp {
            result: 0,
            proto_version: 4,
            ring_size: 2,
            ownership_mode: 0,
            meta: cuframes_core::format::FrameGeometry::new(Format::Nv12, 64, 32)
                .unwrap()
                .to_meta(),
            shm_path: frame_shm_name(&key),
            publisher_flags: 0,
            packets: None,
        };
        let msg = cuframes_core::tlv::Message::HelloResp(resp);
        s.write_all(&cuframes_core::tlv::encode(&msg).unwrap())
            .unwrap();
        // Whatever comes next (a SUBSCRIBE without the fix) is left unanswered.
        let _ = s.read(&mut h);
    });
    let mut opts = env.subscriber_options("victim");
    opts.connect_timeout = Duration::from_secs(2);
    let e = Subscriber::connect(&env.key, &opts)
        .err()
        .expect("the subscriber must refuse");
    server.join().unwrap();
    assert_eq!(e.code(), ErrorCode::Permission, "{e}");
    assert!(e.message().contains(&format!("uid {SQUATTER_UID}")), "{e}");
}

/// The squatter: uid 65534 polls /dev/shm and tries to take every name of the key it can
/// guess or see, and to unlink, truncate or write what is there (a name it could create
/// is one that had just gone: a replaced generation's, never used again). Until the parent's `stop`
/// file appears; while the `release` file exists it gives the key's names back now and then
/// (and takes them again at once if it can), so that replacements race it for them.
fn squatter(key: &str) {
    use nix::fcntl::OFlag;
    use nix::sys::mman::{shm_open, shm_unlink};
    use nix::sys::stat::Mode;
    let (stop, release) = (
        std::path::PathBuf::from(std::env::var("SQUAT_STOP").unwrap()),
        std::path::PathBuf::from(std::env::var("SQUAT_RELEASE").unwrap()),
    );
    // SAFETY: getuid has no preconditions.
    assert_eq!(
        unsafe { libc::getuid() },
        SQUATTER_UID,
        "not running as the squatter"
    );
    let frame = frame_shm_name(key);
    let packets = packet_shm_name(key);
    let create = |name: &str| {
        shm_open(
            format!("/{name}").as_str(),
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR,
            Mode::from_bits_truncate(0o644),
        )
        .is_ok()
    };
    let (mut won, mut took_stale, mut unlinked, mut writes, mut rounds) = (0u64, 0, 0, 0, 0);
    let mut held = [false, false];
    while !stop.exists() {
        rounds += 1;
        // Give the key's names back now and then, to race the next replacement for them.
        if release.exists() && rounds % 3 == 0 {
            for (i, name) in [&frame, &packets].into_iter().enumerate() {
                if held[i] {
                    let _ = shm_unlink(format!("/{name}").as_str());
                    held[i] = false;
                }
            }
        }
        for (i, name) in [&frame, &packets].into_iter().enumerate() {
            if !held[i] && create(name) {
                held[i] = true;
                won += 1;
            }
        }
        // Every name of the key it sees: take it, remove it, truncate it, write it.
        for seen in std::fs::read_dir("/dev/shm")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&frame) && n != &frame && n != &packets)
            .filter(|n| owner(n) != Some(SQUATTER_UID))
        {
            if create(&seen) {
                // Gone meanwhile (a replaced generation: its name is never used again), so
                // now the squatter's own: nothing of ours.
                took_stale += 1;
                continue;
            }
            let path = format!("/{seen}");
            let _ = shm_unlink(path.as_str()).map(|_| unlinked += 1);
            if let Ok(fd) = shm_open(path.as_str(), OFlag::O_RDWR, Mode::empty()) {
                writes += 1;
                let _ = nix::unistd::ftruncate(fd, 0);
            }
            // Its generation neighbours, in case names were predictable.
            if let (base, Some(g)) = cuframes_core::paths::split_generation(&seen) {
                for d in [1u64, 2, u64::MAX] {
                    let _ = create(&cuframes_core::paths::generation_name(
                        base,
                        g.wrapping_add(d),
                    ));
                }
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    for (i, name) in [&frame, &packets].into_iter().enumerate() {
        if held[i] {
            let _ = shm_unlink(format!("/{name}").as_str());
        }
    }
    println!(
        "RESULT won={won} took_stale={took_stale} unlinked={unlinked} writes={writes} \
         rounds={rounds}"
    );
}

/// The real attack: a squatter of another uid holds the key's names before the
/// publisher starts and races every replacement for them (gives them back and takes them
/// again), seeing and attacking every generation name, while the publisher replaces its
/// host-memory ring 40 times between 1080p NV12 and 80x32 with two subscribers reading.
/// Every replacement succeeds, publishing goes on, both readers get the last generation's
/// frames, the squatter never gets one of our names, and nothing of ours is left.
#[test]
fn a_squatter_racing_every_replacement_never_stops_the_publisher() {
    if !is_root() {
        eprintln!("SKIPPED (needs root to run the squatter as another uid)");
        return;
    }
    let env = TestEnv::new("sq-race");
    let objects = KeyObjects(env.key.clone());
    // The squatter reads the stop and release files and lists /dev/shm: the runtime
    // directory must be searchable by it (TestEnv's is 0755 under /tmp).
    let stop = env.dir.join("stop");
    let release = env.dir.join("release");
    let mut cmd = child::command_as(&child::OTHER_USER_GROUP_0, "squatter");
    child::in_env(&mut cmd, &env)
        .env("SQUAT_STOP", &stop)
        .env("SQUAT_RELEASE", &release)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut children = Children(vec![cmd.spawn().unwrap()]);
    let frame = frame_shm_name(&env.key);
    common::wait_until(
        "the squatter to take the frame SHM name",
        Duration::from_secs(20),
        || owner(&frame) == Some(SQUATTER_UID),
    );

    let p = Arc::new(Publisher::create(&env.key, options(&env)).expect("create"));
    let cfg = |big: bool| {
        let (w, h) = if big { (1920, 1080) } else { (80, 32) };
        let mut c = FrameRingConfig::new(Format::Nv12, w, h);
        c.ring_size = 3;
        c
    };
    p.enable_frames(cfg(false)).expect("enable_frames");
    p.enable_packets(packets()).expect("enable_packets");

    let stop_readers = Arc::new(AtomicBool::new(false));
    let last_width = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let mut readers = Vec::new();
    for i in 0..2 {
        let mut s = Subscriber::connect(&env.key, &env.subscriber_options("reader"))
            .expect("a subscriber follows HELLO_RESP");
        let (stop_readers, last_width) = (stop_readers.clone(), last_width.clone());
        readers.push(std::thread::spawn(move || {
            let mut frames = 0u64;
            let mut wrong = 0u64;
            while !stop_readers.load(Ordering::Relaxed) {
                match s.next_frame(Some(Duration::from_millis(100))) {
                    Ok(f) => {
                        frames += 1;
                        if !common::verify_frame(&f, &common::planes_for(&f.layout, f.seq)) {
                            wrong += 1;
                        }
                        last_width[i].store(u64::from(f.layout.width), Ordering::Relaxed);
                    }
                    Err(e) if e.code() == ErrorCode::Timeout => {}
                    Err(e) => panic!("reader {i}: {e}"),
                }
            }
            (frames, wrong)
        }));
    }

    let mut seq = 0u64;
    let mut at_name = 0;
    let mut names = std::collections::HashSet::new();
    for round in 0..40 {
        if round == 10 {
            std::fs::write(&release, b"").unwrap();
        }
        p.replace_frames(cfg(round % 2 == 0))
            .unwrap_or_else(|e| panic!("replacement {round} failed: {e}"));
        let name = p.frame_shm_name().expect("the publisher has a ring");
        if name == frame {
            at_name += 1;
        }
        names.insert(name);
        for _ in 0..3 {
            // The pattern of the seq the frame gets (each generation counts on).
            let next = p.frame_seq() + 1;
            let (published, _) = common::publish_pattern(&p, next, None)
                .unwrap_or_else(|e| panic!("publish after replacement {round}: {e}"));
            assert_eq!(published, next);
            seq += 1;
        }
        p.publish_packet(&[0, 0, 0, 1, 0x65, round as u8], seq as i64, seq as i64, 1)
            .unwrap_or_else(|e| panic!("packet after replacement {round}: {e}"));
    }
    // The readers reach the last generation (80x32): publish until both have it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let reached = loop {
        if last_width.iter().all(|w| w.load(Ordering::Relaxed) == 80) {
            break true;
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        common::publish_pattern(&p, p.frame_seq() + 1, None).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    };
    stop_readers.store(true, Ordering::Relaxed);
    let got: Vec<(u64, u64)> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    std::fs::write(&stop, b"").unwrap();
    let (code, fields, out) = child::wait_for_result(&mut children.0[0]);
    assert_eq!(code, Some(0), "the squatter failed: {out}");
    let fields = fields.unwrap_or_else(|| panic!("no RESULT from the squatter: {out}"));
    eprintln!(
        "squatter {fields:?}; {} of 40 generations at {frame}, {} names; readers {got:?}",
        at_name,
        names.len()
    );
    assert!(
        reached,
        "the readers did not reach the last generation: {got:?}"
    );
    for (i, (frames, wrong)) in got.iter().enumerate() {
        assert!(*frames > 0, "reader {i} read nothing");
        assert_eq!(*wrong, 0, "reader {i} read wrong bytes");
    }
    // The squatter held the names (it took them before the publisher started), saw our
    // generation names and could neither remove nor write one of them.
    assert!(fields["won"] >= 1, "{fields:?}");
    assert_eq!(
        fields["unlinked"], 0,
        "the squatter removed our ring: {fields:?}"
    );
    assert_eq!(
        fields["writes"], 0,
        "the squatter opened our ring to write: {fields:?}"
    );
    // Every generation kept its own name (or the key's, when it won that).
    assert_eq!(
        names.len(),
        40 - at_name + usize::from(at_name > 0),
        "{names:?}"
    );
    drop(p);
    let ours: Vec<String> = objects
        .names()
        .into_iter()
        .filter(|n| owner(n) != Some(SQUATTER_UID))
        .collect();
    assert!(ours.is_empty(), "left behind: {ours:?}");
}
