//! The baselines of table 3 on the GPU: the same frames through the host, and the
//! device-to-device copy bandwidth.

use std::time::Instant;

use cuframes_core::cuda::{self, CudaDevice, DeviceBuffer, Stream};
use cuframes_core::format::FrameGeometry;
use cuframes_core::wire::Format;

use crate::latency::pct;

/// The same frames through the host: device-to-host, into shared memory, host-to-device.
pub fn host_path(w: u32, h: u32, frames: u32) -> (f64, f64) {
    let layout = FrameGeometry::new(Format::Nv12, w, h).unwrap();
    let dev = CudaDevice::open(0).unwrap();
    dev.make_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let a = DeviceBuffer::new(&dev, layout.frame_size).unwrap();
    let b = DeviceBuffer::new(&dev, layout.frame_size).unwrap();
    let fd = cuframes_core::shm::memfd("bench-host-path", layout.frame_size).unwrap();
    let map = cuframes_core::shm::Mapping::map(
        std::os::fd::AsFd::as_fd(&fd),
        layout.frame_size,
        true,
        "bench",
    )
    .unwrap();
    let mut host = vec![0u8; layout.frame_size];
    let mut times = Vec::new();
    for _ in 0..frames {
        let t = Instant::now();
        // SAFETY: `a` is a live device buffer of frame_size bytes.
        unsafe {
            cuda::copy_dtoh_2d(
                &mut host,
                layout.frame_size,
                a.device_ptr(),
                layout.frame_size,
                layout.frame_size,
                1,
                &stream,
            )
        }
        .unwrap();
        map.write_bytes(0, &host);
        map.read_bytes(0, &mut host);
        // SAFETY: `b` is a live device buffer of frame_size bytes, alive past the synchronize.
        unsafe {
            cuda::copy_htod_2d_async(
                b.device_ptr(),
                layout.frame_size,
                &host,
                layout.frame_size,
                layout.frame_size,
                1,
                &stream,
            )
        }
        .unwrap();
        stream.synchronize().unwrap();
        times.push(t.elapsed().as_nanos() as i64);
    }
    let mean = times.iter().sum::<i64>() as f64 / times.len() as f64 / 1000.0;
    (mean, pct(&mut times, 0.99))
}

/// Device-to-device copy bandwidth (GB/s of frame bytes moved).
pub fn dtod_bandwidth() -> f64 {
    let size = 256 << 20;
    let dev = CudaDevice::open(0).unwrap();
    dev.make_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let a = DeviceBuffer::new(&dev, size).unwrap();
    let b = DeviceBuffer::new(&dev, size).unwrap();
    let row = 1 << 16;
    let copy = || {
        // SAFETY: `a` and `b` are live device buffers of `size` bytes, alive past the
        // synchronize that follows every use of this closure.
        unsafe {
            cuda::copy_2d_async(
                b.device_ptr(),
                row,
                a.device_ptr(),
                row,
                row,
                size / row,
                &stream,
            )
        }
        .unwrap()
    };
    // One copy before the clock starts, so the timed ones pay no first-use cost.
    copy();
    stream.synchronize().unwrap();
    let t = Instant::now();
    let reps = 20;
    for _ in 0..reps {
        copy();
    }
    stream.synchronize().unwrap();
    (size * reps) as f64 / t.elapsed().as_secs_f64() / 1e9
}
