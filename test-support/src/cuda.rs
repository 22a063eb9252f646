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

/// Reads frames back to the host through [`Frame::download_plane`] (a device-to-host copy
/// for CUDA frames), so that tests check them byte for byte like host frames.
///
/// [`Frame::download_plane`]: cuframes_core::subscriber::Frame::download_plane
pub struct CudaCheck {
    _dev: std::sync::Arc<cuframes_core::cuda::CudaDevice>,
}

impl CudaCheck {
    /// Device 0, made current on this thread (the tests' own CUDA work runs in it; the
    /// downloads run on a stream the frame's subscription owns).
    pub fn open() -> CudaCheck {
        let dev = cuframes_core::cuda::CudaDevice::open(0).unwrap();
        dev.make_current().unwrap();
        CudaCheck { _dev: dev }
    }

    /// The frame's planes, dense (row_bytes per row, no pitch padding), as the publisher was
    /// given them.
    pub fn dense_planes(&self, f: &cuframes_core::subscriber::Frame) -> Vec<Vec<u8>> {
        f.layout
            .planes()
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut out = vec![0u8; p.row_bytes * p.rows];
                f.download_plane(i, &mut out).unwrap();
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
