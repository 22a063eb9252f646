//! `Publisher`: a frame ring fed from host buffers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuframes_core::publisher::{
    FrameRingConfig, MemoryChoice, Publisher as CorePublisher, PublisherOptions,
};
use cuframes_core::wire::{Format, Policy};
use cuframes_core::ErrorCode;
use pyo3::exceptions::{PyNotImplementedError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyTuple};

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

/// The bytes of one source plane: bytes / bytearray directly, anything else through
/// `memoryview(obj).tobytes()` (C order: dense rows whatever the source's strides).
fn plane_bytes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if obj.hasattr("__cuda_array_interface__")? || is_cuda_dlpack(obj) {
        return Err(PyNotImplementedError::new_err(
            "Publisher.publish takes host buffers only for now; CUDA sources \
             (__cuda_array_interface__ / DLPack kDLCUDA) are not implemented yet: \
             copy the plane to the host first (e.g. tensor.cpu())",
        ));
    }
    if let Ok(b) = obj.downcast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = obj.downcast::<PyByteArray>() {
        return Ok(b.to_vec());
    }
    let py = obj.py();
    let memoryview = py.import("builtins")?.getattr("memoryview")?;
    let view = match memoryview.call1((obj,)) {
        Ok(v) => v,
        // torch CPU tensors and other array-likes without the buffer protocol.
        Err(e) if obj.hasattr("__array__")? => {
            let arr = obj.call_method0("__array__").map_err(|_| e)?;
            memoryview.call1((arr,))?
        }
        Err(_) => {
            return Err(PyTypeError::new_err(format!(
                "a plane must be bytes, bytearray or an object with the buffer protocol \
                 (a NumPy array), not {}",
                obj.get_type().name()?
            )))
        }
    };
    let item: usize = view.getattr("itemsize")?.extract()?;
    let format: String = view.getattr("format")?.extract()?;
    if !(item == 1 || (item == 2 && matches!(format.as_str(), "H" | "<H" | "=H" | "h"))) {
        return Err(PyTypeError::new_err(format!(
            "a plane's elements must be bytes or 16-bit unsigned integers, not format {format:?}"
        )));
    }
    view.call_method0("tobytes")?.extract::<Vec<u8>>()
}

fn is_cuda_dlpack(obj: &Bound<'_, PyAny>) -> bool {
    obj.call_method0("__dlpack_device__")
        .and_then(|d| d.extract::<(i32, i32)>())
        .is_ok_and(|(t, _)| t != crate::dlpack::KDL_CPU)
}

/// A frame publisher (host sources; the ring in host memory or CUDA VMM).
///
/// The lock only guards taking the publisher out (close); every call works on a clone of the
/// Arc, so no thread holds the lock while it waits for the GIL (or the GIL while it waits).
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
                        ack_timeout=1.0))]
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
            ..FrameRingConfig::new(format, width, height)
        };
        let p = create_publisher(py, key, runtime_dir, |p| p.enable_frames(config))?;
        Ok(Publisher {
            inner: Mutex::new(Some(p)),
            key: key.to_string(),
        })
    }

    /// Copy one frame from host buffers (one per plane) and publish it; returns its seq.
    ///
    /// Each plane is bytes, bytearray or a buffer-protocol object (a NumPy array: any strides,
    /// read in C order) holding the plane's rows densely, or, for bytes-like planes,
    /// `strides[i]` bytes apart. The wait for a free slot (strict_wait) releases the GIL.
    #[pyo3(signature = (planes, pts_ns=None, strides=None))]
    fn publish(
        &self,
        py: Python<'_>,
        planes: &Bound<'_, PyAny>,
        pts_ns: Option<i64>,
        strides: Option<Vec<usize>>,
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
        if let Some(s) = &strides {
            if s.len() != geometry.len() {
                return Err(PyValueError::new_err("strides needs one entry per plane"));
            }
        }
        let mut data = Vec::with_capacity(planes.len());
        let mut pitches = Vec::with_capacity(planes.len());
        for (i, (obj, g)) in planes.iter().zip(geometry).enumerate() {
            let bytes = plane_bytes(obj)?;
            let stride = strides.as_ref().map_or(g.row_bytes, |s| s[i]);
            let need = if g.rows == 0 {
                0
            } else {
                stride * (g.rows - 1) + g.row_bytes
            };
            if stride < g.row_bytes || bytes.len() < need {
                return Err(PyValueError::new_err(format!(
                    "plane {i}: {} rows of {} bytes (stride {stride}) need {need} bytes, got {}",
                    g.rows,
                    g.row_bytes,
                    bytes.len()
                )));
            }
            data.push(bytes);
            pitches.push(stride);
        }
        let p = self.get()?;
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        py.allow_threads(|| p.publish_host_planes(&refs, &pitches, pts_ns))
            .map_err(to_py)
    }

    /// Subscribers connected now.
    #[getter]
    fn subscriber_count(&self) -> PyResult<usize> {
        self.with(|p| Ok(p.subscriber_count()))
    }

    /// Wait until at least `count` subscribers are connected; False on timeout.
    #[pyo3(signature = (count=1, timeout=5.0))]
    fn wait_for_subscribers(&self, py: Python<'_>, count: usize, timeout: f64) -> PyResult<bool> {
        let deadline = Instant::now() + duration("timeout", timeout)?;
        loop {
            if self.with(|p| Ok(p.subscriber_count()))? >= count {
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

    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    /// Shut down: subscribers read what was published, then their iteration ends.
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
