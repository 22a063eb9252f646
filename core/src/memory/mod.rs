//! The memory behind frame slots: one allocation per slot, shared by file descriptor.
//!
//! Two kinds (R14): CUDA VMM allocations exported as POSIX fds, and host memfds for
//! CPU-only machines and CI. The publisher owns a [`SlotStore`]; a subscriber imports the
//! descriptors of VMM_FDS once at handshake into a [`SlotImport`].

pub mod host;

use std::os::fd::OwnedFd;

use crate::error::Result;
use crate::wire::MemoryKind;

/// Publisher side: the slots it writes into.
pub trait SlotStore: Send + Sync {
    fn kind(&self) -> MemoryKind;
    fn slot_count(&self) -> usize;
    /// Bytes of one slot mapping, rounded up to the granularity (R20).
    fn mapped_size(&self) -> usize;
    /// VMM granularity, or the page size for host memory.
    fn granularity(&self) -> u64;
    /// Fresh descriptors, one per slot, to send in VMM_FDS.
    fn export_fds(&self) -> Result<Vec<OwnedFd>>;
    /// Where slot `index` starts: a host pointer or a CUDA device pointer.
    fn slot_address(&self, index: usize) -> u64;
}

/// Subscriber side: the slots it reads from, imported once.
pub trait SlotImport: Send + Sync {
    fn kind(&self) -> MemoryKind;
    fn slot_count(&self) -> usize;
    fn mapped_size(&self) -> usize;
    fn slot_address(&self, index: usize) -> u64;
}

/// CUDA VMM slots on `device` (the CUDA backend lives in `cuda.rs` of this module).
pub fn create_cuda_slots(
    device: i32,
    count: usize,
    frame_size: usize,
) -> Result<Box<dyn SlotStore>> {
    let _ = (device, count, frame_size);
    Err(crate::Error::new(
        crate::ErrorCode::Cuda,
        "CUDA slots are not available in this build yet",
    ))
}

/// Import CUDA VMM slots from VMM_FDS descriptors on `device`.
pub fn import_cuda_slots(
    device: i32,
    fds: Vec<OwnedFd>,
    size: usize,
) -> Result<Box<dyn SlotImport>> {
    let _ = (device, fds, size);
    Err(crate::Error::new(
        crate::ErrorCode::Cuda,
        "CUDA slots are not available in this build yet",
    ))
}
