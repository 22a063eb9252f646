//! The key's listening socket: the runtime directory (R16) and a bind that gives the socket
//! its mode without a path anyone could redirect.

use std::os::unix::net::UnixListener;

use crate::error::{Error, ErrorCode, Result};
use crate::paths;

/// Create the runtime directory 0755 if missing (R16).
pub(super) fn ensure_runtime_dir(dir: &std::path::Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::PermissionDenied {
                ErrorCode::Permission
            } else {
                ErrorCode::Io
            };
            Error::new(
                code,
                format!(
                    "cannot create runtime directory {}: {e} (create it as root, or set {})",
                    dir.display(),
                    paths::RUNTIME_DIR_ENV
                ),
            )
        })
}

/// Bind the listening socket at `path` with `mode`, never changing a mode through a path that
/// someone else could have redirected. The runtime directory is writable by the group, so a
/// member could replace the socket by a symlink between `bind` and a `chmod` by path, and a
/// root publisher would then chmod the symlink's target. Instead the socket gets its mode
/// from `bind` itself: Linux creates the socket file with the socket's own inode mode (set
/// with `fchmod` before `bind`) masked by the umask. The umask belongs to the whole process,
/// and other threads (an application's) may be creating files, so the `bind` with umask 0
/// runs in a forked child that only calls `umask`, `bind`, `write` and `_exit` (all
/// async-signal-safe) on the same socket. The path is bound directly, so `/proc/net/unix`
/// names it.
///
/// The child reports bind's result through a close-on-exec pipe, not through its exit status:
/// the host's signal dispositions then do not matter. With SIGCHLD ignored the kernel reaps
/// the child itself and `waitpid` fails with ECHILD; a host's SIGCHLD handler may reap it
/// first. The `waitpid` here only keeps a zombie from staying where nobody else reaps.
pub(super) fn bind(path: &std::path::Path, mode: u32) -> Result<UnixListener> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType, SockaddrLike, UnixAddr};
    use std::os::fd::AsRawFd;
    let io = |what: &str, e: nix::errno::Errno| {
        Error::new(ErrorCode::Io, format!("{what} {}: {e}", path.display()))
    };
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| io("socket for", e))?;
    nix::sys::stat::fchmod(&fd, nix::sys::stat::Mode::from_bits_truncate(mode & 0o777))
        .map_err(|e| io("fchmod the socket for", e))?;
    let addr = UnixAddr::new(path).map_err(|e| io("address", e))?;
    let (report_rx, report_tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| io("pipe for the bind of", e))?;
    let report_fd = report_tx.as_raw_fd();
    // SAFETY: the child only calls async-signal-safe functions (umask, bind, write, _exit) on
    // memory and descriptors that were set up before the fork (`addr`, `fd`, `report_fd`) and
    // exits without returning into Rust code, as required after fork in a multithreaded
    // process.
    let child = unsafe { libc::fork() };
    let fork_error = nix::errno::Errno::last();
    if child == 0 {
        // SAFETY: in the child; see above. The parent holds the read end open until it has
        // read the report, so the write cannot raise SIGPIPE.
        unsafe {
            libc::umask(0);
            let rc = libc::bind(fd.as_raw_fd(), addr.as_ptr().cast(), addr.len());
            let err: i32 = if rc == 0 {
                0
            } else {
                *libc::__errno_location()
            };
            let report = err.to_ne_bytes();
            libc::write(report_fd, report.as_ptr().cast(), report.len());
            libc::_exit(0);
        }
    }
    // Only the child holds the write end now: a child that ends without reporting ends the
    // read with EOF.
    drop(report_tx);
    if child < 0 {
        return Err(io("fork to bind", fork_error));
    }
    let mut report = [0u8; 4];
    let mut got = 0;
    let read = loop {
        if got == report.len() {
            break Ok(());
        }
        match nix::unistd::read(&report_rx, &mut report[got..]) {
            Ok(0) => break Ok(()),
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => break Err(e),
        }
    };
    // ECHILD: already reaped (SIGCHLD ignored, or the host's handler); nothing is lost.
    while let Err(nix::errno::Errno::EINTR) =
        nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None)
    {}
    read.map_err(|e| io("read the bind result of", e))?;
    if got < report.len() {
        // The child ended (killed?) before reporting: the socket is ours exactly when it is
        // bound, which the socket itself tells.
        let bound = nix::sys::socket::getsockname::<UnixAddr>(fd.as_raw_fd())
            .is_ok_and(|a| a.path().is_some_and(|p| !p.as_os_str().is_empty()));
        if !bound {
            return Err(Error::new(
                ErrorCode::Io,
                format!(
                    "bind {}: the binding child ended without reporting a result",
                    path.display()
                ),
            ));
        }
    } else {
        match i32::from_ne_bytes(report) {
            0 => {}
            libc::EADDRINUSE => {
                return Err(Error::new(
                    ErrorCode::AlreadyExists,
                    format!("{} is taken by another publisher", path.display()),
                ))
            }
            code => return Err(io("bind", nix::errno::Errno::from_raw(code))),
        }
    }
    let cleanup = |e: Error| {
        let _ = std::fs::remove_file(path);
        e
    };
    nix::sys::socket::listen(
        &fd,
        nix::sys::socket::Backlog::new(128).unwrap_or(nix::sys::socket::Backlog::MAXCONN),
    )
    .map_err(|e| cleanup(io("listen on", e)))?;
    Ok(UnixListener::from(fd))
}
