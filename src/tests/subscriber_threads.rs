//! A subscriber handle shared by threads, as cuframes.h allows: its queries answer at once and
//! consistently while another thread's reading call changes rings under it.

use std::ffi::{c_int, CString};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use cuframes_core::wire::{
    Format, MemoryKind, Policy, CODEC_ID_H264, PACKET_FLAG_KEY, SUBSCRIBE_WANTS_FRAMES,
    SUBSCRIBE_WANTS_PACKETS,
};
use cuframes_core::ErrorCode;

use super::Scratch;
use crate::api::frame::{cuframes_frame_release, CFrame};
use crate::api::packet::{cuframes_subscriber_next_packet, CPacketStats};
use crate::api::packet::{cuframes_subscriber_packet_codec, cuframes_subscriber_packet_stats};
use crate::api::subscriber::*;
use crate::api::types::{CColour, CFrameLayout};

/// The geometries the publisher switches between.
const SIZES: [(u32, u32); 3] = [(64, 48), (32, 16), (96, 32)];

fn ring(i: usize) -> FrameRingConfig {
    let mut c = FrameRingConfig::new(Format::Nv12, SIZES[i].0, SIZES[i].1);
    c.policy = Policy::DropOldest;
    c.ring_size = 4;
    c
}

/// The handle as two threads share it (the pointer is only ever used through the C API,
/// whose thread-safety section this test checks).
#[derive(Clone, Copy)]
struct Handle(*mut CSubscriber);
// SAFETY: cuframes.h lets a subscriber handle's calls come from several threads at once;
// the pointer itself is only passed to them, and the handle outlives both threads.
unsafe impl Send for Handle {}

/// One thread reads frames (and packets) in a loop while the publisher keeps replacing its
/// ring, so that every few frames the subscriber changes its rings under the reading call;
/// another thread calls every query of the handle in a loop. Each
/// answer must be one the publisher could have given (a layout it published, host memory,
/// counters that hold together), and a query must not wait for a read in progress.
///
/// A query that formed a shared reference to the subscriber while the reading call held a
/// mutable one would be undefined behaviour (it could read a ring the read is unmapping).
/// The harness cannot see undefined behaviour as such; what it can see is the crash or the
/// garbage answer it may cause, which this test provokes by replacing rings all the time.
#[test]
fn queries_run_while_another_thread_reads() {
    let tag = cuframes_core::testing::unique_suffix() & 0xFF_FFFF;
    let scratch = Scratch {
        dir: std::env::temp_dir().join(format!("cuframes-mt-{}-{tag}", std::process::id())),
        key: format!("mt-{}-{tag}", std::process::id()),
    };
    std::fs::create_dir_all(&scratch.dir).unwrap();
    let publisher = Arc::new(
        Publisher::create(
            &scratch.key,
            PublisherOptions {
                runtime_dir: Some(scratch.dir.clone()),
                ..Default::default()
            },
        )
        .unwrap(),
    );
    publisher.enable_frames(ring(0)).unwrap();
    publisher
        .enable_packets(PacketRingConfig {
            codec_id: CODEC_ID_H264,
            ring_slots: 64,
            data_size: 1 << 16,
            ..Default::default()
        })
        .unwrap();
    let dir = CString::new(scratch.dir.to_str().unwrap()).unwrap();
    let key = CString::new(scratch.key.as_str()).unwrap();
    let mut o = std::mem::MaybeUninit::<CSubscriberOptions>::uninit();
    let mut s: *mut CSubscriber = null_mut();
    // SAFETY: `o` is written by options_default before it is read; `dir` and `key` are
    // NUL-terminated and outlive the connect; `s` is a live out-pointer.
    let rc = unsafe {
        cuframes_subscriber_options_default(o.as_mut_ptr());
        let o = o.assume_init_mut();
        o.runtime_dir = dir.as_ptr();
        o.flags = SUBSCRIBE_WANTS_FRAMES | SUBSCRIBE_WANTS_PACKETS;
        o.connect_timeout_ms = 10_000;
        cuframes_subscriber_connect(key.as_ptr(), o, &mut s)
    };
    assert_eq!(rc, 0);
    let handle = Handle(s);
    let stop = Arc::new(AtomicBool::new(false));
    // A failed assertion stops the other threads too.
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let _stop_on_panic = StopOnDrop(stop.clone());

    let (p, stop_p) = (publisher.clone(), stop.clone());
    let publishing = std::thread::spawn(move || {
        let mut generation = 0;
        let mut n = 0u64;
        while !stop_p.load(Ordering::SeqCst) {
            n += 1;
            let flags = if n == 1 { PACKET_FLAG_KEY } else { 0 };
            p.publish_packet(&n.to_le_bytes(), n as i64, n as i64, flags)
                .unwrap();
            let l = p.frame_layout().unwrap();
            let planes: Vec<Vec<u8>> = l
                .planes()
                .iter()
                .map(|pl| vec![n as u8; pl.row_bytes * pl.rows])
                .collect();
            let refs: Vec<&[u8]> = planes.iter().map(Vec::as_slice).collect();
            let strides: Vec<usize> = l.planes().iter().map(|pl| pl.row_bytes).collect();
            p.publish_host_planes(&refs, &strides, None).unwrap();
            if n % 5 == 0 {
                generation += 1;
                p.replace_frames(ring(generation % SIZES.len())).unwrap();
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        generation
    });

    let stop_r = stop.clone();
    let reading = std::thread::spawn(move || {
        let h = handle;
        let (mut frames, mut packets) = (0u64, 0u64);
        while !stop_r.load(Ordering::SeqCst) {
            let mut f: *mut CFrame = null_mut();
            // SAFETY: a live handle (destroyed only after this thread ends), a live
            // out-pointer.
            let rc = unsafe { cuframes_subscriber_next_frame(h.0, 20, &mut f) };
            if rc == 0 {
                frames += 1;
                // SAFETY: the frame just received, released once.
                unsafe { cuframes_frame_release(f, null_mut()) };
            } else {
                assert_eq!(rc, ErrorCode::Timeout as c_int);
            }
            let (mut data, mut info) = (std::ptr::null(), std::mem::MaybeUninit::uninit());
            // SAFETY: as above; `data` and `info` are live out-pointers.
            let rc =
                unsafe { cuframes_subscriber_next_packet(h.0, 0, &mut data, info.as_mut_ptr()) };
            if rc == 0 {
                packets += 1;
            } else {
                assert_eq!(rc, ErrorCode::Timeout as c_int);
            }
        }
        (frames, packets)
    });

    let t = Instant::now();
    let mut queries = 0u64;
    let mut slowest = Duration::ZERO;
    let ok_layouts: Vec<(u32, u32)> = SIZES.to_vec();
    let s = handle.0;
    while t.elapsed() < Duration::from_secs(3) {
        let q = Instant::now();
        let mut l = CFrameLayout::default();
        let mut st = CFrameStats {
            delivered: 0,
            dropped_overrun: 0,
            dropped_torn: 0,
        };
        let mut colour = CColour::default();
        let mut codec = 0u32;
        let mut pst = CPacketStats {
            packets: 0,
            bytes: 0,
            overruns: 0,
            last_seq: 0,
            oversized: 0,
        };
        // SAFETY: a live handle (the other thread's reading calls run meanwhile, which
        // cuframes.h allows); live out-pointers.
        let rcs = unsafe {
            [
                cuframes_subscriber_frame_layout(s, &mut l),
                cuframes_subscriber_stats(s, &mut st),
                cuframes_subscriber_is_zero_copy(s),
                cuframes_subscriber_memory_kind(s),
                cuframes_subscriber_colour(s, &mut colour),
                cuframes_subscriber_cuda_device(s),
                cuframes_subscriber_packet_codec(s, &mut codec),
                cuframes_subscriber_packet_stats(s, &mut pst),
            ]
        };
        slowest = slowest.max(q.elapsed());
        queries += 1;
        let want = [
            0,
            0,
            0,
            MemoryKind::HostMemfd as c_int,
            0,
            ErrorCode::NotFound as c_int,
            0,
            0,
        ];
        assert_eq!(rcs, want, "query {queries}");
        assert!(
            ok_layouts.contains(&(l.width, l.height))
                && l.format == Format::Nv12 as u32
                && l.plane_count == 2
                && l.frame_size == l.offset[1] + u64::from(l.pitch[1] * l.rows[1]),
            "query {queries}: a layout nobody published: {l:?}"
        );
        assert_eq!(codec, CODEC_ID_H264);
        assert!(pst.packets <= pst.last_seq, "{}", pst.packets);
        assert!(st.delivered < 1 << 32, "{}", st.delivered);
    }
    // A read that waits (nothing published now) holds the handle for its whole timeout;
    // the queries still answer at once.
    stop.store(true, Ordering::SeqCst);
    let generations = publishing.join().unwrap();
    let (frames, packets) = reading.join().unwrap();
    let waiting = std::thread::spawn(move || {
        let h = handle;
        let mut f: *mut CFrame = null_mut();
        // SAFETY: as in the reading thread.
        unsafe { cuframes_subscriber_next_frame(h.0, 3000, &mut f) }
    });
    std::thread::sleep(Duration::from_millis(200));
    let q = Instant::now();
    let mut st = CFrameStats {
        delivered: 0,
        dropped_overrun: 0,
        dropped_torn: 0,
    };
    // SAFETY: a live handle; a live out-pointer.
    assert_eq!(unsafe { cuframes_subscriber_stats(s, &mut st) }, 0);
    let during_read = q.elapsed();
    assert_eq!(waiting.join().unwrap(), ErrorCode::Timeout as c_int);
    // SAFETY: the handle, destroyed once, with no call on it in flight any more.
    unsafe { cuframes_subscriber_destroy(s) };
    drop(publisher);
    eprintln!(
        "{queries} rounds of queries (slowest {slowest:?}) while {frames} frames and \
         {packets} packets were read across {generations} rings"
    );
    assert!(
        generations >= 10 && frames >= 10 && packets >= 1,
        "too little happened"
    );
    // The read lasts 3 s from 0.2 s before the query: a query that waited for it took
    // 2.8 s; one that did not, microseconds (1 s: room for a loaded machine).
    assert!(
        during_read < Duration::from_secs(1),
        "a query waited for the read in progress: {during_read:?}"
    );
}
