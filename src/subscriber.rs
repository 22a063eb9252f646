//! Subscriber functions of the C API (`cuframes_subscriber_*`, `cuframes_frame_*`).

use std::ffi::{c_char, c_int, c_void};
use std::time::Duration;

use cuframes_core::subscriber::{Frame, Subscriber, SubscriberOptions};
use cuframes_core::wire::{SubscriberMode, SUBSCRIBE_WANTS_FRAMES, SUBSCRIBE_WANTS_PACKETS};
use cuframes_core::{Error, ErrorCode, Result};

use crate::convert::{input, opt_path, opt_str, out, str_arg};
use crate::ffi::{guard, status, value};
use crate::layout::CFrameLayout;

/// Opaque `cuframes_subscriber_t`: the subscriber and the buffer its last packet is in.
pub struct CSubscriber(Subscriber, Vec<u8>);

impl CSubscriber {
    pub(crate) fn inner(&self) -> &Subscriber {
        &self.0
    }

    pub(crate) fn inner_mut(&mut self) -> &mut Subscriber {
        &mut self.0
    }

    pub(crate) fn parts(&mut self) -> (&mut Subscriber, &mut Vec<u8>) {
        (&mut self.0, &mut self.1)
    }
}

/// Opaque `cuframes_frame_t`.
pub struct CFrame(Frame);

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
        *out_sub = Box::into_raw(Box::new(CSubscriber(s, Vec::new())));
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
        let l =
            s.0.frame_layout()
                .ok_or_else(|| Error::new(ErrorCode::NotFound, "no frame ring"))?;
        // SAFETY: the C contract: `layout` is NULL or a writable cuframes_frame_layout_t.
        *unsafe { out(layout, "layout") }? = CFrameLayout::from(l);
        Ok(())
    })
}

/// Wait for the next frame (`timeout_ms` < 0: forever). TIMEOUT, or DISCONNECTED once the
/// publisher shut down or died. Release every frame with `cuframes_frame_release`.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle, used by one thread at
/// a time; `frame` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_next_frame(
    s: *mut CSubscriber,
    timeout_ms: i64,
    frame: *mut *mut CFrame,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle used by this
        // thread only; `frame` is NULL or writable, and distinct from it.
        let (s, frame) = unsafe { (out(s, "subscriber")?, out(frame, "frame")?) };
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        let f = s.0.next_frame(timeout)?;
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
        let st = unsafe { input(s, "subscriber") }?.0.frame_stats();
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
        unsafe { s.as_ref() }.is_some_and(|s| s.0.is_zero_copy()) as c_int
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
        match unsafe { s.as_ref() }.and_then(|s| s.0.memory_kind()) {
            Some(k) => Ok(k as c_int),
            None => Err(Error::new(ErrorCode::NotFound, "no frame ring")),
        }
    })
}
