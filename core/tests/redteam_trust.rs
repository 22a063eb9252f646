//! Red-team checks of the trust surfaces: what a hostile local user (another uid
//! in the group) can make a publisher, a subscriber or the operator tools trust or remove.
//! Objects of "another uid" are made as root and chowned to 65534 (the sticky /dev/shm
//! keeps a name its creator's; root may unlink it when the test ends).

use cuframes_test_support as common;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use common::{frame_shm_name, shm_path, TestEnv};
use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::Publisher;
use cuframes_core::subscriber::Subscriber;
use cuframes_core::ErrorCode;

const OTHER_UID: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Every /dev/shm object of `key` (names and generation names), removed at the end.
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
}

impl Drop for KeyObjects {
    fn drop(&mut self) {
        for n in self.names() {
            let _ = cuframes_core::shm::unlink(&n);
        }
    }
}

fn packet_publisher(env: &TestEnv) -> Publisher {
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_packets(PacketRingConfig {
        codec_id: 27,
        extradata: vec![0, 0, 0, 1, 0x67, 1],
        ring_slots: 16,
        data_size: 1 << 16,
    })
    .unwrap();
    p
}

/// The packet SHM that HELLO_RESP names is opened only if the publisher (SO_PEERCRED of the
/// subscriber's connection) owns it, as the frame SHM is: a name in /dev/shm is anyone's to
/// create first (the key's packet name between a publisher's exit and a reader's open, a
/// generation name once its ring is gone): a packets-only subscriber never maps an object of
/// another uid at the announced name nor reads its packets.
#[test]
fn a_subscriber_refuses_a_packet_shm_the_publisher_does_not_own() {
    if !is_root() {
        eprintln!("SKIPPED (needs root to make an object owned by another uid)");
        return;
    }
    let env = TestEnv::new("rt-pktown");
    let _objects = KeyObjects(env.key.clone());
    let p = packet_publisher(&env);
    let name = p.packet_shm_name().unwrap();
    // What the subscriber finds at the announced name: an object of another uid (here the
    // publisher's own ring, handed to uid 65534: a valid header, as a squatter's would be).
    let path = shm_path(&name);
    std::os::unix::fs::chown(&path, Some(OTHER_UID), None).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().uid(), OTHER_UID);
    let mut opts = env.subscriber_options("victim");
    opts.want_frames = false;
    opts.want_packets = true;
    opts.connect_timeout = Duration::from_secs(5);
    let got = Subscriber::connect(&env.key, &opts);
    std::os::unix::fs::chown(&path, Some(0), None).unwrap();
    let e = got.err().expect("the subscriber must refuse the object");
    assert_eq!(e.code(), ErrorCode::Permission, "{e}");
    assert!(e.message().contains(&format!("uid {OTHER_UID}")), "{e}");
    assert!(e.message().contains(&name), "{e}");
    // The publisher's own ring is read as before.
    let s = Subscriber::connect(&env.key, &opts).unwrap();
    drop(s);
    drop(p);
}

/// Plant `/dev/shm/<name>` as another user would: an object of uid 65534 with a valid frame
/// header (pid 1 as its producer).
fn plant_frame_shm(name: &str) {
    use cuframes_core::wire::{Format, MemoryKind, Policy};
    use std::os::fd::AsFd;
    let (fd, map) =
        cuframes_core::shm::create(name, cuframes_core::wire::frame::FRAME_SHM_SIZE, 0o644)
            .unwrap();
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
        Some(nix::unistd::Uid::from_raw(OTHER_UID)),
        None,
    )
    .unwrap();
}

/// A ring under its generation name (another user holds the key's name) is replaced while a
/// subscriber is between HELLO_RESP and opening the ring it named; the replacement removes
/// that name and another user creates it again (anyone in the group saw it in HELLO_RESP or
/// in /dev/shm). The ring HELLO_RESP described is gone: the handshake starts over and meets
/// the new ring. Failing for good with PERMISSION ("belongs to uid 65534") instead would let
/// one user end every connect (and every reconnecting reader's wait, which does not retry
/// PERMISSION) that meets a replacement.
#[test]
fn a_replaced_generation_name_taken_by_another_uid_restarts_the_handshake() {
    use cuframes_core::publisher::FrameRingConfig;
    use cuframes_core::wire::Format;
    use std::sync::Arc;
    if !is_root() {
        eprintln!("SKIPPED (needs root to make an object owned by another uid)");
        return;
    }
    let env = TestEnv::new("rt-genrace");
    let _objects = KeyObjects(env.key.clone());
    // The key's frame name is another user's: the ring takes its generation name.
    plant_frame_shm(&frame_shm_name(&env.key));
    let p = Arc::new(Publisher::create(&env.key, env.publisher_options()).unwrap());
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 80, 32))
        .unwrap();
    let first = p.frame_shm_name().unwrap();
    assert!(cuframes_core::paths::split_generation(&first).1.is_some());
    let (hook_p, hook_first) = (Arc::clone(&p), first.clone());
    cuframes_core::testing::hooks::set_before_frame_shm_open(&env.key, move || {
        hook_p
            .replace_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
            .unwrap();
        let gone = std::time::Instant::now() + Duration::from_secs(10);
        while std::path::Path::new(&shm_path(&hook_first)).exists() {
            assert!(std::time::Instant::now() < gone, "{hook_first} stayed");
            std::thread::sleep(Duration::from_millis(5));
        }
        plant_frame_shm(&hook_first);
    });
    let mut opts = env.subscriber_options("victim");
    opts.connect_timeout = Duration::from_secs(10);
    let got = Subscriber::connect(&env.key, &opts);
    let planted = std::fs::metadata(shm_path(&first)).map(|m| m.uid());
    let mut s = got.expect("the subscriber follows the replacement");
    assert_eq!(planted.unwrap(), OTHER_UID, "the hook ran");
    let (seq, planes) = common::publish_pattern(&p, 1, None).unwrap();
    let f = s.next_frame(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(f.layout.width, 64, "the new ring");
    assert_eq!((f.seq, common::verify_frame(&f, &planes)), (seq, true));
    drop(f);
    drop(s);
}

/// The same race at the key's own name, in a reconnecting reader's wait: the publisher it
/// waited for came back and announced `cuframes-K`, and between HELLO_RESP and the open
/// another user's object is at that name (the publisher went again, or its ring moved; here
/// the publisher's object is moved aside and put back 200 ms later). The wait goes on and
/// meets the publisher's ring: the foreign object's PERMISSION is retried, not the end of the
/// reader's stream.
#[test]
fn a_reconnecting_reader_waits_out_a_foreign_object_at_the_key_name() {
    use cuframes_core::publisher::FrameRingConfig;
    use cuframes_core::wire::Format;
    if !is_root() {
        eprintln!("SKIPPED (needs root to make an object owned by another uid)");
        return;
    }
    let env = TestEnv::new("rt-keyrace");
    let _objects = KeyObjects(env.key.clone());
    let ring = FrameRingConfig::new(Format::Nv12, 80, 32);
    let first = Publisher::create(&env.key, env.publisher_options()).unwrap();
    first.enable_frames(ring.clone()).unwrap();
    let mut opts = env.subscriber_options("waiter");
    opts.reconnect = Some(Duration::from_secs(10));
    let mut s = Subscriber::connect(&env.key, &opts).unwrap();
    let (seq, planes) = common::publish_pattern(&first, 1, None).unwrap();
    let f = s.next_frame(Some(Duration::from_secs(5))).unwrap();
    assert_eq!((f.seq, common::verify_frame(&f, &planes)), (seq, true));
    drop(f);
    drop(first);

    let second = Publisher::create(&env.key, env.publisher_options()).unwrap();
    second.enable_frames(ring).unwrap();
    let name = second.frame_shm_name().unwrap();
    assert_eq!(name, frame_shm_name(&env.key));
    let aside = format!("{name}.0000000000000000");
    let (hook_name, hook_aside) = (name.clone(), aside.clone());
    let restorer = std::sync::Arc::new(std::sync::Mutex::new(None));
    let hook_restorer = std::sync::Arc::clone(&restorer);
    cuframes_core::testing::hooks::set_before_frame_shm_open(&env.key, move || {
        let path = |n: &str| shm_path(n);
        std::fs::rename(path(&hook_name), path(&hook_aside)).unwrap();
        plant_frame_shm(&hook_name);
        *hook_restorer.lock().unwrap() = Some(std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            cuframes_core::shm::unlink(&hook_name).unwrap();
            std::fs::rename(path(&hook_aside), path(&hook_name)).unwrap();
        }));
    });
    // A frame counts for a reader that subscribed before it: publish until one arrives.
    let until = std::time::Instant::now() + Duration::from_secs(8);
    let mut published = std::collections::HashMap::new();
    let f = loop {
        let (seq, planes) =
            common::publish_pattern(&second, published.len() as u64 + 1, None).unwrap();
        published.insert(seq, planes);
        match s.next_frame(Some(Duration::from_millis(50))) {
            Ok(f) => break f,
            Err(e) if e.code() == ErrorCode::Timeout && std::time::Instant::now() < until => {}
            Err(e) => panic!("the reader waits the foreign object out: {e}"),
        }
    };
    assert!(
        common::verify_frame(&f, &published[&f.seq]),
        "seq {}",
        f.seq
    );
    assert_eq!(s.restarts(), 1);
    drop(f);
    let restorer = restorer.lock().unwrap().take();
    restorer.expect("the hook ran").join().unwrap();
    assert!(!std::path::Path::new(&shm_path(&aside)).exists());
}
