//! `Frame`: one frame of a subscriber.

use std::sync::{Arc, Mutex};

use cuframes_core::format::FrameLayout;
use cuframes_core::wire::{Format, MemoryKind};
use cuframes_core::ErrorCode;
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::export::FrameShared;
use crate::plane::Plane;
use crate::rgb::{self, RgbGpu};
use crate::stream::stream_handle;
use crate::{error, lock, to_py};

/// Shared by a subscriber and its frames.
pub(crate) type RgbSlot = Arc<Mutex<Option<Arc<RgbGpu>>>>;

/// One frame. Release it (`release()`, `with frame:`) as soon as it is no longer needed: a
/// zero-copy frame holds a ring slot until then.
///
/// A frame inherited by a forked child is the parent's: releasing or dropping it there does
/// not release it (no ACK, no CUDA call).
#[pyclass(module = "cuframes", frozen)]
pub struct Frame {
    #[pyo3(get)]
    pub(crate) seq: u64,
    #[pyo3(get)]
    pub(crate) pts_ns: Option<i64>,
    pub(crate) layout: Arc<FrameLayout>,
    pub(crate) colour: Option<cuframes_core::colour::ColourInfo>,
    pub(crate) memory: MemoryKind,
    #[pyo3(get)]
    pub(crate) zero_copy: bool,
    #[pyo3(get)]
    pub(crate) device: i32,
    pub(crate) rgb: RgbSlot,
    pub(crate) shared: Arc<FrameShared>,
}

fn itemsize(format: Format) -> usize {
    match format {
        Format::P010 | Format::P016 => 2,
        _ => 1,
    }
}

impl Frame {
    fn release_impl(&self, py: Python<'_>, stream: Option<usize>) {
        let Some(f) = self.shared.mark_released() else {
            return;
        };
        py.allow_threads(move || f.release(stream));
    }
}

#[pymethods]
impl Frame {
    #[getter]
    fn format(&self) -> &'static str {
        self.layout.format.name()
    }

    #[getter]
    fn width(&self) -> u32 {
        self.layout.width
    }

    #[getter]
    fn height(&self) -> u32 {
        self.layout.height
    }

    #[getter]
    fn pitches<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.layout.planes().iter().map(|p| p.pitch))
    }

    #[getter]
    fn num_planes(&self) -> usize {
        self.layout.planes().len()
    }

    /// "cuda" or "host".
    #[getter]
    fn memory(&self) -> &'static str {
        match self.memory {
            MemoryKind::CudaVmm => "cuda",
            MemoryKind::HostMemfd => "host",
        }
    }

    #[getter]
    fn released(&self) -> bool {
        lock(&self.shared.state).released
    }

    /// Plane `i` (0 = luma / packed RGB, 1.. = chroma).
    fn plane(slf: Bound<'_, Self>, i: usize) -> PyResult<Plane> {
        let f = slf.get();
        {
            let s = lock(&f.shared.state);
            f.shared.check_usable(&s)?;
        }
        let p = *f.layout.planes().get(i).ok_or_else(|| {
            PyIndexError::new_err(format!(
                "plane {i}: a {} frame has {} planes",
                f.layout.format.name(),
                f.layout.planes().len()
            ))
        })?;
        let item = itemsize(f.layout.format);
        let interleaved = match f.layout.format {
            Format::Nv12 | Format::P010 | Format::P016 if i == 1 => 2,
            Format::Rgba | Format::Bgra => 4,
            _ => 1,
        };
        if p.pitch % item != 0 || p.row_bytes % (item * interleaved) != 0 {
            return Err(error(
                ErrorCode::Format,
                format!(
                    "plane {i}: pitch {} is not a whole number of samples",
                    p.pitch
                ),
            ));
        }
        let (shape, strides) = if interleaved > 1 {
            (
                vec![
                    p.rows as i64,
                    (p.row_bytes / item / interleaved) as i64,
                    interleaved as i64,
                ],
                vec![(p.pitch / item) as i64, interleaved as i64, 1],
            )
        } else {
            (
                vec![p.rows as i64, (p.row_bytes / item) as i64],
                vec![(p.pitch / item) as i64, 1],
            )
        };
        Ok(Plane {
            frame: slf.clone().unbind(),
            index: i,
            offset: p.offset,
            pitch: p.pitch,
            row_bytes: p.row_bytes,
            rows: p.rows,
            itemsize: item,
            shape,
            strides,
            pin: Mutex::new(None),
        })
    }

    /// All planes, in order.
    #[getter]
    fn planes(slf: Bound<'_, Self>) -> PyResult<Vec<Plane>> {
        let n = slf.get().layout.planes().len();
        (0..n).map(|i| Frame::plane(slf.clone(), i)).collect()
    }

    /// Release the frame. `stream` (CUDA frames: an int CUstream, or a torch/CuPy stream):
    /// the release waits for the work queued on it; it must be a live stream of the frame's
    /// device (not checked). None: released now (a zero-copy CUDA frame after the device's
    /// primary context finished its work). With exports alive (DLPack capsules or arrays
    /// imported from this frame's planes), the release happens when the last one is gone,
    /// without the stream. Idempotent; new exports raise `cuframes.Error` afterwards.
    #[pyo3(signature = (stream=None))]
    fn release(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let stream = match stream {
            Some(s) => stream_handle(s)?,
            None => None,
        };
        self.release_impl(py, stream);
        Ok(())
    }

    /// The colour description the publisher gave the ring (a dict: `range`, `primaries`,
    /// `transfer`, `matrix`, `chroma_location` in FFmpeg's numbering, `sar` as a (num, den)
    /// tuple), or None when it gave none. `to_rgb` uses its matrix and range by default.
    #[getter]
    fn colour<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(c) = &self.colour else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("range", c.range)?;
        d.set_item("primaries", c.primaries)?;
        d.set_item("transfer", c.transfer)?;
        d.set_item("matrix", c.matrix)?;
        d.set_item("chroma_location", c.chroma_location)?;
        d.set_item("sar", c.sar)?;
        Ok(Some(d))
    }

    /// The frame as an RGB image (a `cuframes.Tensor`; `torch.from_dlpack` takes it without
    /// a copy): `dtype` "uint8" (0..255), "float16" or "float32" (0..1); `layout` "chw"
    /// (3, H, W) or "hwc" (H, W, 3); `matrix` "bt709" / "bt601" / "bt2020" and `range`
    /// "limited" / "full" say how to read the YUV samples (None: the ring's colour description
    /// where the publisher gave one, else BT.709 limited). CUDA frames are converted on the GPU into a pooled
    /// device buffer, queued on `stream` (an int CUstream or a torch/CuPy stream of the
    /// frame's device, in its primary context; None: the legacy default stream); host frames
    /// on the host. The frame stays usable; its release waits for the conversion.
    #[pyo3(signature = (dtype="uint8", layout="chw", matrix=None, range=None, stream=None))]
    fn to_rgb(
        &self,
        py: Python<'_>,
        dtype: &str,
        layout: &str,
        matrix: Option<&str>,
        range: Option<&str>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<rgb::Tensor> {
        let spec = rgb::parse_spec(dtype, layout, matrix, range, self.colour.as_ref())?;
        let stream = match stream {
            Some(s) => stream_handle(s)?,
            None => None,
        };
        let guard = self.shared.export()?;
        if self.memory == MemoryKind::HostMemfd {
            let s = lock(&guard.0.state);
            let f = s.frame.as_ref().expect("an export guard keeps the frame");
            return match f.bytes() {
                Some(b) => rgb::host_tensor(b, &self.layout, &spec),
                None => {
                    // Zero-copy: a snapshot of the slot first (the conversion reads every
                    // byte several times; the copy is one pass).
                    let mut copy = vec![0u8; self.layout.frame_size];
                    f.copy_to(&mut copy).map_err(to_py)?;
                    rgb::host_tensor(&copy, &self.layout, &spec)
                }
            };
        }
        let (dev, src) = {
            let s = lock(&guard.0.state);
            let f = s.frame.as_ref().expect("an export guard keeps the frame");
            let dev = f
                .cuda_device()
                .cloned()
                .ok_or_else(|| error(ErrorCode::Cuda, "to_rgb: the CUDA frame has no device"))?;
            (dev, f.address())
        };
        let gpu = {
            let mut slot = lock(&self.rgb);
            match &*slot {
                Some(g) => g.clone(),
                None => {
                    let g = Arc::new(
                        py.allow_threads(|| RgbGpu::new(&dev))
                            .map_err(rgb::no_gpu)?,
                    );
                    *slot = Some(g.clone());
                    g
                }
            }
        };
        // SAFETY: `src` is the frame's device address (its slot, or its copy buffer), kept
        // valid by `guard` now and, after, by the release: it waits for the event recorded
        // below (Releasable::release). `stream` is to_rgb's documented contract.
        let (tensor, done) =
            unsafe { rgb::device_tensor(&gpu, src, &self.layout, &spec, stream.unwrap_or(0)) }?;
        lock(&guard.0.state).conversions.push(done);
        Ok(tensor)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> bool {
        self.release_impl(py, None);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "<cuframes.Frame seq={} {} {}x{} {}{}>",
            self.seq,
            self.layout.format.name(),
            self.layout.width,
            self.layout.height,
            self.memory(),
            if self.zero_copy { " zero_copy" } else { "" }
        )
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        if let Some(f) = self.shared.mark_released() {
            f.release(None);
        }
    }
}
