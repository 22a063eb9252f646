//! The one reading of every `stream=` argument.
//!
//! The rule (the same for `Frame.release`, `Frame.to_rgb` and `Publisher.publish`):
//! - None: no stream given (each call says what it does then);
//! - 0: the legacy default stream. CUDA's runtime API names it 0 (`cudaStreamLegacy` is the
//!   same stream), and so do torch (`torch.cuda.current_stream().cuda_stream == 0` on the
//!   default stream) and CuPy (`cupy.cuda.Stream.null.ptr == 0`). The core reads a null
//!   `CUstream` as "no stream" in some calls (`release_after_stream`: the caller's reads are
//!   done; `publish_device_planes`: the ring's own stream), so 0 is passed on as
//!   `CU_STREAM_LEGACY`, which the driver takes for that same stream;
//! - 1 (`CU_STREAM_LEGACY`) and 2 (`CU_STREAM_PER_THREAD`, the calling thread's default
//!   stream): passed on as they are (the driver's special handles, as DLPack and the CUDA
//!   array interface spell them too);
//! - anything else: a `CUstream` handle.
//!
//! A handle is an int (or an object with `__index__`, as NumPy's integers) from 0 to
//! 2**64 - 1: another int is a ValueError that says so; a bool is a TypeError (True is not
//! the legacy stream 1, it is a mistake).
//!
//! The C ABI keeps its own meaning (NULL = none); this module is only the Python side's.

use cuframes_core::cuda::stream::CU_STREAM_LEGACY;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

/// The legacy default stream's handle as the core and the driver take it.
pub(crate) const LEGACY_STREAM: usize = CU_STREAM_LEGACY;

/// A stream handle from Python's spelling of it: 0 (the legacy default stream as CUDA's
/// runtime, torch and CuPy name it) becomes `CU_STREAM_LEGACY`; every other value stays.
pub(crate) fn from_python_handle(handle: usize) -> usize {
    if handle == 0 {
        LEGACY_STREAM
    } else {
        handle
    }
}

/// A CUstream from what Python passes: None, an int, or a stream object of torch / CuPy /
/// anything with `__cuda_stream__()`, `.cuda_stream` or `.ptr`; read by the module's rule
/// (0 is the legacy default stream, never "no stream").
pub(crate) fn stream_handle(stream: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    Ok(raw_handle(stream)?.map(from_python_handle))
}

const RULE: &str = "stream must be None, an int (a CUstream; 0 = the legacy default stream) or \
                    a stream object with __cuda_stream__, .cuda_stream (torch) or .ptr (CuPy)";

/// The handle as the object gives it.
fn raw_handle(stream: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    if stream.is_none() {
        return Ok(None);
    }
    if let Some(handle) = int_handle(stream, "stream")? {
        return Ok(Some(handle));
    }
    if stream.hasattr("__cuda_stream__")? {
        let t = stream.call_method0("__cuda_stream__")?;
        let Ok((_version, handle)) = t.extract::<(i64, Bound<'_, PyAny>)>() else {
            return Err(PyTypeError::new_err(format!(
                "stream.__cuda_stream__() must return (version, handle), not {}; {RULE}",
                t.repr()?
            )));
        };
        return match int_handle(&handle, "stream.__cuda_stream__()'s handle")? {
            Some(h) => Ok(Some(h)),
            None => Err(PyTypeError::new_err(format!(
                "stream.__cuda_stream__()'s handle must be an int, not {}",
                handle.get_type().name()?
            ))),
        };
    }
    for attr in ["cuda_stream", "ptr"] {
        if let Ok(v) = stream.getattr(attr) {
            if let Some(h) = int_handle(&v, &format!("stream.{attr}"))? {
                return Ok(Some(h));
            }
        }
    }
    Err(PyTypeError::new_err(RULE))
}

/// `v` as a handle when it is an integer (None when it is no integer at all): a bool is
/// refused, as is an integer outside a CUstream's 0..=2**64-1 (by what it is, never by an
/// OverflowError from the conversion).
fn int_handle(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<usize>> {
    if v.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{what}: a bool is not a stream; {RULE}"
        )));
    }
    if !v.is_instance_of::<PyInt>() && !v.hasattr("__index__")? {
        return Ok(None);
    }
    match v.extract::<u64>() {
        Ok(h) => usize::try_from(h)
            .map(Some)
            .map_err(|_| out_of_range(v, what)),
        Err(e) if e.is_instance_of::<PyOverflowError>(v.py()) => Err(out_of_range(v, what)),
        // `__index__` itself failed: its own error.
        Err(e) => Err(e),
    }
}

fn out_of_range(v: &Bound<'_, PyAny>, what: &str) -> PyErr {
    // The int's value (an `__index__` object's own str is no number).
    let shown = v
        .call_method0("__index__")
        .and_then(|n| n.str())
        .map_or_else(|_| "?".to_string(), |s| s.to_string());
    PyValueError::new_err(format!(
        "{what} {shown} is not a CUstream handle: an int from 0 to 2**64 - 1 \
         (0 = the legacy default stream)"
    ))
}

/// `cuframes._cuframes._stream_handle(stream)`: the handle a `stream=` argument is passed on
/// as (None when none is given). Not public API: the tests check the rule through it, on
/// machines without a GPU.
#[pyfunction]
#[pyo3(name = "_stream_handle")]
pub(crate) fn stream_handle_py(stream: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
    stream_handle(stream)
}
