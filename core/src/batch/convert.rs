//! Converting the assembled frames into the batch buffer: on the GPU, one launch of the
//! batched kernel reading the cameras' slots where they are, its frames then released on the
//! stream behind it; on the host, `convert_batch_host` into a host buffer.

use std::ffi::c_void;
use std::sync::Arc;

use crate::cuda::{CudaDevice, Event, Stream};
use crate::error::{Error, Result};
use crate::rgb::batch::{
    batch_bytes, convert_batch_host, BatchInput, BatchKernel, BatchSpec, HostBatchInput,
    MAX_BATCH_CAMERAS,
};
use crate::rgb::{ColourMatrix, ColourRange};
use crate::subscriber::Frame;
use crate::wire::MemoryKind;

use super::camera::Camera;
use super::pool::{BatchBuffer, BufferPool};

/// `CU_STREAM_LEGACY`: what a batch converts on when the caller names no stream.
const LEGACY_STREAM: usize = 1;

/// Where batches are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// Host memory, by the CPU.
    Host,
    /// On this GPU (this process's ordinal).
    Cuda(i32),
}

/// The GPU side: the kernel, the reader's own stream (the frames' releases are queued there
/// behind the conversions' events) and the device buffers.
struct Gpu {
    kernel: BatchKernel,
    own: Stream,
    pool: BufferPool,
    dev: Arc<CudaDevice>,
}

/// Converts assembled frames into batch buffers.
pub(super) struct Converter {
    spec: BatchSpec,
    cameras: usize,
    /// Fixed by the first camera that connects; host until then.
    target: Option<Target>,
    host_pool: BufferPool,
    gpu: Option<Gpu>,
    /// Per camera: where a zero-copy host frame is copied before the conversion.
    scratch: Vec<Vec<u8>>,
}

impl Converter {
    /// A converter for `cameras` cameras, or why `spec` makes no batch.
    pub fn new(spec: &BatchSpec, cameras: usize) -> Result<Converter> {
        spec.validate()?;
        if cameras > MAX_BATCH_CAMERAS {
            return Err(Error::invalid(format!(
                "{cameras} cameras: a batch holds at most {MAX_BATCH_CAMERAS}"
            )));
        }
        if batch_bytes(cameras, spec) == usize::MAX {
            return Err(Error::invalid("the batch is too large"));
        }
        Ok(Converter {
            spec: *spec,
            cameras,
            target: None,
            host_pool: BufferPool::new(),
            gpu: None,
            scratch: vec![Vec::new(); cameras],
        })
    }

    /// Where batches are made (host until a camera has connected).
    pub fn target(&self) -> Target {
        self.target.unwrap_or(Target::Host)
    }

    /// Fix the target from the first connected camera, once; loads the kernel for a GPU.
    pub fn choose_target(&mut self, cameras: &[Camera]) -> Result<()> {
        if self.target.is_some() {
            return Ok(());
        }
        let Some(sub) = cameras.iter().find_map(Camera::subscriber) else {
            return Ok(());
        };
        match (sub.memory_kind(), sub.cuda_device()) {
            (Some(MemoryKind::CudaVmm), Some(ordinal)) => {
                let dev = CudaDevice::open(ordinal)?;
                let kernel = BatchKernel::load(&dev)?;
                let own = Stream::new(&dev)?;
                self.gpu = Some(Gpu {
                    kernel,
                    own,
                    pool: BufferPool::new(),
                    dev,
                });
                self.target = Some(Target::Cuda(ordinal));
            }
            _ => self.target = Some(Target::Host),
        }
        Ok(())
    }

    /// In a forked child: let go of the GPU state without a CUDA call (it is the parent's).
    pub fn forget_gpu(&mut self) {
        if let Some(g) = self.gpu.take() {
            std::mem::forget(g);
        }
    }

    /// The stream frames that GPU conversions read are released on (None for host batches).
    pub fn release_stream(&self) -> Option<&Stream> {
        self.gpu.as_ref().map(|g| &g.own)
    }

    /// Kernel launches so far.
    pub fn launches(&self) -> u64 {
        self.gpu.as_ref().map_or(0, |g| g.kernel.launches())
    }

    /// Output buffers waiting in the pools.
    pub fn pooled(&self) -> usize {
        self.host_pool.free_count() + self.gpu.as_ref().map_or(0, |g| g.pool.free_count())
    }

    /// Whether camera `c`'s held frame can go into this converter's batches: its memory must
    /// be the batches' (host frames into host batches, frames of the batch's GPU into GPU
    /// batches).
    pub fn accepts(&self, c: &Camera) -> Result<()> {
        let Some(h) = &c.held else { return Ok(()) };
        let f = &h.frame;
        let ok = match self.target() {
            Target::Host => f.memory_kind() == MemoryKind::HostMemfd,
            Target::Cuda(ordinal) => {
                f.memory_kind() == MemoryKind::CudaVmm
                    && f.cuda_device().is_some_and(|d| d.ordinal() == ordinal)
            }
        };
        if ok {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "camera {:?} has frames in {}, the batches are made {}",
            c.key,
            match f.cuda_device() {
                Some(d) => format!("the memory of GPU {}", d.ordinal()),
                None => String::from("host memory"),
            },
            match self.target() {
                Target::Host => String::from("in host memory"),
                Target::Cuda(o) => format!("on GPU {o}"),
            }
        )))
    }

    /// Convert the held frames of the cameras marked `valid` into a pooled buffer; the
    /// others get the pad colour.
    ///
    /// # Safety
    /// GPU batches: `stream` as for [`super::Batch::next`].
    pub unsafe fn convert(
        &mut self,
        cameras: &mut [Camera],
        valid: &[bool],
        stream: Option<usize>,
    ) -> Result<BatchBuffer> {
        debug_assert_eq!(cameras.len(), self.cameras);
        let size = batch_bytes(self.cameras, &self.spec);
        match self.target() {
            Target::Host => self.convert_host(cameras, valid, size),
            Target::Cuda(_) => {
                let raw = match stream {
                    None | Some(0) => LEGACY_STREAM,
                    Some(s) => s,
                };
                // SAFETY: the caller's contract on `stream`.
                unsafe { self.convert_cuda(cameras, valid, size, raw) }
            }
        }
    }

    fn convert_host(
        &mut self,
        cameras: &[Camera],
        valid: &[bool],
        size: usize,
    ) -> Result<BatchBuffer> {
        let mut buf = self.host_pool.take_host(size)?;
        // Zero-copy host frames are copied out of their slot first (a stable snapshot while
        // the frame is held under STRICT_WAIT); COPY frames are read where they are.
        for ((c, &v), scratch) in cameras.iter().zip(valid).zip(self.scratch.iter_mut()) {
            let Some(h) = c.held.as_ref().filter(|_| v) else {
                continue;
            };
            if h.frame.bytes().is_none() {
                scratch.resize(h.frame.layout.frame_size, 0);
                h.frame.copy_to(scratch)?;
            }
        }
        let inputs = cameras
            .iter()
            .zip(valid)
            .zip(&self.scratch)
            .map(|((c, &v), scratch)| match c.held.as_ref().filter(|_| v) {
                None => Ok(None),
                Some(h) => {
                    let data = h.frame.bytes().unwrap_or(scratch);
                    let (m, r) = colour_of(&h.frame);
                    HostBatchInput::from_frame(data, (*h.frame.layout).clone(), m, r).map(Some)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let out = buf.host_bytes_mut().expect("a host buffer");
        convert_batch_host(&inputs, &self.spec, out)?;
        Ok(buf)
    }

    /// # Safety
    /// `raw` is a live `CUstream` of the GPU's context (or a special handle) that outlives
    /// the returned buffer and the frames read.
    unsafe fn convert_cuda(
        &mut self,
        cameras: &mut [Camera],
        valid: &[bool],
        size: usize,
        raw: usize,
    ) -> Result<BatchBuffer> {
        let gpu = self.gpu.as_ref().expect("a GPU target has its kernel");
        let _current = gpu.dev.push_current()?;
        // SAFETY: the caller's contract: a live stream of this device's context.
        let user = unsafe { Stream::from_raw_with_device(&gpu.dev, raw as *mut c_void) };
        let buf = gpu.pool.take_device(&gpu.dev, size, &user, raw)?;
        let inputs: Vec<Option<BatchInput>> = cameras
            .iter()
            .zip(valid)
            .map(|(c, &v)| {
                c.held.as_ref().filter(|_| v).map(|h| {
                    let (m, r) = colour_of(&h.frame);
                    BatchInput::from_slot(h.frame.address(), (*h.frame.layout).clone(), m, r)
                })
            })
            .collect();
        // SAFETY: every input is a frame held by its camera (a slot of a mapped ring, or a
        // COPY buffer) on this GPU (`accepts`), not released before the event recorded below
        // has completed (`camera::release` queues the ACK behind it); `buf` holds `size`
        // bytes, the batch's, and its earlier users' work is waited for (take_device).
        unsafe { gpu.kernel.launch(&inputs, &self.spec, buf.address(), &user) }?;
        let ready = Arc::new(Event::new(&gpu.dev)?);
        ready.record(&user)?;
        for (c, &v) in cameras.iter_mut().zip(valid) {
            if let Some(h) = c.held.as_mut().filter(|_| v) {
                // The newest conversion on a stream covers the earlier ones there.
                h.read_by.retain(|(s, _)| *s != raw);
                h.read_by.push((raw, ready.clone()));
            }
        }
        Ok(buf)
    }
}

/// The matrix and range of a frame: its ring's colour description, else BT.709 limited
/// (what `Frame.to_rgb` assumes).
fn colour_of(f: &Frame) -> (ColourMatrix, ColourRange) {
    let c = f.colour.as_ref();
    (
        c.and_then(|c| c.rgb_matrix())
            .unwrap_or(ColourMatrix::Bt709),
        c.and_then(|c| c.rgb_range())
            .unwrap_or(ColourRange::Limited),
    )
}
