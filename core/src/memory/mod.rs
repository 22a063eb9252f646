//! The memory behind frame slots: one allocation per slot, shared by file descriptor.
//!
//! Two kinds (R14): CUDA VMM allocations exported as POSIX fds, and host memfds for
//! CPU-only machines and CI. The publisher owns a [`SlotStore`]; a subscriber imports the
//! descriptors of VMM_FDS once at handshake into a [`SlotImport`].

pub mod cuda;
pub mod host;

use std::os::fd::OwnedFd;

use crate::error::Result;
use crate::wire::MemoryKind;

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
    /// The device of CUDA slots.
    fn cuda_device(&self) -> Option<&std::sync::Arc<crate::cuda::CudaDevice>> {
        None
    }
}

/// CUDA VMM slots on `device`.
pub fn create_cuda_slots(
    device: i32,
    count: usize,
    frame_size: usize,
) -> Result<Box<dyn SlotStore>> {
    Ok(Box::new(cuda::CudaSlots::create(
        device, count, frame_size,
    )?))
}

/// Import CUDA VMM slots from VMM_FDS descriptors on `device`.
pub fn import_cuda_slots(
    device: i32,
    fds: Vec<OwnedFd>,
    size: usize,
) -> Result<Box<dyn SlotImport>> {
    Ok(Box::new(cuda::CudaImport::import(device, fds, size)?))
}
