//! Raw and hostile protocol peers, plain v4 subscribers, peers of another user, PING and
//! readiness: each peer gets its answer and the others are served.

use cuframes_test_support as common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{child, frame_shm_name, shm_path, wait_until, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::tlv::{self, HelloReq, Message};
use cuframes_core::wire::{
    Format, Policy, PROTOCOL_VERSION, SUBSCRIBE_ACK_PAGE, SUBSCRIBE_WANTS_FRAMES,
};
use cuframes_core::ErrorCode;

use super::roles::publish;

/// A raw protocol client for hostile-peer tests.
fn raw_client(env: &TestEnv) -> UnixStream {
    let s = UnixStream::connect(env.dir.join(format!("{}.sock", env.key))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn raw_recv(s: &mut UnixStream) -> Option<Message> {
    let mut h = [0u8; 8];
    s.read_exact(&mut h).ok()?;
    let (t, len) = tlv::decode_header(&h).unwrap();
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).ok()?;
    Some(tlv::decode_payload(t, &p).unwrap())
}

fn hello(version: u32) -> Vec<u8> {
    tlv::encode(&Message::HelloReq(HelloReq {
        proto_version: version,
        consumer_name: "raw".into(),
        cuda_device: 0,
        mode: 0,
        subscribe_flags: 0,
    }))
    .unwrap()
}

fn assert_still_serving(env: &TestEnv, p: &Publisher) {
    let mut s = Subscriber::connect(&env.key, &env.subscriber_options("good")).unwrap();
    let seq = publish(p, 7).unwrap();
    assert_eq!(s.next_frame(Some(Duration::from_secs(2))).unwrap().seq, seq);
}

#[test]
fn hostile_peers_get_errors_and_others_are_served() {
    let env = TestEnv::new("bad");
    let mut opts = env.publisher_options();
    opts.handshake_timeout = Duration::from_millis(300);
    opts.allow_legacy_subscribers = true; // the raw clients below are plain v4 peers
    let p = Publisher::create(&env.key, opts).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();

    // Garbage bytes: an ERROR(PROTOCOL) and the connection closes.
    let mut c = raw_client(&env);
    c.write_all(&[0xFF; 40]).unwrap();
    match raw_recv(&mut c) {
        Some(Message::Error { code, .. }) => assert_eq!(code, ErrorCode::Protocol as i32),
        other => panic!("expected ERROR, got {other:?}"),
    }
    assert!(raw_recv(&mut c).is_none());
    assert_still_serving(&env, &p);

    // Wrong protocol version: HELLO_RESP(PROTOCOL), then closed.
    let mut c = raw_client(&env);
    c.write_all(&hello(3)).unwrap();
    match raw_recv(&mut c) {
        Some(Message::HelloResp(r)) => assert_eq!(r.result, ErrorCode::Protocol as i32),
        other => panic!("expected HELLO_RESP, got {other:?}"),
    }
    assert!(raw_recv(&mut c).is_none());

    // A header declaring a huge payload is refused from the header alone.
    let mut c = raw_client(&env);
    c.write_all(&[1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0x7F]).unwrap();
    assert!(matches!(raw_recv(&mut c), Some(Message::Error { .. })));

    // SUBSCRIBE before HELLO.
    let mut c = raw_client(&env);
    c.write_all(&tlv::encode(&Message::SubscribeReq { proto_version: 4 }).unwrap())
        .unwrap();
    assert!(matches!(raw_recv(&mut c), Some(Message::Error { .. })));

    // Truncated message then close: dropped quietly.
    let mut c = raw_client(&env);
    c.write_all(&hello(4)[..11]).unwrap();
    drop(c);

    // Half a message and a stall: dropped at the handshake deadline.
    let mut c = raw_client(&env);
    c.write_all(&hello(4)[..5]).unwrap();
    let t = Instant::now();
    match raw_recv(&mut c) {
        Some(Message::Error { code, .. }) => assert_eq!(code, ErrorCode::Timeout as i32),
        other => panic!("expected ERROR(TIMEOUT), got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(3));
    assert_still_serving(&env, &p);
    wait_until(
        "the good subscriber to leave",
        Duration::from_secs(2),
        || p.subscriber_count() == 0,
    );
}

/// Trust boundary: a plain v4 frame subscriber ACKs in the shared header, which only an
/// allow_legacy_subscribers publisher keeps writable; by default it is refused with PERMISSION
/// and the frame SHM is not writable by the group.
#[test]
fn plain_v4_frame_subscribers_are_refused_unless_allowed() {
    use std::os::unix::fs::PermissionsExt;
    for allow in [false, true] {
        let env = TestEnv::new("legacy");
        let opts = cuframes_core::publisher::PublisherOptions {
            allow_legacy_subscribers: allow,
            ..env.publisher_options()
        };
        let p = Publisher::create(&env.key, opts).unwrap();
        p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
            .unwrap();
        let mode = std::fs::metadata(shm_path(&frame_shm_name(&env.key)))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, if allow { 0o660 } else { 0o640 });
        let mut c = raw_client(&env);
        c.write_all(&hello(PROTOCOL_VERSION)).unwrap();
        match raw_recv(&mut c) {
            Some(Message::HelloResp(r)) if !allow => {
                assert_eq!(r.result, ErrorCode::Permission as i32)
            }
            Some(Message::HelloResp(r)) => {
                assert_eq!(r.result, 0);
                assert_ne!(
                    r.publisher_flags & cuframes_core::wire::PUBLISHER_ACK_PAGES,
                    0
                );
            }
            other => panic!("{other:?}"),
        }
        // Our own subscribers use ACK pages and are served either way.
        assert_still_serving(&env, &p);
    }
}

/// The library's `plain_v4_acks` (benchmark baseline, interop): refused by default like any
/// plain v4 peer; where allowed it ACKs through the header, and STRICT_WAIT still waits for it
/// (a publish of slot 0 again needs its ACK of frame 1).
#[test]
fn the_library_can_subscribe_as_a_plain_v4_peer_where_allowed() {
    for allow in [false, true] {
        let env = TestEnv::new("plainv4");
        let opts = cuframes_core::publisher::PublisherOptions {
            allow_legacy_subscribers: allow,
            ..env.publisher_options()
        };
        let p = Publisher::create(&env.key, opts).unwrap();
        let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 32);
        cfg.policy = Policy::StrictWait;
        cfg.ring_size = 2;
        cfg.ack_timeout = Duration::from_secs(5);
        p.enable_frames(cfg).unwrap();
        let sopts = cuframes_core::subscriber::SubscriberOptions {
            plain_v4_acks: true,
            ..env.subscriber_options("plain")
        };
        let s = cuframes_core::subscriber::Subscriber::connect(&env.key, &sopts);
        let mut s = match s {
            Err(e) if !allow => {
                assert_eq!(e.code(), ErrorCode::Permission, "{e}");
                continue;
            }
            other => other.unwrap(),
        };
        assert!(allow, "a plain v4 subscriber was admitted by default");
        for seq in 1..=6u64 {
            let (got, planes) = common::publish_pattern(&p, seq, None).unwrap();
            assert_eq!(got, seq);
            let f = s.next_frame(Some(Duration::from_secs(5))).unwrap();
            assert_eq!(f.seq, seq, "STRICT_WAIT delivers every frame");
            assert!(common::verify_frame(&f, &planes));
            f.release();
        }
        assert_eq!(p.subscribers()[0].lag, 0);
    }
}

/// Found by the model check: an error on an admitted plain v4 subscriber (here a message
/// out of place) freed its bit at once, while the peer could still ACK with it in the
/// header; the next subscriber got that bit. Now the bit is given up on like a kick and stays
/// taken until the peer's socket closes.
#[test]
fn an_erring_legacy_subscriber_keeps_its_bit_until_it_closes() {
    let env = TestEnv::new("errq");
    let opts = cuframes_core::publisher::PublisherOptions {
        allow_legacy_subscribers: true, // the raw client below is a plain v4 peer
        ..env.publisher_options()
    };
    let p = Publisher::create(&env.key, opts).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let mut c = raw_client(&env);
    c.write_all(&hello(PROTOCOL_VERSION)).unwrap();
    assert!(matches!(raw_recv(&mut c), Some(Message::HelloResp(r)) if r.result == 0));
    c.write_all(&tlv::encode(&Message::SubscribeReq { proto_version: 4 }).unwrap())
        .unwrap();
    let bit = match raw_recv(&mut c) {
        Some(Message::SubscribeResp(r)) if r.result == 0 => r.assigned_bit as usize,
        other => panic!("{other:?}"),
    };
    assert!(matches!(raw_recv(&mut c), Some(Message::VmmFds(_))));
    // A second HELLO after SUBSCRIBE is a protocol error.
    c.write_all(&hello(PROTOCOL_VERSION)).unwrap();
    assert!(matches!(raw_recv(&mut c), Some(Message::Error { .. })));
    let s = Subscriber::connect(&env.key, &env.subscriber_options("next")).unwrap();
    assert_ne!(
        s.bit(),
        bit,
        "the erring peer's bit was handed on while its socket is open"
    );
    assert_eq!(p.subscriber_count(), 2);
    drop(c);
    wait_until(
        "the erring peer's bit to be freed",
        Duration::from_secs(2),
        || p.subscriber_count() == 1,
    );
}

#[test]
fn a_subscriber_that_never_acks_is_declared_dead() {
    let env = TestEnv::new("noack");
    let opts = cuframes_core::publisher::PublisherOptions {
        allow_legacy_subscribers: true, // the raw client below is a plain v4 peer
        ..env.publisher_options()
    };
    let p = Publisher::create(&env.key, opts).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 32);
    cfg.policy = Policy::StrictWait;
    cfg.ring_size = 2;
    cfg.ack_timeout = Duration::from_millis(200);
    p.enable_frames(cfg).unwrap();
    let mut c = raw_client(&env);
    c.write_all(&hello(PROTOCOL_VERSION)).unwrap();
    assert!(matches!(raw_recv(&mut c), Some(Message::HelloResp(r)) if r.result == 0));
    c.write_all(&tlv::encode(&Message::SubscribeReq { proto_version: 4 }).unwrap())
        .unwrap();
    assert!(matches!(raw_recv(&mut c), Some(Message::SubscribeResp(r)) if r.result == 0));
    // VMM_FDS arrives with descriptors; raw_recv reads the bytes and the kernel closes the fds.
    assert!(matches!(raw_recv(&mut c), Some(Message::VmmFds(_))));
    assert_eq!(p.subscriber_count(), 1);
    let t = Instant::now();
    for seq in 1..=3 {
        publish(&p, seq).unwrap();
    }
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_millis(1500),
        "{waited:?}"
    );
    match raw_recv(&mut c) {
        Some(Message::Error { code, .. }) => assert_eq!(code, ErrorCode::Timeout as i32),
        other => panic!("expected ERROR(TIMEOUT), got {other:?}"),
    }
    // The given-up subscriber is owed nothing: publishing is immediate again ...
    let t = Instant::now();
    publish(&p, 4).unwrap();
    publish(&p, 5).unwrap();
    assert!(t.elapsed() < Duration::from_millis(100));
    // ... but its bit stays quarantined while its socket is open (it might still ACK with it).
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        p.subscriber_count(),
        1,
        "a given-up bit is not free before its socket closes"
    );
    drop(c);
    wait_until("removal", Duration::from_secs(2), || {
        p.subscriber_count() == 0
    });
}

#[test]
fn peers_outside_the_allowed_uid_are_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || Command::new("setpriv").arg("--version").output().is_err()
    {
        eprintln!("SKIPPED (needs root and setpriv to run a peer as another user)");
        return;
    }
    let env = TestEnv::new("uid");
    let mut opts = env.publisher_options();
    opts.file_mode = 0o666; // the socket lets anyone connect: SO_PEERCRED must do the refusing
    opts.allowed_uid = Some(0);
    let p = Publisher::create(&env.key, opts).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&env.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = child::in_env(
        &mut child::command_as(
            &["--reuid=65534", "--regid=65534", "--clear-groups"],
            "refused_subscriber",
        ),
        &env,
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {stdout} {stderr}");
    assert!(
        stdout.contains(&format!("RESULT code={}", -(ErrorCode::Permission as i32))),
        "{stdout} {stderr}"
    );
    assert!(stderr.contains("does not accept this user"), "{stderr}");
    // Root (this process) is still served.
    assert_still_serving(&env, &p);
}

#[test]
fn ping_is_answered_in_every_phase_and_keeps_the_subscription() {
    let env = TestEnv::new("ping");
    let mut opts = env.publisher_options();
    opts.handshake_timeout = Duration::from_millis(150);
    opts.allow_legacy_subscribers = true; // the raw client below is a plain v4 peer
    let p = Publisher::create(&env.key, opts).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let mut c = raw_client(&env);
    let ping = |c: &mut UnixStream, token: u64| {
        c.write_all(&tlv::encode(&Message::Ping { token }).unwrap())
            .unwrap();
        assert_eq!(raw_recv(c), Some(Message::Pong { token }));
    };
    ping(&mut c, 1);
    c.write_all(&hello(PROTOCOL_VERSION)).unwrap();
    assert!(matches!(raw_recv(&mut c), Some(Message::HelloResp(r)) if r.result == 0));
    ping(&mut c, 2);
    c.write_all(&tlv::encode(&Message::SubscribeReq { proto_version: 4 }).unwrap())
        .unwrap();
    assert!(matches!(raw_recv(&mut c), Some(Message::SubscribeResp(r)) if r.result == 0));
    assert!(matches!(raw_recv(&mut c), Some(Message::VmmFds(_))));
    ping(&mut c, 3);
    // Past the handshake deadline, an active subscriber that pinged is still subscribed.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(p.subscriber_count(), 1);
    c.write_all(&tlv::encode(&Message::Unsubscribe).unwrap())
        .unwrap();
    assert!(
        raw_recv(&mut c).is_none(),
        "UNSUBSCRIBE closes the connection"
    );
    wait_until("the subscriber to leave", Duration::from_secs(2), || {
        p.subscriber_count() == 0
    });
}

/// A frame subscriber counts as ready only once it has mapped the ring's slots (it marks its
/// ACK page): `wait_subscribers` waited for admitted subscribers, and FFmpeg readers still
/// importing their CUDA slots (~0.1 s each, one process after another) then held a
/// STRICT_WAIT publisher's first frames up for ~0.1 s per reader. Here a peer that subscribes
/// with an ACK page and never maps anything stays "not ready"; a real subscriber is ready
/// when `connect` returns.
#[test]
fn a_subscriber_is_ready_only_once_it_has_mapped_the_ring() {
    let env = TestEnv::new("ready");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let mut raw = raw_client(&env);
    raw.write_all(
        &tlv::encode(&Message::HelloReq(HelloReq {
            proto_version: PROTOCOL_VERSION,
            consumer_name: "maps-nothing".into(),
            cuda_device: 0,
            mode: 0,
            subscribe_flags: SUBSCRIBE_WANTS_FRAMES | SUBSCRIBE_ACK_PAGE,
        }))
        .unwrap(),
    )
    .unwrap();
    assert!(matches!(raw_recv(&mut raw), Some(Message::HelloResp(r)) if r.result == 0));
    raw.write_all(
        &tlv::encode(&Message::SubscribeReq {
            proto_version: PROTOCOL_VERSION,
        })
        .unwrap(),
    )
    .unwrap();
    assert!(matches!(raw_recv(&mut raw), Some(Message::SubscribeResp(r)) if r.result == 0));
    // VMM_FDS and ACK_PAGE: read, their descriptors discarded (nothing is mapped).
    assert!(matches!(raw_recv(&mut raw), Some(Message::VmmFds(_))));
    assert!(matches!(raw_recv(&mut raw), Some(Message::AckPage(_))));
    wait_until("the raw peer's admission", Duration::from_secs(5), || {
        p.subscriber_count() == 1
    });
    assert_eq!(
        p.ready_subscriber_count(),
        0,
        "admitted, but nothing mapped"
    );

    let _s = Subscriber::connect(&env.key, &env.subscriber_options("maps")).unwrap();
    assert_eq!(p.subscriber_count(), 2);
    assert_eq!(
        p.ready_subscriber_count(),
        1,
        "a subscriber whose connect returned has mapped the ring"
    );
}
