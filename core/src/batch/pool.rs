//! The batches' output buffers, reused: a [`BatchBuffer`] goes back to its pool when the last
//! reference to it is dropped, so that a steady stream of batches allocates nothing.
//!
//! Stream discipline of a device buffer (as torch's caching allocator keeps it): the batch's
//! conversion is queued on the caller's stream (the *production* stream); consumers that name
//! their own stream (DLPack's `stream=`) are added with [`BatchBuffer::add_reader`]. When the
//! buffer is dropped, an event is recorded on the production stream and on every reader's
//! stream, and the next conversion into it waits for those events on the GPU: it never
//! overwrites what a consumer's queued work still reads, and the host never waits.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use crate::cuda::{CudaDevice, DeviceBuffer, Event, Stream};
use crate::error::{Error, ErrorCode, Result};
use crate::util::Origin;

/// Buffers a pool keeps; more in use at once are freed when they come back.
pub const POOL_KEEP: usize = 4;

/// Where a buffer's bytes are.
enum Memory {
    Host(Box<[u8]>),
    Device(DeviceBuffer),
}

impl Memory {
    fn size(&self) -> usize {
        match self {
            Memory::Host(b) => b.len(),
            Memory::Device(b) => b.size(),
        }
    }
}

/// A buffer in the pool, with the events its last users' work was recorded behind.
struct Pooled {
    mem: Memory,
    after: Vec<Event>,
}

/// Output buffers of one batch reader (host or one GPU's), reused.
#[derive(Clone, Default)]
pub struct BufferPool {
    free: Arc<Mutex<Vec<Pooled>>>,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("free", &self.free_count())
            .finish()
    }
}

impl BufferPool {
    /// An empty pool.
    pub fn new() -> BufferPool {
        BufferPool::default()
    }

    /// Buffers waiting in the pool.
    pub fn free_count(&self) -> usize {
        lock(&self.free).len()
    }

    fn take(&self, size: usize, device: bool) -> Option<Pooled> {
        let mut free = lock(&self.free);
        let i = free
            .iter()
            .position(|p| p.mem.size() == size && matches!(p.mem, Memory::Device(_)) == device)?;
        Some(free.swap_remove(i))
    }

    /// A host buffer of `size` bytes (its contents are what the last user left).
    pub fn take_host(&self, size: usize) -> Result<BatchBuffer> {
        let mem = match self.take(size, false) {
            Some(p) => p.mem,
            None => {
                let mut v = Vec::new();
                v.try_reserve_exact(size).map_err(|_| {
                    Error::new(
                        ErrorCode::NoMemory,
                        format!("cannot allocate a {size}-byte batch"),
                    )
                })?;
                v.resize(size, 0);
                Memory::Host(v.into_boxed_slice())
            }
        };
        Ok(self.wrap(mem, None))
    }

    /// A device buffer of `size` bytes on `dev`, usable by work queued on `stream` from now
    /// on (the stream waits on the GPU for the work of its last users); `produced_on` is the
    /// raw handle of that stream, recorded behind when the buffer comes back.
    pub fn take_device(
        &self,
        dev: &Arc<CudaDevice>,
        size: usize,
        stream: &Stream,
        produced_on: usize,
    ) -> Result<BatchBuffer> {
        let mem = match self.take(size, true) {
            Some(p) => {
                for e in &p.after {
                    stream.wait_event(e)?;
                }
                p.mem
            }
            None => Memory::Device(DeviceBuffer::new(dev, size)?),
        };
        Ok(self.wrap(
            mem,
            Some(DeviceUse {
                dev: dev.clone(),
                produced_on,
                readers: Mutex::new(Vec::new()),
            }),
        ))
    }

    fn wrap(&self, mem: Memory, device: Option<DeviceUse>) -> BatchBuffer {
        BatchBuffer {
            mem: Some(mem),
            device,
            pool: self.free.clone(),
            origin: Origin::here(),
        }
    }
}

/// The streams a device buffer's users queue work on.
struct DeviceUse {
    dev: Arc<CudaDevice>,
    /// The stream the batch was converted on (a raw `CUstream`; 1 = the legacy stream).
    produced_on: usize,
    /// Streams of consumers that named one.
    readers: Mutex<Vec<usize>>,
}

/// A batch's output buffer, back to its pool when dropped (share it with an `Arc`).
pub struct BatchBuffer {
    mem: Option<Memory>,
    device: Option<DeviceUse>,
    pool: Arc<Mutex<Vec<Pooled>>>,
    /// The process that made it: a copy inherited through fork makes no CUDA call.
    origin: Origin,
}

impl std::fmt::Debug for BatchBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchBuffer")
            .field("address", &self.address())
            .field("size", &self.size())
            .field("device", &self.is_device())
            .finish()
    }
}

impl BatchBuffer {
    /// The first byte's address: a host pointer, or a device pointer for GPU batches.
    pub fn address(&self) -> u64 {
        match &self.mem {
            Some(Memory::Host(b)) => b.as_ptr() as u64,
            Some(Memory::Device(b)) => b.device_ptr(),
            None => 0,
        }
    }

    /// Its size in bytes.
    pub fn size(&self) -> usize {
        self.mem.as_ref().map_or(0, Memory::size)
    }

    /// True for device memory.
    pub fn is_device(&self) -> bool {
        matches!(self.mem, Some(Memory::Device(_)))
    }

    /// The bytes of a host buffer (None for device memory).
    pub fn host_bytes(&self) -> Option<&[u8]> {
        match &self.mem {
            Some(Memory::Host(b)) => Some(b),
            _ => None,
        }
    }

    pub(super) fn host_bytes_mut(&mut self) -> Option<&mut [u8]> {
        match &mut self.mem {
            Some(Memory::Host(b)) => Some(b),
            _ => None,
        }
    }

    /// The raw stream the batch was converted on (device buffers).
    pub fn produced_on(&self) -> Option<usize> {
        self.device.as_ref().map(|d| d.produced_on)
    }

    /// A consumer queues work reading the buffer on `stream` (a raw `CUstream`, live as long
    /// as the buffer is): the buffer's return to the pool waits for that work too.
    pub fn add_reader(&self, stream: usize) {
        if let Some(d) = &self.device {
            let mut r = lock(&d.readers);
            if stream != d.produced_on && !r.contains(&stream) {
                r.push(stream);
            }
        }
    }
}

impl Drop for BatchBuffer {
    fn drop(&mut self) {
        let Some(mem) = self.mem.take() else { return };
        if !self.origin.is_here() {
            // Inherited through fork: the parent's memory, and CUDA is unusable here.
            if let Memory::Device(b) = mem {
                std::mem::forget(b);
            }
            return;
        }
        let mut after = Vec::new();
        if let Some(d) = &self.device {
            let mut streams = vec![d.produced_on];
            streams.extend(lock(&d.readers).drain(..));
            for s in streams {
                // SAFETY: `s` is the production stream or a reader's, given as live streams of
                // this device's context for as long as the buffer lives (take_device's and
                // add_reader's contract); it is only borrowed for the record.
                let stream = unsafe { Stream::from_raw_with_device(&d.dev, s as *mut c_void) };
                match Event::new(&d.dev).and_then(|e| e.record(&stream).map(|()| e)) {
                    Ok(e) => after.push(e),
                    // A stream that takes no event (destroyed meanwhile): the buffer is freed,
                    // and cuMemFree waits for the device, so nothing still reads it.
                    Err(_) => return,
                }
            }
        }
        let mut free = lock(&self.pool);
        if free.len() < POOL_KEEP {
            free.push(Pooled { mem, after });
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
