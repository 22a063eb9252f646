//! Is a process alive? One answer for the whole crate (§1): the subscribers' wait for a dead
//! publisher, crash recovery at create (`publisher::stale`) and the operator tool
//! (`inspect`) all ask [`is_alive`].
//!
//! Alive means able to act: a process that exists and has not exited. A zombie (exited, not
//! yet reaped by its parent) counts as dead: it can no longer write a ring nor listen on a
//! socket, however long its parent takes to reap it.

use std::sync::atomic::Ordering;

use nix::errno::Errno;

use crate::shm::Mapping;
use crate::wire::PRODUCER_PID_OFFSET;

/// True when `pid` names a live process in our PID namespace: it exists (`pidfd_open` where
/// the kernel has it, `kill(pid, 0)` otherwise) and is not a zombie. A pid of 0 or one beyond
/// `pid_t` is dead.
pub fn is_alive(pid: u64) -> bool {
    exists(pid) && !is_zombie(pid)
}

/// Whether the kernel still has process `pid`, zombies included.
fn exists(pid: u64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd >= 0 {
        // SAFETY: we own the fd just returned.
        unsafe { libc::close(fd as libc::c_int) };
        return true;
    }
    match Errno::last() {
        Errno::ESRCH => false,
        // No pidfd_open (old kernel, seccomp): fall back to signal 0.
        _ => match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
            Ok(()) => true,
            Err(Errno::EPERM) => true,
            Err(_) => false,
        },
    }
}

/// Waits up to `timeout` for process `pid` to exit; true once it has (or when there is no such
/// process), false when it is still alive at the deadline. A pidfd (`pidfd_open`) becomes
/// readable when the process exits, so the wait sleeps in `poll`; without pidfds (old kernel,
/// seccomp) [`is_alive`] is asked every 5 ms.
pub fn wait_exit(pid: u64, timeout: std::time::Duration) -> bool {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return true;
    };
    if raw <= 0 {
        return true;
    }
    let deadline = std::time::Instant::now() + timeout;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
    if fd < 0 {
        if Errno::last() == Errno::ESRCH {
            return true;
        }
        while is_alive(pid) {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        return true;
    }
    // SAFETY: the fd was just returned to us and is owned by nothing else.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut pfd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&fd),
            events: libc::POLLIN,
            revents: 0,
        };
        // Rounded up: poll's milliseconds never end the wait before the deadline.
        let ms = libc::c_int::try_from(left.as_micros().div_ceil(1000)).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd, for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return true;
        }
        let interrupted = n < 0 && Errno::last() == Errno::EINTR;
        if !interrupted && (n < 0 || std::time::Instant::now() >= deadline) {
            return !is_alive(pid);
        }
    }
}

/// Whether `/proc/<pid>/stat` says the process has exited (state Z or X). No /proc entry:
/// not a zombie (the process is gone or /proc is not mounted; [`exists`] decides).
fn is_zombie(pid: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": comm may contain ')' and spaces, so look after the last ')'.
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next())
        .is_some_and(|s| s == 'Z' || s == 'X')
}

/// What the header of a mapped SHM object says about its producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// One of the expected magics, and the pid at [`PRODUCER_PID_OFFSET`].
    Producer(u64),
    /// A magic that is none of the expected ones: not an object of that kind.
    ForeignMagic(u32),
    /// The mapping ends before the pid.
    TooShort,
}

/// The producer pid recorded in a mapped cuframes SHM header whose magic is one of `magics`
/// (see [`crate::wire::SHM_MAGICS`]).
pub(crate) fn recorded_producer(map: &Mapping, magics: &[u32]) -> Recorded {
    if map.len() < PRODUCER_PID_OFFSET + 8 {
        return Recorded::TooShort;
    }
    let magic = map.load_u32(0, Ordering::Acquire);
    if !magics.contains(&magic) {
        return Recorded::ForeignMagic(magic);
    }
    Recorded::Producer(map.load_u64(PRODUCER_PID_OFFSET, Ordering::Acquire))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A child that has exited and is not reaped yet (a zombie), with its pid.
    pub(crate) fn zombie_child() -> (std::process::Child, u64) {
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as u64;
        let t = std::time::Instant::now();
        while !is_zombie(pid) && t.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(is_zombie(pid), "child {pid} did not become a zombie");
        (child, pid)
    }

    #[test]
    fn self_is_alive_and_a_reaped_child_is_not() {
        assert!(is_alive(std::process::id() as u64));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as u64;
        child.wait().unwrap();
        assert!(!is_alive(pid));
        assert!(!is_alive(0));
        assert!(!is_alive(u64::MAX));
    }

    /// A zombie is dead for every caller (the subscribers, crash recovery and the operator
    /// tool), although the kernel still reports it: it can no longer write a ring nor listen.
    #[test]
    fn a_zombie_is_dead() {
        let (mut child, pid) = zombie_child();
        assert!(
            exists(pid),
            "the kernel still reports the zombie (the old is_alive)"
        );
        assert!(!is_alive(pid));
        child.wait().unwrap();
        assert!(!exists(pid));
        assert!(!is_alive(pid));
    }

    #[test]
    fn wait_exit_returns_when_the_process_exits_and_times_out_while_it_lives() {
        use std::time::{Duration, Instant};
        let mut child = std::process::Command::new("sleep")
            .arg("0.3")
            .spawn()
            .unwrap();
        let pid = child.id() as u64;
        let t = Instant::now();
        assert!(
            !wait_exit(pid, Duration::from_millis(50)),
            "sleep 0.3 is still alive"
        );
        assert!(t.elapsed() >= Duration::from_millis(50));
        // The exit is seen as the child exits (a zombie has exited), well before 5 s.
        assert!(wait_exit(pid, Duration::from_secs(5)));
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "took {:?}",
            t.elapsed()
        );
        child.wait().unwrap();
        assert!(
            wait_exit(pid, Duration::from_secs(5)),
            "a reaped process is gone"
        );
        assert!(
            wait_exit(0, Duration::from_secs(5)),
            "no pid: nothing to wait for"
        );
    }

    #[test]
    fn the_recorded_producer_is_read_at_the_wire_offset() {
        let fd = crate::shm::memfd("liveness-test", 64).unwrap();
        let map = Mapping::map(std::os::fd::AsFd::as_fd(&fd), 64, true, "test").unwrap();
        let magics = crate::wire::SHM_MAGICS;
        assert_eq!(recorded_producer(&map, &magics), Recorded::ForeignMagic(0));
        map.atomic_u32(0)
            .store(crate::wire::PACKET_MAGIC, Ordering::Relaxed);
        map.atomic_u64(0x18).store(4242, Ordering::Relaxed);
        assert_eq!(recorded_producer(&map, &magics), Recorded::Producer(4242));
        assert_eq!(
            recorded_producer(&map, &[crate::wire::FRAME_MAGIC]),
            Recorded::ForeignMagic(crate::wire::PACKET_MAGIC)
        );
        let short = Mapping::map(std::os::fd::AsFd::as_fd(&fd), 0x18, false, "short").unwrap();
        assert_eq!(recorded_producer(&short, &magics), Recorded::TooShort);
    }
}
