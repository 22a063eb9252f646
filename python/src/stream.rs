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
//! The C ABI keeps its own meaning (NULL = none); this module is only the Python side's.

use cuframes_core::cuda::stream::CU_STREAM_LEGACY;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

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

/// The handle as the object gives it.
fn raw_handle(stream: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
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
        "stream must be None, an int (a CUstream; 0 = the legacy default stream) or a stream \
         object with __cuda_stream__, .cuda_stream (torch) or .ptr (CuPy)",
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
