//! Frames written by a kernel on the publisher's stream while another stream loads the
//! device; every subscriber process checks every byte on its own GPU with a kernel: both
//! policies, COPY and ZERO_COPY, and no host copy on the way.

use cuframes_test_support as common;

use std::io::Read;
use std::process::Child;
use std::time::{Duration, Instant};

use common::{child, cuda_publisher, gpu_or_skip, TestEnv};
use cuframes_core::cuda::{self, CudaDevice, Stream};
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::testing;
use cuframes_core::wire::{Format, MemoryKind, Policy, SubscriberMode};
use cuframes_core::ErrorCode;

/// A subscriber process on device 0 in the mode `mode` (`copy` or `zero_copy`) that checks
/// every frame with a kernel and reports one `RESULT` line.
pub fn gpu_subscriber(mode: &str) {
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
    let mut c = child::role_command(mode, env);
    if accept {
        c.env("CUFRAMES_TEST_ACCEPT", "1");
    }
    c.spawn().unwrap()
}

fn result(c: &mut Child) -> std::collections::HashMap<String, u64> {
    let (code, fields, out) = child::wait_for_result(c);
    assert!(code == Some(0), "child failed: {out}");
    fields.unwrap_or_else(|| panic!("no RESULT: {out}"))
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
    let mut cfg = FrameRingConfig::new(Format::Nv12, 1920, 1080);
    cfg.policy = policy;
    cfg.ring_size = 4;
    cfg.ack_timeout = Duration::from_secs(10);
    cfg.memory = MemoryChoice::Cuda { device: 0 };
    let p = cuda_publisher(&env, cfg);
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
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
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
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
    let modes = [("copy", false), ("zero_copy", true), ("copy", false)];
    run_with(Policy::DropOldest, &modes, 300, Publish::OnStream);
}

#[test]
fn strict_wait_copy_and_zero_copy_bit_exact() {
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
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
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
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
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
    let modes: Vec<(&str, bool)> = (0..8)
        .map(|i| (if i % 2 == 0 { "copy" } else { "zero_copy" }, false))
        .collect();
    run(Policy::StrictWait, &modes, 200);
}
