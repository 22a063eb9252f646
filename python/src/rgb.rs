//! `Frame.to_rgb`: RGB images ready for inference, as `cuframes.Tensor` objects.
//!
//! CUDA frames are converted on the GPU (`cuframes_core::rgb::RgbKernel`) into device
//! buffers from a pool of the subscriber's; host frames on the host (`to_rgb_host`, the
//! same arithmetic) into a buffer the tensor owns.
//!
//! Stream discipline of a pooled buffer, as torch's caching allocator keeps it:
//! - the conversion is queued on the caller's stream (the *production* stream) and an event
//!   recorded behind it;
//! - an importer that names its own stream (`__dlpack__(stream=s)`) gets `s` made to wait on
//!   that event; `s` is remembered;
//! - when the tensor and every import of it are gone, an event is recorded on the production
//!   stream and on every remembered stream, and the buffer goes back to the pool with them:
//!   the next conversion into it waits for those events on the GPU, so it never overwrites
//!   what a consumer's queued work still reads. (Streams that imported through
//!   `__cuda_array_interface__` are not known: such consumers synchronise with the
//!   production stream, which the interface names, as its v3 protocol says.)

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cuframes_core::batch::BatchBuffer;
use cuframes_core::cuda::{CudaDevice, DeviceBuffer, Event, Stream};
use cuframes_core::format::FrameGeometry;
use cuframes_core::rgb::{
    rgb_size, to_rgb_host, ColourMatrix, ColourRange, RgbDtype, RgbKernel, RgbLayout, RgbSpec,
};
use cuframes_core::ErrorCode;
use pyo3::exceptions::{PyAttributeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::dlpack::{self, DLDevice, DType, Tensor as DlTensor, KDL_CPU, KDL_CUDA};
use crate::{error, lock, to_py};

/// Buffers a pool keeps for reuse; more are freed when returned.
const POOL_KEEP: usize = 8;

/// `CU_STREAM_LEGACY`: the legacy default stream, as DLPack and the CUDA array interface
/// spell it (1); what a `stream=` of 0 or None converts on (crate::stream's rule).
const LEGACY_STREAM: usize = crate::stream::LEGACY_STREAM;

/// A buffer waiting in the pool, with the events its last users' work was recorded behind.
struct Pooled {
    buf: DeviceBuffer,
    after: Vec<Event>,
}

/// The GPU side of `to_rgb` for one subscriber: the kernel, loaded on first use, and the pool.
pub struct RgbGpu {
    kernel: RgbKernel,
    pool: Mutex<Vec<Pooled>>,
}

impl RgbGpu {
    pub fn new(dev: &Arc<CudaDevice>) -> cuframes_core::Result<RgbGpu> {
        Ok(RgbGpu {
            kernel: RgbKernel::load(dev)?,
            pool: Mutex::new(Vec::new()),
        })
    }

    fn device(&self) -> &Arc<CudaDevice> {
        self.kernel.device()
    }

    /// A buffer of exactly `size` bytes, usable by work queued on `stream` from now on.
    fn take(&self, size: usize, stream: &Stream) -> cuframes_core::Result<DeviceBuffer> {
        let pooled = {
            let mut pool = lock(&self.pool);
            pool.iter()
                .position(|p| p.buf.size() == size)
                .map(|i| pool.swap_remove(i))
        };
        match pooled {
            Some(p) => {
                for e in &p.after {
                    stream.wait_event(e)?;
                }
                Ok(p.buf)
            }
            None => DeviceBuffer::new(self.device(), size),
        }
    }

    /// Back to the pool once the work queued now on `streams` is done (events recorded
    /// behind it). A stream that cannot take an event (destroyed meanwhile) makes the buffer
    /// be freed instead: `cuMemFree` waits for the device, so nothing still reads it.
    fn give_back(&self, buf: DeviceBuffer, streams: &[usize]) {
        let mut after = Vec::with_capacity(streams.len());
        for &s in streams {
            // SAFETY: `s` is the production stream or an importer's stream, both given as live
            // streams of this device's context (to_rgb's and __dlpack__'s contract); it is only
            // borrowed (never destroyed) for the record.
            let stream = unsafe { Stream::from_raw_with_device(self.device(), raw_stream(s)) };
            match Event::new(self.device()).and_then(|e| e.record(&stream).map(|()| e)) {
                Ok(e) => after.push(e),
                Err(_) => return drop(buf),
            }
        }
        let mut pool = lock(&self.pool);
        if pool.len() < POOL_KEEP {
            pool.push(Pooled { buf, after });
        }
    }
}

/// The driver's handle of a DLPack / CUDA-array-interface stream number (1 and 2 are the
/// driver's special handles of the same streams; 0 never comes here, see `device_tensor`).
fn raw_stream(s: usize) -> *mut c_void {
    s as *mut c_void
}

/// Where a tensor's bytes are.
enum Storage {
    Host(Box<[u8]>),
    /// A batch of `cuframes.Batch`: the buffer returns to the reader's pool when the tensor
    /// and every import of it are gone (the pool records its events behind the production
    /// stream and the importers' streams then).
    Batch {
        buf: BatchBuffer,
        /// CUDA batches: the device and an event recorded behind the conversion, which an
        /// importer's stream waits for.
        gpu: Option<(Arc<CudaDevice>, Arc<Event>)>,
    },
    Device {
        buf: Option<DeviceBuffer>,
        gpu: Arc<RgbGpu>,
        /// The stream the conversion was queued on (never 0: the legacy stream is 1).
        produced_on: usize,
        /// Recorded behind the conversion (the frame's release waits for it too).
        ready: Arc<Event>,
        /// Streams of importers that named one, for the return to the pool.
        readers: Mutex<Vec<usize>>,
    },
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Storage::Device {
            buf,
            gpu,
            produced_on,
            readers,
            ..
        } = self
        {
            if let Some(b) = buf.take() {
                let mut streams = vec![*produced_on];
                for s in lock(readers).drain(..) {
                    if !streams.contains(&s) {
                        streams.push(s);
                    }
                }
                gpu.give_back(b, &streams);
            }
        }
    }
}

impl Storage {
    fn address(&self) -> u64 {
        match self {
            Storage::Host(b) => b.as_ptr() as u64,
            Storage::Device { buf, .. } => buf.as_ref().map_or(0, DeviceBuffer::device_ptr),
            Storage::Batch { buf, .. } => buf.address(),
        }
    }

    /// The stream the bytes were produced on (CUDA; 1 = the legacy default stream).
    fn produced_on(&self) -> Option<usize> {
        match self {
            Storage::Host(_) => None,
            Storage::Device { produced_on, .. } => Some(*produced_on),
            Storage::Batch { buf, .. } => buf.produced_on(),
        }
    }
}

/// An RGB image made by `Frame.to_rgb`: DLPack (`__dlpack__`) and the array interfaces
/// (`__cuda_array_interface__` on CUDA, `__array_interface__` on the host), so that
/// `torch.from_dlpack`, `cupy.from_dlpack`, `numpy.asarray` take it without a copy. Its memory
/// lives while the tensor or any import of it does.
#[pyclass(module = "cuframes", frozen)]
pub struct Tensor {
    storage: Arc<Storage>,
    dtype: RgbDtype,
    /// (3, H, W) / (H, W, 3) for an image; (N, 3, H, W) / (N, H, W, 3) for a batch.
    shape: Vec<i64>,
    device: DLDevice,
}

fn dtype_name(d: RgbDtype) -> &'static str {
    match d {
        RgbDtype::U8 => "uint8",
        RgbDtype::F16 => "float16",
        RgbDtype::F32 => "float32",
    }
}

impl Tensor {
    /// Dense, row-major strides in elements.
    fn strides(&self) -> Vec<i64> {
        let mut strides = vec![1i64; self.shape.len()];
        for i in (0..self.shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.shape[i + 1];
        }
        strides
    }

    fn dl(&self) -> DlTensor {
        DlTensor {
            data: self.storage.address(),
            device: self.device,
            dtype: match self.dtype {
                RgbDtype::U8 => DType::Uint(1),
                RgbDtype::F16 => DType::Float(2),
                RgbDtype::F32 => DType::Float(4),
            },
            shape: self.shape.clone(),
            strides: self.strides(),
            read_only: false,
        }
    }

    fn interface<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let size = self.dtype.size() as i64;
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item(
            "typestr",
            match self.dtype {
                RgbDtype::U8 => "|u1",
                RgbDtype::F16 => "<f2",
                RgbDtype::F32 => "<f4",
            },
        )?;
        d.set_item(
            "strides",
            PyTuple::new(py, self.strides().iter().map(|s| s * size))?,
        )?;
        d.set_item("data", (self.storage.address(), false))?;
        d.set_item("version", 3)?;
        Ok(d)
    }
}

#[pymethods]
impl Tensor {
    /// (3, height, width) for "chw", (height, width, 3) for "hwc"; a batch has the number
    /// of cameras in front: (N, 3, height, width) or (N, height, width, 3).
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// "uint8", "float16" or "float32".
    #[getter]
    fn dtype(&self) -> &'static str {
        dtype_name(self.dtype)
    }

    /// The image's size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.shape.iter().product::<i64>() as usize * self.dtype.size()
    }

    /// The stream the conversion was queued on (CUDA tensors; 1 = the legacy default stream).
    #[getter]
    fn stream(&self) -> Option<usize> {
        self.storage.produced_on()
    }

    /// (1, 0) for host tensors (kDLCPU), (2, device) for CUDA tensors (kDLCUDA).
    fn __dlpack_device__(&self) -> (i32, i32) {
        (self.device.device_type, self.device.device_id)
    }

    /// A DLPack capsule, for `from_dlpack` of torch, CuPy, NumPy, JAX: "dltensor_versioned"
    /// when `max_version` >= (1, 0), else the legacy "dltensor". `stream` (CUDA): the
    /// importer's stream, made to wait for the conversion (None: the legacy default stream;
    /// -1: no wait, as DLPack says). `dl_device` must be the tensor's own device;
    /// `copy=True` raises BufferError (tensors are exported without a copy).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<i64>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<PyObject> {
        if copy == Some(true) {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "cuframes tensors are exported without a copy (copy=True is not supported)",
            ));
        }
        if let Some((t, id)) = dl_device {
            if (t, id) != (self.device.device_type, self.device.device_id) {
                return Err(pyo3::exceptions::PyBufferError::new_err(format!(
                    "the tensor is on device ({}, {}), not ({t}, {id})",
                    self.device.device_type, self.device.device_id
                )));
            }
        }
        let consumer = || match stream {
            None => Ok(Some(LEGACY_STREAM)),
            Some(-1) => Ok(None),
            Some(s) if s > 0 => Ok(Some(s as usize)),
            Some(s) => Err(PyValueError::new_err(format!(
                "stream {s}: DLPack streams are None, -1 or a positive handle"
            ))),
        };
        match &*self.storage {
            Storage::Device {
                gpu,
                produced_on,
                ready,
                readers,
                ..
            } => {
                if let Some(s) = consumer()? {
                    wait_for(gpu.device(), ready, s, *produced_on)?;
                    let mut r = lock(readers);
                    if !r.contains(&s) {
                        r.push(s);
                    }
                }
            }
            Storage::Batch {
                buf,
                gpu: Some((dev, ready)),
            } => {
                if let Some(s) = consumer()? {
                    wait_for(dev, ready, s, buf.produced_on().unwrap_or(LEGACY_STREAM))?;
                    buf.add_reader(s);
                }
            }
            Storage::Host(_) | Storage::Batch { gpu: None, .. } => {}
        }
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        dlpack::capsule(py, &self.dl(), Box::new(self.storage.clone()), versioned)
    }

    /// NumPy's array interface (host tensors; AttributeError on CUDA): `numpy.asarray(t)`.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.device.device_type != KDL_CPU {
            return Err(PyAttributeError::new_err(
                "a CUDA tensor has no __array_interface__ (use DLPack or __cuda_array_interface__)",
            ));
        }
        self.interface(py)
    }

    /// The CUDA array interface v3 (CUDA tensors; AttributeError on the host), with the
    /// stream the conversion was queued on: `cupy.asarray(t)`.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let Some(produced_on) = self.storage.produced_on() else {
            return Err(PyAttributeError::new_err(
                "a host tensor has no __cuda_array_interface__ (use DLPack or __array_interface__)",
            ));
        };
        let d = self.interface(py)?;
        // v3: the consumer synchronises with the stream the data was produced on.
        d.set_item("stream", produced_on)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "<cuframes.Tensor {} {} {}>",
            crate::plane::shape_text(&self.shape),
            self.dtype(),
            match self.stream() {
                Some(s) if self.device.device_type == KDL_CUDA => {
                    format!("cuda:{} stream={s}", self.device.device_id)
                }
                _ => "host".to_string(),
            }
        )
    }
}

/// An importer's stream `s` waits for the work recorded by `ready` (unless it is the
/// production stream itself).
fn wait_for(dev: &Arc<CudaDevice>, ready: &Event, s: usize, produced_on: usize) -> PyResult<()> {
    if s != produced_on {
        // SAFETY: DLPack's contract: the importer passes a live stream of the tensor's
        // device; borrowed, never destroyed here.
        let st = unsafe { Stream::from_raw_with_device(dev, raw_stream(s)) };
        st.wait_event(ready).map_err(to_py)?;
    }
    Ok(())
}

/// A batch of `cuframes.Batch` as a tensor: `shape` (N, 3, H, W) or (N, H, W, 3); `gpu`
/// for a CUDA batch (its device and an event recorded behind the conversion).
pub fn batch_tensor(
    buf: BatchBuffer,
    dtype: RgbDtype,
    shape: Vec<i64>,
    gpu: Option<(Arc<CudaDevice>, Arc<Event>)>,
) -> Tensor {
    let device = match &gpu {
        Some((dev, _)) => DLDevice {
            device_type: KDL_CUDA,
            device_id: dev.ordinal(),
        },
        None => DLDevice {
            device_type: KDL_CPU,
            device_id: 0,
        },
    };
    Tensor {
        storage: Arc::new(Storage::Batch { buf, gpu }),
        dtype,
        shape,
        device,
    }
}

/// The options of `to_rgb`, parsed.
pub fn parse_spec(
    dtype: &str,
    layout: &str,
    matrix: Option<&str>,
    range: Option<&str>,
    described: Option<&cuframes_core::colour::ColourInfo>,
) -> PyResult<RgbSpec> {
    let dtype = match dtype {
        "uint8" | "u8" => RgbDtype::U8,
        "float16" | "half" => RgbDtype::F16,
        "float32" | "float" => RgbDtype::F32,
        other => {
            return Err(PyValueError::new_err(format!(
                "dtype must be \"uint8\", \"float16\" or \"float32\", not {other:?}"
            )))
        }
    };
    let layout = match layout {
        "chw" => RgbLayout::Chw,
        "hwc" => RgbLayout::Hwc,
        other => {
            return Err(PyValueError::new_err(format!(
                "layout must be \"chw\" or \"hwc\", not {other:?}"
            )))
        }
    };
    // Unnamed: what the ring's colour description says, else BT.709 limited.
    let matrix_default = described
        .and_then(|c| c.rgb_matrix())
        .unwrap_or(ColourMatrix::Bt709);
    let range_default = described
        .and_then(|c| c.rgb_range())
        .unwrap_or(ColourRange::Limited);
    let matrix = match matrix.unwrap_or(match matrix_default {
        ColourMatrix::Bt601 => "bt601",
        ColourMatrix::Bt709 => "bt709",
        ColourMatrix::Bt2020 => "bt2020",
    }) {
        "bt709" => ColourMatrix::Bt709,
        "bt601" | "smpte170m" | "bt470bg" => ColourMatrix::Bt601,
        "bt2020" | "bt2020nc" => ColourMatrix::Bt2020,
        other => {
            return Err(PyValueError::new_err(format!(
                "matrix must be \"bt709\", \"bt601\" or \"bt2020\", not {other:?}"
            )))
        }
    };
    let range = match range.unwrap_or(match range_default {
        ColourRange::Limited => "limited",
        ColourRange::Full => "full",
    }) {
        "limited" | "tv" | "mpeg" => ColourRange::Limited,
        "full" | "pc" | "jpeg" => ColourRange::Full,
        other => {
            return Err(PyValueError::new_err(format!(
                "range must be \"limited\" or \"full\", not {other:?}"
            )))
        }
    };
    Ok(RgbSpec {
        matrix,
        range,
        dtype,
        layout,
    })
}

fn shape_of(layout: &FrameGeometry, spec: &RgbSpec) -> Vec<i64> {
    let (w, h) = (i64::from(layout.width), i64::from(layout.height));
    match spec.layout {
        RgbLayout::Chw => vec![3, h, w],
        RgbLayout::Hwc => vec![h, w, 3],
    }
}

/// Converts a host frame whose bytes are `src` (laid out by `layout`).
pub fn host_tensor(src: &[u8], layout: &FrameGeometry, spec: &RgbSpec) -> PyResult<Tensor> {
    let mut out = vec![0u8; rgb_size(layout.width, layout.height, spec.dtype)];
    to_rgb_host(src, layout, spec, &mut out).map_err(to_py)?;
    Ok(Tensor {
        storage: Arc::new(Storage::Host(out.into_boxed_slice())),
        dtype: spec.dtype,
        shape: shape_of(layout, spec),
        device: DLDevice {
            device_type: KDL_CPU,
            device_id: 0,
        },
    })
}

/// Queues the conversion of the CUDA frame at `src` on `stream`, a handle read by
/// crate::stream's rule (1 = the legacy default stream, 2 = the calling thread's per-thread
/// default stream; 0, Python's name of the legacy stream, is read as 1 here too).
///
/// # Safety
/// `src` must address the frame's `layout.frame_size` device bytes on `gpu`'s device, valid
/// until the conversion has run (the frame is released only after work on `stream` in the
/// device's primary context, or after `stream` itself); `stream` must be a live stream of
/// that device's primary context, or 1.
pub unsafe fn device_tensor(
    gpu: &Arc<RgbGpu>,
    src: u64,
    layout: &FrameGeometry,
    spec: &RgbSpec,
    stream: usize,
) -> PyResult<(Tensor, Arc<Event>)> {
    // Never 0: the tensor's `stream` and `__cuda_array_interface__` say 1 for the legacy
    // stream, as DLPack and the array interface (where 0 is not allowed) spell it.
    let stream_no = crate::stream::from_python_handle(stream);
    // SAFETY: this function's contract: a live stream of the device's context; borrowed.
    let st = unsafe { Stream::from_raw_with_device(gpu.device(), raw_stream(stream_no)) };
    let size = rgb_size(layout.width, layout.height, spec.dtype);
    let buf = gpu.take(size, &st).map_err(to_py)?;
    // SAFETY: `src` per this function's contract; `buf` holds exactly the RGB image's bytes
    // and lives (in the tensor, then in the pool behind events on this stream) past the
    // kernel; `st` is a live stream of the kernel's device.
    let launched = unsafe {
        gpu.kernel
            .convert_async(src, layout, spec, buf.device_ptr(), &st)
    };
    if let Err(e) = launched {
        gpu.give_back(buf, &[stream_no]);
        return Err(to_py(e));
    }
    let ready = Arc::new(
        Event::new(gpu.device())
            .and_then(|e| e.record(&st).map(|()| e))
            .map_err(to_py)?,
    );
    let tensor = Tensor {
        storage: Arc::new(Storage::Device {
            buf: Some(buf),
            gpu: gpu.clone(),
            produced_on: stream_no,
            ready: ready.clone(),
            readers: Mutex::new(Vec::new()),
        }),
        dtype: spec.dtype,
        shape: shape_of(layout, spec),
        device: DLDevice {
            device_type: KDL_CUDA,
            device_id: gpu.device().ordinal(),
        },
    };
    Ok((tensor, ready))
}

/// A clear error for a conversion that cannot start.
pub fn no_gpu(e: cuframes_core::Error) -> PyErr {
    error(
        ErrorCode::Cuda,
        format!("to_rgb: cannot load the conversion kernel: {e}"),
    )
}
