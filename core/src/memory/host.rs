//! Host-memory slots (R14): one sealed memfd per slot.
//!
//! The publisher seals each memfd against shrinking before it shares it, and the subscriber
//! refuses descriptors without that seal: a peer that could shrink the file could make our
//! reads fault (SIGBUS) — with the seal it cannot. Once the publisher has mapped a slot for
//! writing it also adds `F_SEAL_FUTURE_WRITE`: nobody else can map it writable or `write` it,
//! so a subscriber cannot change frames the others read.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, SealFlag};

use super::private_view::PrivateView;
use super::slot::{SlotImport, SlotSize, SlotStore};
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

/// The subscriber's view of host slots: read-only mappings and, for a zero-copy subscription,
/// the descriptors for [`PrivateView`]s of them.
pub struct HostImport {
    maps: Vec<Mapping>,
    /// Empty unless the import was asked to keep them ([`SlotFds::KeepForPrivateViews`]).
    fds: Vec<OwnedFd>,
    size: usize,
}

/// What an import does with the slot descriptors once every slot is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotFds {
    /// Close them (protocol §3.7 step 4): the mappings stay valid without them. A COPY
    /// subscription reads the slots through its mappings only; keeping one descriptor per
    /// slot would cost every subscriber `ring_size` fds, and a process of many subscribers
    /// would run out of them.
    Close,
    /// Keep them: a zero-copy subscription hands its frames' planes out through
    /// [`PrivateView`]s, which map the slot's memfd again.
    KeepForPrivateViews,
}

impl HostImport {
    /// Map every descriptor, after checking that the announced size is what the frame needs
    /// ([`SlotSize::checked`], before anything is mapped) and that each is a sealed memfd of
    /// at least that size (a smaller one would fault, SIGBUS, where it ends). With
    /// [`SlotFds::Close`] the descriptors are closed once mapped, and [`SlotImport::private_view`]
    /// is `None`.
    pub fn import(fds: Vec<OwnedFd>, size: SlotSize, keep: SlotFds) -> Result<HostImport> {
        let size = size.checked(page_size())?;
        let mut maps = Vec::with_capacity(fds.len());
        let received = fds;
        let mut fds = Vec::with_capacity(received.len());
        for fd in received {
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
            if keep == SlotFds::KeepForPrivateViews {
                fds.push(fd);
            }
        }
        Ok(HostImport { maps, fds, size })
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
    fn private_view(&self, index: usize, offset: usize, len: usize) -> Option<Result<PrivateView>> {
        let fd = self.fds.get(index)?;
        Some(PrivateView::map(fd.as_fd(), self.size, offset, len))
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

    /// The `Anonymous:` kilobytes of the mapping containing `addr` (/proc/self/smaps): the
    /// pages this process has copied for itself there.
    fn anonymous_kb(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((a, b)) = range.split_once('-') {
                    if let (Ok(a), Ok(b)) =
                        (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                    {
                        inside = (a..b).contains(&addr);
                        continue;
                    }
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix("Anonymous:") {
                    return v.trim().trim_end_matches("kB").trim().parse().unwrap();
                }
            }
        }
        panic!("no mapping at {addr:#x}");
    }

    /// A consumer that may write (a legacy DLPack capsule, a consumer that
    /// ignores the read-only flag) gets a private view: the slot's bytes without a copy, and
    /// a write lands in this process's pages, never in the slot others read, and never faults.
    #[test]
    fn private_views_share_the_slot_until_written_and_never_write_it() {
        let slots = HostSlots::create(2, 3 * 4096 + 100).unwrap();
        let size = slots.mapped_size();
        let pattern: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        // SAFETY: slot 1's mapping is writable and `size` bytes long; `pattern` is ours.
        unsafe {
            std::ptr::copy_nonoverlapping(pattern.as_ptr(), slots.slot_address(1) as *mut u8, size)
        };
        let import = HostImport::import(
            slots.export_fds().unwrap(),
            SlotSize {
                announced: size as u64,
                granularity: slots.granularity(),
                frame_size: 3 * 4096 + 100,
            },
            SlotFds::KeepForPrivateViews,
        )
        .unwrap();
        // Not page-aligned, across pages: a chroma plane's place.
        let (offset, len) = (4096 + 123, 2 * 4096);
        let view = import.private_view(1, offset, len).unwrap().unwrap();
        assert_eq!(view.len(), len);
        // SAFETY: the view is `len` readable bytes; nothing else maps them writable here.
        let read =
            |v: &PrivateView| unsafe { std::slice::from_raw_parts(v.as_ptr(), len).to_vec() };
        assert_eq!(read(&view), &pattern[offset..offset + len]);
        // Zero-copy: reading copied nothing into this process.
        assert_eq!(anonymous_kb(view.as_ptr() as usize), 0);
        // SAFETY: the view's bytes are writable (a private mapping) and `len` long.
        unsafe { std::ptr::write_bytes(view.as_ptr().add(10), 0xEE, 5000) };
        assert!(read(&view)[10..5010].iter().all(|&b| b == 0xEE));
        assert!(
            anonymous_kb(view.as_ptr() as usize) > 0,
            "the write copied no page"
        );
        // The slot, the publisher's and every subscriber's view of it, is unchanged.
        let slot = |a: u64| {
            // SAFETY: both slot mappings are `size` readable bytes.
            unsafe { std::slice::from_raw_parts(a as *const u8, size).to_vec() }
        };
        assert_eq!(slot(slots.slot_address(1)), pattern);
        assert_eq!(slot(import.slot_address(1)), pattern);
        let other = import.private_view(1, offset, len).unwrap().unwrap();
        assert_eq!(read(&other), &pattern[offset..offset + len]);
        // Ranges outside the slot, or empty, are refused.
        for (o, l) in [(size - 10, 11), (0, 0), (usize::MAX, 2)] {
            let e = import.private_view(1, o, l).unwrap().err().unwrap();
            assert_eq!(e.code(), ErrorCode::InvalidArg, "{o}+{l}: {e}");
        }
        assert!(import.private_view(2, 0, 1).is_none(), "no slot 2");
    }

    /// Descriptors of this process open on the same file as `fd` (itself included), found by
    /// device and inode: other tests running meanwhile open and close fds of their own, and
    /// every slot memfd has the same name.
    fn open_on_same_file(fd: std::os::fd::BorrowedFd<'_>) -> usize {
        let me = nix::sys::stat::fstat(fd).unwrap();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::metadata(e.ok()?.path()).ok())
            .filter(|m| {
                use std::os::unix::fs::MetadataExt;
                m.dev() == me.st_dev as u64 && m.ino() == me.st_ino as u64
            })
            .count()
    }

    /// Only an import for a zero-copy subscription keeps one memfd per slot (for private
    /// views): COPY subscriptions close them, as the protocol's VMM_FDS steps (§3.7 step 4)
    /// say, or ten subscribers of a 16-slot ring would hold 190 fds.
    #[test]
    fn only_imports_for_private_views_keep_the_slot_descriptors() {
        let slots = HostSlots::create(16, 10_000).unwrap();
        let size = SlotSize {
            announced: slots.mapped_size() as u64,
            granularity: slots.granularity(),
            frame_size: 10_000,
        };
        // Descriptors of each slot open beside the publisher's own.
        let held = || -> Vec<usize> {
            (0..16)
                .map(|i| open_on_same_file(slots.fds[i].as_fd()) - 1)
                .collect()
        };
        let copy = HostImport::import(slots.export_fds().unwrap(), size, SlotFds::Close).unwrap();
        // Only the publisher's own descriptor of each slot is open; the mappings stay readable.
        assert_eq!(held(), vec![0; 16], "a COPY import kept slot fds");
        assert!(copy.private_view(3, 0, 10).is_none());
        // SAFETY: slot 15's read-only mapping is mapped_size >= 1 bytes long.
        assert_eq!(unsafe { *(copy.slot_address(15) as *const u8) }, 0);
        let zero_copy = HostImport::import(
            slots.export_fds().unwrap(),
            size,
            SlotFds::KeepForPrivateViews,
        )
        .unwrap();
        assert_eq!(held(), vec![1; 16]);
        assert!(zero_copy.private_view(3, 0, 10).unwrap().is_ok());
        drop(zero_copy);
        assert_eq!(held(), vec![0; 16]);
    }

    /// Latency: every slot page is resident in the publisher at create and in a subscriber at
    /// import, so the first frames written into (and read from) a fresh ring do not pay a page
    /// fault per 4 KiB on each side (~3000 for a 1080p NV12 frame).
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
            SlotFds::Close,
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
