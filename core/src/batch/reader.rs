//! [`Batch`]: N cameras read into one batch tensor per call of [`Batch::next`].

use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};
use crate::paths::Key;
use crate::rgb::batch::{placement, BatchSpec, Placement};
use crate::util::Origin;
use crate::wire::{Format, MemoryKind};

use super::camera::{Camera, Stop};
use super::convert::{Converter, Target};
use super::options::BatchOptions;
use super::pool::BatchBuffer;

/// What one camera gave a batch.
#[derive(Debug, Clone)]
pub struct CameraInfo {
    /// The camera's key.
    pub key: String,
    /// True when the camera's frame is in the batch; false: its image is the pad value
    /// (the camera is lost, has no frame yet, or none that the policy accepts).
    pub valid: bool,
    /// The frame's seq in its ring (0 when invalid).
    pub seq: u64,
    /// The frame's pts in nanoseconds (0 when invalid).
    pub pts_ns: i64,
    /// The frame's size and format (of the camera's current ring when invalid; None when it
    /// has never been connected).
    pub source: Option<(u32, u32, Format)>,
    /// Where the frame's pixels are in the batch image: `dst = src * scale + offset`
    /// (None when the source size is unknown).
    pub placement: Option<Placement>,
    /// True while the camera's subscriber is connected.
    pub connected: bool,
}

/// One batch: the output buffer (`[N, 3, H, W]` or `[N, H, W, 3]` of the spec's dtype)
/// and what each camera gave it.
#[derive(Debug)]
pub struct BatchOutput {
    /// The batch's bytes, back to the pool when the last reference goes.
    pub buffer: BatchBuffer,
    /// Host memory or the GPU.
    pub memory: MemoryKind,
    /// The GPU's ordinal for device batches.
    pub cuda_device: Option<i32>,
    /// One entry per camera, in the order of the keys.
    pub cameras: Vec<CameraInfo>,
    /// How many batches the reader made before this one.
    pub index: u64,
}

/// A batched reader of many cameras (frame rings of any format and size, host or CUDA):
/// each [`Batch::next`] assembles one frame per camera per the policy and converts them all
/// into one tensor (one kernel launch per batch on the GPU, `convert_batch_host` on the host).
///
/// Cameras keep their index for the reader's life: one that is lost (its publisher gone, a
/// ring in error) is invalid in the batches until it is connected again, which is tried in
/// the background every `retry_interval`; no batch waits on a lost camera.
///
/// The batch memory is decided by the first camera that connects: a CUDA ring makes GPU
/// batches on its device, a host ring host batches; a camera whose frames are elsewhere
/// (another memory kind or GPU) is invalid, with `last_error` saying why.
pub struct Batch {
    cameras: Vec<Camera>,
    options: BatchOptions,
    spec: BatchSpec,
    converter: Converter,
    made: u64,
    /// The process that opened it: in a child forked from it, the reader is a copy whose
    /// subscriptions, frames and GPU state are the parent's.
    origin: Origin,
}

impl Batch {
    /// Subscribe to `keys` and wait up to `options.wait_publisher` for all of them to
    /// connect (and at least for every camera's first connection attempt, which the
    /// handshake timeout bounds). Errors: no key or an invalid one; a camera refused for a reason that retrying
    /// cannot change (a publisher of another uid than `publisher_uid`, bad options). Missing
    /// publishers are not an error (see [`BatchOptions::wait_publisher`]).
    pub fn open(keys: &[&str], spec: BatchSpec, options: BatchOptions) -> Result<Batch> {
        if keys.is_empty() {
            return Err(Error::invalid("a batch needs at least one camera key"));
        }
        for k in keys {
            Key::new(k)?;
        }
        // Checks the spec (sizes, mean and std) before anything connects.
        let converter = Converter::new(&spec, keys.len())?;
        let mut options = options;
        options.subscriber.want_frames = true;
        options.subscriber.want_packets = false;
        let mut cameras = keys
            .iter()
            .map(|k| Camera::new(k, &options.subscriber))
            .collect::<Result<Vec<_>>>()?;
        let deadline = Instant::now() + options.wait_publisher;
        loop {
            for c in cameras.iter_mut() {
                c.poll_link(
                    &options.subscriber,
                    options.retry_interval.min(RETRY_WHILE_OPENING),
                )?;
            }
            // Every camera's first attempt is waited for (the handshake bounds it), so that
            // the cameras that are there are connected when this returns.
            let tried = cameras.iter().all(|c| c.attempts > 0);
            if cameras.iter().all(Camera::is_connected) || (tried && Instant::now() >= deadline) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut batch = Batch {
            cameras,
            options,
            spec,
            converter,
            made: 0,
            origin: Origin::here(),
        };
        batch.converter.choose_target(&batch.cameras)?;
        Ok(batch)
    }

    /// The next batch, assembled per the policy (waiting at most its timeout) and converted.
    /// `stream`: for GPU batches, the raw `CUstream` the conversion is queued on (None: the
    /// legacy default stream); the batch is ready when the work queued there before this
    /// returns has run. Host batches are complete on return.
    ///
    /// # Safety
    /// `stream` is None or a live `CUstream` of the batch's GPU that stays alive as long as the
    /// returned buffer and the frames this batch read (until the next call or the reader's
    /// drop); the special handles 1 (legacy) and 2 (per-thread) are accepted.
    pub unsafe fn next(&mut self, stream: Option<usize>) -> Result<BatchOutput> {
        // SAFETY: the caller's contract on `stream`, which is this method's.
        unsafe { self.next_unless(stream, &mut || false) }?
            .ok_or_else(|| Error::new(ErrorCode::Timeout, "the batch was stopped"))
    }

    /// [`next`](Self::next), with the policy's wait (`All`, `Aligned`) made in slices of about
    /// 50 ms between which `stop` is asked: when it says true, no batch is made and this
    /// returns None at once (the frames read so far stay held for the next batch). For callers
    /// that must stay interruptible during a long timeout (Ctrl-C, a close from another
    /// thread).
    ///
    /// # Safety
    /// As [`next`](Self::next).
    pub unsafe fn next_unless(
        &mut self,
        stream: Option<usize>,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<Option<BatchOutput>> {
        if !self.origin.is_here() {
            return Err(Error::invalid(
                "this batch reader belongs to the process that opened it (this one was forked \
                 from it): open a reader of its own here",
            ));
        }
        if self.cameras.is_empty() {
            return Err(closed());
        }
        let retry = self.options.retry_interval;
        for c in self.cameras.iter_mut() {
            // A camera that cannot connect is invalid (`last_error` says why), never an
            // error of the batch.
            let _ = c.poll_link(&self.options.subscriber, retry);
        }
        self.converter.choose_target(&self.cameras)?;
        let own = self.converter.release_stream();
        let mut stop = Stop::new(stop);
        let assembled = super::assemble::assemble(
            &mut self.cameras,
            self.options.policy,
            own,
            retry,
            &mut stop,
        );
        let Some(mut valid) = assembled else {
            return Ok(None);
        };
        for (c, v) in self.cameras.iter_mut().zip(valid.iter_mut()) {
            if *v {
                if let Err(e) = self.converter.accepts(c) {
                    c.last_error = Some(e);
                    *v = false;
                }
            }
        }
        // SAFETY: the caller's contract on `stream`.
        let buffer = unsafe { self.converter.convert(&mut self.cameras, &valid, stream) }?;
        let cameras = self
            .cameras
            .iter_mut()
            .zip(&valid)
            .map(|(c, &v)| info(c, v, &self.spec))
            .collect();
        let index = self.made;
        self.made += 1;
        let (memory, cuda_device) = match self.converter.target() {
            Target::Host => (MemoryKind::HostMemfd, None),
            Target::Cuda(d) => (MemoryKind::CudaVmm, Some(d)),
        };
        Ok(Some(BatchOutput {
            buffer,
            memory,
            cuda_device,
            cameras,
            index,
        }))
    }

    /// Look at the cameras' connection attempts now (what `next` does first): take finished
    /// ones, start due ones. True when every camera is connected. For callers that wait for
    /// cameras their own way (between checks for an interrupt, say) instead of
    /// `wait_publisher`.
    pub fn poll_cameras(&mut self) -> bool {
        let retry = self.options.retry_interval.min(RETRY_WHILE_OPENING);
        for c in self.cameras.iter_mut() {
            let _ = c.poll_link(&self.options.subscriber, retry);
        }
        !self.cameras.is_empty() && self.cameras.iter().all(Camera::is_connected)
    }

    /// The cameras' keys, in index order.
    pub fn keys(&self) -> Vec<&str> {
        self.cameras.iter().map(|c| c.key.as_str()).collect()
    }

    /// What the batches are made of.
    pub fn spec(&self) -> &BatchSpec {
        &self.spec
    }

    /// The assembly policy and connection options.
    pub fn options(&self) -> &BatchOptions {
        &self.options
    }

    /// True while camera `i`'s subscriber is connected.
    pub fn is_connected(&self, i: usize) -> bool {
        self.cameras.get(i).is_some_and(Camera::is_connected)
    }

    /// Camera `i`'s last connection error or end (None: none so far).
    pub fn last_error(&self, i: usize) -> Option<&Error> {
        self.cameras.get(i).and_then(|c| c.last_error.as_ref())
    }

    /// Times camera `i` was connected again after being lost.
    pub fn reconnections(&self, i: usize) -> u64 {
        self.cameras.get(i).map_or(0, |c| c.reconnections)
    }

    /// GPU batches: kernel launches so far (the conversion is one launch per batch).
    pub fn kernel_launches(&self) -> u64 {
        self.converter.launches()
    }

    /// Output buffers waiting in the pool.
    pub fn pooled_buffers(&self) -> usize {
        self.converter.pooled()
    }

    /// Let every camera go: frames are released behind the conversions that read them,
    /// subscriptions end. Later calls of `next` fail.
    pub fn close(&mut self) {
        let own = self.converter.release_stream();
        for c in self.cameras.iter_mut() {
            c.close(own);
        }
        self.cameras.clear();
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if !self.origin.is_here() {
            // A copy in a forked child: the subscribers and frames let go of the child's copy
            // only (their own drops know), and no CUDA call is made (unusable after a fork:
            // the GPU state is leaked).
            self.cameras.clear();
            self.converter.forget_gpu();
            return;
        }
        self.close();
    }
}

/// How often cameras missing at `open` are tried again while it waits.
const RETRY_WHILE_OPENING: Duration = Duration::from_millis(50);

/// The entry of camera `c` in a batch; a valid camera's frame becomes its batched one.
fn info(c: &mut Camera, valid: bool, spec: &BatchSpec) -> CameraInfo {
    let frame = c.held.as_ref().filter(|_| valid);
    let geometry = frame
        .map(|h| (*h.frame.layout).clone())
        .or_else(|| c.subscriber().and_then(|s| s.frame_layout().cloned()));
    let source = geometry.as_ref().map(|g| (g.width, g.height, g.format));
    let mut out = CameraInfo {
        key: c.key.clone(),
        valid,
        seq: frame.map_or(0, |h| h.frame.seq),
        pts_ns: frame.map_or(0, |h| h.frame.pts_ns),
        source,
        placement: source.map(|(w, h, _)| placement(w, h, spec)),
        connected: c.is_connected(),
    };
    if valid {
        if let Some(h) = &c.held {
            c.batched = h.serial;
        }
    } else {
        out.seq = 0;
    }
    out
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("keys", &self.keys())
            .field("policy", &self.options.policy)
            .field("batches", &self.made)
            .finish()
    }
}

/// `next` after `close`.
pub(super) fn closed() -> Error {
    Error::new(ErrorCode::Disconnected, "the batch reader is closed")
}
