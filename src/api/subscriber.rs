//! `cuframes_subscriber_t`: the subscriber handle of the C API (`cuframes_subscriber_*`):
//! options, connect and destroy, the next frame, and the queries of what the publisher
//! announced (layout, colour, memory kind and GPU, counters). A frame it hands out is a
//! `cuframes_frame_t` (`frame.rs`); its packet calls are in `packet.rs`.

use std::ffi::{c_char, c_int};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use cuframes_core::colour::ColourInfo;
use cuframes_core::packet_ring::PacketReaderStats;
use cuframes_core::subscriber::{FrameStats, Subscriber, SubscriberOptions};
use cuframes_core::wire::{
    MemoryKind, SubscriberMode, SUBSCRIBE_WANTS_FRAMES, SUBSCRIBE_WANTS_PACKETS,
};
use cuframes_core::{Error, ErrorCode, Result};

use super::frame::CFrame;
use super::types::{CColour, CFrameLayout};
use crate::ffi::args::{input, opt_path, opt_str, out, str_arg};
use crate::ffi::{guard, status, value};

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

// What cuframes.h promises: a subscriber handle's calls may run on several threads at once,
// and it may be destroyed on any thread.
const _: fn() = || {
    fn shared_across_threads<T: Send + Sync>() {}
    shared_across_threads::<CSubscriber>();
};

/// Mirrors `cuframes_subscriber_options_t`.
#[repr(C)]
pub struct CSubscriberOptions {
    /// Directory of the publisher's socket; NULL: `$CUFRAMES_RUNTIME_DIR`, else /run/cuframes.
    pub runtime_dir: *const c_char,
    /// Shown to operators; printable ASCII, at most 31 bytes; NULL: none.
    pub name: *const c_char,
    /// GPU to import CUDA rings on: -1 = the publisher's GPU (found by its UUID).
    pub cuda_device: i32,
    /// `cuframes_subscriber_mode_t`: COPY or ZERO_COPY.
    pub mode: u32,
    /// `CUFRAMES_SUBSCRIBE_WANTS_*`; 0 = frames.
    pub flags: u32,
    /// Bound of the connect and handshake; 0 = 5000.
    pub connect_timeout_ms: u32,
    /// Non-zero: allow ZERO_COPY under DROP_OLDEST (R12).
    pub accept_zero_copy_overwrite: c_int,
    /// Microseconds to poll before each sleep of a read; 0 = sleep at once.
    pub spin_us: u32,
    /// How long to wait for a new publisher of the key when one goes; 0 = the stream ends.
    pub reconnect_ms: u32,
    /// The largest packet data ring this subscriber maps, in bytes; 0 = the default.
    pub max_packet_ring_size: u32,
    /// The largest packet this subscriber reads, in bytes; 0 = the default.
    pub max_packet_size: u32,
    /// Accept only a publisher running as this uid; -1 = any.
    pub publisher_uid: i64,
}

/// Mirrors `cuframes_frame_stats_t`.
#[repr(C)]
pub struct CFrameStats {
    /// Frames received.
    pub delivered: u64,
    /// Frames overwritten before they were read (DROP_OLDEST).
    pub dropped_overrun: u64,
    /// Frames rewritten while being copied (R10).
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

/// Make CUDA ready for a subscriber with these options while it waits for its publisher:
/// `*out` is a reference on the device it will most likely import a CUDA ring on (release it
/// with `cuframes_cuda_context_release` once connected), or NULL when there is none to make
/// ready (no GPU; several GPUs and an automatic device). Best effort: never fails for want of
/// a GPU.
///
/// # Safety
/// The C contract (crate docs): `opts` is NULL or points to an initialised
/// `CSubscriberOptions`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_warm_up(
    opts: *const CSubscriberOptions,
    out_ctx: *mut *mut super::cuda::CCudaContext,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `out_ctx` is NULL or writable; `opts` NULL or a valid
        // options struct whose strings are NULL or NUL-terminated.
        let (out_ctx, opts) = unsafe { (out(out_ctx, "out")?, options(opts.as_ref())?) };
        *out_ctx = match opts.warm_up_cuda() {
            Some(dev) => Box::into_raw(Box::new(super::cuda::CCudaContext::new(dev))),
            None => std::ptr::null_mut(),
        };
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

/// After the publisher ended the stream (a read returned DISCONNECTED), wait up to
/// `timeout_ms` for its process to exit: OK once it has (or when it is not visible from this
/// PID namespace), TIMEOUT while it lives, and TIMEOUT at once while the stream has not ended.
/// Called before `cuframes_subscriber_destroy` by a reader that is about to release its GPU
/// state, it keeps that release from slowing the publisher's own teardown (the driver
/// serialises them across processes).
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_wait_publisher_exit(
    s: *const CSubscriber,
    timeout_ms: u32,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle.
        let s = unsafe { input(s, "subscriber") }?;
        let timeout = Duration::from_millis(u64::from(timeout_ms));
        if s.read(|sub, _| sub.wait_publisher_exit(timeout)) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorCode::Timeout,
                "the publisher's process has not exited (or the stream has not ended)",
            ))
        }
    })
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
        *frame = Box::into_raw(Box::new(CFrame::new(f)));
        Ok(())
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

/// The colour description the publisher announced for its frame ring: `present` = 0 when it
/// announced none. CUFRAMES_ERR_NOT_FOUND without a frame ring.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle; `colour` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_colour(
    s: *const CSubscriber,
    colour: *mut CColour,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle, `colour` NULL or
        // a writable cuframes_colour_t.
        let (s, colour) = unsafe { (input(s, "subscriber")?, out(colour, "colour")?) };
        let view = s.view();
        if view.layout.is_none() {
            return Err(Error::new(ErrorCode::NotFound, "no frame ring"));
        }
        *colour = view.colour.into();
        Ok(())
    })
}

/// This process's CUDA device ordinal of the ring's GPU (resolved from the UUID the publisher
/// announced), or a negative error: CUFRAMES_ERR_NOT_FOUND for a host ring or no frame ring.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_cuda_device(s: *const CSubscriber) -> c_int {
    value(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle.
        let s = unsafe { input(s, "subscriber")? };
        s.view()
            .cuda_device
            .ok_or_else(|| Error::new(ErrorCode::NotFound, "the frame ring is not in CUDA memory"))
    })
}
