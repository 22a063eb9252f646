//! Device planes handed to `Publisher.publish`: CUDA memory described by
//! `__cuda_array_interface__` (v3) or a DLPack capsule (kDLCUDA / kDLCUDAManaged), reduced to
//! what a pitched copy needs (address, pitch) after checking it against the ring's plane
//! geometry.

use std::ffi::CStr;

use cuframes_core::format::Plane as PlaneGeometry;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::dlpack::DLManagedTensor;

const KDL_CUDA: i32 = crate::dlpack::KDL_CUDA;
const KDL_CUDA_MANAGED: i32 = 13;
const LEGACY_NAME: &CStr = c"dltensor";
const USED_NAME: &CStr = c"used_dltensor";

/// One plane in device memory, ready for a pitched copy.
pub struct DevicePlane {
    pub address: u64,
    pub pitch: usize,
    /// The stream the producer says the data is ready on (CUDA array interface `stream`:
    /// 1 = legacy default, 2 = per-thread default, else a `CUstream`); `None` when it says
    /// nothing (DLPack: the data is ready on the stream we passed to `__dlpack__`).
    pub ready_on: Option<usize>,
    /// A consumed DLPack tensor, deleted when the copy is done.
    _consumed: Option<ConsumedDlpack>,
}

/// True when `obj` is CUDA memory by either protocol.
pub fn is_device_source(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if obj.hasattr("__cuda_array_interface__")? {
        return Ok(true);
    }
    Ok(obj
        .call_method0("__dlpack_device__")
        .and_then(|d| d.extract::<(i32, i32)>())
        .is_ok_and(|(t, _)| t == KDL_CUDA || t == KDL_CUDA_MANAGED))
}

/// Plane `index` of a frame from a device object, checked against `geometry`. `stream` is
/// the stream the copy will run on (given to a DLPack producer so that it orders its work
/// before ours).
pub fn device_plane(
    obj: &Bound<'_, PyAny>,
    index: usize,
    geometry: &PlaneGeometry,
    stream: usize,
) -> PyResult<DevicePlane> {
    if let Ok(cai) = obj.getattr("__cuda_array_interface__") {
        let cai = cai.downcast_into::<PyDict>().map_err(|_| {
            PyTypeError::new_err("__cuda_array_interface__ must be a dict (version 3)")
        })?;
        return from_array_interface(&cai, index, geometry);
    }
    from_dlpack(obj, index, geometry, stream)
}

fn from_array_interface(
    cai: &Bound<'_, PyDict>,
    index: usize,
    geometry: &PlaneGeometry,
) -> PyResult<DevicePlane> {
    let field = |name: &str| -> PyResult<Bound<'_, PyAny>> {
        cai.get_item(name)?.ok_or_else(|| {
            PyTypeError::new_err(format!("__cuda_array_interface__ has no {name:?}"))
        })
    };
    let (address, _read_only): (usize, bool) = field("data")?.extract()?;
    let shape: Vec<i64> = field("shape")?.extract()?;
    let typestr: String = field("typestr")?.extract()?;
    let strides: Option<Vec<i64>> = match cai.get_item("strides")? {
        Some(s) if !s.is_none() => Some(s.extract()?),
        _ => None,
    };
    let ready_on = match cai.get_item("stream")? {
        Some(s) if !s.is_none() => Some(s.extract::<usize>()?),
        _ => None,
    };
    let itemsize = itemsize_of_typestr(&typestr).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "plane {index}: elements must be unsigned 8- or 16-bit integers, not {typestr:?}"
        ))
    })?;
    let pitch = pitch_of(index, &shape, strides.as_deref(), itemsize, geometry)?;
    Ok(DevicePlane {
        address: address as u64,
        pitch,
        ready_on,
        _consumed: None,
    })
}

/// `|u1`, `<u2`, `=u2` (and `|b1`-free): the item size of an unsigned type we can copy.
fn itemsize_of_typestr(t: &str) -> Option<usize> {
    let little = matches!(t.as_bytes().first(), Some(b'|' | b'<' | b'='))
        && (cfg!(target_endian = "little") || t.starts_with('|'));
    match (little, &t.get(1..)?) {
        (true, &"u1") => Some(1),
        (true, &"u2") => Some(2),
        _ => None,
    }
}

/// `geometry.pitch_of_array` with the plane's index in the error.
fn pitch_of(
    index: usize,
    shape: &[i64],
    byte_strides: Option<&[i64]>,
    itemsize: usize,
    geometry: &PlaneGeometry,
) -> PyResult<usize> {
    geometry
        .pitch_of_array(shape, byte_strides, itemsize)
        .map_err(|why| PyValueError::new_err(format!("plane {index}: {why}")))
}

/// A DLPack tensor whose ownership we took from its capsule: deleted on drop (with the GIL
/// held: some producers' deleters need it).
struct ConsumedDlpack(*mut DLManagedTensor);

// SAFETY: the pointer is only dereferenced on drop, which happens on a thread holding the GIL
// (DevicePlane is dropped by `Publisher.publish`, a Python method); nothing else touches it.
unsafe impl Send for ConsumedDlpack {}

impl Drop for ConsumedDlpack {
    fn drop(&mut self) {
        Python::with_gil(|_| {
            // SAFETY: we own the managed tensor (the capsule was renamed "used_dltensor", so
            // its destructor will not delete it); DLPack says the consumer calls the deleter
            // once.
            unsafe {
                if let Some(deleter) = (*self.0).deleter {
                    deleter(self.0);
                }
            }
        });
    }
}

fn from_dlpack(
    obj: &Bound<'_, PyAny>,
    index: usize,
    geometry: &PlaneGeometry,
    stream: usize,
) -> PyResult<DevicePlane> {
    let py = obj.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("stream", stream)?;
    let capsule = obj.call_method("__dlpack__", PyTuple::empty(py), Some(&kwargs))?;
    let raw = capsule.as_ptr();
    // SAFETY: `raw` is a live object (we hold `capsule`); PyCapsule_IsValid accepts any object.
    if unsafe { ffi::PyCapsule_IsValid(raw, LEGACY_NAME.as_ptr()) } != 1 {
        return Err(PyTypeError::new_err(format!(
            "plane {index}: __dlpack__() did not return a \"dltensor\" capsule (or it was \
             already consumed)"
        )));
    }
    // SAFETY: a valid capsule of that name (checked above) holds a DLManagedTensor.
    let managed =
        unsafe { ffi::PyCapsule_GetPointer(raw, LEGACY_NAME.as_ptr()) } as *mut DLManagedTensor;
    if managed.is_null() {
        return Err(PyErr::fetch(py));
    }
    // Take ownership first (rename, as DLPack consumers do), so any early return below still
    // deletes the tensor exactly once, through `consumed`.
    // SAFETY: `raw` is the capsule checked above; the name is a static C string.
    if unsafe { ffi::PyCapsule_SetName(raw, USED_NAME.as_ptr()) } != 0 {
        return Err(PyErr::fetch(py));
    }
    let consumed = ConsumedDlpack(managed);
    // SAFETY: the producer keeps the managed tensor and the arrays it points at valid until
    // its deleter runs (when `consumed` drops).
    let t = unsafe { &(*managed).dl_tensor };
    if t.device.device_type != KDL_CUDA && t.device.device_type != KDL_CUDA_MANAGED {
        return Err(PyTypeError::new_err(format!(
            "plane {index}: DLPack device type {} is not CUDA memory",
            t.device.device_type
        )));
    }
    let itemsize = match (t.dtype.code, t.dtype.bits, t.dtype.lanes) {
        (1, 8, 1) => 1,
        (1, 16, 1) => 2,
        (code, bits, lanes) => {
            return Err(PyTypeError::new_err(format!(
                "plane {index}: elements must be unsigned 8- or 16-bit integers (DLPack type \
                 code {code}, {bits} bits, {lanes} lanes given)"
            )))
        }
    };
    let ndim = usize::try_from(t.ndim)
        .ok()
        .filter(|&n| (1..=8).contains(&n) && !t.shape.is_null())
        .ok_or_else(|| PyValueError::new_err(format!("plane {index}: {} dimensions", t.ndim)))?;
    // SAFETY: DLPack: `shape` points at `ndim` values, valid while the tensor is.
    let shape = unsafe { std::slice::from_raw_parts(t.shape, ndim) };
    let byte_strides: Option<Vec<i64>> = if t.strides.is_null() {
        None // compact (C order)
    } else {
        // SAFETY: DLPack: non-NULL `strides` points at `ndim` values, valid as `shape`.
        let elements = unsafe { std::slice::from_raw_parts(t.strides, ndim) };
        Some(elements.iter().map(|s| s * itemsize as i64).collect())
    };
    let pitch = pitch_of(index, shape, byte_strides.as_deref(), itemsize, geometry)?;
    Ok(DevicePlane {
        address: t.data as u64 + t.byte_offset,
        pitch,
        ready_on: None,
        _consumed: Some(consumed),
    })
}
