//! POSIX shared memory and memfd mappings, with bounds-checked, race-tolerant access.
//!
//! Everything in a mapping can change under us (another process writes it), so nothing here
//! hands out `&T` to mapped structs: fields are read and written through atomics at checked
//! offsets, and byte ranges are copied in and out with bounds checks.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{mmap, munmap, shm_open, shm_unlink, MapFlags, ProtFlags};
use nix::sys::stat::{fchmod, fstat, Mode};
use nix::unistd::ftruncate;

use crate::error::{Error, ErrorCode, Result};

/// A shared mapping of a whole file (SHM object or memfd).
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
}

// The mapping is plain shared memory; all access goes through atomics or explicit copies.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map `len` bytes of `fd`, read-write or read-only.
    pub fn map(fd: BorrowedFd<'_>, len: usize, writable: bool, what: &str) -> Result<Mapping> {
        let size = std::num::NonZeroUsize::new(len)
            .ok_or_else(|| Error::invalid(format!("{what}: cannot map 0 bytes")))?;
        let prot = if writable {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        // SAFETY: a fresh shared mapping of a file we hold; no existing memory is affected.
        let ptr = unsafe { mmap(None, size, prot, MapFlags::MAP_SHARED, fd, 0) }
            .map_err(|e| Error::os(format!("mmap {what}"), e))?;
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
            writable,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_writable(&self) -> bool {
        self.writable
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn check(&self, offset: usize, len: usize, align: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len) && offset % align == 0,
            "shared-memory access at {offset}+{len} outside a {}-byte mapping",
            self.len
        );
    }

    /// The 64-bit field at `offset` as an atomic. Offsets come from the wire layout, never
    /// from the peer, so a bad one is a bug in this crate: it panics.
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        self.check(offset, 8, 8);
        // SAFETY: in bounds and aligned (mmap is page aligned); lives as long as &self.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(offset).cast()) }
    }

    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        self.check(offset, 4, 4);
        // SAFETY: as above.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(offset).cast()) }
    }

    /// Copy `out.len()` bytes from `offset`. Concurrent writers may tear what is copied:
    /// callers validate with a seqlock.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len(), 1);
        // SAFETY: in bounds; source and destination cannot overlap (ours is private memory).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        }
    }

    pub fn write_bytes(&self, offset: usize, data: &[u8]) {
        assert!(self.writable, "write to a read-only mapping");
        self.check(offset, data.len(), 1);
        // SAFETY: in bounds, writable.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len())
        }
    }

    /// Fill a range with zeros.
    pub fn zero(&self, offset: usize, len: usize) {
        assert!(self.writable, "write to a read-only mapping");
        self.check(offset, len, 1);
        // SAFETY: in bounds, writable.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(offset), 0, len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping and nothing borrows it past &self.
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

fn shm_path(name: &str) -> Result<CString> {
    CString::new(format!("/{name}")).map_err(|_| Error::invalid("SHM name contains NUL"))
}

/// Create `/dev/shm/<name>` exclusively with `mode` and size `len`, mapped read-write.
/// Returns `AlreadyExists` when the name is taken.
pub fn create(name: &str, len: usize, mode: u32) -> Result<(OwnedFd, Mapping)> {
    let path = shm_path(name)?;
    let fd = shm_open(
        path.as_c_str(),
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(mode),
    )
    .map_err(|e| Error::os(format!("shm_open /dev/shm/{name}"), e))?;
    let built = (|| {
        // The umask may have stripped bits from the requested mode: set it exactly.
        fchmod(fd.as_fd(), Mode::from_bits_truncate(mode))
            .map_err(|e| Error::os(format!("fchmod /dev/shm/{name}"), e))?;
        ftruncate(fd.as_fd(), len as i64)
            .map_err(|e| Error::os(format!("ftruncate /dev/shm/{name}"), e))?;
        Mapping::map(fd.as_fd(), len, true, &format!("/dev/shm/{name}"))
    })();
    match built {
        Ok(map) => Ok((fd, map)),
        Err(e) => {
            let _ = shm_unlink(path.as_c_str());
            Err(e)
        }
    }
}

/// Open an existing `/dev/shm/<name>`; its size must be at least `min_len`. The whole object
/// is mapped. A permission problem names the object and the access that was needed.
pub fn open(name: &str, min_len: usize, writable: bool) -> Result<(OwnedFd, Mapping)> {
    let path = shm_path(name)?;
    let flags = if writable {
        OFlag::O_RDWR
    } else {
        OFlag::O_RDONLY
    } | OFlag::O_CLOEXEC;
    let fd = shm_open(path.as_c_str(), flags, Mode::empty()).map_err(|e| {
        if e == Errno::EACCES {
            Error::new(
                ErrorCode::Permission,
                format!(
                    "cannot open /dev/shm/{name} for {}: permission denied (the publisher's file mode or group must allow it)",
                    if writable { "reading and writing" } else { "reading" }
                ),
            )
        } else {
            Error::os(format!("shm_open /dev/shm/{name}"), e)
        }
    })?;
    let st = fstat(fd.as_fd()).map_err(|e| Error::os(format!("fstat /dev/shm/{name}"), e))?;
    let len = usize::try_from(st.st_size).unwrap_or(0);
    if len < min_len {
        return Err(Error::protocol(format!(
            "/dev/shm/{name} is {len} bytes; at least {min_len} expected"
        )));
    }
    let map = Mapping::map(fd.as_fd(), len, writable, &format!("/dev/shm/{name}"))?;
    Ok((fd, map))
}

/// Remove `/dev/shm/<name>`; a missing object is not an error.
pub fn unlink(name: &str) -> Result<()> {
    let path = shm_path(name)?;
    match shm_unlink(path.as_c_str()) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(Error::os(format!("shm_unlink /dev/shm/{name}"), e)),
    }
}

/// An anonymous memfd of `len` bytes (host-memory frame slots, R14).
pub fn memfd(name: &str, len: usize) -> Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| Error::invalid("memfd name contains NUL"))?;
    let fd =
        nix::sys::memfd::memfd_create(cname.as_c_str(), nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .map_err(|e| Error::os(format!("memfd_create {name}"), e))?;
    ftruncate(fd.as_fd(), len as i64)
        .map_err(|e| Error::os(format!("ftruncate memfd {name}"), e))?;
    Ok(fd)
}

/// Size of the file behind `fd`.
pub fn file_size(fd: BorrowedFd<'_>) -> Result<usize> {
    let st = fstat(fd).map_err(|e| Error::os(format!("fstat fd {}", fd.as_raw_fd()), e))?;
    Ok(usize::try_from(st.st_size).unwrap_or(0))
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    fn unique(tag: &str) -> String {
        format!(
            "cuframes-test-{tag}-{}-{}",
            std::process::id(),
            crate::util::unique_suffix()
        )
    }

    #[test]
    fn create_open_and_atomics() {
        let name = unique("shm");
        let (_fd, map) = create(&name, 8192, 0o600).unwrap();
        map.atomic_u64(16).store(42, Ordering::Release);
        let (_fd2, ro) = open(&name, 8192, false).unwrap();
        assert_eq!(ro.atomic_u64(16).load(Ordering::Acquire), 42);
        assert!(!ro.is_writable());
        assert_eq!(
            create(&name, 8192, 0o600).err().unwrap().code(),
            ErrorCode::AlreadyExists
        );
        assert_eq!(
            open(&name, 1 << 20, false).err().unwrap().code(),
            ErrorCode::Protocol
        );
        unlink(&name).unwrap();
        unlink(&name).unwrap();
        assert_eq!(
            open(&name, 0, false).err().unwrap().code(),
            ErrorCode::NotFound
        );
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_access_panics() {
        let fd = memfd("oob", 4096).unwrap();
        let map = Mapping::map(fd.as_fd(), 4096, true, "oob").unwrap();
        map.atomic_u64(4096);
    }
}
