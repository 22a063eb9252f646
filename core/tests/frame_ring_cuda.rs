//! The frame ring on CUDA VMM memory (GPU machine only; skipped with the reason elsewhere).
//! Frames are written by a kernel on the publisher's stream while another stream loads the
//! device, and every subscriber process checks every byte on its own GPU with a kernel:
//! both policies, COPY and ZERO_COPY, and no host copy on the way.

mod common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::TestEnv;
use cuframes_core::cuda::{self, CudaDevice, Stream};
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::{Format, MemoryKind, Policy, SubscriberMode};
use cuframes_core::ErrorCode;

const ROLE_ENV: &str = "CUFRAMES_CUDA_CHILD";

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
                    bad += cuda::verify_pattern(
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

fn run(policy: Policy, modes: &[(&str, bool)], frames: u64) {
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
        cuda::busy(&load, 200_000).unwrap();
        let slot = p.acquire().unwrap();
        for (i, pl) in layout.planes().iter().enumerate() {
            cuda::fill_pattern(
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
        p.publish_after_stream(slot, stream.raw(), None).unwrap();
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
        "{policy:?}: {frames} frames in {elapsed:?} ({:.0} fps)",
        frames as f64 / elapsed.as_secs_f64()
    );
}

#[test]
fn strict_wait_copy_and_zero_copy_bit_exact() {
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
