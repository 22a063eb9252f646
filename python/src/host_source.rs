//! Host buffers handed to `Publisher.publish` and `PacketPublisher.publish`, read at memcpy
//! speed: their bytes in C order, borrowed where the source is already dense, else gathered
//! once in Rust (any strides, negative ones included), never element by element in Python.
//!
//! The sources, in the order they are tried:
//! 1. `bytes`: borrowed (immutable, kept alive by the reference we hold);
//! 2. the buffer protocol (NumPy arrays, bytearray, memoryview, array.array, ...): on
//!    CPython >= 3.11 through `PyObject_GetBuffer` (the export pins the exporter's memory
//!    and keeps its size fixed until released); before 3.11, where the stable ABI this wheel
//!    is built for has no buffer calls, through `memoryview(obj).tobytes()` (CPython's own
//!    copy in C order, then borrowed);
//! 3. `__array_interface__` (version 3) of objects without the buffer protocol: its `data`
//!    is a buffer object (bounds checked against it) or a `(pointer, read_only)` tuple (as
//!    NumPy does, the protocol's promise that the memory is valid is trusted; a null
//!    pointer, a shape or strides that overflow the address space, a mask or an unknown
//!    element type are refused);
//! 4. `__array__()` (torch CPU tensors), whose result is read as above.
//!
//! What a source may hold is bounded by its destination ([`Wanted`]): a source's size comes
//! from its shape alone (a broadcast array may describe terabytes over a few bytes), so it
//! is checked against the destination before a byte is allocated, copied or gathered, and
//! only the bytes the destination takes are read. An allocation that still fails is a
//! `MemoryError`, never an abort.
//!
//! One file (about 730 lines) on purpose: the four sources share the bound ([`Wanted`]), the
//! one strided gather and the one result type ([`HostBytes`]); apart, each would import the
//! others.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::{PyMemoryError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PySlice, PyTuple};

/// What the elements may be.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Elements {
    /// Frame planes: bytes or native 16-bit unsigned integers (P010 / P016).
    Plane,
    /// Packets: any elements, read as their bytes.
    AnyBytes,
}

/// How many bytes a destination takes from a source (C order).
pub struct Wanted {
    /// A source of fewer bytes is refused (a plane's span at its stride).
    pub least: usize,
    /// A source of more bytes is refused before anything is read.
    pub most: usize,
    /// Only the first `used` bytes are read (the rest is never copied nor gathered).
    pub used: usize,
    /// The destination in the "too small" error: "36 rows of 64 bytes (stride 64)".
    pub needs: String,
    /// The destination's upper bound in the "too large" error, a whole clause: "the packet
    /// ring's data_size is 8388608 bytes".
    pub bound: String,
}

impl Wanted {
    /// Up to `most` bytes, all of them read (packets, extradata).
    pub fn up_to(most: usize, bound: String) -> Wanted {
        Wanted {
            least: 0,
            most,
            used: most,
            needs: String::new(),
            bound,
        }
    }

    /// The bytes to read of a source of `size` bytes, or why it does not fit.
    fn take(&self, what: &str, size: usize) -> PyResult<usize> {
        if size < self.least {
            return Err(PyValueError::new_err(format!(
                "{what}: {} need {} bytes, got {size}",
                self.needs, self.least
            )));
        }
        if size > self.most {
            return Err(PyValueError::new_err(format!(
                "{what}: the source holds {size} bytes; {}",
                self.bound
            )));
        }
        Ok(size.min(self.used))
    }
}

/// Whether `PyObject_GetBuffer` may be used where the interpreter has it in its stable ABI
/// (tests turn it off to cover the path of CPython 3.9 and 3.10).
static USE_GET_BUFFER: AtomicBool = AtomicBool::new(true);

pub fn set_use_get_buffer(on: bool) {
    USE_GET_BUFFER.store(on, Ordering::Relaxed);
}

/// The bytes of one source, valid while this value lives (it holds what keeps them alive).
pub struct HostBytes<'py> {
    data: Data,
    _keep: Keep<'py>,
}

enum Data {
    /// `len` bytes at `ptr`, owned by what `_keep` holds (null only when `len` is 0).
    Borrowed {
        ptr: *const u8,
        len: usize,
    },
    Owned(Vec<u8>),
}

/// What keeps borrowed bytes valid.
enum Keep<'py> {
    Object(#[allow(dead_code)] Bound<'py, PyAny>),
    Buffer(#[allow(dead_code)] BufferView),
}

impl HostBytes<'_> {
    pub fn as_slice(&self) -> &[u8] {
        match &self.data {
            Data::Borrowed { len: 0, .. } => &[],
            // SAFETY: `ptr` addresses `len` readable bytes that stay allocated (and, for
            // exports and bytes, the same size) while `_keep` lives, which is as long as self.
            Data::Borrowed { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            Data::Owned(v) => v,
        }
    }
}

/// The first `wanted.used` bytes of `obj` in C order (all of them when fewer), refused when
/// it holds fewer than `wanted.least` or more than `wanted.most`; `what` names it in errors
/// ("plane 0", "data").
pub fn read<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
    elements: Elements,
    wanted: &Wanted,
) -> PyResult<HostBytes<'py>> {
    read_depth(obj, what, elements, wanted, 0)
}

fn read_depth<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
    elements: Elements,
    wanted: &Wanted,
    depth: u32,
) -> PyResult<HostBytes<'py>> {
    if let Ok(b) = obj.downcast::<PyBytes>() {
        let s = b.as_bytes();
        let len = wanted.take(what, s.len())?;
        return Ok(HostBytes {
            data: Data::Borrowed {
                ptr: s.as_ptr(),
                len,
            },
            _keep: Keep::Object(b.clone().into_any()),
        });
    }
    let py = obj.py();
    let buffer_error = match from_buffer_protocol(obj, what, elements, wanted) {
        Ok(Some(b)) => return Ok(b),
        Ok(None) => None,
        Err(e) if is_not_a_buffer(py, &e) => Some(e),
        Err(e) => return Err(e),
    };
    if let Some(interface) = obj.getattr_opt("__array_interface__")? {
        return from_array_interface(obj, &interface, what, elements, wanted);
    }
    if depth == 0 && obj.hasattr("__array__")? {
        let array = obj.call_method0("__array__")?;
        return read_depth(&array, what, elements, wanted, 1);
    }
    Err(PyTypeError::new_err(format!(
        "{what}: expected bytes, bytearray or an object with the buffer protocol or \
         __array_interface__ (a NumPy array), not {}{}",
        obj.get_type().name()?,
        buffer_error.map_or(String::new(), |e| format!(" ({e})"))
    )))
}

/// A TypeError (no buffer protocol) or BufferError (the exporter refuses): try the next source.
fn is_not_a_buffer(py: Python<'_>, e: &PyErr) -> bool {
    e.is_instance_of::<PyTypeError>(py) || e.is_instance_of::<pyo3::exceptions::PyBufferError>(py)
}

/// `Ok(None)`: the object has no buffer protocol (memoryview path: checked up front).
fn from_buffer_protocol<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
    elements: Elements,
    wanted: &Wanted,
) -> PyResult<Option<HostBytes<'py>>> {
    let py = obj.py();
    if USE_GET_BUFFER.load(Ordering::Relaxed) && py.version_info() >= (3, 11) {
        let view = BufferView::get(obj, RECORDS_RO)?;
        check_elements(what, view.itemsize(), view.format(), elements)?;
        let strided = view.strided()?;
        let data = strided.read(what, wanted)?;
        return Ok(Some(HostBytes {
            data,
            _keep: Keep::Buffer(view),
        }));
    }
    let view = py
        .import("builtins")?
        .getattr("memoryview")?
        .call1((obj,))?;
    let itemsize: usize = view.getattr("itemsize")?.extract()?;
    let format: String = view.getattr("format")?.extract()?;
    check_elements(what, itemsize, Some(&format), elements)?;
    // tobytes() copies every byte the view describes: its size is checked first.
    let nbytes: usize = view.getattr("nbytes")?.extract()?;
    if let Err(e) = wanted.take(what, nbytes) {
        view.call_method0("release")?;
        return Err(e);
    }
    let bytes = view.call_method0("tobytes")?;
    view.call_method0("release")?;
    read_depth(&bytes, what, elements, wanted, 1).map(Some)
}

fn check_elements(
    what: &str,
    itemsize: usize,
    format: Option<&str>,
    elements: Elements,
) -> PyResult<()> {
    if elements == Elements::AnyBytes || itemsize == 1 {
        return Ok(());
    }
    let native_u16 = matches!(format, Some("H" | "=H" | "h" | "=h" | "@H" | "@h"))
        || (cfg!(target_endian = "little") && matches!(format, Some("<H" | "<h")));
    if itemsize == 2 && native_u16 {
        return Ok(());
    }
    Err(PyTypeError::new_err(format!(
        "{what}: elements must be bytes or 16-bit unsigned integers, not format {:?} of {itemsize} \
         bytes",
        format.unwrap_or("?")
    )))
}

/// Elements described by a start, a shape and byte strides (any sign).
struct Strided {
    base: *const u8,
    itemsize: usize,
    shape: Vec<usize>,
    strides: Vec<isize>,
}

impl Strided {
    /// The byte offsets (relative to `base`) of the first byte and one past the last byte
    /// of any element, or None when that overflows; (0, 0) for no elements.
    fn extent(&self) -> Option<(isize, isize)> {
        if self.shape.contains(&0) {
            return Some((0, 0));
        }
        let (mut lo, mut hi) = (0isize, 0isize);
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            let span = isize::try_from(n - 1).ok()?.checked_mul(s)?;
            if span < 0 {
                lo = lo.checked_add(span)?;
            } else {
                hi = hi.checked_add(span)?;
            }
        }
        let hi = hi.checked_add(isize::try_from(self.itemsize).ok()?)?;
        hi.checked_sub(lo)?;
        Some((lo, hi))
    }

    /// Bytes of the elements, checked to fit the address space.
    fn size(&self) -> Option<usize> {
        self.shape
            .iter()
            .try_fold(self.itemsize, |acc, &n| acc.checked_mul(n))
            .filter(|&n| n <= isize::MAX as usize)
    }

    fn is_c_contiguous(&self) -> bool {
        let mut expect = self.itemsize as isize;
        for (&n, &s) in self.shape.iter().zip(&self.strides).rev() {
            if n > 1 && s != expect {
                return false;
            }
            expect = expect.saturating_mul(n as isize);
        }
        true
    }

    /// The first bytes of the elements in C order, as many as `wanted` takes (checked
    /// against their size before anything is allocated): borrowed when dense, else gathered.
    ///
    /// The caller guarantees that every element lies in memory readable while the result
    /// is used (within `extent()` from `base`).
    fn read(&self, what: &str, wanted: &Wanted) -> PyResult<Data> {
        let size = self.size().ok_or_else(|| {
            PyValueError::new_err(format!("{what}: the array is larger than memory"))
        })?;
        let take = wanted.take(what, size)?;
        if take == 0 {
            return Ok(Data::Owned(Vec::new()));
        }
        if self.is_c_contiguous() {
            return Ok(Data::Borrowed {
                ptr: self.base,
                len: take,
            });
        }
        let mut out = Vec::new();
        out.try_reserve_exact(take).map_err(|_| {
            PyMemoryError::new_err(format!(
                "{what}: cannot allocate {take} bytes to gather the array's elements"
            ))
        })?;
        out.resize(take, 0);
        // SAFETY: the caller's guarantee: every element this visits is readable; `out` holds
        // at most the `size` bytes of all elements.
        unsafe { self.gather(&mut out) };
        Ok(Data::Owned(out))
    }

    /// Copies the first `out.len()` bytes (at most all elements' bytes) of the elements, in
    /// C order, into `out`.
    ///
    /// # Safety
    /// Every element (base + Σ index·stride, `itemsize` bytes) must be readable.
    unsafe fn gather(&self, out: &mut [u8]) {
        let n = self.shape.len();
        let item = self.itemsize;
        if n == 0 {
            // A scalar: one element at `base` (out is at most its bytes long).
            // SAFETY: the caller's guarantee (the one element is readable).
            out.copy_from_slice(unsafe { std::slice::from_raw_parts(self.base, out.len()) });
            return;
        }
        // Rows of the innermost axis, in C order; each copied as one run when its elements
        // are adjacent, else element by element with the element size known to the compiler.
        // The last row may be cut short (only part of the elements is wanted), and with it
        // its last element.
        let inner_n = self.shape[n - 1];
        let inner_s = self.strides[n - 1];
        let mut index = vec![0usize; n - 1];
        for dst in out.chunks_mut(inner_n * item) {
            let offset: isize = index
                .iter()
                .zip(&self.strides)
                .map(|(&i, &s)| i as isize * s)
                .sum();
            // SAFETY: `offset` is the offset of the first element of a row of the array
            // (extent() checked that no such sum overflows).
            let row = unsafe { self.base.offset(offset) };
            // SAFETY: in every branch, element j of this row (at `row + j·inner_s`, its
            // `item` bytes) is readable, by this function's contract; `dst` is at most the
            // row's bytes long, so only elements of this row are read, and of the last one
            // only its first `d.len()` bytes.
            unsafe {
                if inner_s == item as isize {
                    dst.copy_from_slice(std::slice::from_raw_parts(row, dst.len()));
                } else if item == 1 {
                    for (j, d) in dst.iter_mut().enumerate() {
                        *d = *row.offset(j as isize * inner_s);
                    }
                } else if item == 2 {
                    for (j, d) in dst.chunks_mut(2).enumerate() {
                        let e = row.offset(j as isize * inner_s);
                        let v = std::ptr::read_unaligned(e as *const [u8; 2]);
                        d.copy_from_slice(&v[..d.len()]);
                    }
                } else {
                    for (j, d) in dst.chunks_mut(item).enumerate() {
                        let e = row.offset(j as isize * inner_s);
                        d.copy_from_slice(std::slice::from_raw_parts(e, d.len()));
                    }
                }
            }
            // The next row: the outer axes' index in C order.
            for axis in (0..n - 1).rev() {
                index[axis] += 1;
                if index[axis] < self.shape[axis] {
                    break;
                }
                index[axis] = 0;
            }
        }
    }
}

// The buffer protocol, declared here: PyO3 declares it for the stable ABI of CPython 3.11
// only, and this wheel's is 3.9's. The layout of `Py_buffer` has been the same since 3.3 and
// is part of the stable ABI since 3.11; it is only used where the interpreter is >= 3.11.
#[repr(C)]
struct PyBufferRaw {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

extern "C" {
    fn PyObject_GetBuffer(obj: *mut ffi::PyObject, view: *mut PyBufferRaw, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut PyBufferRaw);
}

/// PyBUF_STRIDES | PyBUF_FORMAT, read-only: shape, strides and format, never suboffsets
/// (an exporter that needs them refuses the request).
const RECORDS_RO: c_int = 0x0010 | 0x0008 | 0x0004;
/// PyBUF_SIMPLE: contiguous bytes.
const SIMPLE: c_int = 0;

/// An export of an object's buffer, released on drop.
struct BufferView(Box<PyBufferRaw>);

impl BufferView {
    fn get(obj: &Bound<'_, PyAny>, flags: c_int) -> PyResult<BufferView> {
        // SAFETY: Py_buffer is plain data; all-zero is its "not filled" state.
        let mut raw: Box<PyBufferRaw> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `obj` is a live object, the GIL is held, `raw` is writable Py_buffer
        // memory; only called on CPython >= 3.11, where the call and the layout are stable.
        if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *raw, flags) } != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(BufferView(raw))
    }

    fn itemsize(&self) -> usize {
        usize::try_from(self.0.itemsize).unwrap_or(0)
    }

    fn format(&self) -> Option<&str> {
        if self.0.format.is_null() {
            return Some("B"); // the protocol's default: unsigned bytes
        }
        // SAFETY: a non-null format is a NUL-terminated string owned by the export.
        unsafe { CStr::from_ptr(self.0.format) }.to_str().ok()
    }

    /// The export as a strided array (what PyBUF_STRIDES promises: shape and strides of
    /// `ndim` entries, or none for a 0-d or a dense 1-d buffer).
    fn strided(&self) -> PyResult<Strided> {
        let b = &*self.0;
        let itemsize = self.itemsize();
        let ndim = usize::try_from(b.ndim).unwrap_or(usize::MAX);
        if itemsize == 0 || ndim > 64 || (b.buf.is_null() && b.len != 0) {
            return Err(PyValueError::new_err(
                "the object's buffer export is malformed (no data, no item size or too many axes)",
            ));
        }
        let (shape, strides): (Vec<usize>, Vec<isize>) = if b.shape.is_null() {
            let len = usize::try_from(b.len).unwrap_or(0);
            (vec![len / itemsize], vec![itemsize as isize])
        } else {
            // SAFETY: the export's `shape` (and `strides`, when set) hold `ndim` values.
            let shape = unsafe { std::slice::from_raw_parts(b.shape, ndim) };
            let shape: Vec<usize> = shape
                .iter()
                .map(|&n| usize::try_from(n).unwrap_or(usize::MAX))
                .collect();
            let strides = if b.strides.is_null() {
                c_strides(&shape, itemsize)
            } else {
                // SAFETY: as above.
                unsafe { std::slice::from_raw_parts(b.strides, ndim) }.to_vec()
            };
            (shape, strides)
        };
        let s = Strided {
            base: b.buf as *const u8,
            itemsize,
            shape,
            strides,
        };
        if s.shape.contains(&usize::MAX) || s.extent().is_none() || s.size().is_none() {
            return Err(PyValueError::new_err(
                "the object's buffer export has an impossible shape",
            ));
        }
        Ok(s)
    }
}

impl Drop for BufferView {
    fn drop(&mut self) {
        Python::with_gil(|_| {
            // SAFETY: a buffer filled by PyObject_GetBuffer, released once, with the GIL.
            unsafe { PyBuffer_Release(&mut *self.0) }
        });
    }
}

fn c_strides(shape: &[usize], itemsize: usize) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut step = itemsize as isize;
    for (s, &n) in strides.iter_mut().zip(shape).rev() {
        *s = step;
        step = step.saturating_mul(n as isize);
    }
    strides
}

/// `__array_interface__` (version 3) of `obj`.
fn from_array_interface<'py>(
    obj: &Bound<'py, PyAny>,
    interface: &Bound<'py, PyAny>,
    what: &str,
    elements: Elements,
    wanted: &Wanted,
) -> PyResult<HostBytes<'py>> {
    let bad = |why: String| PyValueError::new_err(format!("{what}: __array_interface__ {why}"));
    let d = interface
        .downcast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{what}: __array_interface__ must be a dict")))?;
    let field = |name: &str| -> PyResult<Bound<'py, PyAny>> {
        d.get_item(name)?
            .ok_or_else(|| bad(format!("has no {name:?}")))
    };
    if d.get_item("mask")?.is_some_and(|m| !m.is_none()) {
        return Err(bad("has a mask (masked arrays are not supported)".into()));
    }
    let shape: Vec<usize> = field("shape")?
        .extract()
        .map_err(|_| bad("shape must be a tuple of integers >= 0".into()))?;
    let typestr: String = field("typestr")?
        .extract()
        .map_err(|_| bad("typestr must be a string".into()))?;
    let itemsize = typestr_itemsize(&typestr)
        .ok_or_else(|| bad(format!("typestr {typestr:?} is not understood")))?;
    let format = typestr_format(&typestr);
    check_elements(what, itemsize, format.as_deref(), elements)?;
    if shape.len() > 64 {
        return Err(bad(format!("has {} axes", shape.len())));
    }
    let strides = match d.get_item("strides")? {
        Some(s) if !s.is_none() => {
            let s: Vec<isize> = s
                .extract()
                .map_err(|_| bad("strides must be None or a tuple of integers".into()))?;
            if s.len() != shape.len() {
                return Err(bad(format!(
                    "has {} strides for {} axes",
                    s.len(),
                    shape.len()
                )));
            }
            s
        }
        _ => c_strides(&shape, itemsize),
    };
    let data = field("data")?;
    let mut strided = Strided {
        base: std::ptr::null(),
        itemsize,
        shape,
        strides,
    };
    let (lo, hi) = strided
        .extent()
        .ok_or_else(|| bad("shape and strides overflow the address space".into()))?;
    let Some(size) = strided.size() else {
        return Err(bad("shape is larger than memory".into()));
    };
    let empty = hi == lo;
    if let Ok(t) = data.downcast::<PyTuple>() {
        let (address, _read_only): (usize, bool) = t
            .extract()
            .map_err(|_| bad("data must be (address, read_only) or a buffer".into()))?;
        if address == 0 && !empty {
            return Err(bad("data is a null pointer".into()));
        }
        // The first and last byte must be addresses (no wrap around the address space).
        let first = (address as isize).checked_add(lo);
        let last = (address as isize).checked_add(hi);
        if !empty && (first.map_or(true, |f| f <= 0) || last.is_none()) {
            return Err(bad(
                "data, shape and strides point outside the address space".into(),
            ));
        }
        strided.base = address as *const u8;
        // The protocol's promise (as NumPy takes it): the memory is valid while `obj` is.
        let data = strided.read(what, wanted)?;
        return Ok(HostBytes {
            data,
            _keep: Keep::Object(obj.clone()),
        });
    }
    if data.is_none() {
        return Err(bad(
            "data is None but the object has no buffer protocol".into()
        ));
    }
    // A buffer object: the array lies in its bytes, from `offset`.
    let buffer = DataBuffer::of(&data).map_err(|_| {
        let name = data
            .get_type()
            .name()
            .map_or_else(|_| "?".into(), |n| n.to_string());
        bad(format!(
            "data must be (address, read_only) or a buffer, not {name}"
        ))
    })?;
    let offset: isize = match d.get_item("offset")? {
        Some(o) if !o.is_none() => o
            .extract()
            .map_err(|_| bad("offset must be an integer".into()))?,
        _ => 0,
    };
    let len = buffer.len() as isize;
    let inside = offset >= 0
        && offset.checked_add(lo).is_some_and(|f| f >= 0)
        && offset.checked_add(hi).is_some_and(|l| l <= len);
    if !empty && !inside {
        return Err(bad(format!(
            "describes bytes {}..{} of a data buffer of {len} bytes",
            offset.saturating_add(lo),
            offset.saturating_add(hi)
        )));
    }
    // The array's bytes, `offset + lo .. offset + hi` of the buffer (checked above to lie
    // within it), or none when the array is empty (then `read` does not look at `base`).
    let (first, end) = if empty {
        (0, 0)
    } else {
        ((offset + lo) as usize, (offset + hi) as usize)
    };
    // Before the window is taken: on CPython < 3.11 its bytes are copied.
    wanted.take(what, size)?;
    let (window, keep) = buffer.window(first, end)?;
    // Element 0 lies `-lo` bytes into the window (lo <= 0).
    strided.base = window.wrapping_offset(if empty { 0 } else { -lo });
    let data = strided.read(what, wanted)?;
    Ok(HostBytes { data, _keep: keep })
}

/// A contiguous buffer object holding an array's bytes: an export on CPython >= 3.11, else a
/// memoryview (its bytes copied once the part that is needed is known).
enum DataBuffer<'py> {
    Export(BufferView),
    View(Bound<'py, PyAny>, usize),
}

impl<'py> DataBuffer<'py> {
    fn of(obj: &Bound<'py, PyAny>) -> PyResult<DataBuffer<'py>> {
        let py = obj.py();
        if USE_GET_BUFFER.load(Ordering::Relaxed) && py.version_info() >= (3, 11) {
            let view = BufferView::get(obj, SIMPLE)?;
            let len = usize::try_from(view.0.len).unwrap_or(0);
            if view.0.buf.is_null() && len != 0 {
                return Err(PyValueError::new_err("a buffer export without data"));
            }
            return Ok(DataBuffer::Export(view));
        }
        let view = py
            .import("builtins")?
            .getattr("memoryview")?
            .call1((obj,))?;
        // As PyBUF_SIMPLE refuses on the other path: tobytes() of a strided view would
        // gather every byte it describes (a broadcast array describes any number).
        if !view.getattr("c_contiguous")?.extract::<bool>()? {
            view.call_method0("release")?;
            return Err(PyTypeError::new_err("not a contiguous buffer"));
        }
        let len: usize = view.getattr("nbytes")?.extract()?;
        Ok(DataBuffer::View(view, len))
    }

    fn len(&self) -> usize {
        match self {
            DataBuffer::Export(v) => usize::try_from(v.0.len).unwrap_or(0),
            DataBuffer::View(_, len) => *len,
        }
    }

    /// The address of byte `first` of bytes `first..end` (within the buffer), valid while
    /// the returned value lives: the export's own memory, or a copy of those bytes only.
    fn window(self, first: usize, end: usize) -> PyResult<(*const u8, Keep<'py>)> {
        match self {
            DataBuffer::Export(view) => {
                let start = view.0.buf as *const u8;
                // `first` lies within the export (or is 0), so this stays inside it.
                Ok((start.wrapping_add(first), Keep::Buffer(view)))
            }
            DataBuffer::View(view, _) => {
                // Only the array's bytes; a view whose format cannot be cast to bytes
                // (a non-native one) is copied whole.
                let part = match view.call_method1("cast", ("B",)) {
                    Ok(b) => {
                        let slice = PySlice::new(view.py(), first as isize, end as isize, 1);
                        let part = b.get_item(slice)?.call_method0("tobytes")?;
                        b.call_method0("release")?;
                        (part, 0)
                    }
                    Err(_) => (view.call_method0("tobytes")?, first),
                };
                view.call_method0("release")?;
                let (bytes, skip) = part;
                let bytes = bytes.downcast_into::<PyBytes>()?;
                let start = bytes.as_bytes().as_ptr().wrapping_add(skip);
                Ok((start, Keep::Object(bytes.into_any())))
            }
        }
    }
}

/// Bytes per element of a typestr (`|u1`, `<u2`, `<f4`, ...).
fn typestr_itemsize(t: &str) -> Option<usize> {
    let n: usize = t.get(2..)?.parse().ok()?;
    (matches!(t.as_bytes().first(), Some(b'|' | b'<' | b'>' | b'='))
        && matches!(
            t.as_bytes().get(1),
            Some(b'b' | b'i' | b'u' | b'f' | b'c' | b'V' | b'S')
        )
        && (1..=64).contains(&n))
    .then_some(n)
}

/// The buffer-protocol format of a typestr, where it has one we look at (16-bit integers).
fn typestr_format(t: &str) -> Option<String> {
    let little = cfg!(target_endian = "little");
    match t {
        "|u1" | "<u1" | ">u1" | "=u1" => Some("B".into()),
        "=u2" | "=i2" => Some("H".into()),
        "<u2" | "<i2" if little => Some("H".into()),
        ">u2" | ">i2" if !little => Some("H".into()),
        _ => None,
    }
}
