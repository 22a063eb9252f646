//! The baseline of table 1: the machine's own handoff between two processes, through a futex
//! (what a sleeping subscriber's wake-up costs at the least) or a polled word (what a spinning
//! subscriber's costs at the least).

use std::io::{BufRead, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cuframes_core::testing::monotonic_ns;

use crate::bench_common::child::{start, this_binary};
use crate::cli::futex_child_args;
use crate::latency::{join, pct};

/// The machine's own wake-up: a process sleeping in FUTEX_WAIT on a shared word, woken by
/// another that stores a timestamp and bumps the word (what a sleeping subscriber's wake-up
/// costs at the least). Child side: sleeps, records now - timestamp per wake, until the word
/// is u32::MAX. With `spin` it polls the word instead (PAUSE between loads, as a spinning
/// subscriber does): what a spinning subscriber's handoff costs at the least.
pub fn child(name: &str, spin: bool) {
    let (_fd, map) = cuframes_core::shm::open(name, 64, true).expect("open");
    let word = map.atomic_u32(0);
    let stamp = map.atomic_u64(8);
    println!("ready");
    std::io::stdout().flush().unwrap();
    let (mut last, mut lat) = (0u32, Vec::new());
    loop {
        let v = word.load(Ordering::Acquire);
        if v == u32::MAX {
            break;
        }
        if v != last {
            lat.push(monotonic_ns() - stamp.load(Ordering::Acquire) as i64);
            last = v;
            continue;
        }
        if spin {
            std::hint::spin_loop();
            continue;
        }
        // SAFETY: FUTEX_WAIT on a word of our shared mapping (alive across the call); the
        // kernel only reads it. Not private: the word is shared with the parent process.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                v,
                std::ptr::null::<libc::timespec>(),
            )
        };
    }
    println!("lat 0 {}", join(&lat));
}

/// Parent side of `child`: `count` handoffs at `period` to a sleeping (or, with `spin`,
/// polling) child; latency p50/p99 in µs.
pub fn handoff(period: Duration, count: u64, spin: bool) -> (f64, f64) {
    let name = format!("cuframes-bench-futex-{}", std::process::id());
    let (_fd, map) = cuframes_core::shm::create(&name, 64, 0o600).unwrap();
    let word = map.atomic_u32(0);
    let stamp = map.atomic_u64(8);
    let mut cmd = this_binary();
    cmd.args(futex_child_args(&name, spin));
    let started = start(cmd);
    let (mut c, mut out, mut line) = (started.child, started.out, started.ready);
    std::thread::sleep(Duration::from_millis(20)); // asleep in FUTEX_WAIT
    let wake = |w: cuframes_core::shm::Shared32<'_>| {
        // SAFETY: FUTEX_WAKE only uses the address as a key.
        unsafe { libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
    };
    let start = Instant::now();
    for n in 1..=count {
        let due = start + period * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        stamp.store(monotonic_ns() as u64, Ordering::Release);
        word.store(n as u32, Ordering::Release);
        wake(word);
    }
    std::thread::sleep(period);
    word.store(u32::MAX, Ordering::Release);
    wake(word);
    line.clear();
    out.read_line(&mut line).unwrap();
    c.wait().unwrap();
    let _ = cuframes_core::shm::unlink(&name);
    let mut lat: Vec<i64> = line
        .split_whitespace()
        .skip(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    (pct(&mut lat, 0.5), pct(&mut lat, 0.99))
}
