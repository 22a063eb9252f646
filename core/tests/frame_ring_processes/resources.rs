//! Descriptors and mappings over many cycles, and the CPU of an idle subscriber.

use cuframes_test_support as common;

use std::time::{Duration, Instant};

use common::{child, count_fds, count_maps, wait_until, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::{Format, SubscriberMode};
use cuframes_core::ErrorCode;

use super::roles::publish;

#[test]
fn no_descriptor_or_mapping_leak_over_1000_cycles() {
    // Descriptors and mappings are counted per process: the check runs in a child of its own,
    // so that the other tests of this binary, running in parallel, do not move the counts.
    let env = TestEnv::new("leakparent");
    let out = child::command("leak_check")
        .env("CUFRAMES_TEST_KEY", &env.key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "leak check failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn leak_check() {
    let env = TestEnv::new("leak");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    publish(&p, 1).unwrap();
    // Warm up (lazy allocations of the allocator and the test harness).
    for _ in 0..10 {
        drop(Subscriber::connect(&env.key, &env.subscriber_options("w")).unwrap());
    }
    wait_until("warm-up disconnects", Duration::from_secs(5), || {
        p.subscriber_count() == 0
    });
    let (fds, maps) = (count_fds(), count_maps());
    for i in 0..1000 {
        let mut opts = env.subscriber_options("cycle");
        opts.mode = if i % 2 == 0 {
            SubscriberMode::Copy
        } else {
            SubscriberMode::ZeroCopy
        };
        let s = Subscriber::connect(&env.key, &opts).unwrap();
        drop(s);
    }
    wait_until("disconnects", Duration::from_secs(10), || {
        p.subscriber_count() == 0
    });
    // The server thread frees a connection's table entry (subscriber_count) before it drops
    // the connection's socket: wait up to 5 s for the count rather than a fixed 50 ms.
    let t = Instant::now();
    while count_fds() != fds && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(count_fds(), fds, "file descriptors leaked");
    assert!(
        count_maps() <= maps + 2,
        "mappings leaked: {} -> {}",
        maps,
        count_maps()
    );
}

fn thread_cpu() -> Duration {
    // SAFETY: rusage is plain old data, for which all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for getrusage to fill.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(us(ru.ru_utime) + us(ru.ru_stime))
}

#[test]
fn an_idle_subscriber_sleeps_and_wakes_fast() {
    let env = TestEnv::new("idle");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let opts = env.subscriber_options("idle");
    let key = env.key.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut s = Subscriber::connect(&key, &opts).unwrap();
        let cpu0 = thread_cpu();
        let wall = Instant::now();
        let e = s.next_frame(Some(Duration::from_secs(2))).err().unwrap();
        assert_eq!(e.code(), ErrorCode::Timeout);
        let idle_share =
            thread_cpu().saturating_sub(cpu0).as_secs_f64() / wall.elapsed().as_secs_f64();
        tx.send(idle_share).unwrap();
        // Until the last of the 200 frames: a reader that a loaded machine delays may find
        // some overwritten (the ring drops the oldest), which is not what this test measures.
        let mut lat = Vec::new();
        let mut seq = 0;
        while seq < 200 {
            let f = s.next_frame(Some(Duration::from_secs(5))).unwrap();
            seq = f.seq;
            lat.push(cuframes_core::testing::monotonic_ns() - f.pts_ns);
        }
        lat
    });
    let idle_share = rx.recv().unwrap();
    eprintln!("idle subscriber CPU: {:.3}% of a core", idle_share * 100.0);
    assert!(
        idle_share < 0.01,
        "idle subscriber used {:.2}% of a core",
        idle_share * 100.0
    );
    let layout = p.frame_layout().unwrap().clone();
    let planes = common::planes_for(&layout, 1);
    let refs: Vec<&[u8]> = planes.iter().map(|v| v.as_slice()).collect();
    let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(2));
        p.publish_host_planes(
            &refs,
            &strides,
            Some(cuframes_core::testing::monotonic_ns()),
        )
        .unwrap();
    }
    let mut lat = reader.join().unwrap();
    lat.sort();
    // Reported, not asserted: timing belongs to benchmarks.
    let n = lat.len();
    eprintln!(
        "publish-to-receive latency p50 {} us, p99 {} us ({n} of 200 frames read)",
        lat[n / 2] / 1000,
        lat[n * 99 / 100] / 1000
    );
}
