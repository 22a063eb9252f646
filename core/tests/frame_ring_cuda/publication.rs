//! Publication on a stream (`publish_on_stream`): it returns at once, shows a frame only after
//! its GPU work, keeps seq order across streams and threads, and a publisher with
//! publications pending tears down after them.

use cuframes_test_support as common;

use std::time::{Duration, Instant};

use common::{
    busy_iterations_for, cuda_copy_options, cuda_pair, cuda_publisher, cuda_ring,
    cuda_zero_copy_options, gpu_or_skip, TestEnv, CU_STREAM_PER_THREAD,
};
use cuframes_core::cuda::{self, CudaDevice, CudaStream, Event, Stream};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::testing;
use cuframes_core::wire::Policy;
use cuframes_core::ErrorCode;

/// publish_on_stream returns while the GPU work before it still runs; the frame stays
/// invisible until that work is done (§5) and is complete when it appears; the next acquire
/// of its slot waits for the publication; a publication on another stream keeps seq order.
#[test]
fn publication_on_the_stream_follows_the_gpu_work_and_does_not_block() {
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
    let (_env, p, mut s) = cuda_pair(
        "onstream",
        cuda_ring(1, Policy::DropOldest),
        cuda_copy_options,
    );
    let layout = p.frame_layout().unwrap().clone();
    let dev = CudaDevice::open(0).unwrap();
    let _current = dev.push_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let other = Stream::new(&dev).unwrap();
    let check = Stream::new(&dev).unwrap();
    let load = busy_iterations_for(&stream, Duration::from_millis(300));
    let write = |slot: &cuframes_core::publisher::AcquiredSlot, on: &Stream| {
        for (i, pl) in layout.planes().iter().enumerate() {
            testing::fill_pattern(
                slot.address + pl.offset as u64,
                pl.pitch,
                pl.row_bytes,
                pl.rows,
                slot.seq,
                i as u32,
                on,
            )
            .unwrap();
        }
    };
    let done = Event::new(&dev).unwrap();
    let slot = p.acquire().unwrap();
    testing::busy(&stream, load).unwrap();
    write(&slot, &stream);
    done.record(&stream).unwrap();
    let t = Instant::now();
    p.publish_on_stream(slot, stream.as_cuda_stream(), None)
        .unwrap();
    let returned_after = t.elapsed();
    // Invisible while the kernel runs.
    let early = s.next_frame(Some(Duration::from_millis(50)));
    let still_running = !done.query().unwrap();
    assert!(
        still_running,
        "the kernel ended too soon for the test (load too short)"
    );
    assert!(
        early.is_err(),
        "a frame became visible before the GPU work that writes it had finished"
    );
    let f = s.next_frame(Some(Duration::from_secs(10))).unwrap();
    let visible_after = t.elapsed();
    assert!(done.query().unwrap());
    assert_eq!(f.seq, 1);
    let mut bad = 0;
    for (i, pl) in layout.planes().iter().enumerate() {
        bad += testing::verify_pattern(
            f.address() + pl.offset as u64,
            pl.pitch,
            pl.row_bytes,
            pl.rows,
            1,
            i as u32,
            &check,
        )
        .unwrap();
    }
    drop(f);
    assert_eq!(
        bad, 0,
        "the frame was visible before its bytes were complete"
    );
    // One slot: acquiring frame 2 waits for frame 1's publication (here long done); frame 2 is
    // published on another stream behind a kernel, frame 3 on the first stream: frame 3's
    // publication waits for frame 2's, so seqs appear in order.
    let slot2 = p.acquire().unwrap();
    testing::busy(&other, load).unwrap();
    write(&slot2, &other);
    p.publish_on_stream(slot2, other.as_cuda_stream(), None)
        .unwrap();
    let slot3 = p.acquire().unwrap(); // waits for frame 2 (same slot)
    write(&slot3, &stream);
    p.publish_on_stream(slot3, stream.as_cuda_stream(), None)
        .unwrap();
    let mut seen = Vec::new();
    while let Ok(f) = s.next_frame(Some(Duration::from_secs(2))) {
        seen.push(f.seq);
    }
    eprintln!(
        "publish_on_stream returned after {returned_after:?}; the frame appeared after \
         {visible_after:?} (kernel ~300 ms); then seen {seen:?}"
    );
    assert!(
        returned_after < Duration::from_millis(100),
        "publish_on_stream waited for the GPU ({returned_after:?})"
    );
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert_eq!(seen.last(), Some(&3));
}

/// `CU_STREAM_PER_THREAD` names a different stream on each thread: a frame published on one
/// thread's idle per-thread stream must not become visible before the frame published just
/// before it on another thread's per-thread stream, behind a slow kernel (the handles are
/// equal, the streams are not).
#[test]
fn publications_on_two_threads_per_thread_streams_stay_in_order() {
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
    let (_env, p, mut s) = cuda_pair("ptds", cuda_ring(4, Policy::DropOldest), cuda_copy_options);
    let dev = CudaDevice::open(0).unwrap();
    let load = busy_iterations_for(&Stream::new(&dev).unwrap(), Duration::from_millis(300));
    let (queued_tx, queued_rx) = std::sync::mpsc::channel();
    let (finish_tx, finish_rx) = std::sync::mpsc::channel::<()>();
    let (first_done, second_returned_after) = std::thread::scope(|scope| {
        let (p, dev) = (&p, &dev);
        // Thread A: a slow kernel, then frame 1, on A's per-thread default stream. A stays
        // alive until the end (its per-thread stream holds the work).
        scope.spawn(move || {
            let _current = dev.push_current().unwrap();
            // SAFETY: the special handle, with the device's context current on this thread.
            let per_thread = unsafe { Stream::from_raw_with_device(dev, CU_STREAM_PER_THREAD) };
            let done = Event::new(dev).unwrap();
            testing::busy(&per_thread, load).unwrap();
            done.record(&per_thread).unwrap();
            let slot = p.acquire().unwrap();
            p.publish_on_stream(slot, CudaStream::PER_THREAD, None)
                .unwrap();
            queued_tx.send(done).unwrap();
            let _ = finish_rx.recv();
        });
        let done = queued_rx.recv().unwrap();
        // This thread: frame 2 on its own, idle, per-thread default stream.
        let _current = dev.push_current().unwrap();
        let slot = p.acquire().unwrap();
        let t = Instant::now();
        p.publish_on_stream(slot, CudaStream::PER_THREAD, None)
            .unwrap();
        let returned_after = t.elapsed();
        let first_done = done.query().unwrap();
        finish_tx.send(()).unwrap();
        (first_done, returned_after)
    });
    let mut seen = Vec::new();
    while let Ok(f) = s.next_frame(Some(Duration::from_secs(2))) {
        seen.push(f.seq);
    }
    eprintln!(
        "frame 2's publish returned after {second_returned_after:?} (frame 1's kernel done: \
         {first_done}); seen {seen:?}"
    );
    assert_eq!(seen, vec![1, 2], "frames became visible out of order");
}

/// A frame published on an idle stream arrives with its own pts, not its slot's previous
/// occupant's: the publication stores the pts before it queues its host function, which on an
/// idle stream runs at once (FFmpeg readers drop a frame with an older pts as out of order).
#[test]
fn frames_published_on_an_idle_stream_carry_their_own_pts() {
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
    let (_env, p, mut s) = cuda_pair(
        "onstreampts",
        cuda_ring(2, Policy::StrictWait),
        cuda_zero_copy_options,
    );
    let dev = CudaDevice::open(0).unwrap();
    let _current = dev.push_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let frames = 500u64;
    let reader = std::thread::spawn(move || {
        let mut wrong = Vec::new();
        for want in 1..=frames {
            let f = s.next_frame(Some(Duration::from_secs(10))).unwrap();
            if f.pts_ns != want as i64 * 40_000_000 {
                wrong.push((f.seq, f.pts_ns));
            }
            // SAFETY: null stream: nothing reads the frame any more.
            unsafe { f.release_after_stream(std::ptr::null_mut()) };
        }
        wrong
    });
    for n in 1..=frames {
        let slot = p.acquire().unwrap();
        p.publish_on_stream(slot, stream.as_cuda_stream(), Some(n as i64 * 40_000_000))
            .unwrap();
    }
    let wrong = reader.join().unwrap();
    assert!(
        wrong.is_empty(),
        "{} frames with another frame's pts, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

/// Teardown with publications still queued behind GPU work: dropping the publisher waits for
/// them (the copy may still write the slots), leaves no mapping behind, and the key can be
/// published again at once.
#[test]
fn dropping_a_publisher_with_publications_pending_waits_for_them() {
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
    let env = TestEnv::new("pendingdrop");
    let dev = CudaDevice::open(0).unwrap();
    let _current = dev.push_current().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let load = busy_iterations_for(&stream, Duration::from_millis(300));
    let done = Event::new(&dev).unwrap();
    let maps_before = cuda::live_mappings();
    {
        let p = cuda_publisher(&env, cuda_ring(2, Policy::StrictWait));
        let mut s = Subscriber::connect(&env.key, &cuda_copy_options(&env, "pendingdrop")).unwrap();
        let slot = p.acquire().unwrap();
        testing::busy(&stream, load).unwrap();
        done.record(&stream).unwrap();
        p.publish_on_stream(slot, stream.as_cuda_stream(), None)
            .unwrap();
        assert!(!done.query().unwrap(), "load too short");
        let t = Instant::now();
        drop(p);
        eprintln!(
            "drop with a publication pending behind a ~300 ms kernel took {:?}",
            t.elapsed()
        );
        assert!(
            done.query().unwrap(),
            "the publisher was torn down under pending GPU work"
        );
        // The shutdown flag goes up only after the pending publication ran, so the
        // subscriber gets the last frame before the end (STRICT_WAIT: every frame).
        let f = s.next_frame(Some(Duration::from_secs(5)));
        assert_eq!(
            f.map(|f| f.seq).ok(),
            Some(1),
            "the pending frame was lost at shutdown"
        );
        let e = s.next_frame(Some(Duration::from_secs(5))).err().unwrap();
        assert_eq!(e.code(), ErrorCode::Disconnected);
    }
    assert_eq!(cuda::live_mappings(), maps_before, "mappings left behind");
    let _p = cuda_publisher(&env, cuda_ring(2, Policy::StrictWait));
}
