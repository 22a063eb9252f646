//! `Publisher`: a frame ring fed from host buffers.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuframes_core::cuda::{CudaDevice, CudaStream, Event, Stream};
use cuframes_core::publisher::{
    FrameRingConfig, MemoryChoice, Publisher as CorePublisher, PublisherOptions,
};
use cuframes_core::wire::{Format, Policy};
use cuframes_core::ErrorCode;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::host_source::{self, Elements, HostBytes, Wanted};
use crate::source::{device_plane, is_device_source};
use crate::stream::stream_handle;
use crate::{duration, error, lock, to_py};

/// A core publisher of `key` with its ring enabled by `enable`, made without the GIL (creating
/// binds a socket and may recover a dead predecessor's objects).
pub(crate) fn create_publisher(
    py: Python<'_>,
    key: &str,
    runtime_dir: Option<std::path::PathBuf>,
    enable: impl FnOnce(&CorePublisher) -> cuframes_core::Result<()> + Send,
) -> PyResult<Arc<CorePublisher>> {
    let options = PublisherOptions {
        runtime_dir,
        ..PublisherOptions::default()
    };
    py.allow_threads(|| {
        let p = CorePublisher::create(key, options)?;
        enable(&p)?;
        Ok(Arc::new(p))
    })
    .map_err(to_py)
}

pub(crate) fn parse_format(name: &str) -> PyResult<Format> {
    Format::ALL
        .iter()
        .copied()
        .find(|f| *f != Format::None && f.name() == name.to_ascii_lowercase())
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "format must be one of nv12, p010, p016, yuv420p, yuv444p, rgba, bgra, not {name:?}"
            ))
        })
}

/// A ring's colour description from a dict (`range`, `primaries`, `transfer`, `matrix`,
/// `chroma_location`: FFmpeg's names, their code points as ints, or None; `sar`: a (num, den)
/// tuple or None), as `Frame.colour` gives it back; missing keys are unspecified.
fn parse_colour(d: &Bound<'_, pyo3::types::PyDict>) -> PyResult<cuframes_core::colour::ColourInfo> {
    crate::colour::from_dict(d)
}

/// Make `copy_on` wait for the work a CUDA-array-interface producer queued on `ready_on`
/// (both read by the module's stream rule: 0 and 1 are the legacy default stream).
fn order_after(dev: &Arc<CudaDevice>, copy_on: usize, ready_on: usize) -> PyResult<()> {
    let ready_on = crate::stream::from_python_handle(ready_on);
    if ready_on == copy_on {
        return Ok(());
    }
    let event = Event::new(dev).map_err(to_py)?;
    // SAFETY: both are stream handles the caller and the producer gave us for this device's
    // primary context (pushed by our caller), live for this call (the array interface's
    // contract: its stream is valid while the interface is being consumed).
    let (producer, consumer) = unsafe {
        (
            Stream::from_raw(ready_on as *mut c_void),
            Stream::from_raw(copy_on as *mut c_void),
        )
    };
    event.record(&producer).map_err(to_py)?;
    consumer.wait_event(&event).map_err(to_py)
}

/// Publishes video frames under `key` in a ring of `ring_size` slots that subscribers (other
/// processes: Python, C, FFmpeg's `-f cuframes`) map.
///
/// Parameters:
///     key: the stream's name (letters, digits, `-`, `_`, `.`).
///     format: "nv12", "p010", "p016", "yuv420p", "yuv444p", "rgba" or "bgra".
///     width, height: the frame size in pixels (required).
///     memory: "host" (shared memory; publish NumPy arrays, bytes, any buffer) or "cuda"
///         (CUDA VMM on `device`; publish torch / CuPy arrays as well).
///     policy: "drop_oldest" (never waits; a slow subscriber misses frames) or "strict_wait"
///         (publish waits for every subscriber's release; one that stalls past `ack_timeout`
///         seconds is disconnected).
///     ring_size: slots in the ring.
///     runtime_dir: where the socket lives (default: $CUFRAMES_RUNTIME_DIR, else /run/cuframes).
///     device: the CUDA device of a "cuda" ring.
///     ack_timeout: seconds a subscriber may hold a frame under "strict_wait".
///     colour: the colour description subscribers read (`Frame.colour`): a dict of `range`,
///         `primaries`, `transfer`, `matrix`, `chroma_location`, `sar`.
///
/// Use it as a context manager, or call `close()`: subscribers read what was published, then
/// their iteration ends.
///
/// After `os.fork()` (or multiprocessing's "fork" start method) the child inherits this
/// object, but the publisher stays the parent's: in the child, `close()`, leaving a `with`
/// block, garbage collection and the exit only let go of the child's copy (no shutdown,
/// nothing removed, the parent goes on publishing). Do not publish through it in the child:
/// create a publisher there (another key), or start children with "spawn".
//
// The lock only guards taking the publisher out (close); every call works on a clone of the
// Arc, so no thread holds the lock while it waits for the GIL (or the GIL while it waits).
#[pyclass(module = "cuframes", frozen, subclass, weakref)]
pub struct Publisher {
    inner: Mutex<Option<Arc<CorePublisher>>>,
    key: String,
}

impl Publisher {
    fn get(&self) -> PyResult<Arc<CorePublisher>> {
        lock(&self.inner)
            .clone()
            .ok_or_else(|| error(ErrorCode::InvalidArg, "the publisher is closed"))
    }

    fn with<R>(&self, f: impl FnOnce(&CorePublisher) -> PyResult<R>) -> PyResult<R> {
        f(&*self.get()?)
    }

    /// `publish` of device planes: a pitched device-to-device copy into the slot on the
    /// caller's stream, ordered after each producer's stream, then published (§5: the copy is
    /// complete before the frame is visible).
    fn publish_device(
        &self,
        py: Python<'_>,
        planes: &[Bound<'_, PyAny>],
        geometry: &[cuframes_core::format::Plane],
        pts_ns: Option<i64>,
        stream: Option<usize>,
    ) -> PyResult<u64> {
        let p = self.get()?;
        let dev = p.cuda_device().ok_or_else(|| {
            PyTypeError::new_err(
                "this publisher's ring is in host memory: pass host buffers (e.g. \
                 tensor.cpu()), or create the publisher with memory=\"cuda\"",
            )
        })?;
        // The legacy default stream when none is named: it waits for the work of every
        // blocking stream, as torch's and CuPy's default streams are. A named stream is never
        // null here (stream_handle reads 0 as the legacy stream), so the copy never falls back
        // to the ring's own stream, which is unordered with the caller's work.
        let copy_on = stream.unwrap_or(crate::stream::LEGACY_STREAM);
        // The caller's stream and the producers' live in the device's primary context (the
        // one torch and CuPy use); make it current for the event calls and the copy.
        let _current = dev.push_current().map_err(to_py)?;
        let sources = planes
            .iter()
            .zip(geometry)
            .enumerate()
            .map(|(i, (obj, g))| device_plane(obj, i, g, copy_on))
            .collect::<PyResult<Vec<_>>>()?;
        for s in &sources {
            if let Some(ready_on) = s.ready_on {
                order_after(&dev, copy_on, ready_on)?;
            }
        }
        let addresses: Vec<u64> = sources.iter().map(|s| s.address).collect();
        let pitches: Vec<usize> = sources.iter().map(|s| s.pitch).collect();
        let seq = py.allow_threads(|| {
            // SAFETY: `copy_on` is a special handle (legacy or per-thread default stream,
            // never null) or the caller's live stream of the primary context, which is
            // current on this thread (pushed above; allow_threads runs the
            // closure on this same thread); each address is the producer's device memory of
            // the plane's rows at its pitch (checked against the ring's geometry), kept alive
            // by `planes` / `sources` until this returns, which is after the copy completed.
            unsafe {
                let copy_on = CudaStream::from_raw(copy_on as *mut c_void);
                p.publish_device_planes(&addresses, &pitches, Some(copy_on), pts_ns)
            }
        });
        drop(sources);
        seq.map_err(to_py)
    }

    fn close_impl(&self, py: Python<'_>) {
        let p = py.allow_threads(|| lock(&self.inner).take());
        py.allow_threads(move || drop(p));
    }
}

#[pymethods]
impl Publisher {
    #[new]
    #[pyo3(signature = (key, format="nv12", width=None, height=None, memory="host",
                        policy="drop_oldest", ring_size=4, runtime_dir=None, device=0,
                        ack_timeout=1.0, colour=None),
           text_signature = "(key, format='nv12', width=None, height=None, memory='host', \
                             policy='drop_oldest', ring_size=4, runtime_dir=None, device=0, \
                             ack_timeout=1.0, colour=None)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        key: &str,
        format: &str,
        width: Option<u32>,
        height: Option<u32>,
        memory: &str,
        policy: &str,
        ring_size: usize,
        runtime_dir: Option<std::path::PathBuf>,
        device: i32,
        ack_timeout: f64,
        colour: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Self> {
        let (Some(width), Some(height)) = (width, height) else {
            return Err(PyTypeError::new_err("Publisher needs width= and height="));
        };
        let format = parse_format(format)?;
        let memory = match memory {
            "host" => MemoryChoice::Host,
            "cuda" => MemoryChoice::Cuda { device },
            other => {
                return Err(PyValueError::new_err(format!(
                    "memory must be \"host\" or \"cuda\", not {other:?}"
                )))
            }
        };
        let policy = match policy {
            "drop_oldest" => Policy::DropOldest,
            "strict_wait" => Policy::StrictWait,
            other => {
                return Err(PyValueError::new_err(format!(
                    "policy must be \"drop_oldest\" or \"strict_wait\", not {other:?}"
                )))
            }
        };
        let config = FrameRingConfig {
            ring_size,
            policy,
            ack_timeout: duration("ack_timeout", ack_timeout)?,
            memory,
            colour: colour.map(parse_colour).transpose()?,
            ..FrameRingConfig::new(format, width, height)
        };
        let p = create_publisher(py, key, runtime_dir, |p| p.enable_frames(config))?;
        Ok(Publisher {
            inner: Mutex::new(Some(p)),
            key: key.to_string(),
        })
    }

    /// Copy one frame (one object per plane) into a slot and publish it; returns its seq.
    ///
    /// Parameters:
    ///     planes: one object per plane of the format (NV12: [y, uv]).
    ///     pts_ns: the presentation time in nanoseconds (None: the publisher's clock).
    ///     strides: for host planes given as flat bytes, the bytes between two rows of each
    ///         plane (default: the plane's row size, rows dense).
    ///     stream: the CUDA stream of a device copy (see below).
    ///
    /// Host planes: bytes, bytearray, memoryview, a NumPy array or any object with the
    /// buffer protocol or `__array_interface__` (torch CPU tensors through `__array__`),
    /// read at memcpy speed in C order whatever its strides (views, negative strides), of
    /// bytes or 16-bit unsigned integers (P010 / P016). Its C-order bytes are the plane's
    /// rows, dense, or `strides[i]` bytes apart; a source of more bytes than the rows at that
    /// stride (the last one padded too) is refused (ValueError) before it is read, and only
    /// the plane's bytes are gathered. Device planes (CUDA rings only): objects with
    /// `__cuda_array_interface__` or a CUDA `__dlpack__` (torch, CuPy), rows first, dense
    /// within a row, any row stride; copied device to device on `stream` (an int CUstream or
    /// a torch/CuPy stream; None, 0 and 1: the legacy default stream, which torch's and CuPy's
    /// default streams are; 2: the calling thread's per-thread default stream; a bool is a
    /// TypeError, an int outside 0..2**64-1 a ValueError), after the producer's work, and
    /// published once the copy is complete.
    /// The wait for a free slot (strict_wait) and for the copy release the GIL.
    #[pyo3(signature = (planes, pts_ns=None, strides=None, stream=None))]
    fn publish(
        &self,
        py: Python<'_>,
        planes: &Bound<'_, PyAny>,
        pts_ns: Option<i64>,
        strides: Option<Vec<usize>>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let planes: Vec<Bound<'_, PyAny>> = planes
            .try_iter()
            .map_err(|_| PyTypeError::new_err("planes must be a list of buffers"))?
            .collect::<PyResult<_>>()?;
        let layout = self.with(|p| Ok(p.frame_layout()))?;
        let layout = layout.ok_or_else(|| error(ErrorCode::NotFound, "no frame ring"))?;
        let geometry = layout.planes();
        if planes.len() != geometry.len() {
            return Err(PyValueError::new_err(format!(
                "a {} frame has {} planes, got {}",
                layout.format.name(),
                geometry.len(),
                planes.len()
            )));
        }
        let on_device = planes
            .iter()
            .map(is_device_source)
            .collect::<PyResult<Vec<bool>>>()?;
        // Read by the one rule whether or not it is used (host planes need none): a wrong
        // stream is an error on every path.
        let stream = match stream {
            Some(s) => stream_handle(s)?,
            None => None,
        };
        if on_device.iter().any(|&d| d) {
            if !on_device.iter().all(|&d| d) {
                return Err(PyTypeError::new_err(
                    "planes must be all host buffers or all CUDA arrays, not a mix",
                ));
            }
            return self.publish_device(py, &planes, geometry, pts_ns, stream);
        }
        if let Some(s) = &strides {
            if s.len() != geometry.len() {
                return Err(PyValueError::new_err("strides needs one entry per plane"));
            }
        }
        let mut data = Vec::with_capacity(planes.len());
        let mut pitches = Vec::with_capacity(planes.len());
        for (i, (obj, g)) in planes.iter().zip(geometry).enumerate() {
            let stride = strides.as_ref().map_or(g.row_bytes, |s| s[i]);
            let need = g
                .span_at(stride)
                .map_err(|e| PyValueError::new_err(format!("plane {i}: {}", e.message())))?;
            // The plane's rows at `stride`, the last one padded too (a source of rows × stride
            // bytes, as a padded 2-d array is): more is a source shaped unlike the plane, and
            // is refused before it is read (a broadcast array may describe terabytes).
            let most = g.rows.saturating_mul(stride).max(need);
            let wanted = Wanted {
                least: need,
                most,
                used: need,
                needs: format!("{} rows of {} bytes (stride {stride})", g.rows, g.row_bytes),
                bound: format!(
                    "{} rows of {} bytes (stride {stride}) take at most {most} (is it shaped \
                     as the plane?)",
                    g.rows, g.row_bytes
                ),
            };
            let bytes = host_source::read(obj, &format!("plane {i}"), Elements::Plane, &wanted)?;
            data.push(bytes);
            pitches.push(stride);
        }
        let p = self.get()?;
        let refs: Vec<&[u8]> = data.iter().map(HostBytes::as_slice).collect();
        // The layout the planes were checked against: a ring replaced meanwhile refuses them.
        py.allow_threads(|| p.publish_host_frame(&layout, &refs, &pitches, pts_ns))
            .map_err(to_py)
    }

    /// Subscribers connected now.
    #[getter]
    fn subscriber_count(&self) -> PyResult<usize> {
        self.with(|p| Ok(p.subscriber_count()))
    }

    /// Wait until at least `count` subscribers are connected and ready to read (their slots
    /// mapped); False on timeout.
    #[pyo3(signature = (count=1, timeout=5.0))]
    fn wait_for_subscribers(&self, py: Python<'_>, count: usize, timeout: f64) -> PyResult<bool> {
        let deadline = Instant::now() + duration("timeout", timeout)?;
        loop {
            if self.with(|p| Ok(p.ready_subscriber_count()))? >= count {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            py.allow_threads(|| std::thread::sleep(Duration::from_millis(5)));
            py.check_signals()?;
        }
    }

    /// The ring's pitches, one per plane (bytes).
    #[getter]
    fn pitches<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let pitches: Vec<usize> = self.with(|p| {
            Ok(p.frame_layout()
                .map(|l| l.planes().iter().map(|g| g.pitch).collect())
                .unwrap_or_default())
        })?;
        PyTuple::new(py, pitches)
    }

    /// The stream's key.
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    /// True once `close()` ran (or the `with` block was left).
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    /// Shut down: subscribers read what was published, then their iteration ends. Closing
    /// twice is harmless.
    fn close(&self, py: Python<'_>) {
        self.close_impl(py);
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let name = slf.get_type().name()?;
        let this = slf.get();
        let Ok(p) = this.get() else {
            return Ok(format!("<cuframes.{name} key='{}' closed>", this.key));
        };
        let ring = p.frame_layout().map_or_else(
            || "no ring".to_string(),
            |l| {
                let memory = p
                    .cuda_device()
                    .map_or_else(|| "host".to_string(), |d| format!("cuda:{}", d.ordinal()));
                format!("{} {}x{} {memory}", l.format.name(), l.width, l.height)
            },
        );
        Ok(format!(
            "<cuframes.{name} key='{}' {ring} subscribers={}>",
            this.key,
            p.subscriber_count()
        ))
    }

    /// Tests only: whether host buffers are read through `PyObject_GetBuffer` on CPython >=
    /// 3.11 (True, the default) or through `memoryview.tobytes()` as on 3.9 and 3.10.
    #[staticmethod]
    fn _use_get_buffer(on: bool) {
        host_source::set_use_get_buffer(on);
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
