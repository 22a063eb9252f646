//! CPU time (user + system) from `getrusage` and `wait4`.

use std::time::Duration;

/// User + system time of a `rusage`.
pub fn rusage_cpu(u: &libc::rusage) -> Duration {
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// CPU time (user + system) of this process so far.
pub fn self_cpu() -> Duration {
    // SAFETY: rusage is plain data; getrusage writes the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: fills `u` for this process; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    rusage_cpu(&u)
}
