//! POSIX shared memory and memfd mappings, with bounds-checked, race-tolerant access.
//!
//! Everything in a mapping can change under us (another process writes it), so nothing here
//! hands out `&T` to mapped structs: fields are read and written through [`Shared64`] and
//! [`Shared32`] at checked offsets, and byte ranges are copied in and out with bounds checks.
//!
//! # Read-only mappings
//!
//! Rust allows only *Relaxed* atomic loads of at most register width on read-only memory
//! ("Atomic accesses to read-only memory" in `core::sync::atomic`): an Acquire load, a store
//! or a read-modify-write (even a `compare_exchange` that fails) may fault or be undefined
//! there. So the field handles never form an RMW-capable atomic over a read-only mapping:
//! their loads are a Relaxed load plus fences (see [`Shared64::load`]), and their writes
//! panic (a bug in this crate) instead of faulting.
//!
//! # One file
//!
//! The mapping and its field handles, and the one hardened open (and create, place, unlink) of
//! `/dev/shm` objects, are about 610 lines of production code; the rest of the file is their
//! tests, which exercise both together (a read-only mapping of an object opened here). They
//! share one set of invariants (no `&T` into shared memory, every object opened without
//! following links or blocking on FIFOs), which is why they are kept in one place.

use std::ffi::CString;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{mmap, munmap, shm_open, shm_unlink, MapFlags, ProtFlags};
use nix::sys::stat::{fchmod, fstat, Mode};
use nix::unistd::ftruncate;

use crate::error::{Error, ErrorCode, Result};

// A Relaxed 64-bit load is only documented as valid on read-only memory where the register
// width is 8 bytes (the table in `core::sync::atomic`). Other targets would need another way
// to read 64-bit fields of a read-only mapping.
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "loongarch64",
    target_arch = "mips64",
    target_arch = "mips64r6",
    target_arch = "powerpc64",
    target_arch = "riscv64",
    target_arch = "sparc64",
    target_arch = "s390x"
)))]
compile_error!(
    "cuframes reads 64-bit fields of read-only mappings with Relaxed atomic loads, which Rust \
     only allows on targets with 8-byte registers"
);

/// A shared mapping of a whole file (SHM object or memfd).
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
}

// SAFETY: the mapping is process-wide shared memory owned by this value (unmapped once, in
// Drop); it holds no thread-local state, so it may move to another thread.
unsafe impl Send for Mapping {}
// SAFETY: `&Mapping` only reads and writes the mapped bytes through atomics (`Shared64`,
// `Shared32`) or raw-pointer copies that never form references into the mapping; concurrent
// use from several threads is the same as concurrent use from several processes, which every
// caller already tolerates.
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
        // SAFETY: addr is None, so the kernel picks fresh addresses: no existing memory of this
        // process is replaced. `fd` is open for the duration of the call.
        let ptr = unsafe { mmap(None, size, prot, MapFlags::MAP_SHARED, fd, 0) }
            .map_err(|e| Error::os(format!("mmap {what}"), e))?;
        Ok(Mapping {
            ptr: ptr.cast(),
            len,
            writable,
        })
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping has no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the mapping is `PROT_WRITE`.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The address of the mapping's first byte.
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

    /// The 64-bit field at `offset`. Offsets come from the wire layout, never from the peer,
    /// so a bad one (out of bounds, misaligned) is a bug in this crate: it panics.
    pub fn atomic_u64(&self, offset: usize) -> Shared64<'_> {
        self.check(offset, 8, 8);
        Shared64 {
            // SAFETY: `check` put offset..offset + 8 inside the mapping, so the pointer stays
            // within one allocation and is non-null (the mapping's base is).
            ptr: unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(offset).cast()) },
            writable: self.writable,
            _map: PhantomData,
        }
    }

    /// The 32-bit field at `offset` (panics like [`Self::atomic_u64`]).
    pub fn atomic_u32(&self, offset: usize) -> Shared32<'_> {
        self.check(offset, 4, 4);
        Shared32 {
            // SAFETY: as in `atomic_u64`, for 4 bytes.
            ptr: unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(offset).cast()) },
            writable: self.writable,
            _map: PhantomData,
        }
    }

    /// Load the 64-bit field at `offset`; valid on read-only mappings (see [`Shared64::load`]).
    pub fn load_u64(&self, offset: usize, order: Ordering) -> u64 {
        self.atomic_u64(offset).load(order)
    }

    /// Load the 32-bit field at `offset`; valid on read-only mappings (see [`Shared32::load`]).
    pub fn load_u32(&self, offset: usize, order: Ordering) -> u32 {
        self.atomic_u32(offset).load(order)
    }

    /// Copy `out.len()` bytes from `offset`. Concurrent writers may tear what is copied:
    /// callers validate with a seqlock.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len(), 1);
        // SAFETY: `check` put offset..offset + out.len() inside the mapping, which is readable
        // while &self lives. `out` is memory of this process, not of the mapping (nothing
        // safe hands out a slice of a mapping), so the ranges do not overlap. The copy goes
        // through raw pointers: no reference to the shared bytes is formed, so a peer's
        // concurrent write can only tear what is copied.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        }
    }

    /// Copy `data` into the mapping at `offset` (bounds-checked). Panics on a read-only mapping.
    pub fn write_bytes(&self, offset: usize, data: &[u8]) {
        assert!(self.writable, "write to a read-only mapping");
        self.check(offset, data.len(), 1);
        // SAFETY: `check` put the range inside the mapping, which is PROT_WRITE (asserted).
        // `data` is a live shared slice, and a slice into a mapping exists only under the
        // contract of an unsafe accessor that forbids writing those bytes while it lives, so
        // `data` does not overlap the destination. No reference to the destination exists.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len())
        }
    }

    /// Fault the whole mapping in now (`MADV_POPULATE_WRITE` on a writable mapping, which
    /// allocates the object's pages; `MADV_POPULATE_READ` on a read-only one, which maps
    /// them), so that the first pass over it costs no page fault per 4 KiB. A ring's first lap
    /// otherwise pays one fault per page on each side, on the latency path: the writer's copy
    /// of a 540 KB keyframe into fresh pages, then the reader's. Returns whether it was done:
    /// false on kernels before 5.14 (EINVAL), where the pages are faulted in as they are first
    /// touched, as before. An object a peer truncated gives `Io` (EFAULT: the kernel reports
    /// what would have been a SIGBUS instead of raising it).
    pub fn populate(&self) -> Result<bool> {
        let advice = if self.writable {
            libc::MADV_POPULATE_WRITE
        } else {
            libc::MADV_POPULATE_READ
        };
        // SAFETY: the range is exactly this mapping (page-aligned by mmap). Populating changes
        // no byte of it and no mapping of this process: it only installs its pages.
        let rc = unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, advice) };
        if rc == 0 {
            return Ok(true);
        }
        match Errno::last() {
            Errno::EINVAL => Ok(false),
            e => Err(Error::os(
                "madvise(MADV_POPULATE) of a shared-memory ring",
                e,
            )),
        }
    }

    /// Fill a range with zeros.
    pub fn zero(&self, offset: usize, len: usize) {
        assert!(self.writable, "write to a read-only mapping");
        self.check(offset, len, 1);
        // SAFETY: `check` put the range inside the mapping, which is PROT_WRITE (asserted);
        // the bytes are written through a raw pointer, no reference to them exists.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(offset), 0, len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned, unmapped only here. Every field
        // handle (`Shared64`/`Shared32`) borrows the Mapping, so none outlives it; raw
        // addresses taken with `as_ptr` are their holders' responsibility (the slot and ring
        // owners keep the Mapping alive while they hand those out).
        let _ = unsafe { munmap(self.ptr.cast(), self.len) };
    }
}

macro_rules! shared_field {
    ($(#[$doc:meta])* $name:ident, $int:ty, $atomic:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'a> {
            /// In bounds and aligned (checked when the handle was made), inside a mapping that
            /// outlives `'a`.
            ptr: NonNull<$int>,
            writable: bool,
            _map: PhantomData<&'a Mapping>,
        }

        // SAFETY: the handle is a shared view of one field, like `&$atomic` (which is Send):
        // every access through it is atomic, from whichever thread.
        unsafe impl Send for $name<'_> {}
        // SAFETY: as for Send: `&handle` allows only atomic accesses.
        unsafe impl Sync for $name<'_> {}

        impl<'a> $name<'a> {
            /// Load the field. Valid on read-only mappings too.
            ///
            /// On a writable mapping this is the atomic load with `order`. On a read-only one,
            /// where only a Relaxed load is allowed, the ordering is made with fences:
            /// - Acquire: Relaxed load, then `fence(Acquire)`. If the load reads a value
            ///   written by a Release store (or by a store after a Release fence), the fence
            ///   synchronizes with it (fence-to-atomic synchronization), so everything the
            ///   writer did before it is visible to what we do after: exactly what an Acquire
            ///   load gives. (It also orders every earlier load before later accesses, which is
            ///   only stronger.)
            /// - SeqCst: `fence(SeqCst)`, Relaxed load, `fence(SeqCst)`. The first fence puts
            ///   the load after every earlier SeqCst operation of this thread in the single
            ///   total order, so it sees a peer's SeqCst store that precedes that fence (the
            ///   store-buffering handshake of a waiter count and a sequence word needs this);
            ///   the second fence gives the Acquire half.
            ///
            /// Panics on Release and AcqRel, as the std loads do.
            pub fn load(self, order: Ordering) -> $int {
                if self.writable {
                    return self.atomic().load(order);
                }
                match order {
                    Ordering::Relaxed | Ordering::Acquire => {}
                    Ordering::SeqCst => fence(Ordering::SeqCst),
                    _ => panic!("there is no such thing as a release load"),
                }
                // SAFETY: `ptr` is in bounds and aligned inside a mapping that is readable for
                // 'a. A shared reference to an atomic asks only that the bytes be readable;
                // on read-only memory the one operation done through it is a Relaxed load of
                // register width, which `core::sync::atomic` documents as valid there (and
                // the compile_error! above rules out targets where 8 bytes is too wide).
                let value = unsafe { &*self.ptr.as_ptr().cast::<$atomic>() }.load(Ordering::Relaxed);
                match order {
                    Ordering::Acquire => fence(Ordering::Acquire),
                    Ordering::SeqCst => fence(Ordering::SeqCst),
                    _ => {}
                }
                value
            }

            /// Store to the field. Panics on a read-only mapping.
            pub fn store(self, value: $int, order: Ordering) {
                self.atomic().store(value, order)
            }

            /// Panics on a read-only mapping, like every read-modify-write below.
            pub fn swap(self, value: $int, order: Ordering) -> $int {
                self.atomic().swap(value, order)
            }

            /// Panics on a read-only mapping, like every read-modify-write here.
            pub fn compare_exchange(
                self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> std::result::Result<$int, $int> {
                self.atomic().compare_exchange(current, new, success, failure)
            }

            /// Panics on a read-only mapping.
            pub fn fetch_add(self, value: $int, order: Ordering) -> $int {
                self.atomic().fetch_add(value, order)
            }

            /// Panics on a read-only mapping.
            pub fn fetch_sub(self, value: $int, order: Ordering) -> $int {
                self.atomic().fetch_sub(value, order)
            }

            /// Panics on a read-only mapping.
            pub fn fetch_or(self, value: $int, order: Ordering) -> $int {
                self.atomic().fetch_or(value, order)
            }

            /// Panics on a read-only mapping.
            pub fn fetch_and(self, value: $int, order: Ordering) -> $int {
                self.atomic().fetch_and(value, order)
            }

            /// Panics on a read-only mapping.
            pub fn fetch_max(self, value: $int, order: Ordering) -> $int {
                self.atomic().fetch_max(value, order)
            }

            /// The field's address (for the futex system calls, which only need that).
            pub fn as_ptr(self) -> *const $int {
                self.ptr.as_ptr()
            }

            /// Whether writes through this handle are allowed (the mapping is writable).
            pub fn is_writable(self) -> bool {
                self.writable
            }

            /// The field as a full atomic, for stores and read-modify-writes: only on a
            /// writable mapping.
            fn atomic(self) -> &'a $atomic {
                assert!(self.writable, "atomic write to a read-only mapping");
                // SAFETY: `ptr` is in bounds and aligned inside a mapping that lives for 'a
                // and is mapped PROT_READ | PROT_WRITE (checked just above), so it is valid
                // for reads and writes for 'a. Every access to mapped fields, here and in the
                // peer processes, is atomic (cuframes.h requires it of peers); mixed-size
                // access exists only where a 32-bit futex word overlays the low half of a
                // 64-bit field, which is read, not written, through the narrow handle.
                unsafe { $atomic::from_ptr(self.ptr.as_ptr()) }
            }
        }
    };
}

shared_field!(
    /// A 64-bit field of a [`Mapping`]: what a `&AtomicU64` would be, made valid on read-only
    /// mappings. Loads always work; stores and read-modify-writes panic on a read-only
    /// mapping (instead of faulting).
    Shared64,
    u64,
    AtomicU64
);

shared_field!(
    /// A 32-bit field of a [`Mapping`]; see [`Shared64`].
    Shared32,
    u32,
    AtomicU32
);

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

/// Create `/dev/shm/<name>.<random>` like [`create`], for an object that is put at
/// `/dev/shm/<name>` only once it is complete ([`rename_into_place`]): whoever opens `name`
/// meanwhile finds the previous object, never a half-made one, and no moment leaves `name`
/// free for someone else to take. Keys have no '.', so the private name is nobody's key.
/// Returns the private name with the descriptor and the mapping.
pub fn create_staged(name: &str, len: usize, mode: u32) -> Result<(String, OwnedFd, Mapping)> {
    let mut last = None;
    for _ in 0..8 {
        let mut random = [0u8; 8];
        // SAFETY: getrandom writes at most `random.len()` bytes into the local buffer.
        let n = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
        if n != random.len() as isize {
            random = (crate::util::monotonic_ns() as u64 ^ u64::from(std::process::id()) << 32)
                .to_le_bytes();
        }
        let staged = crate::paths::generation_name(name, u64::from_le_bytes(random));
        match create(&staged, len, mode) {
            Ok((fd, map)) => return Ok((staged, fd, map)),
            // Someone made that name first: another draw.
            Err(e) if e.code() == ErrorCode::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::new(ErrorCode::Io, "no private SHM name found")))
}

/// Put `/dev/shm/<staged>` at `/dev/shm/<name>` in one step (rename(2)): an object of ours
/// already there is replaced atomically (whoever has it open keeps it); another user's is
/// not (the sticky /dev/shm refuses), and the error says whose it is.
pub fn rename_into_place(staged: &str, name: &str) -> Result<()> {
    let dir = std::path::Path::new("/dev/shm");
    let (from, to) = (dir.join(staged), dir.join(name));
    std::fs::rename(&from, &to).map_err(|e| {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::symlink_metadata(&to)
            .map(|m| format!(" ({} is held by uid {})", to.display(), m.uid()))
            .unwrap_or_default();
        Error::os(
            format!("cannot put {} at {}{owner}", from.display(), to.display()),
            Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        )
    })
}

/// Where [`place`] left an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// At the name it was meant for.
    AtName,
    /// Under its own generation name: another user holds the name (its uid). HELLO_RESP
    /// announces where the ring is (R19), so readers follow it there.
    Kept {
        /// The uid that holds the name.
        holder_uid: u32,
    },
}

/// Put `/dev/shm/<staged>` at `/dev/shm/<name>` or, when someone else holds `name` (a uid
/// other than ours: the sticky /dev/shm keeps it theirs), leave it under its own
/// unguessable name: a name anyone can create first must not stop a publisher. With
/// `over_ours` an object of ours at `name` (the ring this one replaces) is replaced in one
/// step ([`rename_into_place`]); without, it is left alone and the answer is
/// `AlreadyExists` (a first ring never takes another's place). Any other failure is an
/// error, and nothing moved.
pub fn place(staged: &str, name: &str, over_ours: bool) -> Result<Placement> {
    let moved = if over_ours {
        rename_into_place(staged, name)
    } else {
        rename_exclusive(staged, name)
    };
    match moved {
        Ok(()) => Ok(Placement::AtName),
        Err(e) => match foreign_holder(name) {
            Some(holder_uid) => Ok(Placement::Kept { holder_uid }),
            None => Err(e),
        },
    }
}

/// `renameat2(RENAME_NOREPLACE)` of `/dev/shm/<staged>` to `/dev/shm/<name>`: fails with
/// `AlreadyExists` when anything is at `name`.
fn rename_exclusive(staged: &str, name: &str) -> Result<()> {
    let from = CString::new(format!("/dev/shm/{staged}"))
        .map_err(|_| Error::invalid("SHM name contains NUL"))?;
    let to = CString::new(format!("/dev/shm/{name}"))
        .map_err(|_| Error::invalid("SHM name contains NUL"))?;
    // SAFETY: both paths are NUL-terminated strings that live across the call; the
    // directory descriptors are AT_FDCWD (the paths are absolute).
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    Err(Error::os(
        format!("cannot put /dev/shm/{staged} at /dev/shm/{name}"),
        Errno::last(),
    ))
}

/// The uid that holds `/dev/shm/<name>`, when that is not us (whatever it put there: an
/// object, a FIFO, a link).
pub fn foreign_holder(name: &str) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::symlink_metadata(std::path::Path::new("/dev/shm").join(name))
        .ok()?
        .uid();
    // SAFETY: geteuid has no preconditions.
    (uid != unsafe { libc::geteuid() }).then_some(uid)
}

/// Why [`open_regular`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenFailure {
    /// `shm_open` or `fstat` failed (ENOENT, EACCES, ELOOP for a symlink, ...).
    Os(Errno),
    /// Something other than a regular file is at the name (its `st_mode`).
    NotRegular(u32),
}

/// The one hardened open of an existing `/dev/shm/<name>`, for subscribers, stale recovery
/// and the operator tool: whoever can create files in /dev/shm can put a FIFO (an open that
/// never returns) or a symlink at our names, so it never waits in open, never follows a link,
/// and accepts regular files only. Returns the descriptor and the object's size.
pub fn open_regular(
    name: &str,
    writable: bool,
) -> std::result::Result<(OwnedFd, usize), OpenFailure> {
    let path = shm_path(name).map_err(|_| OpenFailure::Os(Errno::EINVAL))?;
    let access = if writable {
        OFlag::O_RDWR
    } else {
        OFlag::O_RDONLY
    };
    let flags = access | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW;
    let fd = shm_open(path.as_c_str(), flags, Mode::empty()).map_err(OpenFailure::Os)?;
    let st = fstat(fd.as_fd()).map_err(OpenFailure::Os)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(OpenFailure::NotRegular(st.st_mode));
    }
    Ok((fd, usize::try_from(st.st_size).unwrap_or(0)))
}

/// Open an existing `/dev/shm/<name>` ([`open_regular`]); its size must be at least
/// `min_len`. The whole object is mapped. A permission problem names the object and the
/// access that was needed.
pub fn open(name: &str, min_len: usize, writable: bool) -> Result<(OwnedFd, Mapping)> {
    let (fd, len) = open_regular(name, writable).map_err(|e| match e {
        OpenFailure::Os(Errno::EACCES) => Error::new(
            ErrorCode::Permission,
            format!(
                "cannot open /dev/shm/{name} for {}: permission denied (the publisher's file mode or group must allow it)",
                if writable { "reading and writing" } else { "reading" }
            ),
        ),
        OpenFailure::Os(e) => Error::os(format!("shm_open /dev/shm/{name}"), e),
        OpenFailure::NotRegular(mode) => Error::protocol(format!(
            "/dev/shm/{name} is not a regular file (mode 0{mode:o}): not a cuframes object"
        )),
    })?;
    if len < min_len {
        return Err(Error::protocol(format!(
            "/dev/shm/{name} is {len} bytes; at least {min_len} expected"
        )));
    }
    let map = Mapping::map(fd.as_fd(), len, writable, &format!("/dev/shm/{name}"))?;
    Ok((fd, map))
}

/// `mode` without write permission for the group and others: the mode of a ring that readers
/// only read (a reader that could write it could also truncate it, and every mapping of a
/// truncated object faults).
pub fn readers_read_only(mode: u32) -> u32 {
    mode & !0o022
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

/// A memfd of `len` bytes that accepts seals (F_ADD_SEALS), for objects handed to other
/// processes by descriptor: sealed against resizing, neither side's mapping can fault.
pub fn sealable_memfd(name: &str, len: usize) -> Result<OwnedFd> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    let cname = CString::new(name).map_err(|_| Error::invalid("memfd name contains NUL"))?;
    let fd = memfd_create(
        cname.as_c_str(),
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
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
    // SAFETY: sysconf takes a plain integer name and touches no memory of ours.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod open_tests {
    use super::*;

    /// Trust boundary: a FIFO at /dev/shm/cuframes-K must not hang an open of it (it would
    /// hang the publisher of K, immune to SIGTERM, and the operator tool forever).
    #[test]
    fn a_fifo_or_symlink_at_our_name_is_refused_without_waiting() {
        let name = format!("cuframes-fifo-test-{}", std::process::id());
        let path = format!("/dev/shm/{name}");
        nix::unistd::mkfifo(path.as_str(), Mode::from_bits_truncate(0o600)).unwrap();
        let t = std::time::Instant::now();
        let e = open(&name, 0, false).err().expect("a FIFO was opened");
        let _ = std::fs::remove_file(&path);
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert!(
            e.message().contains("not a regular file"),
            "{}",
            e.message()
        );

        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        let e = open(&name, 0, false).err().expect("a symlink was followed");
        let _ = std::fs::remove_file(&path);
        assert!(e.message().contains(&name), "{}", e.message());
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

    /// A memfd mapped twice: read-write (the "peer") and read-only (the reader under test).
    fn rw_and_ro(len: usize) -> (OwnedFd, Mapping, Mapping) {
        let fd = memfd("ro", len).unwrap();
        let rw = Mapping::map(fd.as_fd(), len, true, "rw").unwrap();
        let ro = Mapping::map(fd.as_fd(), len, false, "ro").unwrap();
        assert!(rw.is_writable() && !ro.is_writable());
        (fd, rw, ro)
    }

    #[test]
    fn loads_work_on_a_read_only_mapping() {
        let (_fd, rw, ro) = rw_and_ro(4096);
        rw.atomic_u64(8)
            .store(0x0123_4567_89AB_CDEF, Ordering::Release);
        rw.atomic_u32(16).store(0xCC7C_1DCE, Ordering::Release);
        assert!(!ro.atomic_u64(8).is_writable());
        for order in [Ordering::Relaxed, Ordering::Acquire, Ordering::SeqCst] {
            assert_eq!(ro.atomic_u64(8).load(order), 0x0123_4567_89AB_CDEF);
            assert_eq!(ro.load_u64(8, order), 0x0123_4567_89AB_CDEF);
            assert_eq!(ro.atomic_u32(16).load(order), 0xCC7C_1DCE);
            assert_eq!(ro.load_u32(16, order), 0xCC7C_1DCE);
            // The low half of the 64-bit field, as the futex word of a global_seq is read.
            assert_eq!(ro.load_u32(8, order), 0x89AB_CDEF);
        }
        let mut raw = [0u8; 4];
        ro.read_bytes(16, &mut raw);
        assert_eq!(u32::from_le_bytes(raw), 0xCC7C_1DCE);

        // The futex word of a read-only mapping: a changed word returns at once, an
        // unchanged one sleeps until the timeout (FUTEX_WAIT only reads the word).
        let word = ro.atomic_u32(16);
        let t = std::time::Instant::now();
        crate::futex::wait(word, 1, Some(std::time::Duration::from_secs(5)));
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        crate::futex::wait(
            word,
            0xCC7C_1DCE,
            Some(std::time::Duration::from_millis(10)),
        );
        crate::futex::wake_all(word);

        // Message passing from the writable mapping to the read-only one: a Release store of
        // the flag after the payload, an Acquire load (Relaxed + fence) of it before reading.
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 1..=2000u64 {
                    rw.atomic_u64(64).store(i * 3, Ordering::Relaxed);
                    rw.atomic_u64(0).store(i, Ordering::Release);
                }
            });
            let mut last = 0;
            while last < 2000 {
                let flag = ro.load_u64(0, Ordering::Acquire);
                assert!(flag >= last);
                if flag > 0 {
                    assert!(ro.load_u64(64, Ordering::Relaxed) >= flag * 3);
                }
                last = flag;
            }
        });
    }

    #[test]
    #[should_panic(expected = "read-only mapping")]
    fn a_store_through_a_read_only_mapping_panics() {
        let (_fd, _rw, ro) = rw_and_ro(4096);
        ro.atomic_u64(0).store(1, Ordering::Relaxed);
    }

    #[test]
    #[should_panic(expected = "read-only mapping")]
    fn a_read_modify_write_through_a_read_only_mapping_panics() {
        let (_fd, _rw, ro) = rw_and_ro(4096);
        // Even one that would fail: a compare_exchange is a write to the hardware.
        let _ = ro
            .atomic_u32(0)
            .compare_exchange(7, 8, Ordering::AcqRel, Ordering::Acquire);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_access_panics() {
        let fd = memfd("oob", 4096).unwrap();
        let map = Mapping::map(fd.as_fd(), 4096, true, "oob").unwrap();
        map.atomic_u64(4096);
    }
}

/// Test helpers: whether pages of a mapping are resident (what `Mapping::populate` is for).
#[cfg(test)]
pub(crate) mod residency {
    /// Whether this kernel has MADV_POPULATE_* (5.14+); without it mappings fault in lazily.
    pub fn kernel_populates() -> bool {
        let fd = super::memfd("probe", 4096).unwrap();
        let map = super::Mapping::map(std::os::fd::AsFd::as_fd(&fd), 4096, true, "probe").unwrap();
        map.populate().unwrap()
    }

    /// This process's mappings (/proc/self/smaps): start address, header line, resident bytes.
    fn mappings() -> Vec<(u64, String, usize)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut out: Vec<(u64, String, usize)> = Vec::new();
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            let start = first
                .split_once('-')
                .and_then(|(start, _)| u64::from_str_radix(start, 16).ok());
            if let Some(start) = start {
                out.push((start, line.to_owned(), 0));
            } else if first == "Rss:" {
                let kb: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
                if let Some(last) = out.last_mut() {
                    last.2 = kb * 1024;
                }
            }
        }
        out
    }

    /// Resident bytes of the mapping that starts at `addr`.
    pub fn resident_bytes_at(addr: u64) -> usize {
        mappings()
            .into_iter()
            .find(|(start, _, _)| *start == addr)
            .unwrap_or_else(|| panic!("no mapping starts at {addr:#x}"))
            .2
    }

    /// Resident bytes of every mapping of `/dev/shm/<name>`.
    pub fn resident_bytes_of(name: &str) -> usize {
        let path = format!("/dev/shm/{name}");
        mappings()
            .into_iter()
            .filter(|(_, header, _)| header.ends_with(&path))
            .map(|(_, _, rss)| rss)
            .sum()
    }
}
