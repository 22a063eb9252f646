//! The batched reader on CUDA rings (GPU machine only; skipped with the reason elsewhere,
//! run by `scripts/gpu-check.sh`): GPU batches equal `convert_batch_host` of the frames
//! they report bit for bit, with one kernel launch per batch and no host copy; a zero-copy
//! slot is released only after the kernel that reads it, although the host never waits;
//! device output buffers come back to the pool after their last reference.

use cuframes_test_support as common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{busy_iterations_for, gpu_or_skip, planes_for, TestEnv};
use cuframes_core::batch::{Batch, BatchOptions, BatchOutput, BatchPolicy};
use cuframes_core::cuda::{self, CudaDevice, Stream};
use cuframes_core::format::FrameGeometry;
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher};
use cuframes_core::rgb::batch::{
    batch_bytes, convert_batch_host, BatchSpec, HostBatchInput, Normalize, Resize,
};
use cuframes_core::rgb::{ColourMatrix, ColourRange, RgbDtype, RgbLayout};
use cuframes_core::testing;
use cuframes_core::wire::{Format, Policy, SubscriberMode};

/// A camera publishing into a CUDA ring on device 0, remembering what it published.
struct Cam {
    p: Publisher,
    frames: HashMap<u64, Vec<Vec<u8>>>,
}

impl Cam {
    fn new(
        key: &str,
        dir: &TestEnv,
        format: Format,
        w: u32,
        h: u32,
        policy: Policy,
        slots: usize,
    ) -> Cam {
        let p = Publisher::create(key, dir.publisher_options()).unwrap();
        let mut ring = FrameRingConfig::new(format, w, h);
        ring.policy = policy;
        ring.ring_size = slots;
        ring.ack_timeout = Duration::from_secs(60);
        ring.memory = MemoryChoice::Cuda { device: 0 };
        p.enable_frames(ring).unwrap();
        Cam {
            p,
            frames: HashMap::new(),
        }
    }

    fn publish(&mut self, n: u64) -> u64 {
        let layout = self.p.frame_layout().unwrap().clone();
        let planes = planes_for(&layout, n);
        let refs: Vec<&[u8]> = planes.iter().map(Vec::as_slice).collect();
        let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
        let seq = self
            .p
            .publish_host_planes(&refs, &strides, Some(n as i64))
            .unwrap();
        self.frames.insert(seq, planes);
        seq
    }

    fn ring_bytes(&self, seq: u64) -> (Vec<u8>, FrameGeometry) {
        let layout = self.p.frame_layout().unwrap().clone();
        let mut buf = vec![0u8; layout.frame_size];
        for (plane, dense) in layout.planes().iter().zip(&self.frames[&seq]) {
            for r in 0..plane.rows {
                let at = plane.offset + r * plane.pitch;
                buf[at..at + plane.row_bytes]
                    .copy_from_slice(&dense[r * plane.row_bytes..(r + 1) * plane.row_bytes]);
            }
        }
        (buf, layout)
    }
}

fn options(env: &TestEnv, policy: BatchPolicy) -> BatchOptions {
    let mut subscriber = env.subscriber_options("batch-gpu");
    subscriber.mode = SubscriberMode::ZeroCopy;
    subscriber.cuda_device = 0;
    BatchOptions {
        subscriber,
        wait_publisher: Duration::from_secs(5),
        retry_interval: Duration::from_millis(50),
        policy,
    }
}

/// The host conversion of the frames `out` reports.
fn expected(out: &BatchOutput, cams: &[&Cam], spec: &BatchSpec) -> Vec<u8> {
    let frames: Vec<Option<(Vec<u8>, FrameGeometry)>> = out
        .cameras
        .iter()
        .zip(cams)
        .map(|(info, cam)| info.valid.then(|| cam.ring_bytes(info.seq)))
        .collect();
    let inputs: Vec<Option<HostBatchInput>> = frames
        .iter()
        .map(|f| {
            f.as_ref().map(|(b, g)| {
                HostBatchInput::from_frame(b, g.clone(), ColourMatrix::Bt709, ColourRange::Limited)
                    .unwrap()
            })
        })
        .collect();
    let mut want = vec![0u8; batch_bytes(cams.len(), spec)];
    convert_batch_host(&inputs, spec, &mut want).unwrap();
    want
}

/// The batch's bytes, downloaded on `stream` (after the conversion queued there).
fn download(out: &BatchOutput, stream: &Stream) -> Vec<u8> {
    let size = out.buffer.size();
    let mut host = vec![0u8; size];
    // SAFETY: the buffer holds `size` device bytes and lives (in `out`) past the copy, which
    // has completed when copy_dtoh_2d returns; `stream` is a live stream of its device.
    unsafe { cuda::copy_dtoh_2d(&mut host, size, out.buffer.address(), size, size, 1, stream) }
        .unwrap();
    host
}

#[test]
fn gpu_batches_equal_the_host_conversion_with_one_launch_and_no_host_copy() {
    let Some(_gpu) = gpu_or_skip() else { return };
    let envs: Vec<TestEnv> = (0..3).map(|i| TestEnv::new(&format!("bcx{i}"))).collect();
    let key = |i: usize| envs[i].key.as_str();
    let mut cams = [
        Cam::new(
            key(0),
            &envs[0],
            Format::Nv12,
            1920,
            1080,
            Policy::StrictWait,
            4,
        ),
        Cam::new(
            key(1),
            &envs[0],
            Format::Yuv420p,
            640,
            360,
            Policy::DropOldest,
            4,
        ),
        Cam::new(
            key(2),
            &envs[0],
            Format::P010,
            320,
            240,
            Policy::StrictWait,
            4,
        ),
    ];
    let specs = [
        BatchSpec {
            width: 640,
            height: 640,
            dtype: RgbDtype::F16,
            layout: RgbLayout::Chw,
            resize: Resize::Letterbox,
            pad: [114.0 / 255.0; 3],
            normalize: None,
        },
        BatchSpec {
            width: 320,
            height: 256,
            dtype: RgbDtype::U8,
            layout: RgbLayout::Hwc,
            resize: Resize::Stretch,
            pad: [0.0; 3],
            normalize: None,
        },
        BatchSpec {
            width: 300,
            height: 200,
            dtype: RgbDtype::F32,
            layout: RgbLayout::Chw,
            resize: Resize::Letterbox,
            pad: [0.5; 3],
            normalize: Some(Normalize {
                mean: [0.485, 0.456, 0.406],
                std: [0.229, 0.224, 0.225],
            }),
        },
    ];
    let dev = CudaDevice::open(0).unwrap();
    let stream = Stream::new(&dev).unwrap();
    let keys = [key(0), key(1), key(2)];
    for spec in specs {
        let mut b = Batch::open(&keys, spec, options(&envs[0], BatchPolicy::Latest)).unwrap();
        for round in 0..3u64 {
            for (i, c) in cams.iter_mut().enumerate() {
                // Camera 2 skips a round: its frame of the last batch is read again.
                if !(i == 2 && round == 1) {
                    c.publish(round * 10 + i as u64 + 1);
                }
            }
            let (copies, launches) = (cuda::host_copy_count(), b.kernel_launches());
            // SAFETY: `stream` is a live stream of device 0, alive past the batch's use.
            let out = unsafe { b.next(Some(stream.raw() as usize)) }.unwrap();
            assert_eq!(
                cuda::host_copy_count(),
                copies,
                "a GPU batch made a host copy"
            );
            assert_eq!(b.kernel_launches(), launches + 1, "one launch per batch");
            assert!(out.cameras.iter().all(|c| c.valid), "{:?}", out.cameras);
            assert_eq!(out.cuda_device, Some(0));
            let got = download(&out, &stream);
            let want = expected(&out, &[&cams[0], &cams[1], &cams[2]], &spec);
            let same = got == want;
            let first_diff = got.iter().zip(&want).position(|(a, b)| a != b);
            assert!(
                same,
                "{spec:?} round {round}: GPU and host differ first at byte {first_diff:?}"
            );
        }
        println!(
            "{:?} {:?}: 3 batches bit-exact against convert_batch_host",
            spec.dtype, spec.resize
        );
    }
}

#[test]
fn a_zero_copy_slot_is_released_only_after_the_kernel_that_reads_it() {
    let Some(_gpu) = gpu_or_skip() else { return };
    let env = TestEnv::new("bcr");
    // Two slots under STRICT_WAIT: the third frame is written into the first one's slot as
    // soon as the batch reader releases it.
    let mut cam = Cam::new(
        &env.key,
        &env,
        Format::Nv12,
        256,
        144,
        Policy::StrictWait,
        2,
    );
    let spec = BatchSpec {
        width: 128,
        height: 128,
        dtype: RgbDtype::U8,
        layout: RgbLayout::Chw,
        resize: Resize::Letterbox,
        pad: [0.0; 3],
        normalize: None,
    };
    let dev = CudaDevice::open(0).unwrap();
    let stream = Stream::new(&dev).unwrap();
    let mut b = Batch::open(
        &[env.key.as_str()],
        spec,
        options(&env, BatchPolicy::Latest),
    )
    .unwrap();
    let s1 = cam.publish(1);
    // The kernel of the first batch waits behind ~0.5 s of other work on the stream.
    let iterations = busy_iterations_for(&stream, Duration::from_millis(500));
    let t = Instant::now();
    testing::busy(&stream, iterations).unwrap();
    // SAFETY: `stream` is a live stream of device 0, alive past the batches.
    let first = unsafe { b.next(Some(stream.raw() as usize)) }.unwrap();
    assert_eq!(first.cameras[0].seq, s1);
    let cam = Arc::new(std::sync::Mutex::new(cam));
    let publisher = {
        let cam = cam.clone();
        std::thread::spawn(move || {
            let mut c = cam.lock().unwrap();
            c.publish(2);
            // Into frame 1's slot: waits for the batch reader's ACK of frame 1.
            c.publish(3);
        })
    };
    // The next batch takes frame 2 and lets frame 1 go: behind the first kernel, on the GPU.
    let deadline = Instant::now() + Duration::from_secs(10);
    let second = loop {
        // SAFETY: as above.
        let out = unsafe { b.next(Some(stream.raw() as usize)) }.unwrap();
        if out.cameras[0].seq > s1 {
            break out;
        }
        assert!(Instant::now() < deadline, "frame 2 never came");
    };
    let host_wait = t.elapsed();
    publisher.join().unwrap();
    let got = download(&first, &stream);
    let gpu_time = t.elapsed();
    let cam = cam.lock().unwrap();
    assert_eq!(
        got,
        expected(&first, &[&cam], &spec),
        "frame 1's slot was rewritten under its batch"
    );
    println!(
        "first batch read frame {s1} intact; host returned from next() after {host_wait:?}, the GPU \
         finished after {gpu_time:?}; second batch frame {}",
        second.cameras[0].seq
    );
}

#[test]
fn device_buffers_come_back_after_their_last_reference() {
    let Some(_gpu) = gpu_or_skip() else { return };
    let env = TestEnv::new("bcp");
    let mut cam = Cam::new(
        &env.key,
        &env,
        Format::Nv12,
        256,
        144,
        Policy::DropOldest,
        4,
    );
    let spec = BatchSpec {
        width: 64,
        height: 64,
        dtype: RgbDtype::F16,
        layout: RgbLayout::Chw,
        resize: Resize::Letterbox,
        pad: [0.0; 3],
        normalize: None,
    };
    let mut b = Batch::open(
        &[env.key.as_str()],
        spec,
        options(&env, BatchPolicy::Latest),
    )
    .unwrap();
    cam.publish(1);
    // SAFETY: no stream: the legacy default stream.
    let first = unsafe { b.next(None) }.unwrap();
    let a = first.buffer.address();
    // SAFETY: as above.
    let second = unsafe { b.next(None) }.unwrap();
    assert_ne!(second.buffer.address(), a);
    drop(first);
    // SAFETY: as above.
    let third = unsafe { b.next(None) }.unwrap();
    assert_eq!(third.buffer.address(), a);
    drop((second, third));
    assert_eq!(b.pooled_buffers(), 2);
}
