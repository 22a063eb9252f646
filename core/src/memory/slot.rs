//! The slot interfaces: what a publisher writes into ([`SlotStore`]), what a subscriber reads
//! from ([`SlotImport`]), and the size check an import makes first ([`SlotSize`]).

use std::os::fd::OwnedFd;

use super::private_view::PrivateView;
use crate::error::{Error, Result};
use crate::wire::MemoryKind;

/// The largest alignment a reader accepts for a slot beyond its own granularity: a 2 MiB huge
/// page (a host publisher backing its slots with huge pages, a CUDA publisher that rounds to
/// the recommended rather than the minimum VMM granularity). Larger announced granularities
/// are not honoured: they would let a publisher make every slot that large.
pub const MAX_SLOT_ALIGNMENT: u64 = 2 << 20;

/// The size of one slot as VMM_FDS announces it, and what the frame needs: what an import
/// checks before it maps anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotSize {
    /// VMM_FDS `frame_size_bytes`: the bytes to map per slot (R20).
    pub announced: u64,
    /// VMM_FDS `vmm_granularity`: the publisher's rounding.
    pub granularity: u64,
    /// `meta.frame_size_bytes`: the sum of the planes (R17), checked against the layout.
    pub frame_size: usize,
}

impl SlotSize {
    /// The size to map, once it is known to be no more than the frame needs: the frame's size
    /// rounded up to this reader's granularity (`local_granularity`: the page size for host
    /// memory, the device's VMM granularity for CUDA), or to the publisher's when that is a
    /// larger power of two of at most [`MAX_SLOT_ALIGNMENT`]. A reader maps (and populates)
    /// every byte of every slot, so a publisher announcing more than that (a 2 GiB slot for a
    /// 12 KiB frame, on a sparse memfd) would make the reader allocate it; that is a
    /// `Protocol` error naming both sizes. A slot smaller than the frame is one too.
    pub fn checked(&self, local_granularity: usize) -> Result<usize> {
        let frame = self.frame_size as u64;
        if self.announced < frame {
            return Err(Error::protocol(format!(
                "VMM_FDS frame_size_bytes {} is smaller than a frame ({frame} bytes)",
                self.announced
            )));
        }
        let theirs = self.granularity;
        let align = if theirs.is_power_of_two() && theirs <= MAX_SLOT_ALIGNMENT {
            theirs.max(local_granularity as u64)
        } else {
            local_granularity as u64
        };
        let allowed = frame.checked_next_multiple_of(align.max(1));
        match allowed {
            Some(allowed) if self.announced <= allowed => {
                usize::try_from(self.announced).map_err(|_| {
                    Error::protocol(format!(
                        "VMM_FDS frame_size_bytes {} does not fit this address space",
                        self.announced
                    ))
                })
            }
            _ => Err(Error::protocol(format!(
                "VMM_FDS announces {}-byte slots for {frame}-byte frames: at most {} \
                 (the frame rounded up to {align} bytes) is accepted",
                self.announced,
                allowed.map_or_else(|| "the frame size".to_owned(), |a| a.to_string()),
            ))),
        }
    }
}

/// Publisher side: the slots it writes into.
pub trait SlotStore: Send + Sync {
    fn kind(&self) -> MemoryKind;
    /// Bytes of one slot mapping, rounded up to the granularity (R20).
    fn mapped_size(&self) -> usize;
    /// VMM granularity, or the page size for host memory.
    fn granularity(&self) -> u64;
    /// Fresh descriptors, one per slot, to send in VMM_FDS.
    fn export_fds(&self) -> Result<Vec<OwnedFd>>;
    /// Where slot `index` starts: a host pointer or a CUDA device pointer.
    fn slot_address(&self, index: usize) -> u64;
    /// The device of CUDA slots.
    fn cuda_device(&self) -> Option<&std::sync::Arc<crate::cuda::CudaDevice>> {
        None
    }
}

/// Subscriber side: the slots it reads from, imported once.
pub trait SlotImport: Send + Sync {
    fn kind(&self) -> MemoryKind;
    fn mapped_size(&self) -> usize;
    fn slot_address(&self, index: usize) -> u64;
    /// A private copy-on-write view of `len` bytes of host slot `index` from `offset`
    /// ([`PrivateView`]); None for CUDA slots, and for host slots imported for a COPY
    /// subscription (their descriptors are closed, [`SlotFds`](super::host::SlotFds)).
    fn private_view(&self, index: usize, offset: usize, len: usize) -> Option<Result<PrivateView>> {
        let _ = (index, offset, len);
        None
    }
    /// The device of CUDA slots.
    fn cuda_device(&self) -> Option<&std::sync::Arc<crate::cuda::CudaDevice>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    fn slot(announced: u64, granularity: u64, frame_size: usize) -> SlotSize {
        SlotSize {
            announced,
            granularity,
            frame_size,
        }
    }

    /// A 12 KiB frame announced in 2 GiB slots would make every reader map and populate
    /// 2 GiB per slot: the slot may only be the frame rounded up to a granularity.
    #[test]
    fn slots_larger_than_the_frame_needs_are_refused() {
        let page = 4096;
        assert_eq!(slot(12288, 4096, 12288).checked(page).unwrap(), 12288);
        assert_eq!(slot(16384, 4096, 12289).checked(page).unwrap(), 16384);
        // A huge-page publisher, or a CUDA one at the recommended granularity.
        assert_eq!(
            slot(2 << 20, 2 << 20, 12288).checked(page).unwrap(),
            2 << 20
        );
        // Our own granularity is always allowed, whatever the publisher says.
        assert_eq!(
            slot(2 << 20, 4096, 12288).checked(2 << 20).unwrap(),
            2 << 20
        );
        for bad in [
            slot(1 << 31, 4096, 12288),
            slot(16384, 4096, 12288),
            slot(1 << 31, 1 << 31, 12288),
            slot(4 << 20, 4 << 20, 12288),
            slot(8192, 4096, 12288),
            slot(u64::MAX, 4096, 12288),
            slot(u64::MAX, 0, usize::MAX),
        ] {
            let e = bad.checked(page).unwrap_err();
            assert_eq!(e.code(), ErrorCode::Protocol, "{bad:?}: {e}");
            assert!(e.message().contains(&bad.announced.to_string()), "{e}");
        }
        let e = slot(1 << 31, 4096, 12288).checked(page).unwrap_err();
        assert!(
            e.message()
                .contains("2147483648-byte slots for 12288-byte frames"),
            "{e}"
        );
    }
}
