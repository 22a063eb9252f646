//! A socket that never accepts, as a member of the runtime directory's group can plant it:
//! every connect to it blocks in the kernel until a
//! connection is accepted, which is never.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;

/// Bind a socket at `hidden`, listen with a backlog of 0, fill the backlog with non-blocking
/// connections until the kernel says EAGAIN, make it connectable by anyone (0666) and rename
/// it to `target`. The listener and the connections holding the backlog must live as long as
/// the squat.
pub fn squat_never_accepting(hidden: &Path, target: &Path) -> (UnixListener, Vec<OwnedFd>) {
    let listener = UnixListener::bind(hidden).unwrap();
    // SAFETY: listen on a socket we own; a second listen only changes the backlog.
    assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
    let path = std::ffi::CString::new(hidden.as_os_str().as_encoded_bytes()).unwrap();
    let mut held = Vec::new();
    loop {
        // SAFETY: socket() has no memory preconditions; the descriptor is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        assert!(fd >= 0);
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero sockaddr_un is valid; the path (checked short) is copied in.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = path.as_bytes_with_nul();
        assert!(bytes.len() <= addr.sun_path.len());
        for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // SAFETY: `addr` is a valid sockaddr_un of the size passed.
        let rc = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{e}");
            break;
        }
        held.push(fd);
        assert!(held.len() < 4096, "the backlog never filled");
    }
    assert!(!held.is_empty());
    std::fs::set_permissions(hidden, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::rename(hidden, target).unwrap();
    (listener, held)
}
