//! CUDA made ready while a reader waits for its publisher: a reader started before its
//! publisher (the usual order of a batch job) otherwise initialises the driver and creates its
//! context only once the publisher is there, and a publisher that waits for its readers
//! (`wait_subscribers`) waits for that too: ~0.13 s per reader on an H100, one reader after
//! another (docs/investigations/run-start-and-end.md).

use std::sync::Arc;

use crate::cuda::{self, CudaDevice};

use super::options::SubscriberOptions;

impl SubscriberOptions {
    /// Opens (retains the primary context of) the CUDA device a subscriber with these options
    /// will most likely import a CUDA ring on, for a reader to hold while it waits for its
    /// publisher and to drop once connected (the import then finds the context made). The
    /// device option when it names one; the only GPU when it is automatic (the publisher's GPU)
    /// and there is one; otherwise none (several GPUs: which one is the publisher's is known
    /// only from its answer). Best effort: no driver, no device or a failure gives none.
    pub fn warm_up_cuda(&self) -> Option<Arc<CudaDevice>> {
        let ordinal = if self.cuda_device >= 0 {
            self.cuda_device
        } else if cuda::device_count().ok()? == 1 {
            0
        } else {
            return None;
        };
        CudaDevice::open(ordinal).ok()
    }
}
