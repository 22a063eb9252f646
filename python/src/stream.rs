//! The one reading of every `stream=` argument.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

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
