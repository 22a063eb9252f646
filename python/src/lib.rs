//! Python bindings of cuframes: `cuframes._cuframes`, re-exported by the pure-Python package
//! `cuframes` (python/cuframes/__init__.py). Built by maturin as an abi3 wheel (CPython >= 3.9).
//!
//! Ownership of frames (the rule the whole module keeps): a Python `Frame` owns the core
//! frame through a shared [`export::FrameShared`]. Every export of a plane (a DLPack capsule,
//! or a plane whose `__array_interface__` / `__cuda_array_interface__` was read) holds an
//! [`export::ExportGuard`] on it. `Frame.release()` forbids new exports at once, and the core
//! frame is released (ACKed) when the last export is gone: memory that an imported array
//! still points at stays mapped and is not handed back to the publisher under it.

#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

mod colour;
mod dlpack;
mod endpoint;
mod export;
mod frame;
mod host_source;
mod ndarray;
mod packet;
mod packet_publisher;
mod packet_subscriber;
mod plane;
mod publisher;
mod reading;
mod rgb;
mod source;
mod stream;
mod subscriber;
mod tool;

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

pub(crate) fn duration(what: &str, seconds: f64) -> PyResult<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(seconds).map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "{what} must be a finite number of seconds >= 0, not {seconds}"
        ))
    })
}

/// A mutex of this module, poisoned or not: its state stays consistent (no code panics
/// half-way through an update of it).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `i64::MIN` (`NO_PTS`) is None in Python.
pub(crate) fn opt_ts(ts: i64) -> Option<i64> {
    (ts != cuframes_core::wire::NO_PTS).then_some(ts)
}

/// Host<->device copies this process's cuframes has made (0 on a zero-copy CUDA path).
#[pyfunction]
fn host_copy_count() -> u64 {
    cuframes_core::cuda::host_copy_count()
}

#[pymodule]
fn _cuframes(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add_class::<subscriber::Subscriber>()?;
    m.add(
        "ZeroCopyRefusedWarning",
        m.py().get_type::<subscriber::ZeroCopyRefusedWarning>(),
    )?;
    m.add_class::<frame::Frame>()?;
    m.add_class::<plane::Plane>()?;
    m.add_class::<rgb::Tensor>()?;
    m.add_class::<publisher::Publisher>()?;
    m.add_class::<packet_publisher::PacketPublisher>()?;
    m.add_class::<packet_subscriber::PacketSubscriber>()?;
    m.add_class::<packet::Packet>()?;
    let codes = pyo3::types::PyDict::new(m.py());
    for c in cuframes_core::ErrorCode::ALL {
        codes.set_item(c.name(), c as i32)?;
    }
    m.add("ERROR_CODES", codes)?;
    m.add("PROTOCOL_VERSION", cuframes_core::wire::PROTOCOL_VERSION)?;
    m.add_function(wrap_pyfunction!(host_copy_count, m)?)?;
    m.add_function(wrap_pyfunction!(tool::tool_main, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(stream::stream_handle_py, m)?)?;
    Ok(())
}
