//! The frame ring on CUDA VMM memory (GPU machine only; skipped with the reason elsewhere).
//! Frames are written by a kernel on the publisher's stream while another stream loads the
//! device, and every subscriber process checks every byte on its own GPU with a kernel:
//! both policies, COPY and ZERO_COPY, and no host copy on the way.
//!
//! Also the release paths (R12) and context hygiene: a frame released on a stream and its
//! subscriber destroyed before the stream ran is torn down on our release thread, not in the
//! CUDA host function (no failed driver release, memory and mappings flat over 1000 cycles);
//! dropping a zero-copy frame waits for the GPU work queued before it, a COPY frame before its
//! buffer is reused; publication on the stream (`publish_on_stream`) returns at once and shows
//! a frame only after its GPU work, and a publisher with publications pending tears down after
//! them; and no call of the
//! library replaces the caller's current context.

use cuframes_test_support as common;

use std::ffi::c_void;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::TestEnv;
use cuframes_core::cuda::{self, CudaDevice, CudaStream, DeviceBuffer, Event, Stream};
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher};
use cuframes_core::subscriber::{self, Subscriber, SubscriberOptions};
use cuframes_core::testing;
use cuframes_core::testing::deferred;
use cuframes_core::wire::{Format, MemoryKind, Policy, SubscriberMode};
use cuframes_core::ErrorCode;

const ROLE_ENV: &str = "CUFRAMES_CUDA_CHILD";

/// `CU_STREAM_LEGACY` of cuda.h: the legacy default stream of the current context (what the
/// FFmpeg glue passes when its hwcontext has no stream).
const CU_STREAM_LEGACY: *mut c_void = 0x1 as *mut c_void;

/// `CU_STREAM_PER_THREAD` of cuda.h: the calling thread's default stream of the current
/// context (torch's and CuPy's default stream in per-thread mode).
const CU_STREAM_PER_THREAD: *mut c_void = 0x2 as *mut c_void;

/// One GPU test at a time in this process: the release and mapping counters and
/// cuMemGetInfo are process- or device-wide.
static GPU: Mutex<()> = Mutex::new(());

fn gpu_lock() -> MutexGuard<'static, ()> {
    GPU.lock().unwrap_or_else(|e| e.into_inner())
}

fn no_gpu() -> bool {
    match cuda::driver_available().and_then(|_| cuda::device_count()) {
        Ok(n) if n > 0 => false,
        Ok(_) => {
            eprintln!("SKIPPED (no CUDA device): the driver reports 0 devices");
            true
        }
        Err(e) => {
            eprintln!("SKIPPED (no CUDA driver): {e}");
            true
        }
    }
}

#[test]
fn child_entry() {
    let Ok(mode) = std::env::var(ROLE_ENV) else {
        return;
    };
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let opts = SubscriberOptions {
        name: format!("gpu-{mode}"),
        mode: if mode == "zero_copy" {
            SubscriberMode::ZeroCopy
        } else {
            SubscriberMode::Copy
        },
        cuda_device: 0,
        accept_zero_copy_overwrite: std::env::var("CUFRAMES_TEST_ACCEPT").is_ok(),
        ..Default::default()
    };
    let mut s = Subscriber::connect(&key, &opts).unwrap();
    assert_eq!(s.memory_kind(), Some(MemoryKind::CudaVmm));
    println!("\nREADY");
    std::io::Write::flush(&mut std::io::stdout()).unwrap();
    let dev = CudaDevice::open(0).unwrap();
    dev.make_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let layout = s.frame_layout().unwrap().clone();
    let host_copies_before = cuda::host_copy_count();
    let (mut delivered, mut corrupt, mut misordered, mut last) = (0u64, 0u64, 0u64, 0u64);
    loop {
        match s.next_frame(Some(Duration::from_secs(30))) {
            Ok(f) => {
                if f.seq <= last {
                    misordered += 1;
                }
                last = f.seq;
                let mut bad = 0;
                for (i, p) in layout.planes().iter().enumerate() {
                    bad += testing::verify_pattern(
                        f.address() + p.offset as u64,
                        p.pitch,
                        p.row_bytes,
                        p.rows,
                        f.seq,
                        i as u32,
                        &stream,
                    )
                    .unwrap();
                }
                if bad > 0 {
                    corrupt += 1;
                }
                delivered += 1;
                // R12: a zero-copy frame is released behind the verify kernel.
                // SAFETY: `stream` is our own live stream, of the frame's device.
                unsafe { f.release_after_stream(stream.raw()) };
            }
            Err(e) if e.code() == ErrorCode::Disconnected => break,
            Err(e) => panic!("subscriber: {e}"),
        }
    }
    let st = s.frame_stats();
    println!(
        "RESULT delivered={delivered} corrupt={corrupt} misordered={misordered} zero_copy={} host_copies={} torn={} overrun={}",
        s.is_zero_copy() as u8,
        cuda::host_copy_count() - host_copies_before,
        st.dropped_torn,
        st.dropped_overrun
    );
}

fn spawn(env: &TestEnv, mode: &str, accept: bool) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, mode)
        .env("CUFRAMES_TEST_KEY", &env.key)
        .env("CUFRAMES_RUNTIME_DIR", &env.dir)
        .stdout(Stdio::piped());
    if accept {
        c.env("CUFRAMES_TEST_ACCEPT", "1");
    }
    c.spawn().unwrap()
}

fn result(c: &mut Child) -> std::collections::HashMap<String, u64> {
    let mut out = String::new();
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(c.wait().unwrap().success(), "child failed: {out}");
    // The harness prints "test child_entry ... " without a newline before our output.
    let line = out
        .split("RESULT ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .unwrap_or_else(|| panic!("no RESULT: {out}"));
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.into(), v.parse().unwrap()))
        .collect()
}

/// How the publisher of `run` makes a written slot visible.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Publish {
    /// `publish_after_stream`: the publishing thread waits for the stream.
    AfterStream,
    /// `publish_on_stream`: a host function on the stream publishes; the thread goes on.
    OnStream,
}

fn run(policy: Policy, modes: &[(&str, bool)], frames: u64) {
    run_with(policy, modes, frames, Publish::AfterStream)
}

fn run_with(policy: Policy, modes: &[(&str, bool)], frames: u64, publish: Publish) {
    let env = TestEnv::new("gpu");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 1920, 1080);
    cfg.policy = policy;
    cfg.ring_size = 4;
    cfg.ack_timeout = Duration::from_secs(10);
    cfg.memory = MemoryChoice::Cuda { device: 0 };
    p.enable_frames(cfg).unwrap();
    let layout = p.frame_layout().unwrap().clone();
    let mut kids: Vec<Child> = modes.iter().map(|(m, a)| spawn(&env, m, *a)).collect();
    // Each child says READY once its imports are done (the publisher counts it earlier).
    for k in kids.iter_mut() {
        let mut out = k.stdout.take().unwrap();
        let mut seen = String::new();
        let mut b = [0u8; 1];
        while !seen.contains("READY") {
            assert_eq!(
                out.read(&mut b).unwrap(),
                1,
                "a subscriber died before READY: {seen}"
            );
            seen.push(b[0] as char);
        }
        k.stdout = Some(out);
    }
    let dev = CudaDevice::open(0).unwrap();
    dev.make_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let load = Stream::new(&dev).unwrap();
    let start = Instant::now();
    for _ in 0..frames {
        // Other GPU work keeps the device busy while frames are written.
        testing::busy(&load, 200_000).unwrap();
        let slot = p.acquire().unwrap();
        for (i, pl) in layout.planes().iter().enumerate() {
            testing::fill_pattern(
                slot.address + pl.offset as u64,
                pl.pitch,
                pl.row_bytes,
                pl.rows,
                slot.seq,
                i as u32,
                &stream,
            )
            .unwrap();
        }
        match publish {
            Publish::AfterStream => {
                p.publish_after_stream(slot, Some(stream.as_cuda_stream()), None)
            }
            Publish::OnStream => p.publish_on_stream(slot, stream.as_cuda_stream(), None),
        }
        .unwrap();
        if policy == Policy::DropOldest {
            // Paced, so that subscribers verify many frames (and are still lapped at times).
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let elapsed = start.elapsed();
    if policy == Policy::StrictWait {
        let t = Instant::now();
        while p.subscribers().iter().any(|s| s.lag > 0) {
            assert!(t.elapsed() < Duration::from_secs(30), "final ACKs missing");
            std::thread::sleep(Duration::from_millis(5));
        }
    } else {
        std::thread::sleep(Duration::from_millis(300));
    }
    drop(p);
    for (k, (mode, accept)) in kids.iter_mut().zip(modes) {
        let r = result(k);
        eprintln!("{policy:?} {mode} (accept overwrite {accept}): {r:?}");
        assert_eq!(r["corrupt"], 0, "{r:?}");
        assert_eq!(r["misordered"], 0, "{r:?}");
        assert_eq!(r["host_copies"], 0, "the CUDA path made a host copy: {r:?}");
        assert!(r["delivered"] > 0);
        let expect_zc = *mode == "zero_copy" && (policy == Policy::StrictWait || *accept);
        assert_eq!(r["zero_copy"], expect_zc as u64, "{r:?}");
        if policy == Policy::StrictWait {
            assert_eq!(
                r["delivered"], frames,
                "STRICT_WAIT delivers every frame: {r:?}"
            );
        } else {
            assert!(
                r["delivered"] >= frames / 4,
                "too few frames verified under DROP_OLDEST: {r:?}"
            );
        }
    }
    eprintln!(
        "{policy:?} ({publish:?}): {frames} frames in {elapsed:?} ({:.0} fps)",
        frames as f64 / elapsed.as_secs_f64()
    );
}

#[test]
fn strict_wait_bit_exact_with_publication_on_the_stream() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let modes = [
        ("copy", false),
        ("zero_copy", false),
        ("copy", false),
        ("zero_copy", false),
    ];
    run_with(Policy::StrictWait, &modes, 300, Publish::OnStream);
}

#[test]
fn drop_oldest_bit_exact_with_publication_on_the_stream() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let modes = [("copy", false), ("zero_copy", true), ("copy", false)];
    run_with(Policy::DropOldest, &modes, 300, Publish::OnStream);
}

/// publish_on_stream returns while the GPU work before it still runs; the frame stays
/// invisible until that work is done (§5) and is complete when it appears; the next acquire
/// of its slot waits for the publication; a publication on another stream keeps seq order.
#[test]
fn publication_on_the_stream_follows_the_gpu_work_and_does_not_block() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let env = TestEnv::new("onstream");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(cuda_ring(1, Policy::DropOldest)).unwrap();
    let mut s = Subscriber::connect(
        &env.key,
        &SubscriberOptions {
            mode: SubscriberMode::Copy,
            cuda_device: 0,
            ..env.subscriber_options("onstream")
        },
    )
    .unwrap();
    let layout = p.frame_layout().unwrap().clone();
    let dev = CudaDevice::open(0).unwrap();
    let _current = dev.push_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let other = Stream::new(&dev).unwrap();
    let check = Stream::new(&dev).unwrap();
    let load = busy_iterations_for(&stream, Duration::from_millis(300));
    let write = |slot: &cuframes_core::publisher::AcquiredSlot, on: &Stream| {
        for (i, pl) in layout.planes().iter().enumerate() {
            testing::fill_pattern(
                slot.address + pl.offset as u64,
                pl.pitch,
                pl.row_bytes,
                pl.rows,
                slot.seq,
                i as u32,
                on,
            )
            .unwrap();
        }
    };
    let done = Event::new(&dev).unwrap();
    let slot = p.acquire().unwrap();
    testing::busy(&stream, load).unwrap();
    write(&slot, &stream);
    done.record(&stream).unwrap();
    let t = Instant::now();
    p.publish_on_stream(slot, stream.as_cuda_stream(), None)
        .unwrap();
    let returned_after = t.elapsed();
    // Invisible while the kernel runs.
    let early = s.next_frame(Some(Duration::from_millis(50)));
    let still_running = !done.query().unwrap();
    assert!(
        still_running,
        "the kernel ended too soon for the test (load too short)"
    );
    assert!(
        early.is_err(),
        "a frame became visible before the GPU work that writes it had finished"
    );
    let f = s.next_frame(Some(Duration::from_secs(10))).unwrap();
    let visible_after = t.elapsed();
    assert!(done.query().unwrap());
    assert_eq!(f.seq, 1);
    let mut bad = 0;
    for (i, pl) in layout.planes().iter().enumerate() {
        bad += testing::verify_pattern(
            f.address() + pl.offset as u64,
            pl.pitch,
            pl.row_bytes,
            pl.rows,
            1,
            i as u32,
            &check,
        )
        .unwrap();
    }
    drop(f);
    assert_eq!(
        bad, 0,
        "the frame was visible before its bytes were complete"
    );
    // One slot: acquiring frame 2 waits for frame 1's publication (here long done); frame 2 is
    // published on another stream behind a kernel, frame 3 on the first stream: frame 3's
    // publication waits for frame 2's, so seqs appear in order.
    let slot2 = p.acquire().unwrap();
    testing::busy(&other, load).unwrap();
    write(&slot2, &other);
    p.publish_on_stream(slot2, other.as_cuda_stream(), None)
        .unwrap();
    let slot3 = p.acquire().unwrap(); // waits for frame 2 (same slot)
    write(&slot3, &stream);
    p.publish_on_stream(slot3, stream.as_cuda_stream(), None)
        .unwrap();
    let mut seen = Vec::new();
    while let Ok(f) = s.next_frame(Some(Duration::from_secs(2))) {
        seen.push(f.seq);
    }
    eprintln!(
        "publish_on_stream returned after {returned_after:?}; the frame appeared after \
         {visible_after:?} (kernel ~300 ms); then seen {seen:?}"
    );
    assert!(
        returned_after < Duration::from_millis(100),
        "publish_on_stream waited for the GPU ({returned_after:?})"
    );
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert_eq!(seen.last(), Some(&3));
}

/// `CU_STREAM_PER_THREAD` names a different stream on each thread: a frame published on one
/// thread's idle per-thread stream must not become visible before the frame published just
/// before it on another thread's per-thread stream, behind a slow kernel (the handles are
/// equal, the streams are not).
#[test]
fn publications_on_two_threads_per_thread_streams_stay_in_order() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let env = TestEnv::new("ptds");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(cuda_ring(4, Policy::DropOldest)).unwrap();
    let mut s = Subscriber::connect(
        &env.key,
        &SubscriberOptions {
            mode: SubscriberMode::Copy,
            cuda_device: 0,
            ..env.subscriber_options("ptds")
        },
    )
    .unwrap();
    let dev = CudaDevice::open(0).unwrap();
    let load = busy_iterations_for(&Stream::new(&dev).unwrap(), Duration::from_millis(300));
    let (queued_tx, queued_rx) = std::sync::mpsc::channel();
    let (finish_tx, finish_rx) = std::sync::mpsc::channel::<()>();
    let (first_done, second_returned_after) = std::thread::scope(|scope| {
        let (p, dev) = (&p, &dev);
        // Thread A: a slow kernel, then frame 1, on A's per-thread default stream. A stays
        // alive until the end (its per-thread stream holds the work).
        scope.spawn(move || {
            let _current = dev.push_current().unwrap();
            // SAFETY: the special handle, with the device's context current on this thread.
            let per_thread = unsafe { Stream::from_raw_with_device(dev, CU_STREAM_PER_THREAD) };
            let done = Event::new(dev).unwrap();
            testing::busy(&per_thread, load).unwrap();
            done.record(&per_thread).unwrap();
            let slot = p.acquire().unwrap();
            p.publish_on_stream(slot, CudaStream::PER_THREAD, None)
                .unwrap();
            queued_tx.send(done).unwrap();
            let _ = finish_rx.recv();
        });
        let done = queued_rx.recv().unwrap();
        // This thread: frame 2 on its own, idle, per-thread default stream.
        let _current = dev.push_current().unwrap();
        let slot = p.acquire().unwrap();
        let t = Instant::now();
        // The per-thread stream of this thread, with the device's context current on this thread.
        p.publish_on_stream(slot, CudaStream::PER_THREAD, None)
            .unwrap();
        let returned_after = t.elapsed();
        let first_done = done.query().unwrap();
        finish_tx.send(()).unwrap();
        (first_done, returned_after)
    });
    let mut seen = Vec::new();
    while let Ok(f) = s.next_frame(Some(Duration::from_secs(2))) {
        seen.push(f.seq);
    }
    eprintln!(
        "frame 2's publish returned after {second_returned_after:?} (frame 1's kernel done: \
         {first_done}); seen {seen:?}"
    );
    assert_eq!(seen, vec![1, 2], "frames became visible out of order");
}

/// Defect: publish_on_stream queued its host function before storing the slot's pts, so on
/// an idle stream the frame became visible with the previous occupant's pts (FFmpeg readers
/// then dropped frames as out of order). Every frame must arrive with its own pts.
#[test]
fn frames_published_on_an_idle_stream_carry_their_own_pts() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let env = TestEnv::new("onstreampts");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(cuda_ring(2, Policy::StrictWait)).unwrap();
    let mut s = Subscriber::connect(
        &env.key,
        &SubscriberOptions {
            mode: SubscriberMode::ZeroCopy,
            cuda_device: 0,
            ..env.subscriber_options("onstreampts")
        },
    )
    .unwrap();
    let dev = CudaDevice::open(0).unwrap();
    let _current = dev.push_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let frames = 500u64;
    let reader = std::thread::spawn(move || {
        let mut wrong = Vec::new();
        for want in 1..=frames {
            let f = s.next_frame(Some(Duration::from_secs(10))).unwrap();
            if f.pts_ns != want as i64 * 40_000_000 {
                wrong.push((f.seq, f.pts_ns));
            }
            // SAFETY: null stream: nothing reads the frame any more.
            unsafe { f.release_after_stream(std::ptr::null_mut()) };
        }
        wrong
    });
    for n in 1..=frames {
        let slot = p.acquire().unwrap();
        p.publish_on_stream(slot, stream.as_cuda_stream(), Some(n as i64 * 40_000_000))
            .unwrap();
    }
    let wrong = reader.join().unwrap();
    assert!(
        wrong.is_empty(),
        "{} frames with another frame's pts, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// Teardown with publications still queued behind GPU work: dropping the publisher waits for
/// them (the copy may still write the slots), leaves no mapping behind, and the key can be
/// published again at once.
#[test]
fn dropping_a_publisher_with_publications_pending_waits_for_them() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let env = TestEnv::new("pendingdrop");
    let dev = CudaDevice::open(0).unwrap();
    let _current = dev.push_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let load = busy_iterations_for(&stream, Duration::from_millis(300));
    let done = Event::new(&dev).unwrap();
    let maps_before = cuda::live_mappings();
    {
        let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
        p.enable_frames(cuda_ring(2, Policy::StrictWait)).unwrap();
        let mut s = Subscriber::connect(
            &env.key,
            &SubscriberOptions {
                mode: SubscriberMode::Copy,
                cuda_device: 0,
                ..env.subscriber_options("pendingdrop")
            },
        )
        .unwrap();
        let slot = p.acquire().unwrap();
        testing::busy(&stream, load).unwrap();
        done.record(&stream).unwrap();
        p.publish_on_stream(slot, stream.as_cuda_stream(), None)
            .unwrap();
        assert!(!done.query().unwrap(), "load too short");
        let t = Instant::now();
        drop(p);
        eprintln!(
            "drop with a publication pending behind a ~300 ms kernel took {:?}",
            t.elapsed()
        );
        assert!(
            done.query().unwrap(),
            "the publisher was torn down under pending GPU work"
        );
        // Defect: the shutdown flag went up before the pending publication ran, so the
        // subscriber ended the stream without the last frame (STRICT_WAIT: every frame).
        let f = s.next_frame(Some(Duration::from_secs(5)));
        assert_eq!(
            f.map(|f| f.seq).ok(),
            Some(1),
            "the pending frame was lost at shutdown"
        );
        let e = s.next_frame(Some(Duration::from_secs(5))).err().unwrap();
        assert_eq!(e.code(), ErrorCode::Disconnected);
    }
    assert_eq!(cuda::live_mappings(), maps_before, "mappings left behind");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(cuda_ring(2, Policy::StrictWait)).unwrap();
}

#[test]
fn strict_wait_copy_and_zero_copy_bit_exact() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    run(
        Policy::StrictWait,
        &[
            ("copy", false),
            ("zero_copy", false),
            ("copy", false),
            ("zero_copy", false),
        ],
        300,
    );
}

#[test]
fn drop_oldest_copy_and_zero_copy_bit_exact() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    // ZERO_COPY under DROP_OLDEST copies unless the risk is accepted (R12); with it accepted
    // the frames are still verified, since the writer waits on nothing.
    run(
        Policy::DropOldest,
        &[("copy", false), ("zero_copy", false), ("copy", false)],
        300,
    );
}

#[test]
fn eight_gpu_subscribers() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let modes: Vec<(&str, bool)> = (0..8)
        .map(|i| (if i % 2 == 0 { "copy" } else { "zero_copy" }, false))
        .collect();
    run(Policy::StrictWait, &modes, 200);
}

#[test]
fn a_cuda_ring_without_a_driver_is_a_clean_error() {
    if cuda::driver_available().is_ok() {
        eprintln!("SKIPPED (a CUDA driver is present): this test checks the no-driver error");
        return;
    }
    let env = TestEnv::new("nogpu");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 64);
    cfg.memory = MemoryChoice::Cuda { device: 0 };
    let e = p.enable_frames(cfg).err().unwrap();
    assert_eq!(e.code(), ErrorCode::Cuda);
    assert!(e.message().contains("libcuda"), "{e}");
    // Nothing was left behind by the failed enable.
    assert!(cuframes_core::shm::open(&format!("cuframes-{}", env.key), 0, false).is_err());
}

/// Iterations of `cuda::busy` that keep `stream` busy for about `target` (timed here: the
/// kernel's speed depends on the GPU and its clocks).
fn busy_iterations_for(stream: &Stream, target: Duration) -> u64 {
    testing::busy(stream, 1000).unwrap(); // module JIT and first launch
    stream.synchronize().unwrap();
    let probe = 20_000_000u64;
    let t = Instant::now();
    testing::busy(stream, probe).unwrap();
    stream.synchronize().unwrap();
    let took = t.elapsed().as_secs_f64().max(1e-6);
    ((probe as f64 * target.as_secs_f64() / took) as u64).clamp(1000, 1 << 40)
}

fn cuda_ring(ring_size: usize, policy: Policy) -> FrameRingConfig {
    let mut cfg = FrameRingConfig::new(Format::Nv12, 256, 144);
    cfg.ring_size = ring_size;
    cfg.policy = policy;
    cfg.ack_timeout = Duration::from_secs(60);
    cfg.memory = MemoryChoice::Cuda { device: 0 };
    cfg
}

fn zero_copy_options(env: &TestEnv, name: &str) -> SubscriberOptions {
    SubscriberOptions {
        mode: SubscriberMode::ZeroCopy,
        accept_zero_copy_overwrite: true,
        cuda_device: 0,
        ..env.subscriber_options(name)
    }
}

/// Device memory in use, device-wide (cuMemGetInfo).
fn device_memory_used(dev: &CudaDevice) -> usize {
    let (free, total) = dev.memory_info().unwrap();
    total - free
}

/// Defect: `cuframes_frame_release(f, stream)` with GPU work pending, then
/// `cuframes_subscriber_destroy`: the host function held the last reference to the ring and
/// ran cuMemUnmap, cuMemAddressFree, cuMemRelease and cuDevicePrimaryCtxRelease inside the
/// callback, where the driver refuses them (CUDA_ERROR_NOT_PERMITTED on the H200), leaking
/// the mappings and a context reference each time. Now the callback only ACKs and our release
/// thread tears the ring down.
#[test]
fn release_then_destroy_cycles_tear_down_on_our_thread() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let cycles: usize = std::env::var("CUFRAMES_RELEASE_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // Held for the whole test: the primary context stays alive between cycles.
    let dev = CudaDevice::open(0).unwrap();
    let stream = Stream::new(&dev).unwrap();
    let pending_mark = Event::new(&dev).unwrap();
    let load = busy_iterations_for(&stream, Duration::from_millis(5));
    let env = TestEnv::new("relcycle");
    let failures_before = cuda::release_failures();
    let mut baseline: Option<(usize, u64)> = None;
    let mut late_callbacks = 0usize;
    let t = Instant::now();
    for cycle in 0..cycles {
        let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
        p.enable_frames(cuda_ring(2, Policy::DropOldest)).unwrap();
        let mut s = Subscriber::connect(&env.key, &zero_copy_options(&env, "relcycle")).unwrap();
        assert!(s.is_zero_copy());
        let slot = p.acquire().unwrap();
        p.publish_after_stream(slot, None, None).unwrap();
        let f = s.next_frame(Some(Duration::from_secs(10))).unwrap();
        // GPU work still reads the frame when it is released and the subscriber destroyed.
        testing::busy(&stream, load).unwrap();
        pending_mark.record(&stream).unwrap();
        // SAFETY: `stream` is our own live stream, of the frame's device.
        unsafe { f.release_after_stream(stream.raw()) };
        drop(s); // cuframes_subscriber_destroy
        if !pending_mark.query().unwrap() {
            late_callbacks += 1; // the host function runs after the destroy
        }
        drop(p);
        if cycle == 0 {
            stream.synchronize().unwrap();
            deferred::flush();
            baseline = Some((device_memory_used(&dev), cuda::live_mappings()));
        }
    }
    stream.synchronize().unwrap(); // every host function has run
    deferred::flush(); // and every ring it handed over is torn down
    let (mem0, maps0) = baseline.unwrap();
    let (mem1, maps1) = (device_memory_used(&dev), cuda::live_mappings());
    let failures = cuda::release_failures() - failures_before;
    eprintln!(
        "{cycles} release-then-destroy cycles in {:?}: host function ran after the destroy in \
         {late_callbacks}; device memory used {} -> {} MiB; live VMM mappings {maps0} -> \
         {maps1}; failed driver releases {failures}",
        t.elapsed(),
        mem0 >> 20,
        mem1 >> 20
    );
    assert!(
        late_callbacks * 2 >= cycles,
        "the scenario was not exercised: the stream finished before the destroy in most \
         cycles ({late_callbacks} of {cycles} late)"
    );
    assert_eq!(failures, 0, "driver teardown calls failed (see stderr)");
    assert_eq!(maps1, maps0, "VMM mappings leaked");
    assert_eq!(maps1, 0, "no mapping outlives its ring");
    // Each leaked cycle would keep 2 slots of >= 2 MiB; allow for the driver's own noise.
    assert!(
        mem1 <= mem0 + (64 << 20),
        "device memory grew by {} MiB over {cycles} cycles",
        (mem1 - mem0) >> 20
    );
}

/// A zero-copy frame released after a stream that has nothing left to run is ACKed before
/// the release returns, with nothing queued on the GPU (a host function per frame costs a
/// submission and the driver's callback thread for nothing; FFmpeg's readers release after
/// an idle legacy stream). With work still queued, the host function still carries the ACK (the waits
/// themselves: `dropping_a_zero_copy_frame_waits_for_the_gpu_work_queued_before` and the
/// release-then-destroy cycles).
#[test]
fn a_release_after_an_idle_stream_acks_at_once_without_gpu_work() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let env = TestEnv::new("idlerel");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(cuda_ring(2, Policy::StrictWait)).unwrap();
    let mut s = Subscriber::connect(&env.key, &zero_copy_options(&env, "idlerel")).unwrap();
    assert!(s.is_zero_copy());
    let dev = CudaDevice::open(0).unwrap();
    dev.make_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let load = busy_iterations_for(&stream, Duration::from_millis(200));
    let lag = |p: &Publisher| p.subscribers().iter().map(|s| s.lag).max().unwrap_or(0);
    let mut next = |p: &Publisher| {
        let slot = p.acquire().unwrap();
        p.publish_after_stream(slot, None, None).unwrap();
        s.next_frame(Some(Duration::from_secs(10))).unwrap()
    };

    // Our own stream, idle; then the current context's legacy stream, idle (FFmpeg's case).
    for (what, raw) in [
        ("own stream", stream.raw()),
        ("CU_STREAM_LEGACY", CU_STREAM_LEGACY),
    ] {
        let f = next(&p);
        stream.synchronize().unwrap();
        let queued = subscriber::stream_acks_queued();
        // SAFETY: a live stream of device 0's primary context, which is current.
        unsafe { f.release_after_stream(raw) };
        assert_eq!(
            subscriber::stream_acks_queued(),
            queued,
            "{what}: a host function was queued although the stream was idle"
        );
        assert_eq!(
            lag(&p),
            0,
            "{what}: the frame was not ACKed when the release returned"
        );
    }

    // Work still queued on the stream: the ACK goes behind it, through a host function.
    let f = next(&p);
    testing::busy(&stream, load).unwrap();
    let queued = subscriber::stream_acks_queued();
    // SAFETY: our own live stream, of the frame's device.
    unsafe { f.release_after_stream(stream.raw()) };
    assert_eq!(subscriber::stream_acks_queued(), queued + 1);
    assert_eq!(
        lag(&p),
        1,
        "ACKed while the kernel queued before the release still ran"
    );
    stream.synchronize().unwrap();
    let t = Instant::now();
    while lag(&p) != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "no ACK after the stream ran"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Defect: dropping a CUDA zero-copy frame ACKed at once, while GPU work queued before the
/// drop could still read it (R12). Now the drop synchronises the device's primary context
/// first: the ACK (seen by a STRICT_WAIT publisher blocked on it) follows the kernel's end.
#[test]
fn dropping_a_zero_copy_frame_waits_for_the_gpu_work_queued_before() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let env = TestEnv::new("dropwait");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    // One slot: the next acquire rewrites frame 1's slot, so it waits for frame 1's ACK.
    p.enable_frames(cuda_ring(1, Policy::StrictWait)).unwrap();
    let mut s = Subscriber::connect(&env.key, &zero_copy_options(&env, "dropwait")).unwrap();
    assert!(s.is_zero_copy());
    let dev = CudaDevice::open(0).unwrap();
    let stream = Stream::new(&dev).unwrap();
    let other = Stream::new(&dev).unwrap();
    let load = busy_iterations_for(&stream, Duration::from_millis(300));
    let marker = DeviceBuffer::new(&dev, 4).unwrap();
    // SAFETY: `marker` is our own 4-byte device buffer, on our own stream.
    unsafe { cuda::memset_d8_async(marker.device_ptr(), 0, 4, &stream) }.unwrap();
    stream.synchronize().unwrap();

    let slot = p.acquire().unwrap();
    p.publish_after_stream(slot, None, None).unwrap();
    let f = s.next_frame(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(f.seq, 1);
    let done = Event::new(&dev).unwrap();
    // The "reader": a long kernel, then a marker written when it ends.
    testing::busy(&stream, load).unwrap();
    // SAFETY: as above.
    unsafe { cuda::memset_d8_async(marker.device_ptr(), 0x5A, 4, &stream) }.unwrap();
    done.record(&stream).unwrap();

    let (waited, kernel_done_at_ack, marker_after_drop) = std::thread::scope(|scope| {
        let publisher = scope.spawn(|| {
            let slot = p.acquire().unwrap(); // returns once frame 1 is ACKed
            let complete = done.query().unwrap();
            p.abandon(slot);
            complete
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !done.query().unwrap(),
            "the kernel must still run when the frame is dropped (load too short)"
        );
        let t = Instant::now();
        drop(f);
        let waited = t.elapsed();
        // Read the marker on another stream, which does not wait for `stream`.
        let mut m = [0u8; 4];
        // SAFETY: `marker` is our own 4-byte device buffer; `m` holds the 4 bytes.
        unsafe { cuda::copy_dtoh_2d(&mut m, 4, marker.device_ptr(), 4, 4, 1, &other) }.unwrap();
        (waited, publisher.join().unwrap(), m)
    });
    eprintln!(
        "drop of a zero-copy frame with a ~300 ms kernel queued waited {waited:?}; kernel \
         complete when the publisher saw the ACK: {kernel_done_at_ack}; marker {marker_after_drop:?}"
    );
    assert_eq!(
        marker_after_drop, [0x5A; 4],
        "the drop returned before the kernel ended"
    );
    assert!(
        kernel_done_at_ack,
        "the ACK reached the publisher while the kernel still ran"
    );
}

/// Defect: dropping a COPY frame of a CUDA ring returned its device buffer to the
/// subscriber's pool at once, and the next frame's copy rewrote it while GPU work queued on
/// the frame still read it. Now the drop waits for the device's primary context first.
#[test]
fn dropping_a_copy_frame_waits_for_the_gpu_work_queued_before_its_buffer_is_reused() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let env = TestEnv::new("copydrop");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(cuda_ring(2, Policy::StrictWait)).unwrap();
    let options = SubscriberOptions {
        mode: SubscriberMode::Copy,
        cuda_device: 0,
        ..env.subscriber_options("copydrop")
    };
    let mut s = Subscriber::connect(&env.key, &options).unwrap();
    assert!(!s.is_zero_copy());
    let layout = p.frame_layout().unwrap().clone();
    let y = layout.planes()[0];
    let dev = CudaDevice::open(0).unwrap();
    let writer = Stream::new(&dev).unwrap();
    let reader = Stream::new(&dev).unwrap();
    let check = Stream::new(&dev).unwrap();
    let load = busy_iterations_for(&reader, Duration::from_millis(300));
    let publish = |seq_hint: u64| {
        let slot = p.acquire().unwrap();
        assert_eq!(slot.seq, seq_hint);
        testing::fill_pattern(
            slot.address + y.offset as u64,
            y.pitch,
            y.row_bytes,
            y.rows,
            slot.seq,
            0,
            &writer,
        )
        .unwrap();
        p.publish_after_stream(slot, Some(writer.as_cuda_stream()), None)
            .unwrap();
    };
    // What the reader's late copy lands in.
    let snapshot = DeviceBuffer::new(&dev, y.pitch * y.rows).unwrap();

    publish(1);
    let f = s.next_frame(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(f.seq, 1);
    // The "reader": a long kernel, then a copy of the frame's luma out of its buffer.
    testing::busy(&reader, load).unwrap();
    // SAFETY: both are device buffers of at least y.pitch * y.rows bytes (the frame's buffer
    // is alive until `f` is dropped, which now waits for this copy); our own stream.
    unsafe {
        cuda::copy_2d_async(
            snapshot.device_ptr(),
            y.pitch,
            f.address() + y.offset as u64,
            y.pitch,
            y.row_bytes,
            y.rows,
            &reader,
        )
    }
    .unwrap();
    let t = Instant::now();
    drop(f);
    let waited = t.elapsed();
    // Frame 2's copy takes a pooled buffer: frame 1's, if the drop handed it back early.
    publish(2);
    let f2 = s.next_frame(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(f2.seq, 2);
    reader.synchronize().unwrap();
    let bad = testing::verify_pattern(
        snapshot.device_ptr(),
        y.pitch,
        y.row_bytes,
        y.rows,
        1,
        0,
        &check,
    )
    .unwrap();
    let bad_frame2 = testing::verify_pattern(
        f2.address() + y.offset as u64,
        y.pitch,
        y.row_bytes,
        y.rows,
        2,
        0,
        &check,
    )
    .unwrap();
    eprintln!(
        "drop of a COPY frame with a ~300 ms kernel queued on it waited {waited:?}; bytes of \
         the reader's copy not frame 1's: {bad}; frame 2 mismatches: {bad_frame2}"
    );
    assert_eq!(
        bad, 0,
        "frame 2's copy rewrote frame 1's buffer under its reader"
    );
    assert_eq!(bad_frame2, 0);
}

/// A context the test creates itself (cuCtxCreate), destroyed on drop: stands for a caller's
/// own context (FFmpeg without the primary-context flag).
struct CallerContext(cudarc::driver::sys::CUcontext);

impl CallerContext {
    /// Creates a context on device 0; cuCtxCreate makes it current on this thread.
    fn create() -> CallerContext {
        use cudarc::driver::sys;
        let mut dev: sys::CUdevice = 0;
        // SAFETY: valid out-pointer; the driver is loaded (no_gpu() checked it).
        let r = unsafe { sys::cuDeviceGet(&mut dev, 0) };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // cuCtxCreate_v4 (CUDA >= 12.5 drivers, the only variant in CUDA 13's header) with no
        // parameters; cuCtxCreate_v2 where the driver lacks it (cudarc panics on a missing
        // symbol).
        let v4 = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: valid out-pointer; null parameters are allowed.
            unsafe { sys::cuCtxCreate_v4(&mut ctx, std::ptr::null_mut(), 0, dev) }
        }));
        let r = match v4 {
            Ok(r) => r,
            // SAFETY: valid out-pointer.
            Err(_) => unsafe { sys::cuCtxCreate_v2(&mut ctx, 0, dev) },
        };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "cuCtxCreate");
        CallerContext(ctx)
    }
}

impl Drop for CallerContext {
    fn drop(&mut self) {
        // SAFETY: created by `create`, destroyed once.
        let r = unsafe { cudarc::driver::sys::cuCtxDestroy_v2(self.0) };
        if !std::thread::panicking() {
            assert_eq!(
                r,
                cudarc::driver::sys::CUresult::CUDA_SUCCESS,
                "cuCtxDestroy"
            );
        }
    }
}

/// Defect: copies and null-stream publish paths called cuCtxSetCurrent and left the caller's
/// context replaced. Every call now pushes the ring's context and pops it again.
#[test]
fn no_call_replaces_the_callers_current_context() {
    let _g = gpu_lock();
    if no_gpu() {
        return;
    }
    let caller = CallerContext::create();
    let check = |what: &str| {
        let current = cuda::current_context().unwrap();
        assert_eq!(
            current, caller.0 as *mut c_void,
            "{what} replaced the caller's current context"
        );
    };
    check("cuCtxCreate");
    let env = TestEnv::new("ctx");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(cuda_ring(4, Policy::StrictWait)).unwrap();
    check("enable_frames (CUDA ring)");
    let mut zc = Subscriber::connect(&env.key, &zero_copy_options(&env, "ctx-zc")).unwrap();
    check("connect (ZERO_COPY)");
    let copy_opts = SubscriberOptions {
        mode: SubscriberMode::Copy,
        cuda_device: 0,
        ..env.subscriber_options("ctx-copy")
    };
    let mut cp = Subscriber::connect(&env.key, &copy_opts).unwrap();
    check("connect (COPY)");
    assert!(zc.is_zero_copy() && !cp.is_zero_copy());
    let layout = p.frame_layout().unwrap().clone();
    let wait = Some(Duration::from_secs(10));

    // HtoD copies (the library's stream).
    let dense: Vec<Vec<u8>> = layout
        .planes()
        .iter()
        .map(|pl| vec![0x33; pl.row_bytes * pl.rows])
        .collect();
    let planes: Vec<&[u8]> = dense.iter().map(Vec::as_slice).collect();
    let strides: Vec<usize> = layout.planes().iter().map(|pl| pl.row_bytes).collect();
    p.publish_host_planes(&planes, &strides, None).unwrap();
    check("publish_host_planes (HtoD copies)");
    let f = cp.next_frame(wait).unwrap();
    check("COPY read (DtoD copy)");
    // SAFETY: CU_STREAM_LEGACY with the caller's context (of device 0) current.
    unsafe { f.release_after_stream(CU_STREAM_LEGACY) };
    check("release_after_stream(CU_STREAM_LEGACY) of a COPY frame");
    let z = zc.next_frame(wait).unwrap();
    check("zero-copy read");
    drop(z);
    check("zero-copy drop (synchronises the ring's context)");

    // DtoD copies on the library's stream, from device memory of the ring's device.
    let dev = CudaDevice::open(0).unwrap();
    check("CudaDevice::open");
    let src = DeviceBuffer::new(&dev, layout.frame_size).unwrap();
    let own = Stream::new(&dev).unwrap();
    let ev = Event::new(&dev).unwrap();
    check("DeviceBuffer/Stream/Event::new");
    testing::fill_pattern(src.device_ptr(), 256, 256, 8, 1, 0, &own).unwrap();
    ev.record(&own).unwrap();
    own.synchronize().unwrap();
    check("fill_pattern, Event::record, Stream::synchronize");
    let ptrs: Vec<u64> = layout
        .planes()
        .iter()
        .map(|pl| src.device_ptr() + pl.offset as u64)
        .collect();
    let pitches: Vec<usize> = layout.planes().iter().map(|pl| pl.pitch).collect();
    // SAFETY: the planes are `src`, a live device buffer of a whole frame; the null stream.
    unsafe { p.publish_device_planes(&ptrs, &pitches, None, None) }.unwrap();
    check("publish_device_planes (DtoD, the library's stream)");
    drop(cp.next_frame(wait).unwrap());
    check("COPY read and drop");
    let z = zc.next_frame(wait).unwrap();
    // SAFETY: CU_STREAM_LEGACY with the caller's context (of device 0) current.
    unsafe { z.release_after_stream(CU_STREAM_LEGACY) };
    check("release_after_stream(CU_STREAM_LEGACY) of a zero-copy frame");

    // Null-stream publish (synchronises the ring's legacy stream).
    let slot = p.acquire().unwrap();
    check("acquire");
    p.publish_after_stream(slot, None, None).unwrap();
    check("publish_after_stream(NULL)");
    drop(cp.next_frame(wait).unwrap());
    let z = zc.next_frame(wait).unwrap();
    // SAFETY: `own` is a live stream of the frame's device.
    unsafe { z.release_after_stream(own.raw()) };
    check("release_after_stream(library-made stream)");

    // Teardown: subscribers, publisher, the release thread's work, our own objects.
    drop(zc);
    drop(cp);
    check("subscriber teardown");
    drop(p);
    check("publisher teardown");
    own.synchronize().unwrap();
    // SAFETY: CU_STREAM_LEGACY with the caller's context current: its legacy stream, where
    // two host functions were enqueued.
    unsafe { Stream::from_raw(CU_STREAM_LEGACY) }
        .synchronize()
        .unwrap();
    check("Stream::from_raw(CU_STREAM_LEGACY).synchronize");
    deferred::flush();
    drop((ev, own, src));
    drop(dev);
    check("teardown of streams, events, buffers and the device");
    drop(caller);
}
