//! Opening SHM objects read-only for inspection (through the one hardened open,
//! [`crate::shm::open_regular`]), with errors that name the object and the access that was
//! missing. Process liveness is [`crate::liveness::is_alive`].

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::SystemTime;

use nix::errno::Errno;

use crate::error::{Error, ErrorCode, Result};
use crate::shm::{Mapping, OpenFailure};

/// Where POSIX SHM objects live on Linux.
pub const SHM_DIR: &str = "/dev/shm";

/// What `stat` says about an object (works without read permission on the object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (e.g. 0o660).
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
    /// Last modification.
    pub modified: SystemTime,
    /// Whether it is a Unix socket.
    pub is_socket: bool,
}

impl ObjectMeta {
    /// `stat` (not following symlinks) of `path`; `None` when it does not exist.
    pub fn of(path: &Path) -> Option<ObjectMeta> {
        use std::os::unix::fs::FileTypeExt;
        let md = std::fs::symlink_metadata(path).ok()?;
        Some(ObjectMeta {
            size: md.size(),
            mode: md.mode() & 0o7777,
            uid: md.uid(),
            gid: md.gid(),
            modified: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            is_socket: md.file_type().is_socket(),
        })
    }

    /// Seconds since the object was last modified (0 if its clock is ahead of ours).
    pub fn age_secs(&self) -> f64 {
        SystemTime::now()
            .duration_since(self.modified)
            .map_or(0.0, |d| d.as_secs_f64())
    }
}

/// The path of SHM object `name` (relative to /dev/shm).
pub fn shm_path(name: &str) -> std::path::PathBuf {
    Path::new(SHM_DIR).join(name)
}

/// A permission error for `path` that says who owns it, its mode, who we are and which
/// access (`needed`, e.g. "read (r)") is missing.
pub fn permission_error(path: &Path, needed: &str, doing: &str) -> Error {
    // SAFETY: getuid/getgid take no arguments, touch no memory of ours and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let owner = match ObjectMeta::of(path) {
        Some(m) => format!(
            " (mode {:04o}, owner uid {}, group gid {})",
            m.mode, m.uid, m.gid
        ),
        None => String::new(),
    };
    Error::new(
        ErrorCode::Permission,
        format!(
            "permission denied: cannot {doing} {}{owner}; this user (uid {uid}, gid {gid}) needs \
             {needed} permission on it: run as its owner or root, or have the publisher create \
             it with a group mode (file_mode 0640 or 0660) and a group this user is in \
             (see docs/operations.md)",
            path.display()
        ),
    )
}

/// A read-only mapping of (a prefix of) an SHM object.
pub struct ReadOnlyObject {
    /// The mapping (`PROT_READ`).
    pub map: Mapping,
    /// Size of the whole object (the mapping may be shorter: at most `max_map` bytes).
    pub size: usize,
}

/// Open `/dev/shm/<name>` read-only and map at most `max_map` bytes of it read-only.
/// Errors: `NotFound`, `Permission` (naming the object and "read (r)"), `Protocol` for an
/// empty object.
pub fn open_readonly(name: &str, max_map: usize) -> Result<ReadOnlyObject> {
    let path = shm_path(name);
    let (fd, size) = crate::shm::open_regular(name, false).map_err(|e| match e {
        OpenFailure::Os(Errno::EACCES | Errno::EPERM) => {
            permission_error(&path, "read (r)", "open")
        }
        OpenFailure::Os(Errno::ENOENT) => Error::new(
            ErrorCode::NotFound,
            format!("{} does not exist", path.display()),
        ),
        OpenFailure::Os(other) => Error::os(format!("open {}", path.display()), other),
        OpenFailure::NotRegular(_) => {
            Error::protocol(format!("{} is not a regular file", path.display()))
        }
    })?;
    if size == 0 {
        return Err(Error::protocol(format!(
            "{} is corrupt: it is empty (0 bytes)",
            path.display()
        )));
    }
    let map = Mapping::map(
        fd.as_fd(),
        size.min(max_map),
        false,
        &path.display().to_string(),
    )?;
    Ok(ReadOnlyObject { map, size })
}

/// The first four bytes of an object (its magic), if it is a regular file we may read.
pub fn read_magic(name: &str) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    let (fd, _) = crate::shm::open_regular(name, false).ok()?;
    let file = std::fs::File::from(fd);
    let mut b = [0u8; 4];
    file.read_exact_at(&mut b, 0).ok()?;
    Some(u32::from_le_bytes(b))
}

#[cfg(test)]
mod fifo_tests {
    use super::*;

    /// Trust boundary: a FIFO at `/dev/shm/cuframes-K` must not hang `cuframes ls`, `stat`
    /// and `clean` (an open without O_NONBLOCK would): the inspector uses the one hardened
    /// open of `shm`.
    #[test]
    fn a_fifo_does_not_hang_the_inspector() {
        let name = format!("cuframes-inspect-fifo-{}", std::process::id());
        let path = format!("/dev/shm/{name}");
        nix::unistd::mkfifo(
            path.as_str(),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let t = std::time::Instant::now();
        let e = open_readonly(&name, 4096).err().expect("a FIFO was mapped");
        let _ = std::fs::remove_file(&path);
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert!(
            e.message().contains("not a regular file"),
            "{}",
            e.message()
        );
    }

    /// `read_magic` (which tells `cuframes ls` whether `cuframes-K-packets` is key K's packet
    /// ring or key `K-packets`' frame ring) uses the hardened open too: with a plain
    /// `File::open`, a FIFO at such a name would hang the whole listing.
    #[test]
    fn read_magic_does_not_hang_on_a_fifo() {
        let name = format!("cuframes-inspect-magic-{}-packets", std::process::id());
        let path = format!("/dev/shm/{name}");
        nix::unistd::mkfifo(
            path.as_str(),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let n = name.clone();
        std::thread::spawn(move || tx.send(read_magic(&n)));
        let got = rx.recv_timeout(std::time::Duration::from_secs(2));
        if got.is_err() {
            // Unblock the hung open so the thread can end, then fail.
            let _ = std::fs::OpenOptions::new().write(true).open(&path);
        }
        let _ = std::fs::remove_file(&path);
        assert_eq!(got.expect("read_magic hung on a FIFO"), None);

        // And a regular object still gives its magic.
        let (_fd, map) = crate::shm::create(&name, 64, 0o600).unwrap();
        map.atomic_u32(0).store(
            crate::wire::PACKET_MAGIC,
            std::sync::atomic::Ordering::Relaxed,
        );
        let magic = read_magic(&name);
        crate::shm::unlink(&name).unwrap();
        assert_eq!(magic, Some(crate::wire::PACKET_MAGIC));
    }
}
