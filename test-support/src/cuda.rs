//! CUDA in tests: whether a driver is there, and reading CUDA frames back to compare them.

use crate::verify_frame;

/// Is there a CUDA driver with a device? `Some(why)` when not (tests print it when skipping).
pub fn no_cuda() -> Option<String> {
    match cuframes_core::cuda::driver_available().and_then(|_| cuframes_core::cuda::device_count())
    {
        Ok(n) if n > 0 => None,
        Ok(_) => Some("the driver reports 0 devices".into()),
        Err(e) => Some(e.to_string()),
    }
}

/// Reads CUDA frames back to the host (a device-to-host copy on a stream of its own), so that
/// tests check them byte for byte like host frames.
pub struct CudaCheck {
    _dev: std::sync::Arc<cuframes_core::cuda::CudaDevice>,
    stream: cuframes_core::cuda::Stream,
}

impl CudaCheck {
    /// Device 0, made current on this thread.
    pub fn open() -> CudaCheck {
        let dev = cuframes_core::cuda::CudaDevice::open(0).unwrap();
        dev.make_current().unwrap();
        let stream = cuframes_core::cuda::Stream::new(&dev).unwrap();
        CudaCheck { _dev: dev, stream }
    }

    /// The frame's planes, dense (row_bytes per row, no pitch padding), as the publisher was
    /// given them.
    pub fn dense_planes(&self, f: &cuframes_core::subscriber::Frame) -> Vec<Vec<u8>> {
        f.layout
            .planes()
            .iter()
            .map(|p| {
                let mut out = vec![0u8; p.row_bytes * p.rows];
                // SAFETY: `f` keeps its device memory (the imported slot, or its pooled copy)
                // mapped while it lives; the plane (rows of row_bytes at pitch from its offset)
                // lies within the frame; `out` holds rows × row_bytes bytes at a pitch of
                // row_bytes; the copy is synchronous on a live stream of ours.
                unsafe {
                    cuframes_core::cuda::copy_dtoh_2d(
                        &mut out,
                        p.row_bytes,
                        f.address() + p.offset as u64,
                        p.pitch,
                        p.row_bytes,
                        p.rows,
                        &self.stream,
                    )
                }
                .unwrap();
                out
            })
            .collect()
    }
}

/// Does every byte of `f` match `dense` (host frames directly, CUDA frames through `cuda`)?
pub fn verify_any(
    f: &cuframes_core::subscriber::Frame,
    dense: &[Vec<u8>],
    cuda: Option<&CudaCheck>,
) -> bool {
    match cuda {
        None => verify_frame(f, dense),
        Some(c) => c.dense_planes(f) == dense,
    }
}
