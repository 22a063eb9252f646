//! The report, scenario by scenario: throttled (real time), unthrottled (capacity), and equal
//! load (the ring and the Unix socket at the same throughput), after the memcpy bandwidth that
//! bounds them all.

use std::time::Instant;

use crate::cli::{Args, Role};
use crate::measure::Measured;
use crate::report::{header, mean, row, tail_table};
use crate::stream::{packets, Pace, FPS, GOP};
use crate::transports::{run_ring, run_ring_as, run_udp, run_unix};

/// The whole report for `args`.
pub fn run(args: &Args) {
    let Args { secs, fast_n } = *args;
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("packet_bench: {cpus} CPUs, throttled {secs} s, unthrottled {fast_n} packets");
    let small = memcpy_gbps(84_000, 2 << 30);
    let big = memcpy_gbps(64 << 20, 4 << 30);
    println!("\nmemcpy: {small:.1} GB/s for 84 KB copies (cache), {big:.1} GB/s for 64 MiB copies");

    let real_time = packets(secs as usize * FPS as usize);
    let avg = real_time.iter().map(Vec::len).sum::<usize>() as f64 / real_time.len() as f64;
    println!(
        "stream: {} packets, mean {avg:.0} B ({:.1} Mbit/s at {FPS} fps), keyframe every {GOP}",
        real_time.len(),
        avg * 8.0 * FPS as f64 / 1e6
    );
    scenario(
        "Throttled: 20 Mbit/s, 30 fps (real time)",
        &real_time,
        Pace::RealTime,
        small,
        big,
    );
    let fast = packets(fast_n);
    let socket_pps = scenario(
        "Unthrottled: the same stream as fast as possible",
        &fast,
        Pace::Unthrottled,
        small,
        big,
    );
    equal_load(&fast, 0.9 * socket_pps);
}

/// memcpy bandwidth in GB/s for `len`-byte copies.
fn memcpy_gbps(len: usize, total: usize) -> f64 {
    let src = vec![0x5Au8; len];
    let mut dst = vec![0u8; len];
    let iters = (total / len).max(1);
    let t = Instant::now();
    for _ in 0..iters {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    (iters * len) as f64 / 1e9 / t.elapsed().as_secs_f64()
}

/// Returns the packets per second the Unix socket reader got (the load for `equal_load`).
fn scenario(
    title: &str,
    packets: &[Vec<u8>],
    pace: Pace,
    memcpy_small: f64,
    memcpy_big: f64,
) -> f64 {
    header(title);
    let r1 = run_ring(packets, 1, pace);
    row("ring, 1 reader", &r1, &r1.readers[0]);
    let r8 = run_ring(packets, 8, pace);
    for (i, m) in r8.readers.iter().enumerate() {
        row(&format!("ring, 8 readers: #{i}"), &r8, m);
    }
    let ux = run_unix(packets, pace);
    row("Unix stream socket, 1 reader", &ux, &ux.readers[0]);
    let ud = run_udp(packets, pace);
    row("UDP 127.0.0.1, 1 reader", &ud, &ud.readers[0]);
    // The demuxer's way of reading, without and with next_packet_into (a fresh packet each).
    let two = run_ring_as(Role::Demuxer2, packets, 1, pace);
    row(
        "ring, demuxer pattern: into the reader's buffer, then into a fresh packet (2 copies)",
        &two,
        &two.readers[0],
    );
    let one = run_ring_as(Role::Demuxer1, packets, 1, pace);
    row(
        "ring, demuxer pattern: next_packet_into a fresh packet (1 copy)",
        &one,
        &one.readers[0],
    );

    let spin = run_ring_as(Role::Demuxer1Spin, packets, 1, pace);
    row(
        "ring, demuxer pattern, 1 copy, spin 100 µs before each sleep",
        &spin,
        &spin.readers[0],
    );

    tail_table(&[
        ("ring, plain", &r1.readers[0]),
        ("ring, demuxer 2 copies", &two.readers[0]),
        ("ring, demuxer 1 copy", &one.readers[0]),
        ("ring, demuxer 1 copy, spin 100 µs", &spin.readers[0]),
        ("Unix socket", &ux.readers[0]),
    ]);
    let ring = &r1.readers[0];
    let (u, d) = (&ux.readers[0], &ud.readers[0]);
    println!("\nRatios (ring with 1 reader / baseline; > 1 means the ring has more):\n");
    for (name, b) in [("Unix socket", u), ("UDP", d)] {
        println!(
            "- vs {name}: MB/s {:.2}, packets delivered {:.2}, p50 latency {:.2}, p99 latency \
             {:.2}, reader CPU per packet {:.2}",
            ring.mbps() / b.mbps(),
            ring.packets as f64 / b.packets.max(1) as f64,
            ring.p50_us / b.p50_us.max(1e-9),
            ring.p99_us / b.p99_us.max(1e-9),
            ring.cpu_us_per_packet() / b.cpu_us_per_packet().max(1e-9),
        );
    }
    let (two, one, spin) = (&two.readers[0], &one.readers[0], &spin.readers[0]);
    println!(
        "- demuxer pattern, 1 copy / 2 copies: reader CPU per packet {:.2}, MB/s {:.2}, p99 {:.2}; \
         1 copy against the Unix socket: p99 {:.2}; 1 copy spinning 100 µs against the Unix \
         socket: p99 {:.2}, reader CPU per packet {:.2}, reader CPU % {:.1} vs {:.1}",
        one.cpu_us_per_packet() / two.cpu_us_per_packet().max(1e-9),
        one.mbps() / two.mbps().max(1e-9),
        one.p99_us / two.p99_us.max(1e-9),
        one.p99_us / u.p99_us.max(1e-9),
        spin.p99_us / u.p99_us.max(1e-9),
        spin.cpu_us_per_packet() / u.cpu_us_per_packet().max(1e-9),
        spin.cpu_pct(),
        u.cpu_pct()
    );
    let total8 = r8.readers.iter().map(Measured::mbps).sum::<f64>();
    println!(
        "- vs memcpy ({memcpy_small:.1} GB/s in cache, {memcpy_big:.1} GB/s for 64 MiB): \
         1 reader {:.3} / {:.3}; 8 readers together ({total8:.0} MB/s) {:.3} / {:.3}",
        ring.mbps() / 1e3 / memcpy_small,
        ring.mbps() / 1e3 / memcpy_big,
        total8 / 1e3 / memcpy_small,
        total8 / 1e3 / memcpy_big
    );
    println!(
        "- 8 readers: mean p50 {:.0} µs, mean p99 {:.0} µs, {} overruns in total",
        mean(&r8.readers, |m| m.p50_us),
        mean(&r8.readers, |m| m.p99_us),
        r8.readers.iter().map(|m| m.overruns).sum::<u64>()
    );
    ux.readers[0].pps()
}

/// The unthrottled comparison is one of two different loads: the ring's writer never waits,
/// the socket's blocks when its buffer is full, so each latency there belongs to its own
/// throughput. Here both carry the same load, `pps` packets per second, below what the socket
/// sustained unthrottled: latency at equal throughput.
fn equal_load(packets: &[Vec<u8>], pps: f64) {
    header(&format!(
        "Equal load: the same stream at {pps:.0} packets/s ({:.0} MB/s), 90 % of what the Unix \
         socket sustained unthrottled",
        pps * packets.iter().map(Vec::len).sum::<usize>() as f64 / packets.len() as f64 / 1e6
    ));
    let pace = Pace::PacketsPerSec(pps);
    let one = run_ring_as(Role::Demuxer1, packets, 1, pace);
    row(
        "ring, demuxer pattern: next_packet_into a fresh packet (1 copy)",
        &one,
        &one.readers[0],
    );
    let ux = run_unix(packets, pace);
    row("Unix stream socket, 1 reader", &ux, &ux.readers[0]);
    let (one, u) = (&one.readers[0], &ux.readers[0]);
    tail_table(&[("ring, demuxer 1 copy", one), ("Unix socket", u)]);
    println!(
        "\n- ring 1 copy / Unix socket at equal load: p50 {:.2}, p99 {:.2}, reader CPU per \
         packet {:.2}",
        one.p50_us / u.p50_us.max(1e-9),
        one.p99_us / u.p99_us.max(1e-9),
        one.cpu_us_per_packet() / u.cpu_us_per_packet().max(1e-9),
    );
}
