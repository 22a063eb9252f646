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

/// The process an object was made in. After `fork` a child has copies of the parent's objects
/// (their memory and descriptors) but not the parent's threads, and the shared state they
/// point at (sockets, SHM, ACK pages, CUDA memory) still belongs to the parent: an object that
/// is not [`Origin::is_here`] must not act on it (no messages, no flags, no ACKs, no unlinks, no
/// joins, no CUDA calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Origin {
    pid: u32,
}

impl Origin {
    /// This process.
    pub fn here() -> Origin {
        Origin { pid: current_pid() }
    }

    /// True in the process that made the object; false in a child forked from it. One atomic
    /// load (no system call): cheap enough for every frame.
    pub fn is_here(self) -> bool {
        self.pid == current_pid()
    }
}

/// This process's pid, kept in memory: set when first asked for, and again in every child by
/// a `pthread_atfork` handler (registered at that first call, so before any object that
/// records an [`Origin`] exists). `fork()` runs the handler (and so do Python's `os.fork()`
/// and `multiprocessing`'s fork start method, which call it); a process cloned by a raw
/// `clone` system call without it is not recognised.
fn current_pid() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Once;
    static PID: AtomicU32 = AtomicU32::new(0);
    static REGISTER: Once = Once::new();

    extern "C" fn in_child() {
        PID.store(std::process::id(), Ordering::Relaxed);
    }

    REGISTER.call_once(|| {
        PID.store(std::process::id(), Ordering::Relaxed);
        // SAFETY: `in_child` only calls getpid and stores an atomic, both async-signal-safe,
        // as a handler that runs in the child of a multithreaded process must be; it lives as
        // long as the program. A failed registration (ENOMEM) leaves children unrecognised:
        // their objects then act as the parent's would.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
    PID.load(Ordering::Relaxed)
}

/// Print a diagnostic line on stderr from library code: `cuframes: <message>`. Never raises
/// SIGPIPE and never panics (unlike `eprintln!`, which panics when stderr is a closed pipe, and
/// whose write kills a host that left SIGPIPE at its default when nobody reads stderr): the
/// write runs with SIGPIPE blocked on this thread, a SIGPIPE it raised is taken back before
/// the mask is restored, and a failed write is dropped. Safe in drops and on driver threads.
pub(crate) fn write_diag(message: std::fmt::Arguments<'_>) {
    let line = format!("cuframes: {message}\n");
    // SAFETY: sigset manipulation on local sets; pthread_sigmask changes this thread's mask
    // only, and it is restored below; write(2) on fd 2 reads `line` for its length;
    // sigtimedwait with a zero timeout only takes a pending SIGPIPE of this thread.
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        let mut old: libc::sigset_t = std::mem::zeroed();
        if libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old) != 0 {
            return;
        }
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending);
        let was_pending = libc::sigismember(&pending, libc::SIGPIPE) == 1;
        let mut rest = line.as_bytes();
        while !rest.is_empty() {
            let n = libc::write(2, rest.as_ptr().cast(), rest.len());
            if n > 0 {
                rest = &rest[n as usize..];
            } else if n < 0 && *libc::__errno_location() == libc::EINTR {
                continue;
            } else {
                if n < 0 && *libc::__errno_location() == libc::EPIPE && !was_pending {
                    let zero = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    };
                    while libc::sigtimedwait(&pipe, std::ptr::null_mut(), &zero) == -1
                        && *libc::__errno_location() == libc::EINTR
                    {}
                }
                break;
            }
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// `eprintln!` for library code: [`write_diag`] (no SIGPIPE, no panic).
macro_rules! diag {
    ($($arg:tt)*) => {
        $crate::util::write_diag(format_args!($($arg)*))
    };
}
pub(crate) use diag;
