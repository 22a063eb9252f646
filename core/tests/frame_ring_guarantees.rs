//! The frame ring's promises on the paths most likely to break them:
//! STRICT_WAIT never rewrites a slot a live subscriber holds, a publish only ever touches the
//! slot its seq names, and a reader faced with an impossible `global_seq` fails clearly.
//! Host memory, one process (subscribers on their own sockets, as in production).

use cuframes_test_support as common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{frame_shm_name, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::{Frame, Subscriber, SubscriberOptions};
use cuframes_core::wire::{Format, Policy, SubscriberMode};
use cuframes_core::ErrorCode;

fn publish(p: &Publisher, seq: u64) -> u64 {
    common::publish_pattern(p, seq, None).unwrap().0
}

/// The bytes of a frame as they are in memory now (a copy through the frame's address, so
/// that a zero-copy frame's slot is read as it is, without forming a reference into it).
fn snapshot(f: &Frame) -> Vec<u8> {
    let mut out = vec![0u8; f.layout.frame_size];
    // SAFETY: a host frame's address is valid for frame_size bytes while the frame lives; the
    // copy goes through raw pointers, so a concurrent rewrite only changes what is copied.
    unsafe { std::ptr::copy_nonoverlapping(f.address() as *const u8, out.as_mut_ptr(), out.len()) };
    out
}

/// The dense frame of `seq` laid out at the ring's pitches, as `snapshot` sees it.
fn expected(p: &Publisher, seq: u64) -> Vec<u8> {
    let layout = p.frame_layout().unwrap().clone();
    let mut out = vec![0u8; layout.frame_size];
    for (plane, dense) in layout.planes().iter().zip(common::planes_for(&layout, seq)) {
        for row in 0..plane.rows {
            let at = plane.offset + row * plane.pitch;
            out[at..at + plane.row_bytes]
                .copy_from_slice(&dense[row * plane.row_bytes..(row + 1) * plane.row_bytes]);
        }
    }
    out
}

fn strict_ring(p: &Publisher, ring_size: usize, ack_timeout: Duration) {
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 32);
    cfg.policy = Policy::StrictWait;
    cfg.ring_size = ring_size;
    cfg.ack_timeout = ack_timeout;
    p.enable_frames(cfg).unwrap();
}

fn options(env: &TestEnv, name: &str, mode: SubscriberMode) -> SubscriberOptions {
    SubscriberOptions {
        mode,
        ..env.subscriber_options(name)
    }
}

/// A subscriber declared dead never ACKs for the next owner of its bit. A (COPY) stalls and
/// is given up on, and its bit goes to B (ZERO_COPY); A, which has not read its socket yet,
/// reads a frame and ACKs it with the old bit: were its bit freed at once, the publisher
/// would take that as B's ACK and rewrite the frame B holds.
#[test]
fn a_dead_subscriber_never_acks_for_the_next_owner_of_its_bit() {
    let env = TestEnv::new("deadack");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    // Long enough that publish 6 below still waits for B when this thread wakes late from its
    // 100 ms sleep on a loaded machine (a shorter one gives B up and overwrites its frame).
    let ack_timeout = Duration::from_secs(1);
    strict_ring(&p, 2, ack_timeout);
    let mut a = Subscriber::connect(&env.key, &options(&env, "A", SubscriberMode::Copy)).unwrap();

    publish(&p, 1);
    publish(&p, 2);
    let t = Instant::now();
    publish(&p, 3); // slot 1 still holds frame 1, which A never ACKs: A is given up on
    assert!(t.elapsed() >= ack_timeout - Duration::from_millis(20));
    std::thread::sleep(Duration::from_millis(100)); // the server thread tells A

    let mut b =
        Subscriber::connect(&env.key, &options(&env, "B", SubscriberMode::ZeroCopy)).unwrap();
    assert!(b.is_zero_copy());
    if a.bit() == b.bit() {
        // The unfixed library hands the bit over at once; the overwrite below follows.
        eprintln!("bit {} went to B while A could still ACK with it", a.bit());
    }
    publish(&p, 4); // slot 0: nobody is owed frame 2

    // A looks at the ring again. It must not deliver (or ACK) anything now.
    match a.next_frame(Some(Duration::from_millis(500))) {
        Err(e) => assert_eq!(e.code(), ErrorCode::Disconnected, "{e}"),
        Ok(f) => {
            // Only the unfixed library gets here; B's check below then fails.
            eprintln!("the given-up subscriber was handed frame {}", f.seq);
        }
    }

    let held = b.next_frame(Some(Duration::from_secs(2))).unwrap();
    assert_eq!(held.seq, 4);
    assert!(snapshot(&held) == expected(&p, 4), "frame 4 as published");
    publish(&p, 5); // slot 1: B joined after frame 3, nobody is owed it

    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            publish(&p, 6); // slot 0 holds frame 4: must wait for B's release
            Instant::now()
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            snapshot(&held) == expected(&p, 4),
            "the zero-copy frame B held was overwritten while held"
        );
        // Whenever the writer got to run: publish 6 returns only after this release (timed
        // from here, not from the writer's start, which a loaded machine may delay).
        let released_at = Instant::now();
        held.release();
        let published_at = writer.join().unwrap();
        assert!(
            published_at >= released_at,
            "publish 6 returned {:?} before B released frame 4: it must wait for the release",
            released_at.duration_since(published_at)
        );
    });
    assert_ne!(
        a.bit(),
        b.bit(),
        "a given-up bit is quarantined until its socket closes"
    );
    // B was not given up on: it reads on without a gap.
    for seq in [5, 6] {
        let f = b.next_frame(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(f.seq, seq);
        assert!(
            snapshot(&f) == expected(&p, seq),
            "frame {seq} as published"
        );
    }
}

/// `publish` derives the slot from the seq and never trusts the caller's
/// `AcquiredSlot::index` (the C API's `CSlot.index`): an index of 16..37 would write seq and
/// pts into the subscriber-slot area while the real slot stays INVALID, and the frame would
/// never be delivered.
#[test]
fn publish_derives_the_slot_from_the_seq_not_from_the_caller() {
    let env = TestEnv::new("slotidx");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 32);
    cfg.ring_size = 4;
    p.enable_frames(cfg).unwrap();
    let mut sub = Subscriber::connect(&env.key, &env.subscriber_options("idx")).unwrap();
    let before: Vec<_> = p.subscribers();
    let frame_size = p.frame_layout().unwrap().frame_size;

    let mut slot = p.acquire().unwrap();
    assert_eq!(slot.seq, 1);
    // SAFETY: a host slot's address is writable for frame_size bytes until it is published.
    unsafe { std::ptr::write_bytes(slot.address as *mut u8, 0xAB, frame_size) };
    slot.index = 20; // past the ring: slot_offset(20) lies among the subscriber slots
    assert_eq!(p.publish(slot, Some(7)).unwrap(), 1);

    let f = sub.next_frame(Some(Duration::from_secs(2))).unwrap();
    assert_eq!((f.seq, f.pts_ns), (1, 7));
    assert!(f.bytes().unwrap().iter().all(|&b| b == 0xAB));
    let after = p.subscribers();
    assert_eq!(
        (before[0].bit, &before[0].name),
        (after[0].bit, &after[0].name),
        "the subscriber's slot was changed by a publish"
    );
}

/// A reader that sees `global_seq` move backwards (a crashed or hostile writer) must not spin
/// at 100 % CPU with no frame and no error until its timeout, nor stall silently on one far
/// ahead of every slot. Both are impossible for an honest writer (R18, R24): a clear PROTOCOL
/// error, at once.
#[test]
fn global_seq_moving_backwards_or_far_ahead_fails_clearly() {
    const GLOBAL_SEQ_OFFSET: usize = 0xC0;
    let env = TestEnv::new("gseq");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 32);
    cfg.ring_size = 4;
    p.enable_frames(cfg).unwrap();
    let (_fd, header) = cuframes_core::shm::open(&frame_shm_name(&env.key), 0, true).unwrap();

    for (case, forged) in [("backwards", 1u64), ("far ahead", 1u64 << 40)] {
        let mut sub = Subscriber::connect(&env.key, &env.subscriber_options(case)).unwrap();
        let first = p.frame_seq() + 1;
        for seq in first..first + 3 {
            publish(&p, seq);
            assert_eq!(
                sub.next_frame(Some(Duration::from_secs(2))).unwrap().seq,
                seq
            );
        }
        header
            .atomic_u64(GLOBAL_SEQ_OFFSET)
            .store(forged, Ordering::SeqCst);
        let t = Instant::now();
        let err = sub
            .next_frame(Some(Duration::from_secs(2)))
            .err()
            .unwrap_or_else(|| panic!("{case}: a frame was delivered from a corrupt ring"));
        assert_eq!(err.code(), ErrorCode::Protocol, "{case}: {err}");
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "{case}: took {:?} to notice",
            t.elapsed()
        );
        // Put the header back for the next case, as the writer's own record has it.
        header
            .atomic_u64(GLOBAL_SEQ_OFFSET)
            .store(p.frame_seq(), Ordering::SeqCst);
    }
}
