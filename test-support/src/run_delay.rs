//! CPU run-queue delay of the calling thread (schedstat), to bound waits net of starvation.

use std::time::Duration;

/// The calling thread's run-queue delay so far (`/proc/thread-self/schedstat`, second field),
/// if the kernel keeps schedstats: CPU-starved time that a bound on a wall-clock wait must
/// not count on a loaded 2-core machine.
pub struct RunDelay(Option<std::fs::File>);

impl RunDelay {
    /// Whether the kernel reports it (else net times are wall times).
    pub fn available(&self) -> bool {
        self.0.is_some()
    }
}

impl RunDelay {
    pub fn of_this_thread() -> RunDelay {
        let rd = RunDelay(std::fs::File::open("/proc/thread-self/schedstat").ok());
        match rd.get() {
            Some(_) => rd,
            None => RunDelay(None),
        }
    }

    pub fn get(&self) -> Option<Duration> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.0.as_ref()?.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let ns = text.split_whitespace().nth(1)?.parse().ok()?;
        Some(Duration::from_nanos(ns))
    }
}
