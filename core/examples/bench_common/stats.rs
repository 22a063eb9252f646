//! Percentiles of latencies in nanoseconds, reported in µs.

/// The index of percentile `p` (0.0..=1.0) in a sorted list of `len` values (nearest rank;
/// 0 for an empty list).
pub fn rank(len: usize, p: f64) -> usize {
    (len.saturating_sub(1) as f64 * p).round() as usize
}

/// Percentile `p` of `sorted` (nanoseconds, ascending) in µs; `None` for an empty list, which
/// each benchmark prints its own way.
pub fn percentile_us(sorted: &[i64], p: f64) -> Option<f64> {
    sorted
        .get(rank(sorted.len(), p))
        .map(|&ns| ns as f64 / 1000.0)
}
