//! DLPack (<https://dmlc.github.io/dlpack/latest/>): the C structs, and capsules whose deleter
//! drops what keeps the memory alive (an `ExportGuard` on a frame, a tensor's storage).

use std::ffi::{c_void, CStr};

use pyo3::ffi;
use pyo3::prelude::*;

pub const KDL_CPU: i32 = 1;
pub const KDL_CUDA: i32 = 2;
const KDL_UINT: u8 = 1;
const KDL_FLOAT: u8 = 2;
/// DLPack 1.x flag: the consumer must not write.
const FLAG_READ_ONLY: u64 = 1 << 0;

const LEGACY_NAME: &CStr = c"dltensor";
const VERSIONED_NAME: &CStr = c"dltensor_versioned";

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
pub(crate) struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
pub(crate) struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// What keeps an export's memory valid until its consumer deletes it.
pub type Keeper = Box<dyn Send>;

/// What one export owns: the managed tensor first (its address is the export's), the shape
/// and strides it points at, and what keeps the memory valid (the frame's export guard, a
/// tensor's storage).
#[repr(C)]
struct Export<T> {
    managed: T,
    shape: [i64; 3],
    strides: [i64; 3],
    _keeper: Keeper,
}

/// Element type: unsigned or IEEE float, of so many bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    Uint(u8),
    Float(u8),
}

/// Geometry of one plane in DLPack terms.
pub struct Tensor {
    pub data: u64,
    pub device: DLDevice,
    pub dtype: DType,
    pub shape: Vec<i64>,
    /// In elements.
    pub strides: Vec<i64>,
    pub read_only: bool,
}

fn dl_tensor(t: &Tensor, shape: *mut i64, strides: *mut i64) -> DLTensor {
    DLTensor {
        data: t.data as *mut c_void,
        device: t.device,
        ndim: t.shape.len() as i32,
        dtype: match t.dtype {
            DType::Uint(bytes) => DLDataType {
                code: KDL_UINT,
                bits: bytes * 8,
                lanes: 1,
            },
            DType::Float(bytes) => DLDataType {
                code: KDL_FLOAT,
                bits: bytes * 8,
                lanes: 1,
            },
        },
        shape,
        strides,
        byte_offset: 0,
    }
}

fn dims(v: &[i64]) -> [i64; 3] {
    let mut out = [0; 3];
    out[..v.len()].copy_from_slice(v);
    out
}

unsafe extern "C" fn delete_legacy(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // No unwinding out of a C callback: a panic in the guard's drop is caught and dropped.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: `m` is the `managed` field (offset 0, repr(C)) of an Export leaked from a
        // Box in `capsule`; DLPack calls the deleter once, so the Box is reclaimed once.
        drop(unsafe { Box::from_raw(m.cast::<Export<DLManagedTensor>>()) });
    });
}

unsafe extern "C" fn delete_versioned(m: *mut DLManagedTensorVersioned) {
    if m.is_null() {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: as in delete_legacy, for the versioned Export.
        drop(unsafe { Box::from_raw(m.cast::<Export<DLManagedTensorVersioned>>()) });
    });
}

/// The capsule's destructor: a capsule still under its original name was never consumed,
/// so the export is ours to delete; a consumer renames it ("used_...") and owns it then.
unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: CPython calls this with the GIL held and a live capsule; PyCapsule_IsValid and
    // PyCapsule_GetPointer only read it, and with a matching name the pointer is the export
    // leaked in `capsule`, not consumed (the consumer would have renamed it).
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY_NAME.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, LEGACY_NAME.as_ptr());
            delete_legacy(p.cast());
        } else if ffi::PyCapsule_IsValid(capsule, VERSIONED_NAME.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, VERSIONED_NAME.as_ptr());
            delete_versioned(p.cast());
        }
    }
}

/// A DLPack capsule for `t`: versioned (DLPack 1.0) when the consumer asked for it.
pub fn capsule(py: Python<'_>, t: &Tensor, keeper: Keeper, versioned: bool) -> PyResult<PyObject> {
    let (ptr, name): (*mut c_void, &CStr) = if versioned {
        let mut e = Box::new(Export {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion { major: 1, minor: 0 },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_versioned),
                flags: if t.read_only { FLAG_READ_ONLY } else { 0 },
                dl_tensor: dl_tensor(t, std::ptr::null_mut(), std::ptr::null_mut()),
            },
            shape: dims(&t.shape),
            strides: dims(&t.strides),
            _keeper: keeper,
        });
        // The Box does not move when leaked: the pointers into it stay valid.
        e.managed.dl_tensor.shape = e.shape.as_mut_ptr();
        e.managed.dl_tensor.strides = e.strides.as_mut_ptr();
        let raw = Box::into_raw(e);
        // SAFETY: `raw` is the live, just leaked Box.
        unsafe { (*raw).managed.manager_ctx = raw.cast() };
        (raw.cast(), VERSIONED_NAME)
    } else {
        let mut e = Box::new(Export {
            managed: DLManagedTensor {
                dl_tensor: dl_tensor(t, std::ptr::null_mut(), std::ptr::null_mut()),
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_legacy),
            },
            shape: dims(&t.shape),
            strides: dims(&t.strides),
            _keeper: keeper,
        });
        e.managed.dl_tensor.shape = e.shape.as_mut_ptr();
        e.managed.dl_tensor.strides = e.strides.as_mut_ptr();
        let raw = Box::into_raw(e);
        // SAFETY: `raw` is the live, just leaked Box.
        unsafe { (*raw).managed.manager_ctx = raw.cast() };
        (raw.cast(), LEGACY_NAME)
    };
    // SAFETY: `ptr` is non-null, `name` a static C string (the capsule keeps the pointer),
    // and the destructor matches what `ptr` is; we hold the GIL.
    let obj = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(capsule_destructor)) };
    if obj.is_null() {
        // The capsule was not made: nobody else will delete the export.
        // SAFETY: `ptr` is the export leaked above, owned by nobody else.
        unsafe {
            if versioned {
                delete_versioned(ptr.cast());
            } else {
                delete_legacy(ptr.cast());
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `obj` is a new, owned reference returned by PyCapsule_New.
    Ok(unsafe { PyObject::from_owned_ptr(py, obj) })
}
