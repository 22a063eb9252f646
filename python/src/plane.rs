//! `Plane`: one plane of a frame, exported by DLPack and the array interfaces.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use cuframes_core::wire::MemoryKind;
use cuframes_core::ErrorCode;
use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::dlpack::{self, DLDevice, Tensor, KDL_CPU, KDL_CUDA};
use crate::exception::{error, to_py};
use crate::export::{ExportGuard, FrameShared};
use crate::values::lock;
use cuframes_core::subscriber::PrivateView;

/// One plane of a frame, exported without a copy: `numpy.asarray(plane)` and
/// `numpy.from_dlpack(plane)` (host frames), `torch.from_dlpack(plane)` and `cupy.asarray(plane)`
/// (CUDA frames).
///
/// The plane keeps its frame alive: a frame is handed back to the publisher only when the
/// plane objects whose `__array_interface__` / `__cuda_array_interface__` were read (NumPy and
/// CuPy keep them as their arrays' base) and every imported DLPack capsule are gone.
///
/// A zero-copy host plane is exported through a private copy-on-write view of its slot,
/// shared by all the plane's live exports (one mapping, however many exports). A consumer
/// that writes through a read-only export (a legacy DLPack import, torch) changes only this
/// process's pages: the slot, the publisher and the other subscribers never see the write,
/// but the plane's other exports alive at the time do.
#[pyclass(module = "cuframes", frozen)]
pub struct Plane {
    /// The Python frame, kept alive while the plane is.
    pub(crate) _frame: PyObject,
    /// What the plane needs to know of its frame.
    pub(crate) of: FrameFacts,
    /// The plane's number in its frame (0 = luma or packed RGB).
    #[pyo3(get)]
    pub(crate) index: usize,
    pub(crate) offset: usize,
    /// Bytes from one row to the next.
    #[pyo3(get)]
    pub(crate) pitch: usize,
    /// Bytes of samples in one row (without the pitch's padding).
    #[pyo3(get)]
    pub(crate) row_bytes: usize,
    /// Number of rows.
    #[pyo3(get)]
    pub(crate) rows: usize,
    /// Bytes per sample: 1, or 2 for P010/P016.
    #[pyo3(get)]
    pub(crate) itemsize: usize,
    pub(crate) shape: Vec<i64>,
    /// In elements.
    pub(crate) strides: Vec<i64>,
    pub(crate) pin: Mutex<Option<Pinned>>,
}

/// The facts of a frame its planes read: copies of the frame's fields, so that a plane needs
/// no reference to the `Frame` class (which makes the planes).
pub(crate) struct FrameFacts {
    /// The frame's sequence number, for `repr`.
    pub seq: u64,
    /// Host or CUDA memory.
    pub memory: MemoryKind,
    /// The CUDA device ordinal DLPack names (CUDA frames).
    pub device: i32,
    /// The bytes are the publisher's slot (exported read-only on the host).
    pub zero_copy: bool,
    /// The frame's state and export count, shared with the frame.
    pub shared: Arc<FrameShared>,
}

/// What keeps one export of a plane valid: the frame's export guard and, for a zero-copy host
/// plane, the private view the export points into (unmapped first: fields drop in order).
pub(crate) struct Pinned {
    address: u64,
    /// Shared with the plane's other live exports (`FrameState::private_view`).
    _view: Option<Arc<PrivateView>>,
    _guard: ExportGuard,
}

impl Plane {
    fn frame(&self) -> &FrameFacts {
        &self.of
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

    /// Bytes from the plane's first byte to the end of its last row.
    fn extent(&self) -> usize {
        self.rows.saturating_sub(1) * self.pitch + self.row_bytes
    }

    /// One export of the plane, under `guard`. A zero-copy host plane is exported through a
    /// private copy-on-write view of its slot, never through the subscriber's shared mapping:
    /// that mapping is read-only, and consumers do write through what they are given (a legacy
    /// DLPack capsule has no read-only flag; torch ignores the versioned one). A write would
    /// kill the process there; in the view it lands in this process's own pages, and no
    /// export lets a subscriber change what the others read. Nothing is copied until then.
    /// The plane's live exports share one view: a mapping per export ran the process out of
    /// mappings.
    fn pinned(&self, guard: ExportGuard) -> PyResult<Pinned> {
        let (address, view) = {
            let mut s = lock(&guard.0.state);
            match s.private_view(self.offset, self.extent()) {
                Some(view) => {
                    let view = view.map_err(to_py)?;
                    (view.as_ptr() as u64, Some(view))
                }
                None => {
                    let f = s.frame.as_ref().expect("an export guard keeps the frame");
                    (f.address() + self.offset as u64, None)
                }
            }
        };
        Ok(Pinned {
            address,
            _view: view,
            _guard: guard,
        })
    }

    fn tensor(&self, address: u64) -> Tensor {
        Tensor {
            data: address,
            device: self.dl_device(),
            dtype: dlpack::DType::Uint(self.itemsize as u8),
            shape: self.shape.clone(),
            strides: self.strides.clone(),
            // A zero-copy host plane is a frame of the stream, not the consumer's buffer: it
            // is flagged read-only where DLPack can say so (writes would stay private, see
            // `pinned`). CUDA slots are not flagged: CuPy and torch refuse read-only imports.
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
            *pin = Some(self.pinned(self.frame().shared.export()?)?);
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
        let data = pin.as_ref().expect("set above").address;
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
    /// In elements: (rows, columns), or (rows, columns, channels) for interleaved planes
    /// (NV12/P010/P016 plane 1: (H/2, W/2, 2); RGBA/BGRA: (H, W, 4)).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// In bytes, as NumPy's strides (the first is `pitch`).
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

    /// The plane's rows copied densely, without the pitch's padding (host frames;
    /// `cuframes.Error` for CUDA frames or once the frame is released).
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let guard = self.frame().shared.export()?;
        let s = lock(&guard.0.state);
        let f = s.frame.as_ref().expect("an export guard keeps the frame");
        if self.is_cuda() {
            // `tobytes` is a host-frame method: CUDA planes go through DLPack.
            return Err(to_py(cuframes_core::Error::invalid(
                "the frame is in device memory: copy it with CUDA (address())",
            )));
        }
        let mut out = vec![0u8; self.row_bytes * self.rows];
        f.download_plane(self.index, &mut out).map_err(to_py)?;
        Ok(PyBytes::new(py, &out))
    }

    /// (1, 0) for host planes (kDLCPU), (2, device) for CUDA planes (kDLCUDA).
    fn __dlpack_device__(&self) -> (i32, i32) {
        let d = self.dl_device();
        (d.device_type, d.device_id)
    }

    /// A DLPack capsule, for `from_dlpack` of NumPy, torch, CuPy, JAX: "dltensor_versioned"
    /// when `max_version` >= (1, 0), else the legacy "dltensor". `stream` is accepted and not
    /// waited on (the frame's bytes are complete when it is delivered). `dl_device` must be
    /// the plane's own device; `copy=True` raises BufferError (planes are exported without a
    /// copy). A zero-copy host plane is flagged read-only in a versioned capsule; a consumer
    /// that writes anyway changes only its own copy of the pages it writes, never what other
    /// readers see. `cuframes.Error` once the frame is released.
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
        let pinned = self.pinned(self.frame().shared.export()?)?;
        let t = self.tensor(pinned.address);
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        dlpack::capsule(py, &t, Box::new(pinned), versioned)
    }

    /// NumPy's array interface (host planes; AttributeError for CUDA):
    /// `numpy.asarray(plane)` is a read-only view. Keeps the frame while this Plane lives.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.is_cuda() {
            return Err(PyAttributeError::new_err(
                "a CUDA plane has no __array_interface__ (use __cuda_array_interface__ or DLPack)",
            ));
        }
        self.interface(py)
    }

    /// The CUDA array interface v3 (CUDA planes; AttributeError for host planes):
    /// `cupy.asarray(plane)`. Keeps the frame while this Plane lives.
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
            "<cuframes.Plane {} of frame {}: {} {} pitch={} {}>",
            self.index,
            self.frame().seq,
            shape_text(&self.shape),
            self.dtype(),
            self.pitch,
            if self.is_cuda() {
                format!("cuda:{}", self.frame().device)
            } else {
                "host".to_string()
            }
        )
    }
}

/// A shape as Python prints a tuple: "(48, 64)".
pub(crate) fn shape_text(shape: &[i64]) -> String {
    let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
    if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    }
}
