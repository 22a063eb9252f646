//! Small helpers shared by the modules.

/// A value unique within this process, mixed with the clock so that two processes with
/// recycled pids do not collide (test keys and memfd names: tests only).
#[cfg(any(test, feature = "testing"))]
pub fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t & 0xFFFF_FFFF) ^ (n << 32) ^ n
}

/// CLOCK_REALTIME in nanoseconds (R23: last_ack_ns).
pub fn realtime_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// CLOCK_MONOTONIC in nanoseconds (R25: pts when the producer has none).
pub fn monotonic_ns() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec; clock_gettime writes only it (an unknown
    // clock is EINVAL, leaving it zero).
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Copy a name into a fixed zero-terminated field, truncating to fit.
pub fn fill_cstr(field: &mut [u8], value: &str) {
    field.fill(0);
    let n = value.len().min(field.len().saturating_sub(1));
    field[..n].copy_from_slice(&value.as_bytes()[..n]);
}

/// Read a zero-terminated ASCII field leniently (non-printable bytes become '?').
pub fn read_cstr(field: &[u8]) -> String {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    field[..end]
        .iter()
        .map(|b| {
            if b.is_ascii_graphic() || *b == b' ' {
                *b as char
            } else {
                '?'
            }
        })
        .collect()
}
