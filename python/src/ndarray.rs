//! `Frame.to_ndarray` and `Frame.__array__`: a host frame as one dense NumPy array, laid out
//! as PyAV's `VideoFrame.to_ndarray` lays it out, so that code written for PyAV reads it.

use std::sync::Arc;

use cuframes_core::format::FrameGeometry;
use cuframes_core::wire::{Format, MemoryKind};
use cuframes_core::ErrorCode;
use pyo3::exceptions::{PyImportError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyTuple};

use crate::exception::{error, to_py};
use crate::export::FrameShared;
use crate::values::lock;

/// The array's shape in elements: the planes one after another, their rows dense.
fn shape(l: &FrameGeometry) -> PyResult<Vec<usize>> {
    let (w, h) = (l.width as usize, l.height as usize);
    match l.format {
        // Luma rows, then the chroma rows (interleaved, or U then V), W samples each.
        Format::Nv12 | Format::P010 | Format::P016 | Format::Yuv420p => {
            if w % 2 != 0 || h % 2 != 0 {
                return Err(PyValueError::new_err(format!(
                    "to_ndarray: a {}x{h} {} frame has no (H*3/2, W) layout (odd size): \
                     read its planes (numpy.asarray(frame.plane(i)))",
                    w,
                    l.format.name()
                )));
            }
            Ok(vec![h * 3 / 2, w])
        }
        Format::Yuv444p => Ok(vec![3, h, w]),
        Format::Rgba | Format::Bgra => Ok(vec![h, w, 4]),
        Format::None => Err(error(
            ErrorCode::Format,
            "to_ndarray: the frame has no format",
        )),
    }
}

/// A dense copy of a host frame (see `Frame.to_ndarray`): the frame's memory kind, layout
/// and shared state.
pub(crate) fn dense_copy<'py>(
    py: Python<'py>,
    memory: MemoryKind,
    layout: &FrameGeometry,
    shared: &Arc<FrameShared>,
) -> PyResult<Bound<'py, PyAny>> {
    if memory == MemoryKind::CudaVmm {
        return Err(PyTypeError::new_err(
            "to_ndarray: a CUDA frame's bytes are in GPU memory: import its planes with \
             torch.from_dlpack(frame.plane(i)) or cupy.asarray(frame.plane(i)), or convert it \
             with frame.to_rgb()",
        ));
    }
    let shape = shape(layout)?;
    let item = match layout.format {
        Format::P010 | Format::P016 => 2,
        _ => 1,
    };
    let planes = layout.planes();
    let total: usize = planes.iter().map(|p| p.row_bytes * p.rows).sum();
    if total != shape.iter().product::<usize>() * item {
        return Err(error(
            ErrorCode::Format,
            format!(
                "to_ndarray: the {} planes hold {total} bytes, not {shape:?} samples",
                layout.format.name()
            ),
        ));
    }
    let numpy = py.import("numpy").map_err(|e| {
        PyImportError::new_err(format!(
            "to_ndarray needs NumPy ({e}); frame.plane(i) exports DLPack"
        ))
    })?;
    // Refused once the frame is released or its subscriber closed, like any export.
    let guard = shared.export()?;
    let bytes = PyByteArray::new_with(py, total, |out| {
        let s = lock(&guard.0.state);
        let f = s.frame.as_ref().expect("an export guard keeps the frame");
        let mut at = 0;
        for (i, p) in planes.iter().enumerate() {
            let n = p.row_bytes * p.rows;
            f.download_plane(i, &mut out[at..at + n]).map_err(to_py)?;
            at += n;
        }
        Ok(())
    })?;
    drop(guard);
    // A writable array over the bytearray (its base): one copy in all.
    let dtype = if item == 2 { "<u2" } else { "u1" };
    numpy
        .call_method1("frombuffer", (bytes, dtype))?
        .call_method1("reshape", (PyTuple::new(py, shape)?,))
}

/// `fractions.Fraction(1, 1_000_000_000)`: the time base of every `pts_ns`.
pub(crate) fn time_base(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    py.import("fractions")?
        .getattr("Fraction")?
        .call1((1, 1_000_000_000))
}
