//! The latencies a child reports: the lists of nanoseconds on its "lat ..." line, written by the
//! child and read back by the parent, and their percentiles.

use crate::bench_common::stats::percentile_us;

/// A list of nanoseconds as a child prints it: space-separated.
pub fn join(v: &[i64]) -> String {
    v.iter()
        .map(|l| l.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The numbers of one list in a child's "lat ..." line.
pub fn nanoseconds(list: &str) -> impl Iterator<Item = i64> + '_ {
    list.split_whitespace().filter_map(|v| v.parse().ok())
}

/// Percentile `p` of `v` (nanoseconds, sorted here) in µs; NaN for an empty list, so that a
/// table shows the figure as missing.
pub fn pct(v: &mut [i64], p: f64) -> f64 {
    v.sort_unstable();
    percentile_us(v, p).unwrap_or(f64::NAN)
}
