//! A private, copy-on-write view of part of a host slot: what a consumer that may write gets.

use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::shm::page_size;

/// A private, copy-on-write mapping of part of a host slot (`MAP_PRIVATE` of its memfd).
///
/// It reads the slot's own pages, without a copy, at an address that is writable: a write
/// through it lands in a page of this process's, copied at that moment, never in the slot.
/// That is what a consumer that may write gets (a DLPack consumer that ignores the read-only
/// flag, or asks for a capsule without one): with the read-only shared mapping its first write
/// would kill the process (SIGSEGV), and no mapping may let it change what other subscribers
/// read. The seals allow it: `F_SEAL_FUTURE_WRITE` refuses shared writable mappings only, and
/// the shrink seal checked at import keeps every mapped page backed (no SIGBUS).
///
/// The view is a mapping of its own, valid until dropped whatever happens to the frame; the
/// pages not written yet show the slot as it is now, so hold the frame as long as the view.
pub struct PrivateView {
    map: NonNull<u8>,
    map_len: usize,
    /// From the mapping's start to `offset` (mappings start at a page boundary).
    skip: usize,
    len: usize,
}

// SAFETY: the mapping is owned by this value (unmapped once, in Drop) and holds no
// thread-local state; the bytes are only reached through raw pointers its users take.
unsafe impl Send for PrivateView {}
// SAFETY: `&PrivateView` hands out its address and length only; nothing here reads or writes
// the bytes.
unsafe impl Sync for PrivateView {}

impl PrivateView {
    /// Map `len` bytes of the `size`-byte slot `fd` from `offset` privately (its pages shared
    /// with the slot until written).
    pub(super) fn map(
        fd: std::os::fd::BorrowedFd<'_>,
        size: usize,
        offset: usize,
        len: usize,
    ) -> Result<Self> {
        if len == 0 || !offset.checked_add(len).is_some_and(|end| end <= size) {
            return Err(Error::invalid(format!(
                "private view of {len} bytes at {offset}: outside the {size}-byte slot"
            )));
        }
        let skip = offset % page_size();
        let map_len = skip + len;
        let file_offset = libc::off_t::try_from(offset - skip)
            .map_err(|_| Error::invalid("private view offset out of range"))?;
        // SAFETY: addr is None, so the kernel picks fresh addresses: no memory of this process
        // is replaced. `fd` is open for the call. The range lies within the slot's size, which
        // the import checked against the memfd's (sealed against shrinking).
        let map = unsafe {
            nix::sys::mman::mmap(
                None,
                std::num::NonZeroUsize::new(map_len).expect("len > 0"),
                nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
                nix::sys::mman::MapFlags::MAP_PRIVATE,
                fd,
                file_offset,
            )
        }
        .map_err(|e| Error::os("mmap a private view of a frame slot", e))?;
        // Not populated: a read fault maps the slot's own page (with its neighbours, by the
        // kernel's fault-around), no copy, and a consumer reading part of the plane pays for
        // that part. MADV_POPULATE_READ up front would make each export of a 1080p luma plane
        // cost ~150 us instead of ~5; MAP_POPULATE would copy every page (it write-faults
        // private writable mappings).
        Ok(PrivateView {
            map: map.cast(),
            map_len,
            skip,
            len,
        })
    }

    /// The address of the view's first byte (the slot's byte at `offset`); writable.
    pub fn as_ptr(&self) -> *mut u8 {
        // SAFETY: skip < map_len: the result is inside the mapping.
        unsafe { self.map.as_ptr().add(self.skip) }
    }

    /// The view's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view holds no byte (never: a view of 0 bytes is refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for PrivateView {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map`, unmapped once; whoever used the address
        // held this value, so nothing uses it after.
        let _ = unsafe { nix::sys::mman::munmap(self.map.cast(), self.map_len) };
    }
}
