//! The soak of a ring that changes size under load: a STRICT_WAIT publisher replaces its
//! frame ring every 50 ms while a thread publishes as fast as the readers allow, a monitoring
//! thread calls every read-only publisher function, and reader processes join, read, leave,
//! fork children that drop what they inherited, and are SIGKILLed.
//!
//! Checked: no hang (every thread of the publisher keeps making progress), no crash (the
//! publisher's process survives, every reader not killed exits 0), no wrong frame (every byte
//! of every frame a reader gets is the pattern of its seq, in the layout it was published
//! with), and STRICT_WAIT's promise: a reader that is not given up on misses no frame of a
//! ring generation once it has its first.
//!
//! CI runs 60 s (`CUFRAMES_SOAK_SECS`, default 60); `scripts/soak.sh` runs the 10-minute
//! soak, and `CUFRAMES_SOAK_MEMORY=cuda` the same on a CUDA ring (`scripts/gpu-check.sh`).

use cuframes_test_support as common;

use std::collections::HashMap;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{child, Rng, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::{Format, Policy};
use cuframes_core::ErrorCode;

/// Sizes the ring cycles through: consecutive generations always differ, so a reader can
/// tell one generation from the next by its frames' layout.
const SIZES: [(u32, u32); 3] = [(64, 48), (96, 64), (128, 72)];

fn soak_secs() -> u64 {
    std::env::var("CUFRAMES_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

fn on_cuda() -> bool {
    std::env::var("CUFRAMES_SOAK_MEMORY").as_deref() == Ok("cuda")
}

fn ring(generation: usize) -> FrameRingConfig {
    let (w, h) = SIZES[generation % SIZES.len()];
    let mut cfg = FrameRingConfig::new(Format::Nv12, w, h);
    cfg.policy = Policy::StrictWait;
    cfg.ring_size = 4;
    cfg.ack_timeout = Duration::from_millis(500);
    if on_cuda() {
        cfg.memory = MemoryChoice::Cuda { device: 0 };
    }
    cfg
}

/// What the reader children do.
#[derive(Clone, Copy, Debug)]
enum Role {
    /// Read for a while, then leave cleanly.
    Leave,
    /// Read until SIGKILLed by the test.
    Killed,
    /// Read, fork children that drop the inherited subscriber and exit (as Python's
    /// `os.fork()` children and `multiprocessing` workers do), keep reading.
    Forks,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Leave => "leave",
            Role::Killed => "killed",
            Role::Forks => "forks",
        }
    }
}

struct Reader {
    child: Child,
    role: Role,
    kill_at: Option<Instant>,
}

#[test]
fn replacing_the_ring_under_churn_for_a_while() {
    if on_cuda() {
        if let Some(why) = common::no_cuda() {
            eprintln!("SKIPPED (no CUDA device): {why}");
            return;
        }
    }
    let secs = soak_secs();
    let seed = std::env::var("CUFRAMES_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(cuframes_core::testing::unique_suffix);
    eprintln!("soak: {secs} s, seed {seed} (CUFRAMES_SOAK_SEED replays it)");
    let mut rng = Rng::new(seed);
    let env = TestEnv::new("soak");
    let p = Arc::new(Publisher::create(&env.key, env.publisher_options()).unwrap());
    p.enable_frames(ring(0)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Progress of the publishing, replacing and monitoring threads.
    let progress: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    let mut threads = Vec::new();
    {
        let (p, stop, progress) = (p.clone(), stop.clone(), progress.clone());
        threads.push(std::thread::spawn(move || {
            let mut refused = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // The frame's pattern follows its own seq and the layout of the ring its
                // slot belongs to; a replacement between acquire and publish refuses it.
                let slot = p.acquire().unwrap();
                let layout = p.slot_layout(&slot).unwrap();
                let planes = common::planes_for(&layout, slot.seq);
                let refs: Vec<&[u8]> = planes.iter().map(Vec::as_slice).collect();
                let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
                p.write_host_planes(&slot, &refs, &strides).unwrap();
                match p.publish(slot, None) {
                    Ok(_) => {}
                    Err(e) if e.code() == ErrorCode::Disconnected => refused += 1,
                    Err(e) => panic!("publish failed: {e}"),
                }
                progress[0].fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
            refused
        }));
    }
    {
        let (p, stop, progress) = (p.clone(), stop.clone(), progress.clone());
        threads.push(std::thread::spawn(move || {
            let mut generation = 0;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                generation += 1;
                p.replace_frames(ring(generation)).unwrap();
                progress[1].fetch_add(1, Ordering::Relaxed);
            }
            0
        }));
    }
    {
        let (p, stop, progress) = (p.clone(), stop.clone(), progress.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for info in p.subscribers() {
                    assert!(info.bit >= 1 && info.bit < 32, "{info:?}");
                }
                let _ = p.subscriber_count();
                let _ = p.ready_subscriber_count();
                let _ = p.frame_seq();
                let _ = p.frame_layout();
                let _ = p.frame_wait_stats();
                let _ = p.cuda_device();
                let _ = p.packet_stats();
                let _ = (p.key(), p.socket_path());
                progress[2].fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(200));
            }
            0
        }));
    }

    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut readers: Vec<Reader> = Vec::new();
    let mut totals: HashMap<String, u64> = HashMap::new();
    let mut spawned = HashMap::<&str, u64>::new();
    let mut killed = 0u64;
    let mut last = [0u64; 3];
    let mut stalled_since = [Instant::now(); 3];
    let mut failures = Vec::new();
    while Instant::now() < end {
        // Keep about four readers.
        while readers.len() < 4 {
            let role = match rng.below(3) {
                0 => Role::Leave,
                1 => Role::Killed,
                _ => Role::Forks,
            };
            // A CUDA reader takes about a second to start (driver and context).
            let scale = if on_cuda() { 4 } else { 1 };
            let lifetime = Duration::from_millis(rng.range(300, 3000) * scale);
            readers.push(Reader {
                child: spawn_reader(&env, role, lifetime, rng.next()),
                role,
                kill_at: matches!(role, Role::Killed).then(|| Instant::now() + lifetime),
            });
            *spawned.entry(role.name()).or_default() += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        let mut i = 0;
        while i < readers.len() {
            let r = &mut readers[i];
            if r.kill_at.is_some_and(|t| now >= t) {
                let _ = r.child.kill();
                let _ = r.child.wait();
                killed += 1;
                readers.remove(i);
                continue;
            }
            if let Some(status) = r.child.try_wait().unwrap() {
                let mut r = readers.remove(i);
                let (code, fields, out) = child::wait_for_result(&mut r.child);
                let _ = status;
                match (code, fields) {
                    (Some(0), Some(f)) => {
                        for (k, v) in f {
                            *totals.entry(k).or_default() += v;
                        }
                    }
                    (code, _) => failures.push(format!(
                        "reader ({}) ended with {code:?}: {out}",
                        r.role.name()
                    )),
                }
                continue;
            }
            i += 1;
        }
        let counts: [u64; 3] = std::array::from_fn(|i| progress[i].load(Ordering::Relaxed));
        for k in 0..3 {
            if counts[k] > last[k] {
                stalled_since[k] = now;
            }
            let what = ["publishing", "replacing", "monitoring"][k];
            assert!(
                stalled_since[k].elapsed() < Duration::from_secs(10),
                "the {what} thread made no progress for 10 s (hang): {counts:?}, seed {seed}"
            );
        }
        last = counts;
        assert!(failures.is_empty(), "seed {seed}: {failures:#?}");
    }
    stop.store(true, Ordering::Relaxed);
    for mut r in readers {
        let _ = r.child.kill();
        let _ = r.child.wait();
    }
    let refused: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let get = |k: &str| totals.get(k).copied().unwrap_or(0);
    eprintln!(
        "soak: {secs} s: {} frames published ({} refused at a size change), {} replacements, \
         {} monitor rounds; readers spawned {spawned:?}, {killed} SIGKILLed; \
         reader totals: {totals:?}",
        last[0] - refused[0],
        refused[0],
        last[1],
        last[2],
    );
    assert!(failures.is_empty(), "seed {seed}: {failures:#?}");
    assert_eq!(get("wrong"), 0, "wrong frames (seed {seed})");
    assert_eq!(get("backwards"), 0, "frames out of order (seed {seed})");
    assert_eq!(
        get("gaps"),
        0,
        "frames missed under STRICT_WAIT (seed {seed})"
    );
    assert_eq!(get("fork_failed"), 0, "a forked child failed (seed {seed})");
    assert!(get("frames") > 0, "the readers got no frame at all");
    assert!(
        last[1] >= secs * 5,
        "only {} replacements in {secs} s",
        last[1]
    );
}

fn spawn_reader(env: &TestEnv, role: Role, lifetime: Duration, seed: u64) -> Child {
    child::role_command(role.name(), env)
        .env(
            "CUFRAMES_SOAK_LIFETIME_MS",
            lifetime.as_millis().to_string(),
        )
        .env("CUFRAMES_SOAK_CHILD_SEED", seed.to_string())
        .spawn()
        .unwrap()
}

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let lifetime: u64 = std::env::var("CUFRAMES_SOAK_LIFETIME_MS")
        .unwrap()
        .parse()
        .unwrap();
    let seed: u64 = std::env::var("CUFRAMES_SOAK_CHILD_SEED")
        .unwrap()
        .parse()
        .unwrap();
    // `Killed` readers read until the test kills them; the lifetime is only a bound.
    let lifetime = match role.as_str() {
        "killed" => Duration::from_millis(lifetime * 4),
        _ => Duration::from_millis(lifetime),
    };
    read(&key, role == "forks", lifetime, seed);
}

/// Read frames for `lifetime`, checking each; print one RESULT line.
fn read(key: &str, forks: bool, lifetime: Duration, seed: u64) {
    let mut rng = Rng::new(seed);
    let cuda = on_cuda().then(common::CudaCheck::open);
    let options = SubscriberOptions {
        name: "soak".into(),
        cuda_device: if on_cuda() { 0 } else { -1 },
        ..Default::default()
    };
    let deadline = Instant::now() + lifetime;
    // A handshake can meet a replacement (refused, then tried again) or a full table.
    let mut s = loop {
        match Subscriber::connect(key, &options) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                eprintln!("soak reader: connect: {e}; again");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("soak reader: could not connect: {e}"),
        }
    };
    let (mut frames, mut wrong, mut backwards, mut gaps, mut forked, mut fork_failed) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut kicked = 0u64;
    // The layout and seq of the last frame: the generation a reader is in.
    let mut last: Option<((u32, u32), u64)> = None;
    let mut next_fork = rng.range(5, 40);
    while Instant::now() < deadline {
        let f = match s.next_frame(Some(Duration::from_millis(200))) {
            Ok(f) => f,
            Err(e) if e.code() == ErrorCode::Timeout => continue,
            Err(e) if e.code() == ErrorCode::Disconnected => {
                // Given up on (a SIGKILLed reader's missing ACKs stall the publisher, and
                // a reader starved of CPU meanwhile may miss the ACK timeout too): not a
                // broken promise, but counted, and the reader leaves.
                eprintln!("soak reader: {e}");
                kicked += 1;
                break;
            }
            Err(e) => panic!("soak reader: next_frame: {e}"),
        };
        frames += 1;
        let size = (f.layout.width, f.layout.height);
        if !common::verify_any(&f, &common::planes_for(&f.layout, f.seq), cuda.as_ref()) {
            wrong += 1;
            eprintln!(
                "soak reader: frame {} ({size:?}) has the wrong bytes",
                f.seq
            );
        }
        match last {
            Some((s0, q0)) if s0 == size && f.seq <= q0 => backwards += 1,
            Some((s0, q0)) if s0 == size && f.seq != q0 + 1 => {
                gaps += f.seq - q0 - 1;
                eprintln!("soak reader: {size:?}: frame {q0} then {}", f.seq);
            }
            _ => {}
        }
        last = Some((size, f.seq));
        drop(f);
        if forks && frames == next_fork {
            next_fork += rng.range(5, 40);
            forked += 1;
            if !fork_and_drop(&mut s) {
                fork_failed += 1;
            }
        }
    }
    drop(s);
    println!(
        "RESULT frames={frames} wrong={wrong} backwards={backwards} gaps={gaps} kicked={kicked} \
         forked={forked} fork_failed={fork_failed}"
    );
}

/// Fork a child that drops its inherited copy of `s` (a normally exiting `os.fork()` child
/// runs its destructors) and exits; true when it exited 0.
fn fork_and_drop(s: &mut Subscriber) -> bool {
    // SAFETY: the child only drops the inherited subscriber (which, in a process that did not
    // create it, closes its own descriptors and mappings and touches nothing shared) and
    // calls _exit; this reader's other threads hold no lock the drop needs.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: the child owns its copy of the address space: reading `s` out of it and
        // dropping it once is this process's only use of it.
        let inherited = unsafe { std::ptr::read(s) };
        drop(inherited);
        // SAFETY: ends the child without running the parent's atexit handlers twice.
        unsafe { libc::_exit(0) };
    }
    if pid < 0 {
        return false;
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` a valid out-pointer.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    rc == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}
