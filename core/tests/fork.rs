//! Objects inherited through `fork`: a child that drops the publisher, subscriber, frame or
//! packet writer it inherited must leave the parent's stream as it is.
//! Python's `os.fork()` and `multiprocessing` children do exactly that when they exit.
//!
//! The children here are forks of the test process itself: each runs one closure (dropping
//! its copies of the parent's objects) and `_exit`s, never returning into the test harness.

use cuframes_test_support as common;

use std::time::{Duration, Instant};

use common::{packet_shm_name, shm_path, TestEnv};
use cuframes_core::packet_ring::{PacketRingConfig, PacketRingReader, PacketRingWriter};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::{Format, Policy, SubscriberMode, CODEC_ID_H264, PACKET_FLAG_KEY};
use cuframes_core::{ErrorCode, Key};

/// How a forked child ended.
#[derive(Debug, PartialEq, Eq)]
enum ChildEnd {
    /// `_exit` with this code: 0 when the closure returned, 101 when it panicked.
    Exited(i32),
    /// Killed by this signal.
    Signalled(i32),
    /// Still running after the limit (it was killed).
    Hung,
}

/// Fork; the child runs `f` and `_exit`s (0, or 101 if `f` panicked). Waits for the child at
/// most 30 s.
fn in_forked_child(f: impl FnOnce()) -> ChildEnd {
    // SAFETY: the child runs only `f` (which drops copies of the parent's objects, the code
    // under test) and `_exit`, never returning into the test harness, whose other threads do
    // not exist in the child; glibc keeps malloc usable in the child of a threaded process.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_ok();
        // SAFETY: ends the child at once, without running the parent's atexit handlers or
        // destructors a second time.
        unsafe { libc::_exit(if ok { 0 } else { 101 }) };
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut status = 0;
        // SAFETY: `status` is a live, writable int; `pid` is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return if libc::WIFEXITED(status) {
                ChildEnd::Exited(libc::WEXITSTATUS(status))
            } else {
                ChildEnd::Signalled(libc::WTERMSIG(status))
            };
        }
        assert!(r == 0, "waitpid: {}", std::io::Error::last_os_error());
        if Instant::now() >= deadline {
            // SAFETY: plain system calls on our own, unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return ChildEnd::Hung;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Drop the value at `p` in a forked child. The parent's copy is untouched (the child has its
/// own memory); the child never uses it again because it exits right after.
///
/// # Safety
/// Call only inside [`in_forked_child`]'s closure, once per value.
unsafe fn drop_childs_copy<T>(p: *mut T) {
    // SAFETY: the caller's contract: in the child, which owns a private copy of `*p`, drops it
    // once and exits without touching it again.
    unsafe { std::ptr::drop_in_place(p) }
}

fn strict_ring() -> FrameRingConfig {
    let mut cfg = FrameRingConfig::new(Format::Rgba, 16, 8);
    cfg.policy = Policy::StrictWait;
    cfg.ack_timeout = Duration::from_secs(5);
    cfg
}

const PACKET: &[u8] = &[0, 0, 0, 1, 0x65, 0x88, 0x84];

/// The parent's stream: a publisher of frames (STRICT_WAIT) and packets, and a subscriber of
/// both.
fn publisher_and_subscriber(env: &TestEnv) -> (Publisher, Subscriber) {
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(strict_ring()).unwrap();
    p.enable_packets(PacketRingConfig {
        codec_id: CODEC_ID_H264,
        extradata: vec![0, 0, 0, 1, 0x67, 0x42],
        ..Default::default()
    })
    .unwrap();
    let mut opts = env.subscriber_options("parent");
    opts.want_packets = true;
    let sub = Subscriber::connect(&env.key, &opts).unwrap();
    (p, sub)
}

/// Publish frame and packet `seq` and read both back through `sub`: the parent's stream goes
/// on, every seq arrives, in order, with its pattern.
fn publish_and_read(p: &Publisher, sub: &mut Subscriber, seq: u64) {
    let (published, planes) = common::publish_pattern(p, seq, None).unwrap();
    assert_eq!(published, seq, "frame seq");
    assert_eq!(
        p.publish_packet(PACKET, seq as i64, seq as i64, PACKET_FLAG_KEY)
            .unwrap(),
        seq,
        "packet seq"
    );
    let f = sub
        .next_frame(Some(Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("the parent's subscriber, reading frame {seq}: {e}"));
    assert_eq!(f.seq, seq, "every frame arrives, in order");
    assert!(common::verify_frame(&f, &planes), "frame {seq}'s pattern");
    let mut out = Vec::new();
    let info = sub
        .next_packet(Some(Duration::from_secs(5)), &mut out)
        .unwrap_or_else(|e| panic!("the parent's subscriber, reading packet {seq}: {e}"));
    assert_eq!((info.seq, out.as_slice()), (seq, PACKET), "packet {seq}");
}

/// Children that drop an inherited Publisher (frames and packets) and Subscriber come and go
/// while the parent publishes and reads: the parent loses nothing (no shutdown flag, no
/// UNSUBSCRIBE on its connection, no packet SHM unlinked) and the children exit cleanly.
#[test]
fn children_dropping_an_inherited_publisher_and_subscriber_leave_the_parent_streaming() {
    let env = TestEnv::new("fork");
    let (p, mut sub) = publisher_and_subscriber(&env);
    let mut seq = 0;
    for _ in 0..3 {
        seq += 1;
        publish_and_read(&p, &mut sub, seq);
    }
    let socket = p.socket_path().to_owned();
    let packet_shm = std::path::PathBuf::from(shm_path(&packet_shm_name(&env.key)));
    for child in 0..3 {
        let (sub_ptr, pub_ptr) = (&mut sub as *mut Subscriber, &p as *const Publisher);
        let end = in_forked_child(|| {
            // SAFETY: in the forked child, once each; the child exits right after.
            unsafe {
                drop_childs_copy(sub_ptr);
                drop_childs_copy(pub_ptr.cast_mut());
            }
        });
        for _ in 0..5 {
            seq += 1;
            publish_and_read(&p, &mut sub, seq);
        }
        // Nothing more is published: the stream is idle, not ended (a shutdown flag or a
        // closed connection would end it with DISCONNECTED once everything was read).
        let idle = sub.next_frame(Some(Duration::from_millis(300))).err();
        assert_eq!(
            idle.as_ref().map(|e| e.code()),
            Some(ErrorCode::Timeout),
            "child {child}: the parent's stream must go on: {idle:?}"
        );
        assert_eq!(
            p.subscriber_count(),
            1,
            "the parent's subscriber is still admitted"
        );
        assert!(socket.exists(), "the publisher's socket is still there");
        assert!(packet_shm.exists(), "the packet SHM is still there");
        assert_eq!(
            end,
            ChildEnd::Exited(0),
            "child {child}: dropping inherited objects must neither panic nor hang"
        );
    }
    assert_eq!(sub.frame_stats().delivered, seq);
}

/// A child that drops a zero-copy frame the parent still holds must not ACK it: under
/// STRICT_WAIT the publisher would then rewrite a slot the parent is reading. (The child
/// drops the frame only: its subscriber stays, as in a child that never drops it.)
#[test]
fn a_child_dropping_an_inherited_frame_does_not_ack_it() {
    let env = TestEnv::new("fork-frame");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(strict_ring()).unwrap();
    let mut opts = env.subscriber_options("parent");
    opts.mode = SubscriberMode::ZeroCopy;
    let mut sub = Subscriber::connect(&env.key, &opts).unwrap();
    common::publish_pattern(&p, 1, None).unwrap();
    let mut held = sub.next_frame(Some(Duration::from_secs(5))).unwrap();
    assert!(held.is_zero_copy());
    let acks = |p: &Publisher| {
        let s = &p.subscribers()[0];
        (s.last_seen_seq, s.last_ack_ns)
    };
    assert_eq!(acks(&p), (0, 0), "frame 1 is held, not ACKed yet");
    let frame_ptr = &mut held as *mut cuframes_core::subscriber::Frame;
    // SAFETY: in the forked child, once; the child exits right after.
    let end = in_forked_child(|| unsafe { drop_childs_copy(frame_ptr) });
    assert_eq!(
        acks(&p),
        (0, 0),
        "the child's drop ACKed frame 1 for the parent, which still holds it"
    );
    assert_eq!(end, ChildEnd::Exited(0));
    assert_eq!(held.seq, 1);
    drop(held);
    assert_eq!(acks(&p).0, 1, "the parent's own release ACKs frame 1");
    assert_eq!(p.subscriber_count(), 1);
}

/// A child that drops an inherited packet ring writer must not shut the ring down nor
/// remove its SHM object.
#[test]
fn a_child_dropping_an_inherited_packet_writer_leaves_the_ring_open() {
    let env = TestEnv::new("fork-pkt");
    let key = Key::new(&env.key).unwrap();
    let mut w = PacketRingWriter::create(
        &key,
        PacketRingConfig {
            codec_id: CODEC_ID_H264,
            ..Default::default()
        },
        0o600,
    )
    .unwrap();
    let mut r = PacketRingReader::open(&key.packet_shm_name()).unwrap();
    let mut out = Vec::new();
    let mut read = |r: &mut PacketRingReader, seq: u64| {
        let info = r
            .next_packet(Some(Duration::from_secs(5)), &mut out)
            .unwrap_or_else(|e| panic!("reading packet {seq}: {e}"));
        assert_eq!(info.seq, seq);
    };
    w.publish(PACKET, 1, 1, PACKET_FLAG_KEY).unwrap();
    read(&mut r, 1);
    let w_ptr = &mut w as *mut PacketRingWriter;
    // SAFETY: in the forked child, once; the child exits right after.
    let end = in_forked_child(|| unsafe { drop_childs_copy(w_ptr) });
    let shm = std::path::Path::new("/dev/shm").join(key.packet_shm_name());
    assert!(shm.exists(), "the child removed the packet SHM");
    for seq in 2..=4 {
        w.publish(PACKET, seq as i64, seq as i64, 0).unwrap();
        read(&mut r, seq);
    }
    assert_eq!(end, ChildEnd::Exited(0));
    assert_eq!(
        r.next_packet(Some(Duration::from_millis(50)), &mut out)
            .unwrap_err()
            .code(),
        ErrorCode::Timeout,
        "the ring is open: no packet yet, not DISCONNECTED"
    );
}

/// A child that *uses* an inherited publisher (not only drops it) is refused with a clear
/// error: publishing into the parent's ring, replacing it or publishing a packet would change
/// the parent's stream. A child that creates a publisher of the same key meets the parent's
/// live one (ALREADY_EXISTS from its socket), not "this process already publishes".
#[test]
fn a_child_cannot_publish_through_an_inherited_publisher() {
    let env = TestEnv::new("fork-use");
    let (p, mut sub) = publisher_and_subscriber(&env);
    publish_and_read(&p, &mut sub, 1);
    let (pub_ptr, options) = (&p as *const Publisher, env.publisher_options());
    let key = env.key.clone();
    let end = in_forked_child(|| {
        // SAFETY: the child's own copy of the parent's publisher, used and then dropped once.
        let inherited = unsafe { &*pub_ptr };
        assert!(!inherited.created_here());
        let refused = |what: &str, e: cuframes_core::Error| {
            assert_eq!(e.code(), ErrorCode::InvalidArg, "{what}: {e}");
            assert!(e.message().contains("forked"), "{what}: {e}");
        };
        refused("acquire", inherited.acquire().unwrap_err());
        refused(
            "publish_host_planes",
            common::publish_pattern(inherited, 2, None).unwrap_err(),
        );
        refused(
            "replace_frames",
            inherited.replace_frames(strict_ring()).unwrap_err(),
        );
        refused(
            "publish_packet",
            inherited
                .publish_packet(PACKET, 2, 2, PACKET_FLAG_KEY)
                .unwrap_err(),
        );
        let e = Publisher::create(&key, options)
            .err()
            .expect("the parent publishes the key");
        assert_eq!(e.code(), ErrorCode::AlreadyExists, "{e}");
        assert!(!e.message().contains("this process"), "{e}");
        // SAFETY: in the forked child, once; the child exits right after.
        unsafe { drop_childs_copy(pub_ptr.cast_mut()) };
    });
    assert_eq!(
        end,
        ChildEnd::Exited(0),
        "the child's checks failed (see stderr)"
    );
    // Nothing of the child's reached the parent's stream: frame 2 and packet 2 are the
    // parent's own.
    publish_and_read(&p, &mut sub, 2);
    assert_eq!(p.frame_seq(), 2);
}

/// A child that reads through an inherited subscriber is refused: its reads would take the
/// parent's messages off the shared connection (SHUTDOWN for a new ring: the child would
/// follow the new ring and the parent's stream would end) and consume its frames.
#[test]
fn a_child_cannot_read_through_an_inherited_subscriber() {
    let env = TestEnv::new("fork-read");
    let (p, mut sub) = publisher_and_subscriber(&env);
    publish_and_read(&p, &mut sub, 1);
    common::publish_pattern(&p, 2, None).unwrap();
    p.replace_frames(strict_ring())
        .unwrap_or_else(|e| panic!("replace: {e}"));
    let sub_ptr = &mut sub as *mut Subscriber;
    let end = in_forked_child(|| {
        // SAFETY: the child's own copy of the parent's subscriber, used and dropped once.
        let inherited = unsafe { &mut *sub_ptr };
        for (what, e) in [
            (
                "next_frame",
                inherited.next_frame(Some(Duration::from_millis(100))).err(),
            ),
            (
                "next_packet",
                inherited
                    .next_packet(Some(Duration::from_millis(100)), &mut Vec::new())
                    .err(),
            ),
        ] {
            let e = e.unwrap_or_else(|| panic!("{what}: read through the parent's subscriber"));
            assert_eq!(e.code(), ErrorCode::InvalidArg, "{what}: {e}");
            assert!(e.message().contains("forked"), "{what}: {e}");
        }
        // SAFETY: in the forked child, once; the child exits right after.
        unsafe { drop_childs_copy(sub_ptr) };
    });
    assert_eq!(
        end,
        ChildEnd::Exited(0),
        "the child's checks failed (see stderr)"
    );
    // The parent still has frame 2 of the old ring, then follows the new ring.
    let f = sub.next_frame(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(f.seq, 2);
    drop(f);
    let (seq, planes) = common::publish_pattern(&p, 1, None).unwrap();
    let f = sub.next_frame(Some(Duration::from_secs(5))).unwrap();
    assert_eq!((f.seq, common::verify_frame(&f, &planes)), (seq, true));
}
