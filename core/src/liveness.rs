//! Is a process alive? `pidfd_open` where the kernel has it, `kill(pid, 0)` otherwise (§1).

use nix::errno::Errno;

/// True when `pid` names a live process (a zombie counts as dead is not guaranteed: the
/// kernel reports zombies as alive until reaped). A pid of 0 or one beyond `pid_t` is dead.
pub fn is_alive(pid: u64) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
