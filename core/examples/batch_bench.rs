//! Micro-benchmark of the batched RGB conversion on the GPU (needs a CUDA device): N cameras
//! of NV12 frames in device memory into one batch (default: 16 x 1080p into 640x640 float16
//! letterbox, NCHW), as `BatchKernel::launch` queues it (one kernel launch per batch),
//! against the per-camera conversion it replaces (`RgbKernel::convert_async` per camera, N
//! launches, at full size: the naive loop's conversion alone, before its resize and stack).
//!
//! ```text
//! cargo run --release -p cuframes-core --example batch_bench [-- --cameras 16 --batches 500
//!     --size 640x640 --source 1920x1080 --dtype f16]
//! cargo run --release -p cuframes-core --example batch_bench -- --host   # CPU path only
//! ```
//!
//! Printed: batches/s queued back to back (one sync at the end), per-batch latency p50/p99
//! (launch to the end of its stream sync), kernel launches per batch (the kernel's counter),
//! the same for the per-camera baseline, the host conversion of one batch
//! (`convert_batch_host`, the CPU path), and whether the GPU batch equals the host's bit for
//! bit. The accuracy against a float64 reference is the unit test's
//! (`cargo test -p cuframes-core --lib rgb::batch::reference -- --nocapture`): the GPU gives
//! the host's bits, so its error is the host's.

use std::sync::Arc;
use std::time::Instant;

use cuframes_core::cuda::{copy_dtoh_2d, copy_htod_2d_async, CudaDevice, DeviceBuffer, Stream};
use cuframes_core::format::FrameGeometry;
use cuframes_core::rgb::batch::{
    batch_bytes, convert_batch_host, BatchInput, BatchKernel, BatchSpec, HostBatchInput, Resize,
};
use cuframes_core::rgb::{
    rgb_size, ColourMatrix, ColourRange, RgbDtype, RgbKernel, RgbLayout, RgbSpec,
};
use cuframes_core::wire::Format;

struct Args {
    cameras: usize,
    batches: usize,
    size: (u32, u32),
    source: (u32, u32),
    dtype: RgbDtype,
    /// Only the host conversion (no GPU needed).
    host_only: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        cameras: 16,
        batches: 500,
        size: (640, 640),
        source: (1920, 1080),
        dtype: RgbDtype::F16,
        host_only: false,
    };
    let dims = |v: &str| -> Result<(u32, u32), String> {
        let (w, h) = v.split_once('x').ok_or(format!("{v:?} is not WxH"))?;
        Ok((
            w.parse().map_err(|e| format!("{v}: {e}"))?,
            h.parse().map_err(|e| format!("{v}: {e}"))?,
        ))
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--host" {
            a.host_only = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--cameras" => a.cameras = value.parse().map_err(|e| format!("--cameras: {e}"))?,
            "--batches" => a.batches = value.parse().map_err(|e| format!("--batches: {e}"))?,
            "--size" => a.size = dims(&value)?,
            "--source" => a.source = dims(&value)?,
            "--dtype" => {
                a.dtype = match value.as_str() {
                    "u8" => RgbDtype::U8,
                    "f16" => RgbDtype::F16,
                    "f32" => RgbDtype::F32,
                    other => return Err(format!("--dtype {other}: u8, f16 or f32")),
                }
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    if a.cameras == 0 || a.batches < 10 {
        return Err("--cameras 1 or more, --batches 10 or more".into());
    }
    Ok(a)
}

/// Percentile `p` (0..=1, nearest rank) of sorted nanoseconds, in µs.
fn percentile_us(sorted: &[i64], p: f64) -> Option<f64> {
    let i = (sorted.len().saturating_sub(1) as f64 * p).round() as usize;
    sorted.get(i).map(|&ns| ns as f64 / 1000.0)
}

/// Sorted latencies (ns) of `n` runs of `one` each followed by a stream sync.
fn latencies(n: usize, stream: &Stream, mut one: impl FnMut()) -> Vec<i64> {
    let mut l: Vec<i64> = (0..n)
        .map(|_| {
            let t = Instant::now();
            one();
            stream.synchronize().expect("sync");
            t.elapsed().as_nanos() as i64
        })
        .collect();
    l.sort_unstable();
    l
}

/// Batches per second of `n` runs of `one` queued back to back, one sync at the end.
fn throughput(n: usize, stream: &Stream, mut one: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        one();
    }
    stream.synchronize().expect("sync");
    n as f64 / t.elapsed().as_secs_f64()
}

fn main() {
    let args = parse().unwrap_or_else(|e| {
        eprintln!("batch_bench: {e}");
        std::process::exit(2);
    });
    let geometry =
        FrameGeometry::new(Format::Nv12, args.source.0, args.source.1).expect("geometry");
    // Smooth gradients with per-camera offsets (what a decoder gives, not noise).
    let frames: Vec<Vec<u8>> = (0..args.cameras)
        .map(|n| {
            let mut f = vec![0u8; geometry.frame_size];
            for (i, p) in geometry.planes().iter().enumerate() {
                for y in 0..p.rows {
                    for x in 0..p.row_bytes {
                        f[p.offset + y * p.pitch + x] =
                            ((x + 2 * y + 37 * n + 64 * i) % 220 + 16) as u8;
                    }
                }
            }
            f
        })
        .collect();
    let spec = BatchSpec {
        width: args.size.0,
        height: args.size.1,
        dtype: args.dtype,
        layout: RgbLayout::Chw,
        resize: Resize::Letterbox,
        pad: [114.0 / 255.0; 3],
        normalize: None,
    };
    let (matrix, range) = (ColourMatrix::Bt709, ColourRange::Limited);
    let host_inputs: Vec<Option<HostBatchInput<'_>>> = frames
        .iter()
        .map(|f| Some(HostBatchInput::from_frame(f, geometry.clone(), matrix, range).unwrap()))
        .collect();
    let mut host = vec![0u8; batch_bytes(args.cameras, &spec)];
    let runs = 5;
    let t = Instant::now();
    for _ in 0..runs {
        convert_batch_host(&host_inputs, &spec, &mut host).expect("host batch");
    }
    let host_ms = t.elapsed().as_secs_f64() * 1e3 / runs as f64;
    println!(
        "host conversion (convert_batch_host, {} CPU threads available): {host_ms:.1} ms per batch",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    if args.host_only {
        return;
    }
    let dev: Arc<CudaDevice> = match CudaDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("batch_bench: no CUDA device: {e}");
            std::process::exit(1);
        }
    };
    let stream = Stream::new(&dev).expect("stream");
    let buffers: Vec<DeviceBuffer> = frames
        .iter()
        .map(|f| {
            let b = DeviceBuffer::new(&dev, f.len()).expect("frame buffer");
            // SAFETY: `b` holds the frame's bytes and lives to the end of main.
            unsafe { copy_htod_2d_async(b.device_ptr(), f.len(), f, f.len(), f.len(), 1, &stream) }
                .expect("upload");
            b
        })
        .collect();
    stream.synchronize().expect("uploads");
    let inputs: Vec<Option<BatchInput>> = buffers
        .iter()
        .map(|b| {
            Some(BatchInput::from_slot(
                b.device_ptr(),
                geometry.clone(),
                matrix,
                range,
            ))
        })
        .collect();
    let bytes = batch_bytes(args.cameras, &spec);
    let out = DeviceBuffer::new(&dev, bytes).expect("batch buffer");
    let kernel = BatchKernel::load(&dev).expect("batch kernel");
    let fused = || {
        // SAFETY: the frames and the output live to the end of main; every batch is waited
        // for before they go.
        unsafe { kernel.launch(&inputs, &spec, out.device_ptr(), &stream) }.expect("launch");
    };
    println!(
        "batched conversion: {} cameras of {}x{} NV12 into {}x{} {:?} letterbox NCHW on {}",
        args.cameras,
        args.source.0,
        args.source.1,
        args.size.0,
        args.size.1,
        args.dtype,
        dev.name()
    );

    // The GPU batch against the host's, once.
    fused();
    let mut gpu = vec![0u8; bytes];
    // SAFETY: `out` holds `bytes` bytes; the copy waits for the kernel on the stream.
    unsafe { copy_dtoh_2d(&mut gpu, bytes, out.device_ptr(), bytes, bytes, 1, &stream) }
        .expect("read back");
    let identical = gpu == host;
    println!("GPU batch = host batch, bit for bit: {identical}");

    for _ in 0..20 {
        fused();
    }
    stream.synchronize().expect("warm-up");
    let before = kernel.launches();
    let fused_rate = throughput(args.batches, &stream, fused);
    let fused_lat = latencies(args.batches, &stream, fused);
    let per_batch = (kernel.launches() - before) as f64 / (2 * args.batches) as f64;

    // Baseline: one to_rgb launch per camera at full size (no resize, no stack).
    let rgb = RgbKernel::load(&dev).expect("rgb kernel");
    let rgb_spec = RgbSpec {
        matrix,
        range,
        dtype: args.dtype,
        layout: RgbLayout::Chw,
    };
    let full = rgb_size(args.source.0, args.source.1, args.dtype);
    let outs: Vec<DeviceBuffer> = (0..args.cameras)
        .map(|_| DeviceBuffer::new(&dev, full).expect("per-camera buffer"))
        .collect();
    let per_camera = || {
        for (b, o) in buffers.iter().zip(&outs) {
            // SAFETY: frame and output buffers live to the end of main, waited for before.
            unsafe {
                rgb.convert_async(
                    b.device_ptr(),
                    &geometry,
                    &rgb_spec,
                    o.device_ptr(),
                    &stream,
                )
            }
            .expect("convert");
        }
    };
    for _ in 0..20 {
        per_camera();
    }
    stream.synchronize().expect("warm-up");
    let naive_rate = throughput(args.batches, &stream, per_camera);
    let naive_lat = latencies(args.batches, &stream, per_camera);

    let p = |l: &[i64], q: f64| percentile_us(l, q).unwrap_or(f64::NAN);
    println!(
        "fused (BatchKernel): {fused_rate:.0} batches/s; latency p50 {:.0} µs, p99 {:.0} µs; {per_batch:.2} kernel launches per batch",
        p(&fused_lat, 0.5),
        p(&fused_lat, 0.99)
    );
    println!(
        "per-camera to_rgb only ({} launches, full size, no resize or stack): {naive_rate:.0} batches/s; latency p50 {:.0} µs, p99 {:.0} µs",
        args.cameras,
        p(&naive_lat, 0.5),
        p(&naive_lat, 0.99)
    );
    println!(
        "fused / per-camera conversion: {:.2}x the batches per second",
        fused_rate / naive_rate
    );
    if !identical || per_batch != 1.0 {
        eprintln!("batch_bench: FAIL (GPU differs from host, or not one launch per batch)");
        std::process::exit(1);
    }
}
