//! CUDA VMM slots: one `cuMemCreate` allocation per slot, exported as a POSIX fd (§3.7) and
//! imported once by each subscriber.
//!
//! Both live in the device's primary context ([`CudaDevice::open`]) and leave the calling
//! thread's current context as it was (every driver call pushes and pops the device's
//! context). Dropping them unmaps and releases the memory, which must happen on a thread of
//! the library's or the caller's, never inside a CUDA host function (see
//! `subscriber::deferred`).

use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::slot::{SlotImport, SlotSize, SlotStore};
use crate::cuda::{CudaDevice, VmmAllocation, VmmImport};
use crate::error::Result;
use crate::wire::MemoryKind;

/// The publisher's device slots.
pub struct CudaSlots {
    dev: Arc<CudaDevice>,
    allocs: Vec<VmmAllocation>,
}

impl CudaSlots {
    pub fn create(device: i32, count: usize, frame_size: usize) -> Result<CudaSlots> {
        crate::cuda::driver_available()?;
        let dev = CudaDevice::open(device)?;
        let allocs = (0..count)
            .map(|_| VmmAllocation::create(&dev, frame_size))
            .collect::<Result<Vec<_>>>()?;
        Ok(CudaSlots { dev, allocs })
    }
}

impl SlotStore for CudaSlots {
    fn kind(&self) -> MemoryKind {
        MemoryKind::CudaVmm
    }
    fn mapped_size(&self) -> usize {
        self.allocs[0].size()
    }
    fn granularity(&self) -> u64 {
        self.allocs[0].granularity() as u64
    }
    fn export_fds(&self) -> Result<Vec<OwnedFd>> {
        self.allocs.iter().map(VmmAllocation::export_fd).collect()
    }
    fn slot_address(&self, index: usize) -> u64 {
        self.allocs[index].device_ptr()
    }
    fn cuda_device(&self) -> Option<&Arc<CudaDevice>> {
        Some(&self.dev)
    }
}

/// The subscriber's imported device slots.
pub struct CudaImport {
    dev: Arc<CudaDevice>,
    imports: Vec<VmmImport>,
    size: usize,
}

impl CudaImport {
    /// Import every descriptor on `device` (each closed once imported, §3.7 step 4), once
    /// the announced size is known to be what the frame needs at the device's granularity
    /// ([`SlotSize::checked`]): nothing is imported or mapped before that.
    pub fn import(device: i32, fds: Vec<OwnedFd>, size: SlotSize) -> Result<CudaImport> {
        crate::cuda::driver_available()?;
        let dev = CudaDevice::open(device)?;
        let size = size.checked(dev.vmm_granularity()?)?;
        let imports = fds
            .into_iter()
            .map(|fd| VmmImport::import(&dev, fd, size))
            .collect::<Result<Vec<_>>>()?;
        Ok(CudaImport { dev, imports, size })
    }
}

impl SlotImport for CudaImport {
    fn kind(&self) -> MemoryKind {
        MemoryKind::CudaVmm
    }
    fn mapped_size(&self) -> usize {
        self.size
    }
    fn slot_address(&self, index: usize) -> u64 {
        self.imports[index].device_ptr()
    }
    fn cuda_device(&self) -> Option<&Arc<CudaDevice>> {
        Some(&self.dev)
    }
}
