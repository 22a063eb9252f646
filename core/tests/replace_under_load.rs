//! Ring replacement (a camera changing size) while the publisher is busy: a STRICT_WAIT
//! acquire waiting for a late ACK, a monitoring thread reading the subscriber table,
//! subscribers leaving, and a slot acquired before the replacement. Each of these deadlocks or
//! crashes under a wrong lock order; the lock hierarchy in `core/src/publisher/mod.rs` is what
//! they check.
//!
//! A deadlock cannot be joined: every scenario runs its threads under a watchdog and fails
//! when they have not all finished in time (the stuck threads are left behind; the test
//! process ends with the harness). The slot scenario runs in a child process, because
//! without the fix it dies of SIGSEGV.

use cuframes_test_support as common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{child, count_fds, frame_shm_name, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::{Format, Policy};
use cuframes_core::ErrorCode;

/// Run `f` on its own thread; panic naming `what` if it has not returned within `limit`.
fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(_) => panic!("{what} did not return within {limit:?} (deadlock)"),
    }
}

fn strict(width: u32, ring_size: usize, ack_timeout: Duration) -> FrameRingConfig {
    let mut cfg = FrameRingConfig::new(Format::Nv12, width, 48);
    cfg.policy = Policy::StrictWait;
    cfg.ring_size = ring_size;
    cfg.ack_timeout = ack_timeout;
    cfg
}

/// A STRICT_WAIT publish waits (holding the writer's state) for a subscriber that never
/// ACKs; a replacement starts meanwhile. At the ACK timeout the publish gives the subscriber
/// up, and the replacement then goes ahead: both return, well within 10 s.
#[test]
fn a_replacement_during_an_ack_wait_does_not_deadlock() {
    let env = TestEnv::new("rpl-ack");
    let p = Arc::new(Publisher::create(&env.key, env.publisher_options()).unwrap());
    p.enable_frames(strict(64, 2, Duration::from_millis(500)))
        .unwrap();
    // Connected, never reads: it ACKs nothing.
    let _silent = Subscriber::connect(&env.key, &env.subscriber_options("silent")).unwrap();
    common::publish_pattern(&p, 1, None).unwrap();
    common::publish_pattern(&p, 2, None).unwrap();
    let publisher = Arc::clone(&p);
    let started = Instant::now();
    let waiter = std::thread::spawn(move || {
        // Frame 3 needs frame 1's slot: waits for the silent subscriber's ACK.
        common::publish_pattern(&publisher, 3, None).map(|(seq, _)| seq)
    });
    std::thread::sleep(Duration::from_millis(100));
    let replacer = Arc::clone(&p);
    let replaced = within(
        "replace_frames during an ACK wait",
        Duration::from_secs(10),
        move || replacer.replace_frames(strict(80, 2, Duration::from_millis(500))),
    );
    replaced.unwrap();
    let published = within("the waiting publish", Duration::from_secs(10), move || {
        waiter.join().unwrap()
    });
    // The publish went to the old ring (it had the slot before the replacement) or found it
    // replaced; either way it returned, and the replacement did not wait past the timeout
    // by more than the ACK wait itself.
    match published {
        Ok(seq) => assert_eq!(seq, 3),
        Err(e) => assert_eq!(e.code(), ErrorCode::Disconnected, "{e}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(p.frame_layout().unwrap().width, 80);
}

/// Replacements in a loop against a thread that reads the subscriber table (what
/// `cuframes stat` and the FFmpeg filter's verbose log do) and against subscribers that come
/// and go (the server thread frees their bits): every thread keeps making progress.
#[test]
fn replacements_against_table_readers_and_leaving_subscribers_keep_going() {
    let env = TestEnv::new("rpl-abba");
    let p = Arc::new(Publisher::create(&env.key, env.publisher_options()).unwrap());
    let cfg = |w| {
        let mut c = FrameRingConfig::new(Format::Nv12, w, 16);
        c.ring_size = 2;
        c
    };
    p.enable_frames(cfg(32)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let progress: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let mut threads = Vec::new();
    {
        let (p, stop, progress) = (p.clone(), stop.clone(), progress.clone());
        threads.push(std::thread::spawn(move || {
            let mut w = 32;
            while !stop.load(Ordering::Relaxed) {
                w = if w == 32 { 48 } else { 32 };
                p.replace_frames(cfg(w)).unwrap();
                progress[0].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    {
        let (p, stop, progress) = (p.clone(), stop.clone(), progress.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = p.subscribers();
                let _ = p.ready_subscriber_count();
                let _ = p.frame_seq();
                let _ = p.frame_layout();
                progress[1].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    {
        let (stop, progress) = (stop.clone(), progress.clone());
        let (key, opts) = (env.key.clone(), env.subscriber_options("churn"));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // Refusals (a replacement in the middle of the handshake) are part of the
                // game; only progress counts.
                if let Ok(s) = Subscriber::connect(&key, &opts) {
                    drop(s);
                }
                progress[2].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut last = [0u64; 3];
    let mut stalled_since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        let now: [u64; 3] = std::array::from_fn(|i| progress[i].load(Ordering::Relaxed));
        if now.iter().zip(&last).all(|(a, b)| a > b) {
            stalled_since = Instant::now();
        }
        assert!(
            stalled_since.elapsed() < Duration::from_secs(3),
            "no progress for 3 s (replacements, table reads, subscribers): {now:?} (deadlock)"
        );
        last = now;
    }
    stop.store(true, Ordering::Relaxed);
    within("the threads' end", Duration::from_secs(10), move || {
        for t in threads {
            t.join().unwrap();
        }
    });
    assert!(last[0] > 10, "only {} replacements", last[0]);
}

/// A slot acquired before a replacement stays mapped until it is published or abandoned:
/// writing it is safe, and publishing it fails (the ring it belongs to is gone) instead of
/// publishing into the new ring. Runs in a child: without this guarantee it dies of SIGSEGV.
#[test]
fn a_slot_acquired_before_a_replacement_stays_writable() {
    let env = TestEnv::new("rpl-slot");
    let (code, fields, out) = child::run_role(child::role_command("slot_outlives_ring", &env));
    assert_eq!(code, Some(0), "the child died: {out}");
    let fields = fields.unwrap_or_else(|| panic!("no RESULT line: {out}"));
    assert_eq!(fields["same_thread"], 1, "{out}");
    assert_eq!(fields["other_thread"], 1, "{out}");
    assert_eq!(fields["next_seq"], 1, "{out}");
}

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    match role.as_str() {
        "slot_outlives_ring" => slot_outlives_ring(&key),
        "failed_replacement" => failed_replacement_keeps_the_ring(&key),
        other => panic!("unknown role {other}"),
    }
}

/// Write every byte of an acquired host slot.
fn scribble(address: u64, len: usize) {
    // SAFETY: `address` is a host slot of at least `len` bytes that the publisher keeps
    // mapped until the slot is published or abandoned (what this test checks).
    unsafe { std::ptr::write_bytes(address as *mut u8, 0x5A, len) };
}

fn slot_outlives_ring(key: &str) {
    let p = Publisher::create(key, Default::default()).unwrap();
    let cfg = |w| FrameRingConfig::new(Format::Nv12, w, 1080);
    p.enable_frames(cfg(1920)).unwrap();
    let len = p.frame_layout().unwrap().frame_size;

    // The same thread replaces the ring between acquire and write.
    let slot = p.acquire().unwrap();
    p.replace_frames(cfg(1280)).unwrap();
    // One slot at a time: the new ring's first slot (same seq, 1) is not handed out while
    // the old one is out, so nothing drops the old ring or mistakes one slot for the other.
    let e = p.acquire().expect_err("a slot is still out");
    assert_eq!(e.code(), ErrorCode::InvalidArg, "{e}");
    assert!(e.message().contains("still out"), "{e}");
    scribble(slot.address, len);
    let e = p
        .publish(slot, None)
        .expect_err("a slot of a replaced ring must not publish");
    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
    let same_thread = 1;

    // A control thread replaces it while the writer holds the slot.
    let slot = p.acquire().unwrap();
    let len = p.frame_layout().unwrap().frame_size;
    std::thread::scope(|s| {
        s.spawn(|| p.replace_frames(cfg(640)).unwrap());
    });
    scribble(slot.address, len);
    assert_eq!(
        p.slot_layout(&slot).unwrap().width,
        1280,
        "the slot has its own ring's geometry"
    );
    p.abandon(slot);
    let other_thread = 1;

    // The new ring starts at frame 1, untouched by the old slots.
    let (next_seq, _) = common::publish_pattern(&p, 1, None).unwrap();
    println!("RESULT same_thread={same_thread} other_thread={other_thread} next_seq={next_seq}");
}

/// Several threads publish through one publisher (every publisher function may be called
/// concurrently): frames become visible in seq order, so a reader never sees the ring's
/// global_seq move backwards (PROTOCOL) and gets increasing seqs, each with its own bytes.
#[test]
fn threads_publishing_at_once_keep_frames_in_seq_order() {
    let env = TestEnv::new("mt-pub");
    let p = Arc::new(Publisher::create(&env.key, env.publisher_options()).unwrap());
    let mut cfg = FrameRingConfig::new(Format::Nv12, 32, 16);
    cfg.ring_size = 4;
    p.enable_frames(cfg).unwrap();
    let mut s = Subscriber::connect(&env.key, &env.subscriber_options("mt")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let publishers: Vec<_> = (0..3)
        .map(|_| {
            let (p, stop) = (p.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut published = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let slot = match p.acquire() {
                        Ok(slot) => slot,
                        // Another thread's slot is out (one at a time): try again.
                        Err(e) if e.code() == ErrorCode::InvalidArg => {
                            std::thread::yield_now();
                            continue;
                        }
                        Err(e) => panic!("acquire: {e}"),
                    };
                    let layout = p.slot_layout(&slot).unwrap();
                    let planes = common::planes_for(&layout, slot.seq);
                    let refs: Vec<&[u8]> = planes.iter().map(Vec::as_slice).collect();
                    let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
                    p.write_host_planes(&slot, &refs, &strides).unwrap();
                    p.publish(slot, None).unwrap();
                    published += 1;
                }
                published
            })
        })
        .collect();
    let (mut frames, mut last, mut wrong) = (0u64, 0u64, 0u64);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        match s.next_frame(Some(Duration::from_millis(200))) {
            Ok(f) => {
                assert!(f.seq > last, "frame {} after {last}", f.seq);
                last = f.seq;
                frames += 1;
                if !common::verify_frame(&f, &common::planes_for(&f.layout, f.seq)) {
                    wrong += 1;
                }
            }
            Err(e) if e.code() == ErrorCode::Timeout => {}
            Err(e) => panic!("after {frames} frames (last {last}): {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let published: u64 = publishers.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(frames > 100, "only {frames} frames read of {published}");
    assert_eq!(wrong, 0, "frames with another frame's bytes");
}

/// STRICT_WAIT across a size change made by a control thread while another thread keeps
/// publishing: a reader that is slower than the source (it drains the old ring first) still
/// gets every frame of the new ring from its first, because the new ring's first lap waits
/// for the readers the replacement sent away before it overwrites anything.
#[test]
fn a_slow_reader_gets_every_frame_of_a_ring_replaced_by_another_thread() {
    let env = TestEnv::new("rpl-gap");
    let p = Arc::new(Publisher::create(&env.key, env.publisher_options()).unwrap());
    let cfg = |w| strict(w, 4, Duration::from_secs(2));
    p.enable_frames(cfg(64)).unwrap();
    let mut s = Subscriber::connect(&env.key, &env.subscriber_options("slow")).unwrap();
    let publisher = {
        let p = p.clone();
        std::thread::spawn(move || {
            let mut published = Vec::new();
            while published.len() < 40 {
                let slot = p.acquire().unwrap();
                let layout = p.slot_layout(&slot).unwrap();
                let planes = common::planes_for(&layout, slot.seq);
                let refs: Vec<&[u8]> = planes.iter().map(Vec::as_slice).collect();
                let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
                p.write_host_planes(&slot, &refs, &strides).unwrap();
                match p.publish(slot, None) {
                    Ok(seq) => published.push((layout.width, seq)),
                    Err(e) if e.code() == ErrorCode::Disconnected => {}
                    Err(e) => panic!("publish: {e}"),
                }
                std::thread::sleep(Duration::from_millis(16));
            }
            published
        })
    };
    let replacer = {
        let p = p.clone();
        std::thread::spawn(move || {
            wait_for(|| p.frame_seq() >= 10);
            p.replace_frames(cfg(80)).unwrap();
        })
    };
    let mut seen = Vec::new();
    loop {
        match s.next_frame(Some(Duration::from_secs(1))) {
            Ok(f) => {
                assert!(common::verify_frame(
                    &f,
                    &common::planes_for(&f.layout, f.seq)
                ));
                seen.push((f.layout.width, f.seq));
                std::thread::sleep(Duration::from_millis(30));
            }
            Err(e) if e.code() == ErrorCode::Timeout => break,
            Err(e) => panic!("after {seen:?}: {e}"),
        }
    }
    replacer.join().unwrap();
    let published = publisher.join().unwrap();
    let of = |list: &[(u32, u64)], w| {
        list.iter()
            .filter(|(x, _)| *x == w)
            .map(|(_, s)| *s)
            .collect::<Vec<_>>()
    };
    assert_eq!(of(&seen, 64), of(&published, 64), "the old ring's frames");
    assert_eq!(
        of(&seen, 80),
        of(&published, 80),
        "the new ring's frames, from its first"
    );
}

fn wait_for(mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(10), "timed out");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A replacement that cannot make its new ring (here: no descriptor left for its slots; the
/// same for memory or a device) fails with a clear error and leaves the old ring in place:
/// publishing goes on, readers go on, a later replacement works, nothing is left in /dev/shm.
#[test]
fn a_failed_replacement_leaves_the_old_ring_in_place() {
    let env = TestEnv::new("rpl-fail");
    let (code, fields, out) = child::run_role(child::role_command("failed_replacement", &env));
    assert_eq!(code, Some(0), "the child failed: {out}");
    let fields = fields.unwrap_or_else(|| panic!("no RESULT line: {out}"));
    assert_eq!(fields["kept"], 1, "{out}");
    assert_eq!(fields["followed"], 1, "{out}");
    let strays: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("{}.", frame_shm_name(&env.key))))
        .collect();
    assert!(
        strays.is_empty(),
        "private SHM names left behind: {strays:?}"
    );
}

fn set_fd_limit(n: u64, hard: u64) {
    let limit = libc::rlimit {
        rlim_cur: n,
        rlim_max: hard,
    };
    // SAFETY: a plain system call on a local struct; this (child) process only.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
}

fn failed_replacement_keeps_the_ring(key: &str) {
    let p = Publisher::create(key, Default::default()).unwrap();
    let cfg = |w| FrameRingConfig::new(Format::Nv12, w, 48);
    p.enable_frames(cfg(64)).unwrap();
    let mut s = Subscriber::connect(key, &Default::default()).unwrap();
    common::publish_pattern(&p, 1, None).unwrap();
    assert_eq!(s.next_frame(Some(Duration::from_secs(5))).unwrap().seq, 1);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a plain system call writing the local struct.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    // Room for one more descriptor: a ring of 4 slots needs 5.
    set_fd_limit(count_fds() as u64 + 1, limit.rlim_max);
    let e = p
        .replace_frames(cfg(96))
        .expect_err("no descriptors for the new ring");
    set_fd_limit(limit.rlim_cur, limit.rlim_max);
    eprintln!("the replacement failed as it should: {e}");
    assert!(e.message().contains("Too many open files"), "{e}");
    // The old ring is still the publisher's, and its reader's.
    assert_eq!(p.frame_layout().unwrap().width, 64);
    let (seq, planes) = common::publish_pattern(&p, 2, None).unwrap();
    let f = s.next_frame(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        (f.seq, f.layout.width, common::verify_frame(&f, &planes)),
        (seq, 64, true)
    );
    drop(f);
    let kept = 1;
    p.replace_frames(cfg(96)).unwrap();
    let (seq, planes) = common::publish_pattern(&p, 1, None).unwrap();
    let f = s.next_frame(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        (f.seq, f.layout.width, common::verify_frame(&f, &planes)),
        (seq, 96, true)
    );
    let followed = 1;
    println!("RESULT kept={kept} followed={followed}");
}

/// A replacement between a subscriber's HELLO_RESP and its SUBSCRIBE makes the publisher
/// refuse the SUBSCRIBE (it was for the ring HELLO_RESP described): `connect` tries again
/// within its timeout and subscribes to the new ring, instead of failing.
#[test]
fn a_connect_that_meets_a_replacement_subscribes_to_the_new_ring() {
    let env = TestEnv::new("rpl-conn");
    let p = Arc::new(Publisher::create(&env.key, env.publisher_options()).unwrap());
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 48))
        .unwrap();
    let replacer = p.clone();
    cuframes_core::testing::hooks::set_before_subscribe(&env.key, move || {
        replacer
            .replace_frames(FrameRingConfig::new(Format::Nv12, 96, 48))
            .unwrap();
    });
    let mut s = Subscriber::connect(&env.key, &env.subscriber_options("conn"))
        .unwrap_or_else(|e| panic!("connect across a replacement: {e}"));
    let (seq, planes) = common::publish_pattern(&p, 1, None).unwrap();
    let f = s.next_frame(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        (f.seq, f.layout.width, common::verify_frame(&f, &planes)),
        (seq, 96, true)
    );
}
