//! The memory behind frame slots: one allocation per slot, shared by file descriptor.
//!
//! Two kinds (R14): CUDA VMM allocations exported as POSIX fds, and host memfds for
//! CPU-only machines and CI. The publisher owns a [`SlotStore`]; a subscriber imports the
//! descriptors of VMM_FDS once at handshake into a [`SlotImport`].

pub mod cuda;
pub mod host;
pub mod private_view;
pub mod slot;

pub use private_view::PrivateView;
pub use slot::{SlotImport, SlotSize, SlotStore};

use std::os::fd::OwnedFd;

use crate::error::Result;

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

/// Import CUDA VMM slots from VMM_FDS descriptors on `device` (their size checked against
/// the frame's first, [`SlotSize::checked`]).
pub fn import_cuda_slots(
    device: i32,
    fds: Vec<OwnedFd>,
    size: SlotSize,
) -> Result<Box<dyn SlotImport>> {
    Ok(Box::new(cuda::CudaImport::import(device, fds, size)?))
}
