//! `cuframes.Error`, the one exception class of the module, and the conversion of core
//! errors to it.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    cuframes,
    Error,
    PyException,
    "A cuframes error: `code` is the cuframes error code (int), `name` its C name."
);

/// A core error as a Python `cuframes.Error` with `.code` and `.name` set.
pub(crate) fn to_py(e: cuframes_core::Error) -> PyErr {
    Python::with_gil(|py| {
        let err = Error::new_err(e.to_string());
        let value = err.value(py);
        // Setting attributes on a fresh exception instance cannot fail short of memory
        // exhaustion; the error is still raised without them then.
        let _ = value.setattr("code", e.code() as i32);
        let _ = value.setattr("name", e.code().name());
        err
    })
}

/// A `cuframes.Error` made here (not by the core).
pub(crate) fn error(code: cuframes_core::ErrorCode, message: impl Into<String>) -> PyErr {
    to_py(cuframes_core::Error::new(code, message))
}
