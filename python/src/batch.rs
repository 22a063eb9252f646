//! `Batch`: many cameras read into one inference batch per `next()` (`cuframes_core::batch`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuframes_core::batch::{Batch as CoreBatch, BatchOptions, BatchPolicy};
use cuframes_core::cuda::{CudaDevice, Event, Stream};
use cuframes_core::rgb::batch::{BatchSpec, Normalize, Resize};
use cuframes_core::rgb::{RgbDtype, RgbLayout};
use cuframes_core::subscriber::SubscriberOptions;
use cuframes_core::wire::{MemoryKind, SubscriberMode};
use cuframes_core::ErrorCode;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::batch_result::BatchResult;
use crate::reading::Timing;
use crate::{duration, lock, to_py};

/// Read many cameras into one batch tensor per `next()`: each camera's frame converted to RGB
/// (its own matrix and range), resized (bilinear; letterboxed with `pad`, or stretched),
/// optionally normalised, into `[N, 3, height, width]` ("nchw") or `[N, height, width, 3]`
/// ("nhwc"). CUDA rings: one kernel launch per batch on the GPU, reading the zero-copy
/// slots where they are, the tensor exported by DLPack / `__cuda_array_interface__`. Host
/// rings: converted by the CPU, the tensor a NumPy array.
///
/// Parameters:
///   keys: the cameras' keys; a camera keeps its index (its place in the batch) for the
///     reader's life, through disconnections and reconnections.
///   width, height: each camera's image in the batch.
///   dtype: "uint8", "float16" or "float32" (floats hold 0..1 before normalisation).
///   layout: "nchw" or "nhwc".
///   resize: "letterbox" (aspect ratio kept, borders of `pad`) or "stretch".
///   pad: the border (and missing camera) colour, R, G, B in 0..1 (one number for all three),
///     before normalisation; default 114/255 (YOLO's grey).
///   mean, std: per-channel normalisation `(v - mean) / std` (both or neither; float dtypes).
///   policy: "latest" (each camera's newest frame, never waiting), "all" (wait up to
///     `timeout` for a new frame of every connected camera) or "aligned" (frames within
///     `window` seconds of the newest camera's newest frame, waiting up to `timeout`).
///   timeout: seconds a batch of "all" or "aligned" waits for its cameras; those still
///     missing then are `valid=False` (a lost camera never holds a batch up).
///   window: the "aligned" policy's pts window in seconds.
///   name, mode, runtime_dir, handshake_timeout, reconnect, spin, accept_zero_copy_overwrite,
///     device, publisher_uid: as `Subscriber`'s, for every camera.
///   wait_publisher: seconds the constructor waits for missing publishers; cameras still
///     missing then are connected in the background as their publishers appear (invalid
///     until then), tried every `retry_interval` seconds, as lost cameras are.
#[pyclass(module = "cuframes", frozen)]
pub struct Batch {
    inner: Mutex<Option<CoreBatch>>,
    keys: Vec<String>,
    spec: BatchSpec,
    policy: &'static str,
    /// The GPU of CUDA batches, opened by the first one.
    gpu: Mutex<Option<Arc<CudaDevice>>>,
    /// Set by `close()` before it takes the reader's lock: a `next()` of another thread that
    /// waits for its policy's cameras stops at its next slice and lets the lock go.
    closing: AtomicBool,
}

fn parse_layout(layout: &str) -> PyResult<RgbLayout> {
    match layout {
        "nchw" | "chw" => Ok(RgbLayout::Chw),
        "nhwc" | "hwc" => Ok(RgbLayout::Hwc),
        other => Err(PyValueError::new_err(format!(
            "layout must be \"nchw\" or \"nhwc\", not {other:?}"
        ))),
    }
}

fn parse_dtype(dtype: &str) -> PyResult<RgbDtype> {
    match dtype {
        "uint8" | "u8" => Ok(RgbDtype::U8),
        "float16" | "half" => Ok(RgbDtype::F16),
        "float32" | "float" => Ok(RgbDtype::F32),
        other => Err(PyValueError::new_err(format!(
            "dtype must be \"uint8\", \"float16\" or \"float32\", not {other:?}"
        ))),
    }
}

/// One number for all three channels, or three.
fn triple(what: &str, v: &Bound<'_, PyAny>) -> PyResult<[f32; 3]> {
    if let Ok(x) = v.extract::<f32>() {
        return Ok([x; 3]);
    }
    v.extract::<(f32, f32, f32)>()
        .map(|(a, b, c)| [a, b, c])
        .map_err(|_| {
            PyValueError::new_err(format!("{what} must be a number or 3 numbers (R, G, B)"))
        })
}

fn parse_policy(
    policy: &str,
    timeout: f64,
    window: Option<f64>,
) -> PyResult<(&'static str, BatchPolicy)> {
    let timeout = duration("timeout", timeout)?;
    match (policy, window) {
        ("latest", None) => Ok(("latest", BatchPolicy::Latest)),
        ("all", None) => Ok(("all", BatchPolicy::All { timeout })),
        ("aligned", Some(w)) => Ok((
            "aligned",
            BatchPolicy::Aligned {
                window: duration("window", w)?,
                timeout,
            },
        )),
        ("aligned", None) => Err(PyValueError::new_err(
            "policy \"aligned\" needs window= (seconds between the cameras' timestamps)",
        )),
        ("latest" | "all", Some(_)) => Err(PyValueError::new_err(
            "window= is for policy \"aligned\" only",
        )),
        (other, _) => Err(PyValueError::new_err(format!(
            "policy must be \"latest\", \"all\" or \"aligned\", not {other:?}"
        ))),
    }
}

impl Batch {
    /// `f` on the reader (None once closed), under its lock, taken without the GIL: another
    /// thread may hold the lock through a `next()` that waits without the GIL and needs the
    /// GIL back at its end.
    fn with_inner<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(Option<&CoreBatch>) -> R + Send,
    ) -> R {
        py.allow_threads(|| f(lock(&self.inner).as_ref()))
    }
}

#[pymethods]
impl Batch {
    #[new]
    #[pyo3(signature = (keys, width=640, height=640, dtype="float16", layout="nchw",
                        resize="letterbox", pad=None, mean=None, std=None, policy="latest",
                        timeout=1.0, window=None, *, name="python", mode="auto",
                        runtime_dir=None, wait_publisher=0.0, handshake_timeout=5.0,
                        reconnect=None, spin=0.0, accept_zero_copy_overwrite=false, device=-1,
                        publisher_uid=None, retry_interval=0.25),
           text_signature = "(keys, width=640, height=640, dtype='float16', layout='nchw', \
                             resize='letterbox', pad=None, mean=None, std=None, \
                             policy='latest', timeout=1.0, window=None, *, name='python', \
                             mode='auto', runtime_dir=None, wait_publisher=0.0, \
                             handshake_timeout=5.0, reconnect=None, spin=0.0, \
                             accept_zero_copy_overwrite=False, device=-1, \
                             publisher_uid=None, retry_interval=0.25)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        keys: Vec<String>,
        width: u32,
        height: u32,
        dtype: &str,
        layout: &str,
        resize: &str,
        pad: Option<&Bound<'_, PyAny>>,
        mean: Option<&Bound<'_, PyAny>>,
        std: Option<&Bound<'_, PyAny>>,
        policy: &str,
        timeout: f64,
        window: Option<f64>,
        name: &str,
        mode: &str,
        runtime_dir: Option<std::path::PathBuf>,
        wait_publisher: f64,
        handshake_timeout: f64,
        reconnect: Option<f64>,
        spin: f64,
        accept_zero_copy_overwrite: bool,
        device: i32,
        publisher_uid: Option<u32>,
        retry_interval: f64,
    ) -> PyResult<Self> {
        let resize = match resize {
            "letterbox" => Resize::Letterbox,
            "stretch" => Resize::Stretch,
            other => {
                return Err(PyValueError::new_err(format!(
                    "resize must be \"letterbox\" or \"stretch\", not {other:?}"
                )))
            }
        };
        let pad = match pad {
            Some(p) => triple("pad", p)?,
            None => [114.0 / 255.0; 3],
        };
        let normalize = match (mean, std) {
            (None, None) => None,
            (Some(m), Some(s)) => Some(Normalize {
                mean: triple("mean", m)?,
                std: triple("std", s)?,
            }),
            _ => {
                return Err(PyValueError::new_err(
                    "pass mean and std together (or neither)",
                ))
            }
        };
        let spec = BatchSpec {
            width,
            height,
            dtype: parse_dtype(dtype)?,
            layout: parse_layout(layout)?,
            resize,
            pad,
            normalize,
        };
        let (policy_name, policy) = parse_policy(policy, timeout, window)?;
        let core_mode = match mode {
            "auto" | "zero_copy" => SubscriberMode::ZeroCopy,
            "copy" => SubscriberMode::Copy,
            other => {
                return Err(PyValueError::new_err(format!(
                    "mode must be \"auto\", \"zero_copy\" or \"copy\", not {other:?}"
                )))
            }
        };
        let timing = Timing::new(py, wait_publisher, handshake_timeout, None, reconnect, spin)?;
        let mut subscriber = SubscriberOptions {
            runtime_dir,
            name: name.to_string(),
            cuda_device: device,
            mode: core_mode,
            accept_zero_copy_overwrite,
            publisher_uid,
            ..SubscriberOptions::default()
        };
        timing.apply(&mut subscriber);
        let options = BatchOptions {
            subscriber,
            // The wait for missing publishers is made below, between checks for Ctrl-C.
            wait_publisher: Duration::ZERO,
            retry_interval: duration("retry_interval", retry_interval)?,
            policy,
        };
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut inner = py
            .allow_threads(|| CoreBatch::open(&refs, spec, options))
            .map_err(to_py)?;
        // Cameras still missing after their first attempt: waited for up to wait_publisher.
        let deadline = Instant::now() + timing.wait_publisher;
        while !inner.poll_cameras() && Instant::now() < deadline {
            py.check_signals()?;
            py.allow_threads(|| std::thread::sleep(Duration::from_millis(20)));
        }
        Ok(Batch {
            inner: Mutex::new(Some(inner)),
            keys,
            spec,
            policy: policy_name,
            gpu: Mutex::new(None),
            closing: AtomicBool::new(false),
        })
    }

    /// The next batch (a `BatchResult`): assembled per the policy (waiting at most its
    /// timeout) and converted. `stream` (CUDA batches): where the conversion is queued, by
    /// the rule of `Frame.to_rgb` (None or 0: the legacy default stream; an int or a torch /
    /// CuPy stream); it must stay alive while the batch's tensor is in use.
    #[pyo3(signature = (stream=None), text_signature = "($self, stream=None)")]
    fn next(&self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<BatchResult> {
        let stream = match stream {
            Some(s) => crate::stream::stream_handle(s)?,
            None => None,
        };
        // The reader's lock is taken without the GIL, as everywhere: a thread that holds the
        // lock through a wait must get the GIL back at its end. The policy's wait stops at
        // Ctrl-C (a signal handler's exception, taken with the GIL between slices) and at a
        // close() of another thread.
        let closed =
            || cuframes_core::Error::new(ErrorCode::Disconnected, "the batch reader is closed");
        let mut interrupt = None;
        let (out, launches) = py
            .allow_threads(|| {
                let mut guard = lock(&self.inner);
                let inner = guard.as_mut().ok_or_else(closed)?;
                let mut stop = || {
                    if self.closing.load(Ordering::SeqCst) {
                        return true;
                    }
                    match Python::with_gil(|py| py.check_signals()) {
                        Ok(()) => false,
                        Err(e) => {
                            interrupt = Some(e);
                            true
                        }
                    }
                };
                // SAFETY: `stream` is None or a handle the caller gives as a live stream of
                // the batch's GPU for as long as the tensor is used (this method's contract).
                let out = unsafe { inner.next_unless(stream, &mut stop) }?;
                Ok::<_, cuframes_core::Error>((out, inner.kernel_launches()))
            })
            .map_err(to_py)?;
        let out = match (out, interrupt) {
            (Some(out), _) => out,
            (None, Some(e)) => return Err(e),
            (None, None) => return Err(to_py(closed())),
        };
        let gpu = match (out.memory, out.cuda_device) {
            (MemoryKind::CudaVmm, Some(ordinal)) => {
                let dev = {
                    let mut g = lock(&self.gpu);
                    match &*g {
                        Some(d) => d.clone(),
                        None => g.insert(CudaDevice::open(ordinal).map_err(to_py)?).clone(),
                    }
                };
                let produced_on = out
                    .buffer
                    .produced_on()
                    .unwrap_or(crate::stream::LEGACY_STREAM);
                // SAFETY: the stream the batch was just converted on (the caller's, live).
                let st = unsafe { Stream::from_raw_with_device(&dev, produced_on as *mut _) };
                let ready = Event::new(&dev)
                    .and_then(|e| e.record(&st).map(|()| e))
                    .map_err(to_py)?;
                Some((dev, Arc::new(ready)))
            }
            _ => None,
        };
        BatchResult::new(py, out, &self.spec, gpu, launches)
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Iteration: `for batch in reader` makes batches until the reader is closed.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<BatchResult>> {
        if self.closed(py) {
            return Ok(None);
        }
        match self.next(py, None) {
            // Closed by another thread meanwhile: the end of the iteration.
            Err(_) if self.closing.load(Ordering::SeqCst) => Ok(None),
            got => got.map(Some),
        }
    }

    /// The cameras' keys, in batch order.
    #[getter]
    fn keys(&self) -> Vec<String> {
        self.keys.clone()
    }

    /// "latest", "all" or "aligned".
    #[getter]
    fn policy(&self) -> &'static str {
        self.policy
    }

    /// The tensor's shape: (N, 3, height, width) or (N, height, width, 3).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, crate::batch_result::shape(self.keys.len(), &self.spec))
    }

    /// Which cameras are connected now (a list of bools, in batch order).
    #[getter]
    fn connected(&self, py: Python<'_>) -> Vec<bool> {
        let n = self.keys.len();
        self.with_inner(py, |b| {
            (0..n)
                .map(|i| b.is_some_and(|b| b.is_connected(i)))
                .collect()
        })
    }

    /// Per camera: the last connection error or end as text (None: none so far).
    #[getter]
    fn errors(&self, py: Python<'_>) -> Vec<Option<String>> {
        let n = self.keys.len();
        self.with_inner(py, |b| {
            (0..n)
                .map(|i| b.and_then(|b| b.last_error(i)).map(|e| e.to_string()))
                .collect()
        })
    }

    /// Per camera: how many times it was connected again after being lost.
    #[getter]
    fn reconnections(&self, py: Python<'_>) -> Vec<u64> {
        let n = self.keys.len();
        self.with_inner(py, |b| {
            (0..n)
                .map(|i| b.map_or(0, |b| b.reconnections(i)))
                .collect()
        })
    }

    /// GPU kernel launches so far (one per CUDA batch; 0 for host batches).
    #[getter]
    fn kernel_launches(&self, py: Python<'_>) -> u64 {
        self.with_inner(py, |b| b.map_or(0, CoreBatch::kernel_launches))
    }

    /// Output buffers waiting in the pool (a batch's buffer returns when its tensor and
    /// every import of it are gone).
    #[getter]
    fn pooled_buffers(&self, py: Python<'_>) -> usize {
        self.with_inner(py, |b| b.map_or(0, CoreBatch::pooled_buffers))
    }

    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.with_inner(py, |b| b.is_none())
    }

    /// Let every camera go. A `next()` of another thread waiting for its policy's cameras
    /// stops within about 50 ms (it raises: the reader is closed). Tensors already made stay
    /// valid.
    fn close(&self, py: Python<'_>) {
        self.closing.store(true, Ordering::SeqCst);
        py.allow_threads(|| drop(lock(&self.inner).take()));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<cuframes.Batch {} cameras {}x{} policy='{}'{}>",
            self.keys.len(),
            self.spec.width,
            self.spec.height,
            self.policy,
            if self.closed(py) { " closed" } else { "" }
        )
    }
}
