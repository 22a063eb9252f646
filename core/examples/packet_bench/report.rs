//! The report's tables: one row per reader, the breakdown of each p99 tail, and their headers.

use crate::measure::{Measured, RunResult};

/// One reader's row of a transport table.
pub fn row(name: &str, run: &RunResult, m: &Measured) {
    println!(
        "| {name} | {:.0} | {:.1} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {:.1} | {:.1} |",
        m.pps(),
        m.mbps(),
        m.p50_us,
        m.p99_us,
        m.cpu_pct(),
        m.cpu_us_per_packet(),
        m.overruns + m.lost,
        100.0 * run.writer_cpu_s / run.writer_secs.max(1e-9),
        m.packets as f64
    );
}

/// A transport table's title and header.
pub fn header(title: &str) {
    println!("\n### {title}\n");
    println!(
        "| transport | packets/s | MB/s | p50 µs | p99 µs | reader CPU % | reader CPU µs/pkt | \
         lost (overruns/drops) | writer CPU % | packets read |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
}

/// Where each 1-reader p99 comes from: keyframes or not, after a wait or not, and what was
/// already queued when the reader asked for the packets of the tail (ring: packets; socket:
/// bytes).
pub fn tail_table(rows: &[(&str, &Measured)]) {
    println!("\nWhere the p99 comes from (1 reader; tail = packets at or above p99):\n");
    println!(
        "| reader | p99 µs | p99 keyframes | p99 others | reads that waited % | p99 after a \
         wait | p99 ready | tail: keyframes % | tail: after a wait % | tail: mean backlog |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (name, m) in rows {
        let f: Vec<String> = m.tail.iter().map(|(_, v)| format!("{v:.1}")).collect();
        println!("| {name} | {:.0} | {} |", m.p99_us, f.join(" | "));
    }
}

/// The mean of `f` over the readers `ms`.
pub fn mean(ms: &[Measured], f: impl Fn(&Measured) -> f64) -> f64 {
    ms.iter().map(&f).sum::<f64>() / ms.len().max(1) as f64
}
