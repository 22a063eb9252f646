//! `Plane`: one plane of a frame, exported by DLPack and the array interfaces.

use std::sync::atomic::Ordering;
use std::sync::Mutex;

use cuframes_core::wire::MemoryKind;
use cuframes_core::ErrorCode;
use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::dlpack::{self, DLDevice, Tensor, KDL_CPU, KDL_CUDA};
use crate::export::ExportGuard;
use crate::frame::Frame;
use crate::{error, lock, to_py};

/// One plane of a frame: DLPack (`__dlpack__`), `__cuda_array_interface__` (CUDA frames)
/// and `__array_interface__` (host frames: `numpy.asarray(plane)` is a read-only view).
///
/// The plane keeps its frame alive. Reading `__array_interface__` or
/// `__cuda_array_interface__` pins the frame until the plane object is gone (consumers such
/// as NumPy and CuPy keep it as their base); a DLPack capsule pins it until its consumer
/// deletes it.
#[pyclass(module = "cuframes", frozen)]
pub struct Plane {
    pub(crate) frame: Py<Frame>,
    #[pyo3(get)]
    pub(crate) index: usize,
    pub(crate) offset: usize,
    #[pyo3(get)]
    pub(crate) pitch: usize,
    #[pyo3(get)]
    pub(crate) row_bytes: usize,
    #[pyo3(get)]
    pub(crate) rows: usize,
    #[pyo3(get)]
    pub(crate) itemsize: usize,
    pub(crate) shape: Vec<i64>,
    /// In elements.
    pub(crate) strides: Vec<i64>,
    pub(crate) pin: Mutex<Option<ExportGuard>>,
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
