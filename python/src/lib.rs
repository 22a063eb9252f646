//! Python bindings of cuframes: `cuframes._cuframes`, re-exported by the pure-Python package
//! `cuframes` (python/cuframes/__init__.py). Built by maturin as an abi3 wheel (CPython >= 3.9).
//!
//! Ownership of frames (the rule the whole module keeps): a Python `Frame` owns the core
//! frame through a shared `export::FrameShared`. Every export of a plane (a DLPack capsule,
//! or a plane whose `__array_interface__` / `__cuda_array_interface__` was read) holds an
//! `export::ExportGuard` on it. `Frame.release()` forbids new exports at once, and the core
//! frame is released (ACKed) when the last export is gone: memory that an imported array
//! still points at stays mapped and is not handed back to the publisher under it.

#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

mod batch;
mod batch_result;
mod colour;
mod dlpack;
mod endpoint;
mod exception;
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
mod values;

// The helpers the classes share, also at the crate root (`crate::lock`, `crate::to_py`, ...).
pub(crate) use exception::{error, to_py, Error};
pub(crate) use values::{duration, lock};

use pyo3::prelude::*;

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
    m.add_class::<batch::Batch>()?;
    m.add_class::<batch_result::BatchResult>()?;
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
