//! `BatchResult`: one batch of `cuframes.Batch`: the tensor and what each camera gave it.

use std::sync::Arc;

use cuframes_core::batch::BatchOutput;
use cuframes_core::cuda::{CudaDevice, Event};
use cuframes_core::rgb::batch::{BatchSpec, Placement};
use cuframes_core::rgb::RgbLayout;
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::rgb::batch_tensor;

/// The tensor shape of `cameras` images of `spec`.
pub fn shape(cameras: usize, spec: &BatchSpec) -> Vec<i64> {
    let (n, w, h) = (
        cameras as i64,
        i64::from(spec.width),
        i64::from(spec.height),
    );
    match spec.layout {
        RgbLayout::Chw => vec![n, 3, h, w],
        RgbLayout::Hwc => vec![n, h, w, 3],
    }
}

/// One batch made by `Batch.next()`.
///
/// `tensor`: the images, `[N, 3, H, W]` or `[N, H, W, 3]`: a `cuframes.Tensor` on the GPU
/// (DLPack, `__cuda_array_interface__`), a NumPy array for host batches (a `cuframes.Tensor`
/// when NumPy is not installed). Its buffer returns to the reader's pool when the tensor
/// and every import of it are gone. Per camera, in the order of the keys: `key`, `valid`
/// (False: the image is the pad colour), `seq` and `pts` (of the frame, None when invalid),
/// `placement` (where the frame's pixels are in the image; `to_source` maps detections back).
#[pyclass(module = "cuframes", frozen)]
pub struct BatchResult {
    tensor: PyObject,
    keys: Vec<String>,
    valid: Vec<bool>,
    seq: Vec<Option<u64>>,
    pts: Vec<Option<i64>>,
    placements: Vec<Option<Placement>>,
    sources: Vec<Option<(u32, u32)>>,
    index: u64,
    kernel_launches: u64,
}

impl BatchResult {
    /// Wraps a core batch; `gpu` for CUDA batches (their device, an event behind the
    /// conversion); `launches`: the reader's kernel launches so far.
    pub fn new(
        py: Python<'_>,
        out: BatchOutput,
        spec: &BatchSpec,
        gpu: Option<(Arc<CudaDevice>, Arc<Event>)>,
        launches: u64,
    ) -> PyResult<BatchResult> {
        let host = gpu.is_none();
        let tensor = batch_tensor(out.buffer, spec.dtype, shape(out.cameras.len(), spec), gpu);
        let tensor = Py::new(py, tensor)?.into_any();
        let tensor = if host {
            match py.import("numpy") {
                Ok(np) => np.call_method1("asarray", (tensor,))?.unbind(),
                Err(_) => tensor,
            }
        } else {
            tensor
        };
        let cams = &out.cameras;
        Ok(BatchResult {
            tensor,
            keys: cams.iter().map(|c| c.key.clone()).collect(),
            valid: cams.iter().map(|c| c.valid).collect(),
            seq: cams.iter().map(|c| c.valid.then_some(c.seq)).collect(),
            pts: cams
                .iter()
                .map(|c| c.valid.then_some(c.pts_ns).and_then(crate::values::opt_ts))
                .collect(),
            placements: cams.iter().map(|c| c.placement).collect(),
            sources: cams
                .iter()
                .map(|c| c.source.map(|(w, h, _)| (w, h)))
                .collect(),
            index: out.index,
            kernel_launches: launches,
        })
    }

    fn camera(&self, i: isize) -> PyResult<usize> {
        let n = self.keys.len() as isize;
        let j = if i < 0 { i + n } else { i };
        if (0..n).contains(&j) {
            Ok(j as usize)
        } else {
            Err(PyIndexError::new_err(format!(
                "camera {i} is not in a batch of {n}"
            )))
        }
    }
}

#[pymethods]
impl BatchResult {
    /// The images (see the class documentation).
    #[getter]
    fn tensor(&self, py: Python<'_>) -> PyObject {
        self.tensor.clone_ref(py)
    }

    /// The cameras' keys, in batch order.
    #[getter]
    fn key(&self) -> Vec<String> {
        self.keys.clone()
    }

    /// Per camera: True when its frame is in the batch.
    #[getter]
    fn valid(&self) -> Vec<bool> {
        self.valid.clone()
    }

    /// Per camera: the frame's seq in its ring (None when invalid).
    #[getter]
    fn seq(&self) -> Vec<Option<u64>> {
        self.seq.clone()
    }

    /// Per camera: the frame's pts in nanoseconds (None when invalid or unstamped).
    #[getter]
    fn pts(&self) -> Vec<Option<i64>> {
        self.pts.clone()
    }

    /// Per camera: where its frame's pixels are in its image, a dict with `scale_x`,
    /// `scale_y`, `offset_x`, `offset_y` (`image = source * scale + offset`, in pixel-edge
    /// coordinates), `content_width`, `content_height`, `source_width`, `source_height`;
    /// None for a camera whose frame size is not known.
    #[getter]
    fn placement<'py>(&self, py: Python<'py>) -> PyResult<Vec<Option<Bound<'py, PyDict>>>> {
        self.placements
            .iter()
            .zip(&self.sources)
            .map(|(p, s)| {
                let (Some(p), Some((sw, sh))) = (p, s) else {
                    return Ok(None);
                };
                let d = PyDict::new(py);
                d.set_item("scale_x", p.scale_x)?;
                d.set_item("scale_y", p.scale_y)?;
                d.set_item("offset_x", p.offset_x)?;
                d.set_item("offset_y", p.offset_y)?;
                d.set_item("content_width", p.content_width)?;
                d.set_item("content_height", p.content_height)?;
                d.set_item("source_width", sw)?;
                d.set_item("source_height", sh)?;
                Ok(Some(d))
            })
            .collect()
    }

    /// Map boxes of camera `camera`'s image back to its source frame's pixels: `boxes` is a
    /// sequence of `(x0, y0, x1, y1)` in batch-image pixels; returns a list of such tuples in
    /// source pixels, clipped to the frame (`clip=False`: not clipped).
    #[pyo3(signature = (camera, boxes, clip=true), text_signature = "($self, camera, boxes, clip=True)")]
    fn to_source(
        &self,
        camera: isize,
        boxes: Vec<Vec<f32>>,
        clip: bool,
    ) -> PyResult<Vec<(f32, f32, f32, f32)>> {
        let i = self.camera(camera)?;
        let (Some(p), Some((w, h))) = (self.placements[i], self.sources[i]) else {
            return Err(PyValueError::new_err(format!(
                "camera {i} ({:?}) has no known frame size in this batch",
                self.keys[i]
            )));
        };
        boxes
            .iter()
            .map(|b| {
                let [x0, y0, x1, y1] = b[..] else {
                    return Err(PyValueError::new_err(format!(
                        "a box is (x0, y0, x1, y1), not {} numbers",
                        b.len()
                    )));
                };
                let (a, bb) = (p.to_source(x0, y0), p.to_source(x1, y1));
                let fit = |v: f32, max: u32| {
                    if clip {
                        v.clamp(0.0, max as f32)
                    } else {
                        v
                    }
                };
                Ok((fit(a.0, w), fit(a.1, h), fit(bb.0, w), fit(bb.1, h)))
            })
            .collect()
    }

    /// How many batches the reader made before this one.
    #[getter]
    fn index(&self) -> u64 {
        self.index
    }

    /// The reader's GPU kernel launches when this batch was made (one per CUDA batch).
    #[getter]
    fn kernel_launches(&self) -> u64 {
        self.kernel_launches
    }

    fn __len__(&self) -> usize {
        self.keys.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<cuframes.BatchResult #{} {}/{} valid>",
            self.index,
            self.valid.iter().filter(|v| **v).count(),
            self.keys.len()
        )
    }
}
