//! `Subscriber`, `Frame` and `Plane`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cuframes_core::format::FrameLayout;
use cuframes_core::subscriber::{Subscriber as CoreSubscriber, SubscriberOptions};
use cuframes_core::wire::{Format, MemoryKind, SubscriberMode};
use cuframes_core::ErrorCode;
use pyo3::exceptions::{PyAttributeError, PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use cuframes_core::cuda::{Event, Stream};
use cuframes_core::subscriber::Frame as CoreFrame;

use crate::dlpack::{self, DLDevice, Tensor, KDL_CPU, KDL_CUDA};
use crate::rgb::{self, RgbGpu};
use crate::{duration, error, lock, to_py, until_disconnected, wait_in_slices};

/// A frame's state, shared by the Python `Frame`, its exports and the capsule deleters
/// (which may run on any thread, without the GIL).
pub struct FrameShared {
    state: Mutex<FrameState>,
    /// Set when the subscriber that delivered the frame is closed.
    subscriber_closed: Arc<AtomicBool>,
}

struct FrameState {
    /// The core frame, until it is released.
    frame: Option<CoreFrame>,
    /// Live exports (capsules, pinned planes).
    exports: usize,
    /// `release()` was called (or the Python frame is gone): no new exports.
    released: bool,
    /// Events behind the `to_rgb` conversions queued from this frame: the release waits for
    /// them (they may run on a stream the release is not told about).
    conversions: Vec<Arc<Event>>,
}

/// What releasing a frame needs once nothing exports it any more.
pub(crate) struct Releasable {
    frame: CoreFrame,
    conversions: Vec<Arc<Event>>,
}

impl Releasable {
    /// Releases the core frame after the conversions queued from it; with `stream` (a CUDA
    /// frame's reader stream), after the work queued there too.
    fn release(self, stream: Option<usize>) {
        let Releasable { frame, conversions } = self;
        let cuda = frame.memory_kind() == MemoryKind::CudaVmm;
        match (stream, frame.cuda_device().cloned()) {
            (Some(s), Some(dev)) if cuda && frame.is_zero_copy() => {
                // The ACK follows `s`: make `s` wait for the conversions first (on the GPU).
                // SAFETY: Frame.release(stream)'s contract: a live stream of the frame's
                // device; borrowed, not destroyed.
                let st = unsafe { Stream::from_raw_with_device(&dev, s as *mut std::ffi::c_void) };
                for e in &conversions {
                    if st.wait_event(e).is_err() {
                        let _ = e.synchronize();
                    }
                }
                // SAFETY: as above.
                unsafe { frame.release_after_stream(s as *mut std::ffi::c_void) }
            }
            (s, _) => {
                // A zero-copy CUDA frame's release waits for its device's primary context,
                // where the conversions run; a copy's buffer goes back to the subscriber's pool
                // at once, so wait for them here.
                if !frame.is_zero_copy() {
                    for e in &conversions {
                        let _ = e.synchronize();
                    }
                }
                match s {
                    // SAFETY: as above.
                    Some(s) if cuda => unsafe {
                        frame.release_after_stream(s as *mut std::ffi::c_void)
                    },
                    _ => frame.release(),
                }
            }
        }
    }
}

/// One live export of a frame: while it lives the frame is not released.
pub struct ExportGuard(Arc<FrameShared>);

impl Drop for ExportGuard {
    fn drop(&mut self) {
        let last = {
            let mut s = lock(&self.0.state);
            s.exports -= 1;
            if s.exports == 0 && s.released {
                s.take()
            } else {
                None
            }
        };
        // Released by the last export: ACKed now (for a CUDA ring after the device's
        // primary context finished its work, see the core's Frame::release).
        if let Some(f) = last {
            f.release(None);
        }
    }
}

impl FrameState {
    fn take(&mut self) -> Option<Releasable> {
        Some(Releasable {
            frame: self.frame.take()?,
            conversions: std::mem::take(&mut self.conversions),
        })
    }
}

impl FrameShared {
    fn check_usable(&self, s: &FrameState) -> PyResult<()> {
        if s.released || s.frame.is_none() {
            return Err(error(
                ErrorCode::InvalidArg,
                "the frame was released: its planes can no longer be exported",
            ));
        }
        if self.subscriber_closed.load(Ordering::Acquire) {
            return Err(error(
                ErrorCode::Disconnected,
                "the frame's subscriber is closed: its planes can no longer be exported",
            ));
        }
        Ok(())
    }

    fn export(self: &Arc<Self>) -> PyResult<ExportGuard> {
        let mut s = lock(&self.state);
        self.check_usable(&s)?;
        s.exports += 1;
        Ok(ExportGuard(self.clone()))
    }

    /// Mark released; the core frame if nothing exports it any more.
    fn mark_released(&self) -> Option<Releasable> {
        let mut s = lock(&self.state);
        s.released = true;
        if s.exports == 0 {
            s.take()
        } else {
            None
        }
    }
}

/// A CUstream from what Python passes: None, an int, or a stream object of torch / CuPy /
/// anything with `__cuda_stream__()`, `.cuda_stream` or `.ptr`.
pub(crate) fn stream_handle(stream: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    if stream.is_none() {
        return Ok(None);
    }
    if let Ok(v) = stream.extract::<usize>() {
        return Ok(Some(v));
    }
    if stream.hasattr("__cuda_stream__")? {
        let t = stream.call_method0("__cuda_stream__")?;
        let (_version, handle): (i64, usize) = t.extract()?;
        return Ok(Some(handle));
    }
    for attr in ["cuda_stream", "ptr"] {
        if let Ok(v) = stream.getattr(attr) {
            if let Ok(v) = v.extract::<usize>() {
                return Ok(Some(v));
            }
        }
    }
    Err(PyTypeError::new_err(
        "stream must be None, an int (a CUstream) or a stream object with __cuda_stream__, \
         .cuda_stream (torch) or .ptr (CuPy)",
    ))
}

/// Subscribe to a publisher's frames.
///
/// Waiting for a frame releases the GIL. Iterating yields frames until the publisher shuts
/// down; `next(timeout)` returns None on timeout.
///
/// After `os.fork()` (or multiprocessing's "fork" start method) the child inherits this
/// object, but the subscription stays the parent's: in the child, `close()`, garbage
/// collection and the exit only let go of the child's copy (no UNSUBSCRIBE, no ACK: the
/// parent goes on reading, and frames it holds stay held). Do not read through it in the
/// child (it would take the parent's messages): connect a new subscriber there.
#[pyclass(module = "cuframes", frozen)]
pub struct Subscriber {
    inner: Mutex<Option<CoreSubscriber>>,
    closed: Arc<AtomicBool>,
    device: i32,
    key: String,
    /// Granted at the handshake, fixed for the subscription.
    zero_copy: bool,
    /// `to_rgb`'s kernel and buffer pool, made by the first conversion of a CUDA frame.
    rgb: RgbSlot,
}

/// Shared by a subscriber and its frames.
type RgbSlot = Arc<Mutex<Option<Arc<RgbGpu>>>>;

impl Subscriber {
    fn wrap(&self, f: cuframes_core::subscriber::Frame) -> Frame {
        let memory = f.memory_kind();
        let zero_copy = f.is_zero_copy();
        Frame {
            seq: f.seq,
            pts_ns: crate::opt_ts(f.pts_ns),
            layout: f.layout.clone(),
            colour: f.colour,
            memory,
            zero_copy,
            // The ordinal this process sees the frame's GPU as (resolved from the publisher's
            // GPU UUID), which DLPack's device id must name.
            device: f.cuda_device().map_or(self.device.max(0), |d| d.ordinal()),
            rgb: self.rgb.clone(),
            shared: Arc::new(FrameShared {
                state: Mutex::new(FrameState {
                    frame: Some(f),
                    exports: 0,
                    released: false,
                    conversions: Vec::new(),
                }),
                subscriber_closed: self.closed.clone(),
            }),
        }
    }

    /// The next frame; Ok(None) on timeout. `end_ok`: DISCONNECTED is Ok(None) too.
    fn next_impl(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Frame>> {
        let f = wait_in_slices(py, timeout, |slice| {
            lock(&self.inner)
                .as_mut()
                .map(|s| s.next_frame(Some(slice)))
        })?;
        Ok(f.map(|f| self.wrap(f)))
    }

    fn close_impl(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Release);
        let sub = py.allow_threads(|| lock(&self.inner).take());
        drop(sub);
    }
}

#[pymethods]
impl Subscriber {
    #[new]
    #[pyo3(signature = (key, name="python", mode="copy", runtime_dir=None, connect_timeout=5.0,
                        accept_zero_copy_overwrite=false, device=-1, spin=0.0, reconnect=None,
                        publisher_uid=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        key: &str,
        name: &str,
        mode: &str,
        runtime_dir: Option<std::path::PathBuf>,
        connect_timeout: f64,
        accept_zero_copy_overwrite: bool,
        device: i32,
        spin: f64,
        reconnect: Option<f64>,
        publisher_uid: Option<u32>,
    ) -> PyResult<Self> {
        let mode = match mode {
            "copy" => SubscriberMode::Copy,
            "zero_copy" => SubscriberMode::ZeroCopy,
            other => {
                return Err(PyValueError::new_err(format!(
                    "mode must be \"copy\" or \"zero_copy\", not {other:?}"
                )))
            }
        };
        let options = SubscriberOptions {
            runtime_dir,
            name: name.to_string(),
            cuda_device: device,
            mode,
            want_frames: true,
            want_packets: false,
            connect_timeout: duration("connect_timeout", connect_timeout)?,
            accept_zero_copy_overwrite,
            spin: duration("spin", spin)?,
            reconnect: reconnect.map(|s| duration("reconnect", s)).transpose()?,
            publisher_uid,
            ..SubscriberOptions::default()
        };
        let sub = py
            .allow_threads(|| CoreSubscriber::connect(key, &options))
            .map_err(to_py)?;
        Ok(Subscriber {
            zero_copy: sub.is_zero_copy(),
            inner: Mutex::new(Some(sub)),
            closed: Arc::new(AtomicBool::new(false)),
            device,
            key: key.to_string(),
            rgb: Arc::new(Mutex::new(None)),
        })
    }

    /// The next frame, waiting at most `timeout` seconds (None: until one comes); None on
    /// timeout. At the end of the stream: `cuframes.Error` with code DISCONNECTED.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Frame>> {
        self.next_impl(py, timeout)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Frame>> {
        until_disconnected(py, self.next_impl(py, None))
    }

    /// True when frames come without a copy (zero_copy granted).
    #[getter]
    fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Unsubscribe. Frames still held can no longer be exported (exports already made stay
    /// valid memory, but they no longer hold the slot for this subscriber).
    fn close(&self, py: Python<'_>) {
        self.close_impl(py);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> bool {
        self.close_impl(py);
        false
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// One frame. Release it (`release()`, `with frame:`) as soon as it is no longer needed: a
/// zero-copy frame holds a ring slot until then.
///
/// A frame inherited by a forked child is the parent's: releasing or dropping it there does
/// not release it (no ACK, no CUDA call).
#[pyclass(module = "cuframes", frozen)]
pub struct Frame {
    #[pyo3(get)]
    seq: u64,
    #[pyo3(get)]
    pts_ns: Option<i64>,
    layout: Arc<FrameLayout>,
    colour: Option<cuframes_core::colour::ColourInfo>,
    memory: MemoryKind,
    #[pyo3(get)]
    zero_copy: bool,
    #[pyo3(get)]
    device: i32,
    rgb: RgbSlot,
    shared: Arc<FrameShared>,
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

/// One plane of a frame: DLPack (`__dlpack__`), `__cuda_array_interface__` (CUDA frames)
/// and `__array_interface__` (host frames: `numpy.asarray(plane)` is a read-only view).
///
/// The plane keeps its frame alive. Reading `__array_interface__` or
/// `__cuda_array_interface__` pins the frame until the plane object is gone (consumers such
/// as NumPy and CuPy keep it as their base); a DLPack capsule pins it until its consumer
/// deletes it.
#[pyclass(module = "cuframes", frozen)]
pub struct Plane {
    frame: Py<Frame>,
    #[pyo3(get)]
    index: usize,
    offset: usize,
    #[pyo3(get)]
    pitch: usize,
    #[pyo3(get)]
    row_bytes: usize,
    #[pyo3(get)]
    rows: usize,
    #[pyo3(get)]
    itemsize: usize,
    shape: Vec<i64>,
    /// In elements.
    strides: Vec<i64>,
    pin: Mutex<Option<ExportGuard>>,
}

impl Plane {
    fn frame(&self) -> &Frame {
        self.frame.get()
    }

    fn is_cuda(&self) -> bool {
        self.frame().memory == MemoryKind::CudaVmm
    }

    fn dl_device(&self) -> DLDevice {
        if self.is_cuda() {
            DLDevice {
                device_type: KDL_CUDA,
                device_id: self.frame().device,
            }
        } else {
            DLDevice {
                device_type: KDL_CPU,
                device_id: 0,
            }
        }
    }

    /// The plane's address, under an export guard (so it stays valid while the guard does).
    fn address(&self, guard: &ExportGuard) -> u64 {
        let s = lock(&guard.0.state);
        let base = s.frame.as_ref().map_or(0, |f| f.address());
        base + self.offset as u64
    }

    fn tensor(&self, guard: &ExportGuard) -> Tensor {
        Tensor {
            data: self.address(guard),
            device: self.dl_device(),
            dtype: dlpack::DType::Uint(self.itemsize as u8),
            shape: self.shape.clone(),
            strides: self.strides.clone(),
            // Zero-copy host slots are mapped read-only: a write would fault. CUDA slots are
            // mapped read-write and not flagged: CuPy and torch refuse read-only imports.
            read_only: self.frame().zero_copy && !self.is_cuda(),
        }
    }

    fn typestr(&self) -> &'static str {
        if self.itemsize == 2 {
            "<u2"
        } else {
            "|u1"
        }
    }

    /// The array interface dict (NumPy's and CUDA's share these keys), pinning the frame.
    fn interface<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut pin = lock(&self.pin);
        if pin.is_none() {
            *pin = Some(self.frame().shared.export()?);
        } else {
            // Pinned already: still refuse once the frame is released or its subscriber is
            // closed (the memory stays mapped; the frame is no longer the user's to read).
            let s = lock(&self.frame().shared.state);
            if s.released
                || self
                    .frame()
                    .shared
                    .subscriber_closed
                    .load(Ordering::Acquire)
            {
                return Err(error(
                    ErrorCode::InvalidArg,
                    "the frame was released or its subscriber closed",
                ));
            }
        }
        let data = self.address(pin.as_ref().expect("set above"));
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", self.typestr())?;
        d.set_item(
            "strides",
            PyTuple::new(py, self.strides.iter().map(|s| s * self.itemsize as i64))?,
        )?;
        d.set_item("data", (data, true))?;
        d.set_item("version", 3)?;
        Ok(d)
    }
}

#[pymethods]
impl Plane {
    /// (rows, columns) or (rows, columns, channels) in elements.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// In bytes, as NumPy's strides.
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.strides.iter().map(|s| s * self.itemsize as i64))
    }

    /// "uint8" or "uint16".
    #[getter]
    fn dtype(&self) -> &'static str {
        if self.itemsize == 2 {
            "uint16"
        } else {
            "uint8"
        }
    }

    /// The plane's rows copied densely (host frames).
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let guard = self.frame().shared.export()?;
        let s = lock(&guard.0.state);
        let f = s.frame.as_ref().expect("an export guard keeps the frame");
        let mut out = vec![0u8; self.row_bytes * self.rows];
        f.copy_plane_to(self.index, &mut out).map_err(to_py)?;
        Ok(PyBytes::new(py, &out))
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        let d = self.dl_device();
        (d.device_type, d.device_id)
    }

    /// A DLPack capsule ("dltensor", or "dltensor_versioned" when max_version >= (1, 0)).
    /// `stream` is accepted and not waited on: the frame's bytes are complete when it is
    /// delivered. `copy=True` is refused (BufferError).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<PyObject> {
        let _ = stream;
        if copy == Some(true) {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "cuframes planes are exported without a copy (copy=True is not supported)",
            ));
        }
        let own = self.dl_device();
        if let Some((t, id)) = dl_device {
            if t != own.device_type || id != own.device_id {
                return Err(pyo3::exceptions::PyBufferError::new_err(format!(
                    "the plane is on device ({}, {}), not ({t}, {id})",
                    own.device_type, own.device_id
                )));
            }
        }
        let guard = self.frame().shared.export()?;
        let t = self.tensor(&guard);
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        if t.read_only && !versioned {
            // The legacy capsule has no read-only flag: a consumer would get a writable array
            // over a slot mapped read-only, and its first write would kill the process.
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "this plane is read-only (a zero-copy host slot): ask for a versioned DLPack \
                 capsule (max_version >= (1, 0), which carries the read-only flag), or use a \
                 copy-mode subscriber",
            ));
        }
        dlpack::capsule(py, &t, Box::new(guard), versioned)
    }

    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.is_cuda() {
            return Err(PyAttributeError::new_err(
                "a CUDA plane has no __array_interface__ (use __cuda_array_interface__ or DLPack)",
            ));
        }
        self.interface(py)
    }

    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if !self.is_cuda() {
            return Err(PyAttributeError::new_err(
                "a host plane has no __cuda_array_interface__ (use __array_interface__ or DLPack)",
            ));
        }
        let d = self.interface(py)?;
        // v3: no stream to synchronise with, the bytes are complete.
        d.set_item("stream", py.None())?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "<cuframes.Plane {} of frame {}: {:?} {}>",
            self.index,
            self.frame().seq,
            self.shape,
            self.dtype()
        )
    }
}
