//! The release paths (R12): a frame released on a stream and its subscriber destroyed
//! before the stream ran is torn down on our release thread, not in the CUDA host function;
//! a release after an idle stream ACKs at once; dropping a frame waits for the GPU work
//! queued before it.

use cuframes_test_support as common;

use std::time::{Duration, Instant};

use common::{
    busy_iterations_for, cuda_copy_options, cuda_pair, cuda_publisher, cuda_ring,
    cuda_zero_copy_accepting_overwrite, gpu_or_skip, TestEnv, CU_STREAM_LEGACY,
};
use cuframes_core::cuda::{self, CudaDevice, DeviceBuffer, Event, Stream};
use cuframes_core::publisher::Publisher;
use cuframes_core::subscriber::{self, Subscriber};
use cuframes_core::testing;
use cuframes_core::testing::deferred;
use cuframes_core::wire::Policy;

/// Device memory in use, device-wide (cuMemGetInfo).
fn device_memory_used(dev: &CudaDevice) -> usize {
    let (free, total) = dev.memory_info().unwrap();
    total - free
}

/// `cuframes_frame_release(f, stream)` with GPU work pending, then
/// `cuframes_subscriber_destroy`: the host function may hold the last reference to the ring,
/// and the driver refuses cuMemUnmap, cuMemAddressFree, cuMemRelease and
/// cuDevicePrimaryCtxRelease inside it (CUDA_ERROR_NOT_PERMITTED on the H200), which would
/// leak the mappings and a context reference each time. So the callback only ACKs and our
/// release thread tears the ring down.
#[test]
fn release_then_destroy_cycles_tear_down_on_our_thread() {
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
    let cycles: usize = std::env::var("CUFRAMES_RELEASE_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    // Held for the whole test: the primary context stays alive between cycles.
    let dev = CudaDevice::open(0).unwrap();
    let stream = Stream::new(&dev).unwrap();
    let pending_mark = Event::new(&dev).unwrap();
    let load = busy_iterations_for(&stream, Duration::from_millis(5));
    let env = TestEnv::new("relcycle");
    let failures_before = cuda::release_failures();
    let mut baseline: Option<(usize, u64)> = None;
    let mut late_callbacks = 0usize;
    let t = Instant::now();
    for cycle in 0..cycles {
        let p = cuda_publisher(&env, cuda_ring(2, Policy::DropOldest));
        let mut s = Subscriber::connect(
            &env.key,
            &cuda_zero_copy_accepting_overwrite(&env, "relcycle"),
        )
        .unwrap();
        assert!(s.is_zero_copy());
        let slot = p.acquire().unwrap();
        p.publish_after_stream(slot, None, None).unwrap();
        let f = s.next_frame(Some(Duration::from_secs(10))).unwrap();
        // GPU work still reads the frame when it is released and the subscriber destroyed.
        testing::busy(&stream, load).unwrap();
        pending_mark.record(&stream).unwrap();
        // SAFETY: `stream` is our own live stream, of the frame's device.
        unsafe { f.release_after_stream(stream.raw()) };
        drop(s); // cuframes_subscriber_destroy
        if !pending_mark.query().unwrap() {
            late_callbacks += 1; // the host function runs after the destroy
        }
        drop(p);
        if cycle == 0 {
            stream.synchronize().unwrap();
            deferred::flush();
            baseline = Some((device_memory_used(&dev), cuda::live_mappings()));
        }
    }
    stream.synchronize().unwrap(); // every host function has run
    deferred::flush(); // and every ring it handed over is torn down
    let (mem0, maps0) = baseline.unwrap();
    let (mem1, maps1) = (device_memory_used(&dev), cuda::live_mappings());
    let failures = cuda::release_failures() - failures_before;
    eprintln!(
        "{cycles} release-then-destroy cycles in {:?}: host function ran after the destroy in \
         {late_callbacks}; device memory used {} -> {} MiB; live VMM mappings {maps0} -> \
         {maps1}; failed driver releases {failures}",
        t.elapsed(),
        mem0 >> 20,
        mem1 >> 20
    );
    assert!(
        late_callbacks * 2 >= cycles,
        "the scenario was not exercised: the stream finished before the destroy in most \
         cycles ({late_callbacks} of {cycles} late)"
    );
    assert_eq!(failures, 0, "driver teardown calls failed (see stderr)");
    assert_eq!(maps1, maps0, "VMM mappings leaked");
    assert_eq!(maps1, 0, "no mapping outlives its ring");
    // Each leaked cycle would keep 2 slots of >= 2 MiB; allow for the driver's own noise.
    assert!(
        mem1 <= mem0 + (64 << 20),
        "device memory grew by {} MiB over {cycles} cycles",
        (mem1 - mem0) >> 20
    );
}

/// A zero-copy frame released after a stream that has nothing left to run is ACKed before
/// the release returns, with nothing queued on the GPU (a host function per frame costs a
/// submission and the driver's callback thread for nothing; FFmpeg's readers release after
/// an idle legacy stream). With work still queued, the host function still carries the ACK (the waits
/// themselves: `dropping_a_zero_copy_frame_waits_for_the_gpu_work_queued_before` and the
/// release-then-destroy cycles).
#[test]
fn a_release_after_an_idle_stream_acks_at_once_without_gpu_work() {
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
    let (_env, p, mut s) = cuda_pair(
        "idlerel",
        cuda_ring(2, Policy::StrictWait),
        cuda_zero_copy_accepting_overwrite,
    );
    assert!(s.is_zero_copy());
    let dev = CudaDevice::open(0).unwrap();
    dev.make_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let load = busy_iterations_for(&stream, Duration::from_millis(200));
    let lag = |p: &Publisher| p.subscribers().iter().map(|s| s.lag).max().unwrap_or(0);
    let mut next = |p: &Publisher| {
        let slot = p.acquire().unwrap();
        p.publish_after_stream(slot, None, None).unwrap();
        s.next_frame(Some(Duration::from_secs(10))).unwrap()
    };

    // Our own stream, idle; then the current context's legacy stream, idle (FFmpeg's case).
    for (what, raw) in [
        ("own stream", stream.raw()),
        ("CU_STREAM_LEGACY", CU_STREAM_LEGACY),
    ] {
        let f = next(&p);
        stream.synchronize().unwrap();
        let queued = subscriber::stream_acks_queued();
        // SAFETY: a live stream of device 0's primary context, which is current.
        unsafe { f.release_after_stream(raw) };
        assert_eq!(
            subscriber::stream_acks_queued(),
            queued,
            "{what}: a host function was queued although the stream was idle"
        );
        assert_eq!(
            lag(&p),
            0,
            "{what}: the frame was not ACKed when the release returned"
        );
    }

    // Work still queued on the stream: the ACK goes behind it, through a host function.
    let f = next(&p);
    testing::busy(&stream, load).unwrap();
    let queued = subscriber::stream_acks_queued();
    // SAFETY: our own live stream, of the frame's device.
    unsafe { f.release_after_stream(stream.raw()) };
    assert_eq!(subscriber::stream_acks_queued(), queued + 1);
    assert_eq!(
        lag(&p),
        1,
        "ACKed while the kernel queued before the release still ran"
    );
    stream.synchronize().unwrap();
    let t = Instant::now();
    while lag(&p) != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "no ACK after the stream ran"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Dropping a CUDA zero-copy frame must not ACK while GPU work queued before the drop can
/// still read it (R12): the drop synchronises the device's primary context first, so the ACK
/// (seen by a STRICT_WAIT publisher blocked on it) follows the kernel's end.
#[test]
fn dropping_a_zero_copy_frame_waits_for_the_gpu_work_queued_before() {
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
    // One slot: the next acquire rewrites frame 1's slot, so it waits for frame 1's ACK.
    let (_env, p, mut s) = cuda_pair(
        "dropwait",
        cuda_ring(1, Policy::StrictWait),
        cuda_zero_copy_accepting_overwrite,
    );
    assert!(s.is_zero_copy());
    let dev = CudaDevice::open(0).unwrap();
    let stream = Stream::new(&dev).unwrap();
    let other = Stream::new(&dev).unwrap();
    let load = busy_iterations_for(&stream, Duration::from_millis(300));
    let marker = DeviceBuffer::new(&dev, 4).unwrap();
    // SAFETY: `marker` is our own 4-byte device buffer, on our own stream.
    unsafe { cuda::memset_d8_async(marker.device_ptr(), 0, 4, &stream) }.unwrap();
    stream.synchronize().unwrap();

    let slot = p.acquire().unwrap();
    p.publish_after_stream(slot, None, None).unwrap();
    let f = s.next_frame(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(f.seq, 1);
    let done = Event::new(&dev).unwrap();
    // The "reader": a long kernel, then a marker written when it ends.
    testing::busy(&stream, load).unwrap();
    // SAFETY: as above.
    unsafe { cuda::memset_d8_async(marker.device_ptr(), 0x5A, 4, &stream) }.unwrap();
    done.record(&stream).unwrap();

    let (waited, kernel_done_at_ack, marker_after_drop) = std::thread::scope(|scope| {
        let publisher = scope.spawn(|| {
            let slot = p.acquire().unwrap(); // returns once frame 1 is ACKed
            let complete = done.query().unwrap();
            p.abandon(slot);
            complete
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !done.query().unwrap(),
            "the kernel must still run when the frame is dropped (load too short)"
        );
        let t = Instant::now();
        drop(f);
        let waited = t.elapsed();
        // Read the marker on another stream, which does not wait for `stream`.
        let mut m = [0u8; 4];
        // SAFETY: `marker` is our own 4-byte device buffer; `m` holds the 4 bytes.
        unsafe { cuda::copy_dtoh_2d(&mut m, 4, marker.device_ptr(), 4, 4, 1, &other) }.unwrap();
        (waited, publisher.join().unwrap(), m)
    });
    eprintln!(
        "drop of a zero-copy frame with a ~300 ms kernel queued waited {waited:?}; kernel \
         complete when the publisher saw the ACK: {kernel_done_at_ack}; marker {marker_after_drop:?}"
    );
    assert_eq!(
        marker_after_drop, [0x5A; 4],
        "the drop returned before the kernel ended"
    );
    assert!(
        kernel_done_at_ack,
        "the ACK reached the publisher while the kernel still ran"
    );
}

/// Dropping a COPY frame of a CUDA ring returns its device buffer to the subscriber's pool
/// only after the device's primary context ran what was queued before, so the next frame's
/// copy cannot rewrite it while GPU work queued on the frame still reads it.
#[test]
fn dropping_a_copy_frame_waits_for_the_gpu_work_queued_before_its_buffer_is_reused() {
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
    let (_env, p, mut s) = cuda_pair(
        "copydrop",
        cuda_ring(2, Policy::StrictWait),
        cuda_copy_options,
    );
    assert!(!s.is_zero_copy());
    let layout = p.frame_layout().unwrap().clone();
    let y = layout.planes()[0];
    let dev = CudaDevice::open(0).unwrap();
    let writer = Stream::new(&dev).unwrap();
    let reader = Stream::new(&dev).unwrap();
    let check = Stream::new(&dev).unwrap();
    let load = busy_iterations_for(&reader, Duration::from_millis(300));
    let publish = |seq_hint: u64| {
        let slot = p.acquire().unwrap();
        assert_eq!(slot.seq, seq_hint);
        testing::fill_pattern(
            slot.address + y.offset as u64,
            y.pitch,
            y.row_bytes,
            y.rows,
            slot.seq,
            0,
            &writer,
        )
        .unwrap();
        p.publish_after_stream(slot, Some(writer.as_cuda_stream()), None)
            .unwrap();
    };
    // What the reader's late copy lands in.
    let snapshot = DeviceBuffer::new(&dev, y.pitch * y.rows).unwrap();

    publish(1);
    let f = s.next_frame(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(f.seq, 1);
    // The "reader": a long kernel, then a copy of the frame's luma out of its buffer.
    testing::busy(&reader, load).unwrap();
    // SAFETY: both are device buffers of at least y.pitch * y.rows bytes (the frame's buffer
    // is alive until `f` is dropped, which waits for this copy); our own stream.
    unsafe {
        cuda::copy_2d_async(
            snapshot.device_ptr(),
            y.pitch,
            f.address() + y.offset as u64,
            y.pitch,
            y.row_bytes,
            y.rows,
            &reader,
        )
    }
    .unwrap();
    let t = Instant::now();
    drop(f);
    let waited = t.elapsed();
    // Frame 2's copy takes a pooled buffer: frame 1's, if the drop handed it back early.
    publish(2);
    let f2 = s.next_frame(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(f2.seq, 2);
    reader.synchronize().unwrap();
    let bad = testing::verify_pattern(
        snapshot.device_ptr(),
        y.pitch,
        y.row_bytes,
        y.rows,
        1,
        0,
        &check,
    )
    .unwrap();
    let bad_frame2 = testing::verify_pattern(
        f2.address() + y.offset as u64,
        y.pitch,
        y.row_bytes,
        y.rows,
        2,
        0,
        &check,
    )
    .unwrap();
    eprintln!(
        "drop of a COPY frame with a ~300 ms kernel queued on it waited {waited:?}; bytes of \
         the reader's copy not frame 1's: {bad}; frame 2 mismatches: {bad_frame2}"
    );
    assert_eq!(
        bad, 0,
        "frame 2's copy rewrote frame 1's buffer under its reader"
    );
    assert_eq!(bad_frame2, 0);
}
