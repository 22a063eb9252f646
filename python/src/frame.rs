//! `Frame`: one frame of a subscriber.

use std::sync::{Arc, Mutex};

use cuframes_core::format::FrameGeometry;
use cuframes_core::wire::{Format, MemoryKind};
use cuframes_core::ErrorCode;
use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::exception::{error, to_py};
use crate::export::FrameShared;
use crate::plane::{FrameFacts, Plane};
use crate::rgb::{self, RgbGpu};
use crate::stream::{stream_handle, LEGACY_STREAM};
use crate::values::lock;

/// Shared by a subscriber and its frames.
pub(crate) type RgbSlot = Arc<Mutex<Option<Arc<RgbGpu>>>>;

/// One frame. Release it (`release()`, `with frame:`) as soon as it is no longer needed: a
/// zero-copy frame holds a ring slot until then.
///
/// Its pixels: `plane(i)` / `planes` (exported without a copy: `numpy.asarray`,
/// `numpy.from_dlpack`, `torch.from_dlpack`), `to_ndarray()` (host frames, one dense copy;
/// `numpy.asarray(frame)` too) and `to_rgb()`.
///
/// A frame inherited by a forked child is the parent's: releasing or dropping it there does
/// not release it (no ACK, no CUDA call).
#[pyclass(module = "cuframes", frozen)]
pub struct Frame {
    /// The frame's sequence number in its stream (1 for the first frame published).
    #[pyo3(get)]
    pub(crate) seq: u64,
    /// Presentation time in nanoseconds (the publisher's clock when it gave none); None if
    /// unknown. `time` is the same in seconds.
    #[pyo3(get)]
    pub(crate) pts_ns: Option<i64>,
    pub(crate) layout: Arc<FrameGeometry>,
    pub(crate) colour: Option<cuframes_core::colour::ColourInfo>,
    pub(crate) memory: MemoryKind,
    /// True when the bytes are the ring's own slot (no copy was made).
    #[pyo3(get)]
    pub(crate) zero_copy: bool,
    /// The CUDA device ordinal of a "cuda" frame (0 for host frames).
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

/// The subscriber's `to_rgb` kernel and pool, loaded by the first conversion. The slot's
/// lock is never held while the GIL is waited for, nor across the load (which runs without
/// the GIL): a thread converting meanwhile neither deadlocks on it nor waits for the load.
/// Two first conversions at once may both load the kernel; the first installed is kept and
/// the other dropped outside the lock.
fn rgb_gpu(
    py: Python<'_>,
    slot: &RgbSlot,
    dev: &Arc<cuframes_core::cuda::CudaDevice>,
) -> PyResult<Arc<RgbGpu>> {
    if let Some(g) = lock(slot).clone() {
        return Ok(g);
    }
    let made = Arc::new(py.allow_threads(|| RgbGpu::new(dev)).map_err(rgb::no_gpu)?);
    let (gpu, spare) = {
        let mut s = lock(slot);
        match &*s {
            Some(g) => (g.clone(), Some(made)),
            None => {
                *s = Some(made.clone());
                (made, None)
            }
        }
    };
    drop(spare);
    Ok(gpu)
}

impl Frame {
    /// Marks the frame released and, when nothing exports it, releases it without the GIL
    /// (the release may wait for the GPU).
    fn release_impl(&self, py: Python<'_>, stream: Option<usize>) {
        let Some(f) = self.shared.mark_released() else {
            return;
        };
        f.release_without_gil(py, stream);
    }
}

#[pymethods]
impl Frame {
    /// "nv12", "p010", "p016", "yuv420p", "yuv444p", "rgba" or "bgra".
    #[getter]
    fn format(&self) -> &'static str {
        self.layout.format.name()
    }

    /// Width in pixels.
    #[getter]
    fn width(&self) -> u32 {
        self.layout.width
    }

    /// Height in pixels.
    #[getter]
    fn height(&self) -> u32 {
        self.layout.height
    }

    /// Bytes from one row to the next, per plane.
    #[getter]
    fn pitches<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.layout.planes().iter().map(|p| p.pitch))
    }

    /// The number of planes (1 for RGBA/BGRA, 2 for NV12/P010/P016, 3 for YUV planar).
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

    /// True once `release()` was called (or the `with` block ended).
    #[getter]
    fn released(&self) -> bool {
        lock(&self.shared.state).released
    }

    /// Presentation time in seconds (`pts_ns * time_base`), or None without a pts.
    #[getter]
    fn time(&self) -> Option<f64> {
        self.pts_ns.map(|p| p as f64 / 1e9)
    }

    /// The unit of `pts_ns`: `fractions.Fraction(1, 1_000_000_000)` (nanoseconds).
    #[getter]
    fn time_base<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::ndarray::time_base(py)
    }

    /// The frame's pixels as one NumPy array, a dense copy laid out as PyAV's
    /// `VideoFrame.to_ndarray()`: nv12 and yuv420p as (H*3/2, W) uint8 (the luma rows, then
    /// the chroma rows: interleaved UV, or U then V), p010 and p016 the same in uint16,
    /// yuv444p as (3, H, W), rgba and bgra as (H, W, 4). Host frames; a CUDA frame raises
    /// TypeError (import its planes with DLPack, or use `to_rgb()`). 4:2:0 frames of odd size
    /// raise ValueError (read their planes). `cuframes.Error` once released.
    fn to_ndarray<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::ndarray::dense_copy(py, self.memory, &self.layout, &self.shared)
    }

    /// NumPy's array protocol: `numpy.asarray(frame)` is `frame.to_ndarray()`, cast to
    /// `dtype` when one is given. `copy=False` raises ValueError: the frame is one array only
    /// as a copy (`numpy.asarray(frame.plane(i))` is a view of one plane).
    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if copy == Some(false) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "a frame is one array only as a copy (copy=False): numpy.asarray(frame.plane(i)) \
                 is a view of one plane",
            ));
        }
        let a = crate::ndarray::dense_copy(py, self.memory, &self.layout, &self.shared)?;
        match dtype {
            Some(d) if !d.is_none() => a.call_method1("astype", (d,)),
            _ => Ok(a),
        }
    }

    /// Plane `i` (0 = luma or packed RGB, 1.. = chroma), exported without a copy. IndexError
    /// past the last; `cuframes.Error` once the frame is released or its subscriber closed.
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
            _frame: slf.clone().into_any().unbind(),
            of: FrameFacts {
                seq: f.seq,
                memory: f.memory,
                device: f.device,
                zero_copy: f.zero_copy,
                shared: f.shared.clone(),
            },
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

    /// All planes, in order (see `plane`).
    #[getter]
    fn planes(slf: Bound<'_, Self>) -> PyResult<Vec<Plane>> {
        let n = slf.get().layout.planes().len();
        (0..n).map(|i| Frame::plane(slf.clone(), i)).collect()
    }

    /// Release the frame. `stream` (CUDA frames: an int CUstream, or a torch/CuPy stream):
    /// the release waits for the work queued on it; it must be a live stream of the frame's
    /// device (not checked). 0 and 1 are the legacy default stream (torch's and CuPy's
    /// default stream is 0), 2 the calling thread's per-thread default stream. None:
    /// released now (a zero-copy CUDA frame after the device's primary context finished its
    /// work). With exports alive (DLPack capsules or arrays
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

    /// The colour description the publisher gave the ring, by FFmpeg's names, or None when
    /// it gave none: a dict with `range` ("limited" or "full"), `matrix` (e.g. "bt709",
    /// "smpte170m", "bt2020nc"), `primaries` (e.g. "bt709"), `transfer` (e.g. "bt709",
    /// "smpte2084"), `chroma_location` (e.g. "left") and `sar` ((num, den)). A field the
    /// publisher left unspecified is None; a code point FFmpeg has no name for is its int.
    /// `Publisher(colour=...)` takes the same dict. `to_rgb` uses its matrix and range.
    #[getter]
    fn colour<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.colour
            .as_ref()
            .map(|c| crate::colour::to_dict(py, c))
            .transpose()
    }

    /// The frame as an RGB image (a `cuframes.Tensor`; `torch.from_dlpack` takes it without
    /// a copy): `dtype` "uint8" (0..255), "float16" or "float32" (0..1); `layout` "chw"
    /// (3, H, W) or "hwc" (H, W, 3); `matrix` "bt709" / "bt601" / "bt2020" and `range`
    /// "limited" / "full" say how to read the YUV samples (None: the ring's colour description
    /// where the publisher gave one, else BT.709 limited). CUDA frames are converted on the GPU into a pooled
    /// device buffer, queued on `stream` (an int CUstream or a torch/CuPy stream of the
    /// frame's device, in its primary context; None, 0 and 1: the legacy default stream,
    /// 2: the calling thread's per-thread default stream); host frames
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
        let gpu = rgb_gpu(py, &self.rgb, &dev)?;
        // SAFETY: `src` is the frame's device address (its slot, or its copy buffer), kept
        // valid by `guard` now and, after, by the release: it waits for the event recorded
        // below (Releasable::release). `stream` is to_rgb's documented contract.
        let (tensor, done) = unsafe {
            rgb::device_tensor(
                &gpu,
                src,
                &self.layout,
                &spec,
                stream.unwrap_or(LEGACY_STREAM),
            )
        }?;
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
            "<cuframes.Frame seq={} {} {}x{} {}{} time={}{}>",
            self.seq,
            self.layout.format.name(),
            self.layout.width,
            self.layout.height,
            self.memory(),
            match (self.memory, self.zero_copy) {
                (MemoryKind::CudaVmm, true) => format!(":{} zero_copy", self.device),
                (MemoryKind::CudaVmm, false) => format!(":{}", self.device),
                (_, true) => " zero_copy".to_string(),
                (_, false) => String::new(),
            },
            self.time()
                .map_or("None".to_string(), |t| format!("{t:.6}")),
            if self.released() { " released" } else { "" }
        )
    }
}

/// A Frame dropped unreleased is released here, as `release()` does it: without the GIL,
/// since a zero-copy CUDA frame's release waits for the device's primary context
/// (`cuCtxSynchronize`) and other Python threads must go on meanwhile.
impl Drop for Frame {
    fn drop(&mut self) {
        if let Some(f) = self.shared.mark_released() {
            // A Frame is dropped by its deallocation (the GIL held) or by the Rust code of a
            // method that made it (the GIL held too); with_gil only counts the GIL then.
            Python::with_gil(|py| f.release_without_gil(py, None));
        }
    }
}
