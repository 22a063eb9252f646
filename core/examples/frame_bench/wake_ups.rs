//! Table 1, wake-ups: publish-to-receive latency of sleeping and spinning subscribers against
//! the machine's own handoff at the same pacing, their CPU, and an idle subscriber's CPU; and
//! `--host-probe`, the spinning path on a host-memory ring (no GPU).

use std::io::BufRead;
use std::time::Duration;

use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher, PublisherOptions};
use cuframes_core::wire::Format;

use crate::bench_common::child::{start, this_binary};
use crate::cli::idle_child_args;
use crate::config::{Config, Publish, PERIOD_1KHZ, PERIOD_60FPS};
use crate::futex;
use crate::run::{in_private_runtime_dir, run_config};

/// `--host-probe`: the spinning path on a host-memory ring only, so it runs without a GPU.
pub fn host_probe() {
    in_private_runtime_dir(|| {
        for (label, period, n) in [("60 fps", PERIOD_60FPS, 120), ("1 kHz", PERIOD_1KHZ, 2000)] {
            let (s50, _) = futex::handoff(period, n, true);
            for probe in [false, true] {
                let r = run_config(Config {
                    spin: Duration::from_millis(20),
                    host: true,
                    probe,
                    ..Config::new(1920, 1080, 1, n, Some(period))
                });
                println!(
                    "{label} host ring, {}: p50 {:.1} µs, p99 {:.1} µs (busy-poll handoff p50 {s50:.1} µs; visible p50 {:.1} µs, slot table read took {:.2} µs, recv took {:.2} µs; next_frame spinning itself on alternate frames p50 {:.1} µs, p99 {:.1} µs)",
                    if probe { "probe" } else { "spinning subscriber" },
                    r.p50, r.p99, r.visible_p50, r.table_p50, r.recv_p50, r.own_p50, r.own_p99
                );
            }
        }
    });
}

/// Table 1: wake-ups against the machine's futex handoff, at 60 fps and 1 kHz; spinning
/// subscribers with their CPU; an idle subscriber's CPU.
pub fn wake_ups(frames: u64) {
    println!("Wake-ups, 1920x1080 NV12, 1 zero-copy subscriber, STRICT_WAIT; baseline: futex handoff between two processes at the same pacing:");
    println!("| pacing | path | p50 | p99 | p50 / baseline | p99 / baseline | subscriber CPU |");
    println!("|---|---|---|---|---|---|---|");
    for (label, period, n, spin) in [
        (
            "60 fps",
            PERIOD_60FPS,
            frames.min(300),
            Duration::from_millis(20),
        ),
        (
            "1 kHz",
            PERIOD_1KHZ,
            frames.max(2000),
            Duration::from_millis(2),
        ),
    ] {
        let (b50, b99) = futex::handoff(period, n, false);
        println!(
            "| {label} | futex handoff (baseline) | {b50:.1} µs | {b99:.1} µs | 1.00 | 1.00 | |"
        );
        let (s50, s99) = futex::handoff(period, n, true);
        println!(
            "| {label} | busy-poll handoff (baseline for spinning) | {s50:.1} µs | {s99:.1} µs | {:.2} | {:.2} | |",
            s50 / b50,
            s99 / b99
        );
        // Each ring path against its own baseline: sleeping against the futex handoff,
        // spinning against the busy-poll handoff. The last two spinning rows split the ring's
        // path: without the publisher's CUDA work just before the publication, and without
        // CUDA at all (host slots).
        let spinning = |publish, host| Config {
            spin,
            publish,
            host,
            ..Config::new(1920, 1080, 1, n, Some(period))
        };
        for (path, config, base50, base99) in [
            (
                "ring, sleeping subscriber",
                Config::new(1920, 1080, 1, n, Some(period)),
                b50,
                b99,
            ),
            (
                "ring, spinning subscriber",
                spinning(Publish::AfterStream, false),
                s50,
                s99,
            ),
            (
                "ring, spinning, no GPU work before each publish",
                spinning(Publish::Plain, false),
                s50,
                s99,
            ),
            (
                "ring in host memory, spinning",
                spinning(Publish::Plain, true),
                s50,
                s99,
            ),
            // Where the spinning path's time goes: the publisher's side up to the header
            // store, against the subscriber's side after it; and whether it is the
            // publisher's core coming back from idle between frames.
            (
                "ring, probe: spins on global_seq itself, then next_frame",
                Config {
                    probe: true,
                    ..spinning(Publish::AfterStream, false)
                },
                s50,
                s99,
            ),
            (
                "ring, probe, no GPU work before each publish",
                Config {
                    probe: true,
                    ..spinning(Publish::Plain, false)
                },
                s50,
                s99,
            ),
            (
                "ring, probe, publisher spins until each frame is due",
                Config {
                    probe: true,
                    publisher_spins: true,
                    ..spinning(Publish::AfterStream, false)
                },
                s50,
                s99,
            ),
        ] {
            let spin = config.spin;
            let probe = config.probe;
            let r = run_config(config);
            let mut spin_note = if spin.is_zero() {
                String::new()
            } else {
                format!(" (spin {spin:?}; ratios to the busy-poll handoff)")
            };
            if probe {
                spin_note += &format!(
                    "; visible in the header after {:.1} µs p50, {:.1} µs p99; then the slot table read took {:.2} µs p50, a recv on an empty socket {:.2} µs p50; alternate frames read by next_frame spinning itself: p50 {:.1} µs, p99 {:.1} µs",
                    r.visible_p50, r.visible_p99, r.table_p50, r.recv_p50, r.own_p50, r.own_p99
                );
            }
            println!(
                "| {label} | {path}{spin_note} | {:.1} µs | {:.1} µs | {:.2} | {:.2} | {:.1} % |",
                r.p50,
                r.p99,
                r.p50 / base50,
                r.p99 / base99,
                r.cpu * 100.0
            );
        }
    }
    println!(
        "Idle subscriber (connected, no frames, sleeping) for 5 s: {:.2} % CPU",
        idle_cpu(Duration::from_secs(5)) * 100.0
    );
}

/// An idle subscriber's CPU: connected to a publisher that publishes nothing, for `for_how_long`.
fn idle_cpu(for_how_long: Duration) -> f64 {
    let key = format!("bench-idle-{}", std::process::id());
    let p = Publisher::create(&key, PublisherOptions::default()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 1920, 1080);
    cfg.memory = MemoryChoice::Cuda { device: 0 };
    p.enable_frames(cfg).unwrap();
    let mut cmd = this_binary();
    cmd.args(idle_child_args(&key));
    let started = start(cmd); // after its "ready"
    let (mut c, mut out, mut line) = (started.child, started.out, started.ready);
    std::thread::sleep(for_how_long);
    drop(p);
    line.clear();
    out.read_line(&mut line).unwrap();
    c.wait().unwrap();
    line.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}
