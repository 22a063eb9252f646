//! Host-memory slots (R14): one sealed memfd per slot.
//!
//! The publisher seals each memfd against shrinking before it shares it, and the subscriber
//! refuses descriptors without that seal: a peer that could shrink the file could make our
//! reads fault (SIGBUS) — with the seal it cannot. Once the publisher has mapped a slot for
//! writing it also adds `F_SEAL_FUTURE_WRITE`: nobody else can map it writable or `write` it,
//! so a subscriber cannot change frames the others read.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, SealFlag};

use super::{SlotImport, SlotSize, SlotStore};
use crate::error::{Error, ErrorCode, Result};
use crate::shm::{file_size, page_size, Mapping};
use crate::wire::MemoryKind;

/// The publisher's host slots.
pub struct HostSlots {
    fds: Vec<OwnedFd>,
    maps: Vec<Mapping>,
    size: usize,
}

impl HostSlots {
    pub fn create(count: usize, frame_size: usize) -> Result<HostSlots> {
        let size = frame_size.div_ceil(page_size()) * page_size();
        let mut fds = Vec::with_capacity(count);
        let mut maps = Vec::with_capacity(count);
        for i in 0..count {
            let fd = sealed_memfd(&format!("cuframes-slot-{i}"), size)?;
            let map = Mapping::map(fd.as_fd(), size, true, "frame slot memfd")?;
            // Every page now, not when the first lap writes the frame (the packet ring does the
            // same): no page fault per 4 KiB on the latency path of the ring's first frames.
            map.populate().map_err(|e| {
                Error::new(
                    e.code(),
                    format!(
                        "cannot allocate host frame slot {i} ({size} bytes): {}",
                        e.message()
                    ),
                )
            })?;
            maps.push(map);
            // Our writable mapping stays valid; every later one (a subscriber's) is read-only.
            fcntl(
                fd.as_fd(),
                FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_FUTURE_WRITE | SealFlag::F_SEAL_SEAL),
            )
            .map_err(|e| Error::os("seal memfd against writers", e))?;
            fds.push(fd);
        }
        Ok(HostSlots { fds, maps, size })
    }
}

fn sealed_memfd(name: &str, size: usize) -> Result<OwnedFd> {
    let cname = std::ffi::CString::new(name).map_err(|_| Error::invalid("memfd name"))?;
    let fd = nix::sys::memfd::memfd_create(
        cname.as_c_str(),
        nix::sys::memfd::MFdFlags::MFD_CLOEXEC | nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(|e| Error::os("memfd_create", e))?;
    nix::unistd::ftruncate(fd.as_fd(), size as i64).map_err(|e| Error::os("ftruncate memfd", e))?;
    fcntl(
        fd.as_fd(),
        FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW),
    )
    .map_err(|e| Error::os("seal memfd", e))?;
    Ok(fd)
}

impl SlotStore for HostSlots {
    fn kind(&self) -> MemoryKind {
        MemoryKind::HostMemfd
    }
    fn mapped_size(&self) -> usize {
        self.size
    }
    fn granularity(&self) -> u64 {
        page_size() as u64
    }
    fn export_fds(&self) -> Result<Vec<OwnedFd>> {
        self.fds
            .iter()
            .map(|fd| {
                fd.try_clone()
                    .map_err(|e| Error::new(ErrorCode::Io, format!("dup slot fd: {e}")))
            })
            .collect()
    }
    fn slot_address(&self, index: usize) -> u64 {
        self.maps[index].as_ptr() as u64
    }
}

/// The subscriber's view of host slots: read-only mappings.
pub struct HostImport {
    maps: Vec<Mapping>,
    size: usize,
}

impl HostImport {
    /// Map every descriptor, after checking that the announced size is what the frame needs
    /// ([`SlotSize::checked`], before anything is mapped) and that each is a sealed memfd of
    /// at least that size (a smaller one would fault, SIGBUS, where it ends).
    pub fn import(fds: Vec<OwnedFd>, size: SlotSize) -> Result<HostImport> {
        let size = size.checked(page_size())?;
        let mut maps = Vec::with_capacity(fds.len());
        for fd in fds {
            let seals = fcntl(fd.as_fd(), FcntlArg::F_GET_SEALS).map_err(|e| {
                Error::protocol(format!(
                    "slot fd {} is not a sealable memfd: {}",
                    fd.as_raw_fd(),
                    e.desc()
                ))
            })?;
            if SealFlag::from_bits_truncate(seals) & SealFlag::F_SEAL_SHRINK
                != SealFlag::F_SEAL_SHRINK
            {
                return Err(Error::protocol(
                    "slot memfd is not sealed against shrinking",
                ));
            }
            let actual = file_size(fd.as_fd())?;
            if actual < size {
                return Err(Error::protocol(format!(
                    "slot memfd is {actual} bytes; VMM_FDS announced {size}"
                )));
            }
            let map = Mapping::map(fd.as_fd(), size, false, "frame slot memfd")?;
            // Map its pages now rather than on the first read of each (the shrink seal checked
            // above means they stay there).
            map.populate()?;
            maps.push(map);
        }
        Ok(HostImport { maps, size })
    }
}

impl SlotImport for HostImport {
    fn kind(&self) -> MemoryKind {
        MemoryKind::HostMemfd
    }
    fn mapped_size(&self) -> usize {
        self.size
    }
    fn slot_address(&self, index: usize) -> u64 {
        self.maps[index].as_ptr() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trust boundary: a subscriber got the slot memfds and could map them writable, changing
    /// the frames every other subscriber reads.
    #[test]
    fn subscribers_cannot_map_host_slots_writable() {
        let slots = HostSlots::create(2, 10_000).unwrap();
        for fd in slots.export_fds().unwrap() {
            let e = Mapping::map(fd.as_fd(), slots.mapped_size(), true, "slot")
                .err()
                .expect("a subscriber mapped a slot writable");
            assert!(e.message().contains("mmap"), "{}", e.message());
            assert!(nix::unistd::ftruncate(fd.as_fd(), 0).is_err());
            // Read-only mappings (what subscribers use) still work.
            Mapping::map(fd.as_fd(), slots.mapped_size(), false, "slot").unwrap();
        }
        // The publisher's own mapping is still writable.
        // SAFETY: slot 0's mapping is writable and at least one byte long.
        unsafe { (slots.slot_address(0) as *mut u8).write(7) };
    }

    /// Latency: the first frames written into (and read from) a fresh ring used to pay a page
    /// fault per 4 KiB on each side (~3000 for a 1080p NV12 frame); every slot page is now
    /// resident in the publisher at create and in a subscriber at import.
    #[test]
    fn host_slots_are_resident_on_both_sides_before_the_first_frame() {
        use crate::shm::residency::{kernel_populates, resident_bytes_at};
        if !kernel_populates() {
            println!("SKIPPED: this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)");
            return;
        }
        let slots = HostSlots::create(3, 1920 * 1080 * 3 / 2).unwrap();
        let size = slots.mapped_size();
        for i in 0..3 {
            let resident = resident_bytes_at(slots.slot_address(i));
            assert!(
                resident >= size,
                "publisher slot {i}: {resident} of {size} bytes"
            );
        }
        let import = HostImport::import(
            slots.export_fds().unwrap(),
            SlotSize {
                announced: size as u64,
                granularity: slots.granularity(),
                frame_size: 1920 * 1080 * 3 / 2,
            },
        )
        .unwrap();
        for i in 0..3 {
            let resident = resident_bytes_at(import.slot_address(i));
            assert!(
                resident >= size,
                "subscriber slot {i}: {resident} of {size} bytes"
            );
        }
    }
}
