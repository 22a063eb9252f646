//! Subscriber functions of the C API (`cuframes_subscriber_*`, `cuframes_frame_*`).

use std::ffi::{c_char, c_int, c_void};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use cuframes_core::colour::ColourInfo;
use cuframes_core::packet_ring::PacketReaderStats;
use cuframes_core::subscriber::{Frame, FrameStats, Subscriber, SubscriberOptions};
use cuframes_core::wire::{
    MemoryKind, SubscriberMode, SUBSCRIBE_WANTS_FRAMES, SUBSCRIBE_WANTS_PACKETS,
};
use cuframes_core::{Error, ErrorCode, Result};

use crate::convert::{input, opt_path, opt_str, out, str_arg};
use crate::ffi::{guard, status, value};
use crate::layout::CFrameLayout;

/// Opaque `cuframes_subscriber_t` (thread safety: cuframes.h). Every call takes the handle
/// shared, never `&mut`, so calls on several threads never alias a mutable reference:
/// - the reading calls (next frame, next packet, extradata) run on the subscriber under
///   `reader`, one at a time (a concurrent one waits);
/// - the queries (`const cuframes_subscriber_t *`) read `view`, which every reading call
///   refreshes before it returns: they never wait for a read in progress (which may last
///   its whole timeout) and never see the subscriber while it changes.
pub struct CSubscriber {
    reader: Mutex<Reader>,
    view: Mutex<View>,
}

/// The subscriber and the buffer its last packet is in.
struct Reader {
    sub: Subscriber,
    packet: Vec<u8>,
}

/// What the queries of a subscriber handle answer: its state when the last reading call (or
/// the connect) returned.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct View {
    pub layout: Option<CFrameLayout>,
    pub colour: Option<ColourInfo>,
    pub zero_copy: bool,
    pub memory_kind: Option<MemoryKind>,
    pub cuda_device: Option<i32>,
    pub frame_stats: FrameStats,
    pub packet_codec: Option<u32>,
    pub packet_stats: Option<PacketReaderStats>,
}

impl View {
    fn of(s: &Subscriber) -> View {
        View {
            layout: s.frame_layout().map(CFrameLayout::from),
            colour: s.colour(),
            zero_copy: s.is_zero_copy(),
            memory_kind: s.memory_kind(),
            cuda_device: s.cuda_device(),
            frame_stats: s.frame_stats(),
            packet_codec: s.packet_codec_id(),
            packet_stats: s.packet_stats(),
        }
    }
}

impl CSubscriber {
    fn new(sub: Subscriber) -> CSubscriber {
        CSubscriber {
            view: Mutex::new(View::of(&sub)),
            reader: Mutex::new(Reader {
                sub,
                packet: Vec::new(),
            }),
        }
    }

    /// The handle's state as the last reading call left it (any thread, any time).
    pub(crate) fn view(&self) -> View {
        *self.view.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Run a reading call: one at a time per handle; the view is refreshed before it returns.
    /// A call that panicked (caught at the boundary) leaves the subscriber as it was then.
    pub(crate) fn read<T>(&self, body: impl FnOnce(&mut Subscriber, &mut Vec<u8>) -> T) -> T {
        let mut r = self.reader.lock().unwrap_or_else(PoisonError::into_inner);
        let Reader { sub, packet } = &mut *r;
        let out = body(sub, packet);
        *self.view.lock().unwrap_or_else(PoisonError::into_inner) = View::of(sub);
        out
    }
}

/// Opaque `cuframes_frame_t`: read only by its queries (any threads at once), consumed once by
/// `cuframes_frame_release`.
pub struct CFrame(Frame);

// What cuframes.h promises: a subscriber handle's calls, and a frame handle's queries, may run
// on several threads at once; either may be destroyed or released on any thread.
const _: fn() = || {
    fn shared_across_threads<T: Send + Sync>() {}
    shared_across_threads::<CSubscriber>();
    shared_across_threads::<CFrame>();
};

impl CFrame {
    pub(crate) fn inner(&self) -> &Frame {
        &self.0
    }
}

/// Mirrors `cuframes_subscriber_options_t`.
#[repr(C)]
pub struct CSubscriberOptions {
    pub runtime_dir: *const c_char,
    pub name: *const c_char,
    pub cuda_device: i32,
    pub mode: u32,
    pub flags: u32,
    pub connect_timeout_ms: u32,
    pub accept_zero_copy_overwrite: c_int,
    pub spin_us: u32,
    pub reconnect_ms: u32,
    pub max_packet_ring_size: u32,
    pub max_packet_size: u32,
    pub publisher_uid: i64,
}

/// Mirrors `cuframes_frame_info_t`.
#[repr(C)]
pub struct CFrameInfo {
    pub seq: u64,
    pub pts_ns: i64,
    pub memory_kind: u32,
    pub zero_copy: u32,
    pub plane_count: u32,
    pub pitch: [u32; 3],
    pub data: [u64; 3],
}

/// Mirrors `cuframes_frame_stats_t`.
#[repr(C)]
pub struct CFrameStats {
    pub delivered: u64,
    pub dropped_overrun: u64,
    pub dropped_torn: u64,
}

/// Fill `opts` with the defaults: frames only, COPY, device -1 (the publisher's GPU), 5 s
/// connect timeout.
///
/// # Safety
/// The C contract (crate docs): `opts` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_options_default(opts: *mut CSubscriberOptions) {
    // SAFETY: the C contract: `opts` is NULL or a writable cuframes_subscriber_options_t.
    if let Some(o) = unsafe { opts.as_mut() } {
        *o = CSubscriberOptions {
            runtime_dir: std::ptr::null(),
            name: std::ptr::null(),
            cuda_device: cuframes_core::cuda::DEVICE_AUTO,
            mode: SubscriberMode::Copy as u32,
            flags: SUBSCRIBE_WANTS_FRAMES,
            connect_timeout_ms: 5000,
            accept_zero_copy_overwrite: 0,
            spin_us: 0,
            reconnect_ms: 0,
            max_packet_ring_size: 0,
            max_packet_size: 0,
            publisher_uid: -1,
        };
    }
}

/// # Safety
/// `o.runtime_dir` and `o.name` are NULL or NUL-terminated strings (the C contract for the
/// options).
unsafe fn options(o: Option<&CSubscriberOptions>) -> Result<SubscriberOptions> {
    let mut opts = SubscriberOptions::default();
    if let Some(o) = o {
        // SAFETY: `runtime_dir` is NULL or a NUL-terminated string (our contract); copied.
        opts.runtime_dir = unsafe { opt_path(o.runtime_dir, "runtime_dir") }?;
        // SAFETY: `name` is NULL or a NUL-terminated string (our contract); copied below.
        if let Some(n) = unsafe { opt_str(o.name, "name") }? {
            opts.name = n.to_owned();
        }
        opts.cuda_device = o.cuda_device;
        opts.mode = SubscriberMode::from_u32(o.mode)
            .ok_or_else(|| Error::invalid(format!("unknown mode {}", o.mode)))?;
        let flags = if o.flags == 0 {
            SUBSCRIBE_WANTS_FRAMES
        } else {
            o.flags
        };
        opts.want_frames = flags & SUBSCRIBE_WANTS_FRAMES != 0;
        opts.want_packets = flags & SUBSCRIBE_WANTS_PACKETS != 0;
        if o.connect_timeout_ms != 0 {
            opts.connect_timeout = Duration::from_millis(o.connect_timeout_ms as u64);
        }
        opts.accept_zero_copy_overwrite = o.accept_zero_copy_overwrite != 0;
        opts.spin = Duration::from_micros(u64::from(o.spin_us));
        if o.reconnect_ms != 0 {
            opts.reconnect = Some(Duration::from_millis(o.reconnect_ms as u64));
        }
        // 0 is the default there too.
        opts.max_packet_ring_size = u64::from(o.max_packet_ring_size);
        opts.max_packet_size = u64::from(o.max_packet_size);
        opts.publisher_uid = match o.publisher_uid {
            -1 => None,
            uid => Some(u32::try_from(uid).map_err(|_| {
                Error::invalid(format!("publisher_uid {uid} is not a uid (or -1 for any)"))
            })?),
        };
    }
    Ok(opts)
}

/// Connect to the publisher of `key` and complete the handshake (imports happen here, once).
///
/// # Safety
/// The C contract (crate docs): `key` is NULL or a NUL-terminated string; `opts` is NULL or
/// points to an initialised `CSubscriberOptions` (its pointers, where set, follow the same
/// rules); `out_sub` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_connect(
    key: *const c_char,
    opts: *const CSubscriberOptions,
    out_sub: *mut *mut CSubscriber,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `key` is NULL or a NUL-terminated string, `out_sub` NULL
        // or writable, `opts` NULL or a valid options struct whose strings are NULL or
        // NUL-terminated.
        let (key, out_sub, opts) = unsafe {
            (
                str_arg(key, "key")?,
                out(out_sub, "out")?,
                options(opts.as_ref())?,
            )
        };
        let s = Subscriber::connect(key, &opts)?;
        *out_sub = Box::into_raw(Box::new(CSubscriber::new(s)));
        Ok(())
    })
}

/// Disconnect (UNSUBSCRIBE) and free. Frames still held stay valid until released.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle, destroyed once here
/// with no other call on it in flight.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_destroy(s: *mut CSubscriber) {
    if !s.is_null() {
        // SAFETY: the C contract: a non-NULL `s` came from Box::into_raw in
        // cuframes_subscriber_connect and is destroyed once, with no call on it in flight.
        guard((), || drop(unsafe { Box::from_raw(s) }));
    }
}

/// The layout of the frames this subscriber receives.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle; `layout` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_frame_layout(
    s: *const CSubscriber,
    layout: *mut CFrameLayout,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle.
        let s = unsafe { input(s, "subscriber") }?;
        let l = s
            .view()
            .layout
            .ok_or_else(|| Error::new(ErrorCode::NotFound, "no frame ring"))?;
        // SAFETY: the C contract: `layout` is NULL or a writable cuframes_frame_layout_t.
        *unsafe { out(layout, "layout") }? = l;
        Ok(())
    })
}

/// Wait for the next frame (`timeout_ms` < 0: forever). TIMEOUT, or DISCONNECTED once the
/// publisher shut down or died. Release every frame with `cuframes_frame_release`.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle; `frame` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_next_frame(
    s: *mut CSubscriber,
    timeout_ms: i64,
    frame: *mut *mut CFrame,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle (taken shared: its
        // reading calls serialise themselves); `frame` is NULL or writable, and distinct
        // from it.
        let (s, frame) = unsafe { (input(s, "subscriber")?, out(frame, "frame")?) };
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        let f = s.read(|sub, _| sub.next_frame(timeout))?;
        *frame = Box::into_raw(Box::new(CFrame(f)));
        Ok(())
    })
}

/// Where a frame's planes are and what it is.
///
/// # Safety
/// The C contract (crate docs): `f` is NULL or a live frame handle; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_frame_info(f: *const CFrame, info: *mut CFrameInfo) -> c_int {
    status(|| {
        // SAFETY: the C contract: `f` is NULL or a live (unreleased) frame handle.
        let f = &unsafe { input(f, "frame") }?.0;
        let base = f.address();
        let mut i = CFrameInfo {
            seq: f.seq,
            pts_ns: f.pts_ns,
            memory_kind: f.memory_kind() as u32,
            zero_copy: f.is_zero_copy() as u32,
            plane_count: f.layout.planes().len() as u32,
            pitch: [0; 3],
            data: [0; 3],
        };
        for (k, p) in f.layout.planes().iter().enumerate() {
            i.pitch[k] = p.pitch as u32;
            i.data[k] = base + p.offset as u64;
        }
        // SAFETY: the C contract: `info` is NULL or a writable cuframes_frame_info_t.
        *unsafe { out(info, "info") }? = i;
        Ok(())
    })
}

/// Release a frame. For CUDA frames pass the stream of the last work that reads it: the ACK
/// then follows that work (R12). NULL = the reads are finished now.
///
/// # Safety
/// The C contract (crate docs): `f` is NULL or a live frame handle, released once here with no
/// other call on it in flight; `cuda_stream` is NULL or a live `CUstream` of the ring's device.
#[no_mangle]
pub unsafe extern "C" fn cuframes_frame_release(f: *mut CFrame, cuda_stream: *mut c_void) {
    if f.is_null() {
        return;
    }
    guard((), || {
        // SAFETY: the C contract: a non-NULL `f` came from Box::into_raw in
        // cuframes_subscriber_next_frame and is released once.
        let frame = unsafe { Box::from_raw(f) }.0;
        // SAFETY: the C contract: `cuda_stream` is NULL or a live CUstream of the frame's
        // device, which is release_after_stream's contract.
        unsafe { frame.release_after_stream(cuda_stream) };
    })
}

/// This subscriber's counters.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle; `stats` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_stats(
    s: *const CSubscriber,
    stats: *mut CFrameStats,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle.
        let st = unsafe { input(s, "subscriber") }?.view().frame_stats;
        // SAFETY: the C contract: `stats` is NULL or a writable cuframes_frame_stats_t.
        *unsafe { out(stats, "stats") }? = CFrameStats {
            delivered: st.delivered,
            dropped_overrun: st.dropped_overrun,
            dropped_torn: st.dropped_torn,
        };
        Ok(())
    })
}

/// 1 when frames are handed out without a copy (ZERO_COPY granted), else 0.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_is_zero_copy(s: *const CSubscriber) -> c_int {
    guard(0, || {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle.
        unsafe { s.as_ref() }.is_some_and(|s| s.view().zero_copy) as c_int
    })
}

/// Memory kind of the ring (CUFRAMES_MEMORY_*), or a negative error without a frame ring.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_memory_kind(s: *const CSubscriber) -> c_int {
    value(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle.
        match unsafe { s.as_ref() }.and_then(|s| s.view().memory_kind) {
            Some(k) => Ok(k as c_int),
            None => Err(Error::new(ErrorCode::NotFound, "no frame ring")),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::CString;
    use std::ptr::null_mut;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use cuframes_core::packet_ring::PacketRingConfig;
    use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
    use cuframes_core::wire::{Format, MemoryKind, Policy, CODEC_ID_H264, PACKET_FLAG_KEY};

    use super::*;
    use crate::colour::{cuframes_subscriber_colour, cuframes_subscriber_cuda_device, CColour};
    use crate::packets::{cuframes_subscriber_next_packet, CPacketStats};
    use crate::packets::{cuframes_subscriber_packet_codec, cuframes_subscriber_packet_stats};

    /// A runtime directory of our own; the rings' /dev/shm objects go with it, also on failure.
    struct Scratch {
        dir: std::path::PathBuf,
        key: String,
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
            let _ = cuframes_core::shm::unlink(&format!("cuframes-{}", self.key));
            let _ = cuframes_core::shm::unlink(&format!("cuframes-{}-packets", self.key));
        }
    }

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

    /// Issue 34, item 11: one thread reads frames (and packets) in a loop while the publisher
    /// keeps replacing its ring, so that every few frames the subscriber changes its rings
    /// under the reading call; another thread calls every query of the handle in a loop. Each
    /// answer must be one the publisher could have given (a layout it published, host memory,
    /// counters that hold together), and a query must not wait for a read in progress.
    ///
    /// Before, the queries formed a shared reference to the subscriber while the reading call
    /// held a mutable one (undefined behaviour: they read a ring the read could be unmapping).
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
                let rc = unsafe {
                    cuframes_subscriber_next_packet(h.0, 0, &mut data, info.as_mut_ptr())
                };
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
}
