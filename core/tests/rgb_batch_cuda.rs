//! GPU tests of the batched RGB conversion (`cuframes_core::rgb::batch`): the kernel gives
//! `convert_batch_host`'s bytes exactly, for every format, element type, layout, resize and
//! normalisation on one mixed batch (sizes from 1x1 to 1080p, planes in one allocation or
//! in three, padded pitches, cameras without a frame, each camera its own colour
//! description); one kernel launch per batch (`BatchKernel::launches`); refused launches
//! queue nothing; the per-camera parameter slots are reused safely while earlier batches
//! are still queued, from several streams and threads.
//!
//! Every test first asks for a CUDA device; without one it prints
//! "SKIPPED (no CUDA device): <reason>" and returns (scripts/gpu-check.sh runs this binary
//! on the GPU machine, where a skip fails the step).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use cuframes_core::cuda::{copy_dtoh_2d, copy_htod_2d_async, CudaDevice, DeviceBuffer, Stream};
use cuframes_core::format::FrameGeometry;
use cuframes_core::rgb::batch::cuda::PARAM_SLOTS;
use cuframes_core::rgb::batch::{
    batch_bytes, convert_batch_host, BatchInput, BatchKernel, BatchSpec, HostBatchInput, Normalize,
    Resize,
};
use cuframes_core::rgb::{ColourMatrix, ColourRange, RgbDtype, RgbLayout};
use cuframes_core::testing::busy;
use cuframes_core::wire::Format;
use cuframes_test_support::{no_cuda, Rng};

/// One GPU test at a time (the launch counter is per kernel, but timings and memory are the
/// device's).
static GPU: Mutex<()> = Mutex::new(());

fn gpu_lock() -> MutexGuard<'static, ()> {
    GPU.lock().unwrap_or_else(|e| e.into_inner())
}

/// Device 0, or None after printing why the test is skipped.
fn gpu() -> Option<Arc<CudaDevice>> {
    if let Some(why) = no_cuda() {
        println!("SKIPPED (no CUDA device): {why}");
        return None;
    }
    Some(CudaDevice::open(0).expect("open CUDA device 0"))
}

const IMAGENET: Normalize = Normalize {
    mean: [0.485, 0.456, 0.406],
    std: [0.229, 0.224, 0.225],
};

/// A camera's colour description.
type Desc = (ColourMatrix, ColourRange);

/// A camera's frame on the host and on the device.
struct Camera {
    geometry: FrameGeometry,
    data: Vec<u8>,
    matrix: ColourMatrix,
    range: ColourRange,
    /// One allocation for the whole frame, or one per plane.
    _buffers: Vec<DeviceBuffer>,
    planes: [u64; 3],
}

impl Camera {
    /// Random samples in `geometry`'s layout, uploaded (planes in one allocation, or each
    /// in its own when `split`).
    fn new(
        dev: &Arc<CudaDevice>,
        stream: &Stream,
        rng: &mut Rng,
        geometry: FrameGeometry,
        desc: Desc,
        split: bool,
    ) -> Camera {
        let mut data = vec![0u8; geometry.frame_size];
        for c in data.chunks_mut(8) {
            let v = rng.next().to_ne_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
        let upload = |bytes: &[u8]| {
            let buf = DeviceBuffer::new(dev, bytes.len()).expect("device buffer");
            // SAFETY: `buf` holds `bytes.len()` bytes and outlives the copy (kept in the
            // camera; the stream is synchronised before any use).
            unsafe {
                copy_htod_2d_async(
                    buf.device_ptr(),
                    bytes.len(),
                    bytes,
                    bytes.len(),
                    bytes.len(),
                    1,
                    stream,
                )
            }
            .expect("upload");
            buf
        };
        let (buffers, planes) = if split {
            let mut planes = [0u64; 3];
            let mut buffers = Vec::new();
            for (i, p) in geometry.planes().iter().enumerate() {
                let span = p.span_at(p.pitch).unwrap();
                let buf = upload(&data[p.offset..p.offset + span]);
                planes[i] = buf.device_ptr();
                buffers.push(buf);
            }
            (buffers, planes)
        } else {
            let buf = upload(&data);
            let input = BatchInput::from_slot(buf.device_ptr(), geometry.clone(), desc.0, desc.1);
            (vec![buf], input.planes)
        };
        stream.synchronize().expect("uploads");
        Camera {
            geometry,
            data,
            matrix: desc.0,
            range: desc.1,
            _buffers: buffers,
            planes,
        }
    }

    fn device(&self) -> BatchInput {
        BatchInput {
            geometry: self.geometry.clone(),
            planes: self.planes,
            matrix: self.matrix,
            range: self.range,
        }
    }

    fn host(&self) -> HostBatchInput<'_> {
        HostBatchInput::from_frame(&self.data, self.geometry.clone(), self.matrix, self.range)
            .expect("host input")
    }
}

/// The mixed batch: every format, sizes from 1x1 to 1080p (portrait, odd, padded pitches),
/// planes split or not, each camera its own matrix and range; `None` at index 3.
fn mixed_cameras(dev: &Arc<CudaDevice>, stream: &Stream) -> Vec<Option<Camera>> {
    let mut rng = Rng::new(32);
    let g = |f, w, h| FrameGeometry::new(f, w, h).unwrap();
    let desc709 = (ColourMatrix::Bt709, ColourRange::Limited);
    let desc601 = (ColourMatrix::Bt601, ColourRange::Full);
    let desc2020 = (ColourMatrix::Bt2020, ColourRange::Limited);
    let list: Vec<Option<(FrameGeometry, Desc, bool)>> = vec![
        Some((g(Format::Nv12, 1920, 1080), desc709, false)),
        Some((g(Format::P010, 1280, 720), desc2020, true)),
        Some((
            g(Format::P016, 333, 77),
            (ColourMatrix::Bt709, ColourRange::Full),
            false,
        )),
        None,
        Some((g(Format::Yuv420p, 641, 359), desc601, true)),
        Some((
            g(Format::Yuv444p, 100, 300),
            (ColourMatrix::Bt601, ColourRange::Limited),
            false,
        )),
        Some((g(Format::Rgba, 64, 48), desc709, false)),
        Some((g(Format::Bgra, 7, 5), desc709, true)),
        Some((
            FrameGeometry::with_pitches(Format::Nv12, 50, 31, 50 + 77, 50 + 13).unwrap(),
            desc601,
            true,
        )),
        Some((g(Format::Nv12, 1, 1), desc2020, false)),
    ];
    list.into_iter()
        .map(|c| {
            c.map(|(geometry, desc, split)| {
                Camera::new(dev, stream, &mut rng, geometry, desc, split)
            })
        })
        .collect()
}

/// Runs `spec` on the GPU and the host; panics at the first byte that differs, naming the
/// camera and element.
fn assert_gpu_is_host(
    kernel: &BatchKernel,
    stream: &Stream,
    cams: &[Option<Camera>],
    spec: &BatchSpec,
) {
    let bytes = batch_bytes(cams.len(), spec);
    let dst = DeviceBuffer::new(kernel.device(), bytes).expect("output buffer");
    let inputs: Vec<Option<BatchInput>> = cams
        .iter()
        .map(|c| c.as_ref().map(Camera::device))
        .collect();
    let before = kernel.launches();
    // SAFETY: every camera's planes live in its buffers (kept in `cams`), `dst` holds the
    // batch; the stream is synchronised below before either goes.
    unsafe { kernel.launch(&inputs, spec, dst.device_ptr(), stream) }.expect("launch");
    assert_eq!(kernel.launches(), before + 1, "one kernel launch per batch");
    let mut gpu = vec![0u8; bytes];
    // SAFETY: `dst` holds `bytes` bytes; the copy synchronises the stream (after the kernel).
    unsafe { copy_dtoh_2d(&mut gpu, bytes, dst.device_ptr(), bytes, bytes, 1, stream) }
        .expect("read back");
    let host_inputs: Vec<Option<HostBatchInput<'_>>> =
        cams.iter().map(|c| c.as_ref().map(Camera::host)).collect();
    let mut host = vec![0u8; bytes];
    convert_batch_host(&host_inputs, spec, &mut host).expect("host conversion");
    if let Some(i) = gpu.iter().zip(&host).position(|(a, b)| a != b) {
        let (image, size) = (i / spec.image_bytes(), spec.dtype.size());
        let e = (i % spec.image_bytes()) / size;
        panic!(
            "{spec:?}: byte {i} (camera {image}, element {e}) is {:02x?} on the GPU, {:02x?} on the host",
            &gpu[i / size * size..][..size],
            &host[i / size * size..][..size]
        );
    }
}

fn spec(width: u32, height: u32, dtype: RgbDtype, layout: RgbLayout, resize: Resize) -> BatchSpec {
    BatchSpec {
        width,
        height,
        dtype,
        layout,
        resize,
        pad: [114.0 / 255.0, 0.25, 1.0],
        normalize: None,
    }
}

#[test]
fn the_kernel_gives_the_host_bytes_for_every_format_dtype_layout_and_resize() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let stream = Stream::new(&dev).unwrap();
    let kernel = BatchKernel::load(&dev).expect("load the batch kernel");
    let cams = mixed_cameras(&dev, &stream);
    let mut runs = 0;
    for dtype in [RgbDtype::U8, RgbDtype::F16, RgbDtype::F32] {
        for layout in [RgbLayout::Chw, RgbLayout::Hwc] {
            for resize in [Resize::Letterbox, Resize::Stretch] {
                for normalize in [None, Some(IMAGENET)] {
                    if dtype == RgbDtype::U8 && normalize.is_some() {
                        continue;
                    }
                    // Downscaled and upscaled sources in one batch (96x80 is below most and
                    // above the smallest).
                    let s = BatchSpec {
                        normalize,
                        ..spec(96, 80, dtype, layout, resize)
                    };
                    assert_gpu_is_host(&kernel, &stream, &cams, &s);
                    runs += 1;
                }
            }
        }
    }
    // The configuration: 640x640 float16 letterbox, NCHW; and an odd, large NHWC one.
    assert_gpu_is_host(
        &kernel,
        &stream,
        &cams,
        &spec(640, 640, RgbDtype::F16, RgbLayout::Chw, Resize::Letterbox),
    );
    assert_gpu_is_host(
        &kernel,
        &stream,
        &cams,
        &spec(1001, 333, RgbDtype::F32, RgbLayout::Hwc, Resize::Letterbox),
    );
    runs += 2;
    println!(
        "{runs} configurations of a {}-camera mixed batch: GPU = host, bit for bit",
        cams.len()
    );
}

#[test]
fn one_launch_per_batch_at_every_batch_size() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let stream = Stream::new(&dev).unwrap();
    let kernel = BatchKernel::load(&dev).unwrap();
    let mut rng = Rng::new(7);
    let frames: Vec<Option<Camera>> = (0..64u32)
        .map(|i| {
            let g = FrameGeometry::new(Format::Nv12, 64 + 2 * i, 36 + i).unwrap();
            let desc = (ColourMatrix::Bt709, ColourRange::Limited);
            (i % 9 != 4).then(|| Camera::new(&dev, &stream, &mut rng, g, desc, i % 2 == 1))
        })
        .collect();
    // Batch sizes that grow a parameter slot past its first capacity (16) and shrink again;
    // each batch is checked against the host and counted as exactly one launch.
    for n in [1usize, 16, 17, 64, 3, 64] {
        let s = spec(48, 40, RgbDtype::F16, RgbLayout::Chw, Resize::Letterbox);
        assert_gpu_is_host(&kernel, &stream, &frames[..n], &s);
    }
    assert_eq!(kernel.launches(), 6);
    println!("6 batches of 1 to 64 cameras: 6 kernel launches");
}

#[test]
fn refused_batches_queue_nothing() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let stream = Stream::new(&dev).unwrap();
    let kernel = BatchKernel::load(&dev).unwrap();
    let mut rng = Rng::new(9);
    let cam = Camera::new(
        &dev,
        &stream,
        &mut rng,
        FrameGeometry::new(Format::Yuv420p, 32, 16).unwrap(),
        (ColourMatrix::Bt709, ColourRange::Limited),
        true,
    );
    let s = spec(16, 16, RgbDtype::F32, RgbLayout::Chw, Resize::Letterbox);
    let dst = DeviceBuffer::new(&dev, batch_bytes(2, &s)).unwrap();
    let refused = |inputs: &[Option<BatchInput>], spec: &BatchSpec, dst: u64, words: &str| {
        // SAFETY: the inputs' planes live in `cam`'s buffers, `dst` is the output buffer or
        // null (refused before any use).
        let e = unsafe { kernel.launch(inputs, spec, dst, &stream) }.unwrap_err();
        assert!(e.to_string().contains(words), "{e} lacks {words:?}");
        assert_eq!(kernel.launches(), 0, "a refused batch was launched");
    };
    let good = cam.device();
    let mut null_plane = good.clone();
    null_plane.planes[2] = 0;
    refused(
        &[None, Some(null_plane)],
        &s,
        dst.device_ptr(),
        "camera 1: plane 2",
    );
    let mut taller = good.clone();
    taller.geometry.height = 4096;
    refused(
        &[Some(taller)],
        &s,
        dst.device_ptr(),
        "does not match its own planes",
    );
    refused(&[Some(good.clone())], &s, 0, "device address 0");
    refused(&[], &s, dst.device_ptr(), "a batch of 0 cameras");
    let u8_normalised = BatchSpec {
        dtype: RgbDtype::U8,
        normalize: Some(IMAGENET),
        ..s
    };
    refused(
        &[Some(good.clone())],
        &u8_normalised,
        dst.device_ptr(),
        "uint8",
    );
    // The kernel still works after the refusals.
    assert_gpu_is_host(&kernel, &stream, &[Some(cam), None], &s);
}

#[test]
fn parameter_slots_are_reused_only_after_their_batch_ran() {
    // The stream is held busy, then 3 x PARAM_SLOTS batches are queued behind it, each with
    // other inputs and pad: launches past PARAM_SLOTS reuse a slot whose batch is still
    // queued, so they must wait for it; every output must be its own batch's.
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let streams = [Stream::new(&dev).unwrap(), Stream::new(&dev).unwrap()];
    let kernel = BatchKernel::load(&dev).unwrap();
    let mut rng = Rng::new(11);
    let cams: Vec<Option<Camera>> = (0..6u32)
        .map(|i| {
            let f = [Format::Nv12, Format::P010, Format::Yuv420p][i as usize % 3];
            let g = FrameGeometry::new(f, 96 + 16 * i, 54 + 8 * i).unwrap();
            Some(Camera::new(
                &dev,
                &streams[0],
                &mut rng,
                g,
                (ColourMatrix::Bt709, ColourRange::Limited),
                false,
            ))
        })
        .collect();
    let batches = 3 * PARAM_SLOTS;
    let specs: Vec<BatchSpec> = (0..batches)
        .map(|b| BatchSpec {
            pad: [b as f32 / batches as f32, 0.5, 0.0],
            ..spec(64, 64, RgbDtype::F32, RgbLayout::Hwc, Resize::Letterbox)
        })
        .collect();
    // Batch b reads the cameras rotated by b.
    let inputs: Vec<Vec<Option<BatchInput>>> = (0..batches)
        .map(|b| {
            (0..cams.len())
                .map(|i| cams[(i + b) % cams.len()].as_ref().map(Camera::device))
                .collect()
        })
        .collect();
    let outputs: Vec<DeviceBuffer> = specs
        .iter()
        .map(|s| DeviceBuffer::new(&dev, batch_bytes(cams.len(), s)).unwrap())
        .collect();
    for st in &streams {
        busy(st, 50_000_000).expect("busy kernel");
    }
    let t = Instant::now();
    let mut first_slots = None;
    for b in 0..batches {
        // SAFETY: inputs live in `cams`, outputs in `outputs`, both past the synchronise below.
        unsafe {
            kernel.launch(
                &inputs[b],
                &specs[b],
                outputs[b].device_ptr(),
                &streams[b % 2],
            )
        }
        .expect("launch");
        if b + 1 == PARAM_SLOTS {
            first_slots = Some(t.elapsed());
        }
    }
    let all = t.elapsed();
    for st in &streams {
        st.synchronize().unwrap();
    }
    println!(
        "{batches} batches behind a busy stream: the first {PARAM_SLOTS} queued in {:?}, all in {all:?}",
        first_slots.unwrap()
    );
    assert_eq!(kernel.launches(), batches as u64);
    for b in 0..batches {
        let bytes = batch_bytes(cams.len(), &specs[b]);
        let mut gpu = vec![0u8; bytes];
        // SAFETY: `outputs[b]` holds `bytes` bytes, written by a finished kernel.
        unsafe {
            copy_dtoh_2d(
                &mut gpu,
                bytes,
                outputs[b].device_ptr(),
                bytes,
                bytes,
                1,
                &streams[0],
            )
        }
        .unwrap();
        let host_inputs: Vec<_> = (0..cams.len())
            .map(|i| cams[(i + b) % cams.len()].as_ref().map(Camera::host))
            .collect();
        let mut host = vec![0u8; bytes];
        convert_batch_host(&host_inputs, &specs[b], &mut host).unwrap();
        assert!(gpu == host, "batch {b} is not its own inputs' conversion");
    }
}

#[test]
fn launches_from_several_threads_and_a_kernel_dropped_with_work_queued() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let setup = Stream::new(&dev).unwrap();
    let kernel = BatchKernel::load(&dev).unwrap();
    let mut rng = Rng::new(13);
    let cams: Vec<Option<Camera>> = (0..4u32)
        .map(|i| {
            let g = FrameGeometry::new(Format::Nv12, 320 + 32 * i, 180 + 18 * i).unwrap();
            Some(Camera::new(
                &dev,
                &setup,
                &mut rng,
                g,
                (ColourMatrix::Bt709, ColourRange::Limited),
                i % 2 == 0,
            ))
        })
        .collect();
    let s = spec(128, 128, RgbDtype::F16, RgbLayout::Chw, Resize::Letterbox);
    let bytes = batch_bytes(cams.len(), &s);
    let host_inputs: Vec<_> = cams.iter().map(|c| c.as_ref().map(Camera::host)).collect();
    let mut want = vec![0u8; bytes];
    convert_batch_host(&host_inputs, &s, &mut want).unwrap();
    let inputs: Vec<Option<BatchInput>> = cams
        .iter()
        .map(|c| c.as_ref().map(Camera::device))
        .collect();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let stream = Stream::new(&dev).unwrap();
                let outs: Vec<DeviceBuffer> = (0..8)
                    .map(|_| DeviceBuffer::new(&dev, bytes).unwrap())
                    .collect();
                for o in &outs {
                    // SAFETY: inputs live in `cams`, `o` in `outs`, past the reads below.
                    unsafe { kernel.launch(&inputs, &s, o.device_ptr(), &stream) }.unwrap();
                }
                for o in &outs {
                    let mut got = vec![0u8; bytes];
                    // SAFETY: `o` holds `bytes` bytes.
                    unsafe {
                        copy_dtoh_2d(&mut got, bytes, o.device_ptr(), bytes, bytes, 1, &stream)
                    }
                    .unwrap();
                    assert!(
                        got == want,
                        "a batch launched from a thread differs from the host's"
                    );
                }
            });
        }
    });
    assert_eq!(kernel.launches(), 32);
    // Dropping the kernel right after a launch waits for the batch still reading its slots.
    let out = DeviceBuffer::new(&dev, bytes).unwrap();
    busy(&setup, 20_000_000).unwrap();
    // SAFETY: as above; the stream is synchronised by the read-back below.
    unsafe { kernel.launch(&inputs, &s, out.device_ptr(), &setup) }.unwrap();
    drop(kernel);
    let mut got = vec![0u8; bytes];
    // SAFETY: `out` holds `bytes` bytes.
    unsafe { copy_dtoh_2d(&mut got, bytes, out.device_ptr(), bytes, bytes, 1, &setup) }.unwrap();
    assert!(
        got == want,
        "the batch queued before the kernel was dropped differs"
    );
    assert_eq!(
        cuframes_core::cuda::release_failures(),
        0,
        "a driver teardown call failed"
    );
}
