//! Publisher functions of the C API (`cuframes_publisher_*`).

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use cuframes_core::cuda::CudaStream;
use cuframes_core::publisher::{
    AcquiredSlot, FrameRingConfig, MemoryChoice, Publisher, PublisherOptions,
    DEFAULT_MAX_SUBSCRIBERS_PER_PID, DEFAULT_MAX_SUBSCRIBERS_PER_UID,
};
use cuframes_core::wire::{Format, MemoryKind, Policy};
use cuframes_core::{Error, ErrorCode, Result};

use crate::colour::CColour;
use crate::convert::{input, opt_path, out, str_arg};
use crate::ffi::{guard, status, value};
use crate::layout::CFrameLayout;

/// Opaque `cuframes_publisher_t`: a shared reference to the process's publisher of a key.
pub struct CPublisher(pub(crate) Arc<Publisher>);

/// Mirrors `cuframes_publisher_options_t`.
#[repr(C)]
pub struct CPublisherOptions {
    pub runtime_dir: *const c_char,
    pub file_mode: u32,
    pub allowed_uid: i64,
    pub allowed_gid: i64,
    pub handshake_timeout_ms: u32,
    pub allow_legacy_subscribers: u32,
    pub max_subscribers_per_uid: u32,
    pub max_subscribers_per_pid: u32,
}

/// Mirrors `cuframes_frame_ring_config_t`.
#[repr(C)]
pub struct CFrameRingConfig {
    pub format: u32,
    pub width: u32,
    pub height: u32,
    pub ring_size: u32,
    pub policy: u32,
    pub ack_timeout_ms: u32,
    pub memory_kind: u32,
    pub cuda_device: i32,
    pub colour: CColour,
}

/// Mirrors `cuframes_slot_t`.
#[repr(C)]
pub struct CSlot {
    pub seq: u64,
    pub index: u32,
    pub memory_kind: u32,
    pub address: u64,
}

/// Mirrors `cuframes_subscriber_info_t`.
#[repr(C)]
pub struct CSubscriberInfo {
    pub bit: u32,
    pub pid: u32,
    pub name: [c_char; 32],
    pub wants_frames: u32,
    pub wants_packets: u32,
    pub lag: u64,
    pub last_seen_seq: u64,
    pub last_ack_ns: i64,
    pub delivered: u64,
    pub dropped_overrun: u64,
    pub dropped_torn: u64,
}

/// Publishers of this process by key (R6: one per key per process, shared by components).
static SHARED: Mutex<Option<HashMap<String, Weak<Publisher>>>> = Mutex::new(None);

/// # Safety
/// `o.runtime_dir` is NULL or a NUL-terminated string (the C contract for the options).
unsafe fn options(o: Option<&CPublisherOptions>) -> Result<PublisherOptions> {
    let mut opts = PublisherOptions::default();
    if let Some(o) = o {
        // SAFETY: `runtime_dir` is NULL or a NUL-terminated string (our contract); the path
        // is copied.
        opts.runtime_dir = unsafe { opt_path(o.runtime_dir, "runtime_dir")? };
        if o.file_mode != 0 {
            if o.file_mode > 0o777 {
                return Err(Error::invalid(format!(
                    "file_mode {:o} is not a permission mode",
                    o.file_mode
                )));
            }
            opts.file_mode = o.file_mode;
        }
        opts.allowed_uid = u32::try_from(o.allowed_uid).ok();
        opts.allowed_gid = u32::try_from(o.allowed_gid).ok();
        if o.handshake_timeout_ms != 0 {
            opts.handshake_timeout = Duration::from_millis(o.handshake_timeout_ms as u64);
        }
        opts.allow_legacy_subscribers = o.allow_legacy_subscribers != 0;
        // 0 = the default (a zeroed struct gets the caps, not "no subscriber at all").
        if o.max_subscribers_per_uid != 0 {
            opts.max_subscribers_per_uid = o.max_subscribers_per_uid as usize;
        }
        if o.max_subscribers_per_pid != 0 {
            opts.max_subscribers_per_pid = o.max_subscribers_per_pid as usize;
        }
    }
    Ok(opts)
}

/// Fill `opts` with the defaults.
///
/// # Safety
/// The C contract (crate docs): `opts` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_options_default(opts: *mut CPublisherOptions) {
    // SAFETY: the C contract: `opts` is NULL or a writable cuframes_publisher_options_t.
    if let Some(o) = unsafe { opts.as_mut() } {
        *o = CPublisherOptions {
            runtime_dir: std::ptr::null(),
            file_mode: 0o660,
            allowed_uid: -1,
            allowed_gid: -1,
            handshake_timeout_ms: 5000,
            allow_legacy_subscribers: 0,
            max_subscribers_per_uid: DEFAULT_MAX_SUBSCRIBERS_PER_UID as u32,
            max_subscribers_per_pid: DEFAULT_MAX_SUBSCRIBERS_PER_PID as u32,
        };
    }
}

/// # Safety
/// The C contract of cuframes_publisher_create for `key`, `opts` and `out_pub`.
unsafe fn create(
    key: *const c_char,
    opts: *const CPublisherOptions,
    out_pub: *mut *mut CPublisher,
    shared: bool,
) -> c_int {
    status(|| {
        // SAFETY: our contract: `key` is NULL or a NUL-terminated string, `out_pub` NULL
        // or writable, `opts` NULL or a valid options struct whose `runtime_dir` is NULL
        // or a string.
        let (key, out_pub, opts) = unsafe {
            (
                str_arg(key, "key")?,
                out(out_pub, "out")?,
                options(opts.as_ref())?,
            )
        };
        let mut reg = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        let map = reg.get_or_insert_with(HashMap::new);
        // One upgrade decides: a handle of a live publisher of this process (not one
        // inherited through fork: that is the parent's) is shared; a registered one that no
        // longer upgrades is ending on another thread (its last handle destroyed), and its
        // end (socket, rings) comes before a new publisher of the key here.
        let registered = map.get(key).map(Weak::upgrade);
        map.retain(|_, w| w.strong_count() > 0);
        let existing = match registered {
            Some(Some(p)) => Some(p).filter(|p| p.created_here()),
            Some(None) => {
                cuframes_core::publisher::wait_until_released(key, Duration::from_secs(30));
                None
            }
            None => None,
        };
        if let Some(existing) = existing {
            if !shared {
                return Err(Error::new(
                    ErrorCode::AlreadyExists,
                    format!("this process already publishes {key:?}; use cuframes_publisher_open_shared (R6)"),
                ));
            }
            *out_pub = Box::into_raw(Box::new(CPublisher(existing)));
            return Ok(());
        }
        let p = Arc::new(Publisher::create(key, opts)?);
        map.insert(key.to_owned(), Arc::downgrade(&p));
        *out_pub = Box::into_raw(Box::new(CPublisher(p)));
        Ok(())
    })
}

/// Create the publisher of `key`. ALREADY_EXISTS if a live publisher (here or elsewhere) has it.
///
/// # Safety
/// The C contract (crate docs): `key` is NULL or a NUL-terminated string; `opts` is NULL or
/// points to an initialised `CPublisherOptions` (its pointers, where set, follow the same
/// rules); `out_pub` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_create(
    key: *const c_char,
    opts: *const CPublisherOptions,
    out_pub: *mut *mut CPublisher,
) -> c_int {
    // SAFETY: our C contract is create's.
    unsafe { create(key, opts, out_pub, false) }
}

/// The process's publisher of `key`, created if needed (R6): the filter and the muxer of one
/// ffmpeg command share it. Each handle is destroyed on its own; the last one shuts down.
///
/// # Safety
/// The C contract (crate docs): `key` is NULL or a NUL-terminated string; `opts` is NULL or
/// points to an initialised `CPublisherOptions` (its pointers, where set, follow the same
/// rules); `out_pub` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_open_shared(
    key: *const c_char,
    opts: *const CPublisherOptions,
    out_pub: *mut *mut CPublisher,
) -> c_int {
    // SAFETY: our C contract is create's.
    unsafe { create(key, opts, out_pub, true) }
}

/// Drop a handle; the last handle of a key sends SHUTDOWN and removes every resource.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle, destroyed once here
/// with no other call on it in flight.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_destroy(p: *mut CPublisher) {
    if !p.is_null() {
        // SAFETY: the C contract: a non-NULL `p` came from Box::into_raw in `create` and is
        // destroyed once, with no call on it in flight.
        guard((), || drop(unsafe { Box::from_raw(p) }));
    }
}

/// Fill `cfg` with the defaults: NV12 0x0, ring 4, DROP_OLDEST, 1000 ms, host memory.
///
/// # Safety
/// The C contract (crate docs): `cfg` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_frame_ring_config_default(cfg: *mut CFrameRingConfig) {
    // SAFETY: the C contract: `cfg` is NULL or a writable cuframes_frame_ring_config_t.
    if let Some(c) = unsafe { cfg.as_mut() } {
        *c = CFrameRingConfig {
            format: Format::Nv12 as u32,
            width: 0,
            height: 0,
            ring_size: 4,
            policy: Policy::DropOldest as u32,
            ack_timeout_ms: 1000,
            memory_kind: MemoryKind::HostMemfd as u32,
            cuda_device: 0,
            colour: CColour::default(),
        };
    }
}

fn ring_config(c: &CFrameRingConfig) -> Result<FrameRingConfig> {
    let format = Format::from_u32(c.format)
        .filter(|f| *f != Format::None)
        .ok_or_else(|| {
            Error::new(
                ErrorCode::Format,
                format!("unknown frame format {}", c.format),
            )
        })?;
    let mut cfg = FrameRingConfig::new(format, c.width, c.height);
    cfg.ring_size = c.ring_size as usize;
    cfg.policy = Policy::from_u64(c.policy as u64)
        .ok_or_else(|| Error::invalid(format!("unknown policy {}", c.policy)))?;
    cfg.ack_timeout = Duration::from_millis(c.ack_timeout_ms as u64);
    cfg.colour = c.colour.to_core();
    cfg.memory = match MemoryKind::from_u32(c.memory_kind) {
        Some(MemoryKind::HostMemfd) => MemoryChoice::Host,
        Some(MemoryKind::CudaVmm) => MemoryChoice::Cuda {
            device: c.cuda_device,
        },
        None => {
            return Err(Error::invalid(format!(
                "unknown memory kind {}",
                c.memory_kind
            )))
        }
    };
    Ok(cfg)
}

/// Add the frame ring (once per publisher).
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `cfg` is NULL or points
/// to an initialised `CFrameRingConfig`.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_enable_frames(
    p: *mut CPublisher,
    cfg: *const CFrameRingConfig,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle, `cfg` NULL or a
        // valid cuframes_frame_ring_config_t.
        let (p, cfg) = unsafe { (input(p, "publisher")?, input(cfg, "config")?) };
        p.0.enable_frames(ring_config(cfg)?)
    })
}

/// Replace the frame ring by a new generation with `cfg`'s geometry, format and colour (a
/// camera changing resolution): the old ring's subscribers drain it and follow the new one
/// (`Publisher::replace_frames`).
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `cfg` is NULL or points
/// to an initialised `CFrameRingConfig`.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_replace_frames(
    p: *mut CPublisher,
    cfg: *const CFrameRingConfig,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle, `cfg` NULL or a
        // valid cuframes_frame_ring_config_t.
        let (p, cfg) = unsafe { (input(p, "publisher")?, input(cfg, "config")?) };
        p.0.replace_frames(ring_config(cfg)?)
    })
}

/// The frame layout of the publisher's ring.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `layout` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_frame_layout(
    p: *const CPublisher,
    layout: *mut CFrameLayout,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle.
        let p = unsafe { input(p, "publisher") }?;
        let l =
            p.0.frame_layout()
                .ok_or_else(|| Error::new(ErrorCode::NotFound, "no frame ring"))?;
        // SAFETY: the C contract: `layout` is NULL or a writable cuframes_frame_layout_t.
        *unsafe { out(layout, "layout") }? = CFrameLayout::from(&l);
        Ok(())
    })
}

fn to_core_slot(s: &CSlot) -> Result<AcquiredSlot> {
    Ok(AcquiredSlot {
        index: s.index as usize,
        seq: s.seq,
        address: s.address,
        memory_kind: MemoryKind::from_u32(s.memory_kind)
            .ok_or_else(|| Error::invalid("slot memory kind"))?,
    })
}

fn pts(pts_ns: i64) -> Option<i64> {
    (pts_ns != i64::MIN).then_some(pts_ns)
}

/// Take the next slot to write into (waits for ACKs under STRICT_WAIT).
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `slot` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_acquire(p: *mut CPublisher, slot: *mut CSlot) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle.
        let p = unsafe { input(p, "publisher") }?;
        let s = p.0.acquire()?;
        // SAFETY: the C contract: `slot` is NULL or a writable cuframes_slot_t.
        *unsafe { out(slot, "slot") }? = CSlot {
            seq: s.seq,
            index: s.index as u32,
            memory_kind: s.memory_kind as u32,
            address: s.address,
        };
        Ok(())
    })
}

/// Publish an acquired slot whose contents are complete. `pts_ns` INT64_MIN = now (R25).
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `slot` is NULL or
/// points to an initialised `CSlot`.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_publish(
    p: *mut CPublisher,
    slot: *const CSlot,
    pts_ns: i64,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle, `slot` NULL or a
        // valid cuframes_slot_t.
        let (p, slot) = unsafe { (input(p, "publisher")?, input(slot, "slot")?) };
        p.0.publish(to_core_slot(slot)?, pts(pts_ns)).map(|_| ())
    })
}

/// Give an acquired slot back without publishing it.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `slot` is NULL or
/// points to an initialised `CSlot`.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_abandon(p: *mut CPublisher, slot: *const CSlot) {
    guard((), || {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle, `slot` NULL or a
        // valid cuframes_slot_t.
        if let (Some(p), Some(s)) = unsafe { (p.as_ref(), slot.as_ref()) } {
            if let Ok(s) = to_core_slot(s) {
                p.0.abandon(s);
            }
        }
    })
}

/// Copy a frame from host memory (one pointer and stride per plane) and publish it.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `planes` is NULL or
/// holds `plane_count` pointers, each readable for its plane's rows at its stride; `strides` is
/// NULL or holds `plane_count` elements.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_publish_host(
    p: *mut CPublisher,
    planes: *const *const u8,
    strides: *const usize,
    plane_count: c_int,
    pts_ns: i64,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle.
        let p = unsafe { input(p, "publisher") }?;
        let layout =
            p.0.frame_layout()
                .ok_or_else(|| Error::new(ErrorCode::NotFound, "no frame ring"))?;
        let n = usize::try_from(plane_count).map_err(|_| Error::invalid("plane_count"))?;
        if n != layout.planes().len() || planes.is_null() || strides.is_null() {
            return Err(Error::new(
                ErrorCode::Format,
                format!(
                    "{} needs {} planes, {n} given",
                    layout.format.name(),
                    layout.planes().len()
                ),
            ));
        }
        // SAFETY: the C contract: `strides` and `planes` are arrays of `plane_count` = n
        // elements (checked non-NULL above), unwritten during the call.
        let (strides, ptrs) = unsafe {
            (
                std::slice::from_raw_parts(strides, n),
                std::slice::from_raw_parts(planes, n),
            )
        };
        let mut slices = Vec::with_capacity(n);
        for (i, (ptr, plane)) in ptrs.iter().zip(layout.planes()).enumerate() {
            if ptr.is_null() {
                return Err(Error::invalid(format!("plane {i}: NULL")));
            }
            let span = plane
                .span_at(strides[i])
                .map_err(|e| Error::invalid(format!("plane {i}: {}", e.message())))?;
            // SAFETY: the C contract of this call: plane i holds the ring layout's rows of
            // it, `strides[i]` apart, so it is readable for stride * (rows - 1) + row_bytes
            // bytes (`span`, computed without overflow and within isize::MAX; the pointer
            // checked non-NULL above), unwritten during the call.
            slices.push(unsafe { std::slice::from_raw_parts(*ptr, span) });
        }
        // The layout the slices were cut for: a ring replaced meanwhile refuses the frame.
        p.0.publish_host_frame(&layout, &slices, strides, pts(pts_ns))
            .map(|_| ())
    })
}

/// Seq of the last published frame (0 = none).
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_frame_seq(p: *const CPublisher) -> u64 {
    // SAFETY: the C contract: `p` is NULL or a live publisher handle.
    guard(0, || unsafe { p.as_ref() }.map_or(0, |p| p.0.frame_seq()))
}

/// Mirrors `cuframes_publisher_wait_stats_t`: where the frame ring's frames waited.
#[repr(C)]
pub struct CPublisherWaitStats {
    pub ack_waits: u64,
    pub ack_wait_ns: u64,
    pub publication_waits: u64,
    pub publication_wait_ns: u64,
    pub stream_publications: u64,
    pub stream_publication_ns: u64,
    pub stream_publication_max_ns: u64,
}

/// Where the current frame ring's frames waited so far; NOT_FOUND without a frame ring.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `stats` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_wait_stats(
    p: *const CPublisher,
    stats: *mut CPublisherWaitStats,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle.
        let w = unsafe { input(p, "publisher") }?
            .0
            .frame_wait_stats()
            .ok_or_else(|| Error::new(ErrorCode::NotFound, "this publisher has no frame ring"))?;
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the C contract: `stats` is NULL or a writable cuframes_publisher_wait_stats_t.
        *unsafe { out(stats, "stats") }? = CPublisherWaitStats {
            ack_waits: w.ack_waits,
            ack_wait_ns: ns(w.ack_wait),
            publication_waits: w.publication_waits,
            publication_wait_ns: ns(w.publication_wait),
            stream_publications: w.stream_publications,
            stream_publication_ns: ns(w.stream_publication_time),
            stream_publication_max_ns: ns(w.stream_publication_max),
        };
        Ok(())
    })
}

/// Number of admitted subscribers that can read (a frame subscriber once it has mapped the
/// ring's slots), or a negative error: what a publisher waiting for its readers waits for.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_ready_subscriber_count(p: *const CPublisher) -> c_int {
    // SAFETY: the C contract: `p` is NULL or a live publisher handle.
    value(|| match unsafe { p.as_ref() } {
        Some(p) => Ok(p.0.ready_subscriber_count() as c_int),
        None => Err(Error::invalid("publisher is NULL")),
    })
}

/// Number of admitted subscribers, or a negative error.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_subscriber_count(p: *const CPublisher) -> c_int {
    // SAFETY: the C contract: `p` is NULL or a live publisher handle.
    value(|| match unsafe { p.as_ref() } {
        Some(p) => Ok(p.0.subscriber_count() as c_int),
        None => Err(Error::invalid("publisher is NULL")),
    })
}

/// Up to `max` subscribers' statistics into `infos`; returns how many were written.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `infos` is NULL or
/// writable for `max` elements.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_subscribers(
    p: *const CPublisher,
    infos: *mut CSubscriberInfo,
    max: c_int,
) -> c_int {
    value(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle.
        let Some(p) = (unsafe { p.as_ref() }) else {
            return Err(Error::invalid("publisher is NULL"));
        };
        if infos.is_null() || max <= 0 {
            return Ok(0);
        }
        let mut n = 0;
        for s in p.0.subscribers().into_iter().take(max as usize) {
            let mut name = [0 as c_char; 32];
            for (d, b) in name.iter_mut().zip(s.name.bytes().take(31)) {
                *d = b as c_char;
            }
            let info = CSubscriberInfo {
                bit: s.bit as u32,
                pid: s.pid,
                name,
                wants_frames: s.wants_frames as u32,
                wants_packets: s.wants_packets as u32,
                lag: s.lag,
                last_seen_seq: s.last_seen_seq,
                last_ack_ns: s.last_ack_ns,
                delivered: s.delivered,
                dropped_overrun: s.dropped_overrun,
                dropped_torn: s.dropped_torn,
            };
            // SAFETY: the C contract: `infos` (not NULL, checked above) is writable for `max`
            // elements, and n < max (`take`). `write` drops nothing there.
            unsafe { infos.add(n).write(info) };
            n += 1;
        }
        Ok(n as c_int)
    })
}

/// CUDA rings: publish a slot written by GPU work on `cuda_stream` (a CUstream; NULL = the
/// legacy default stream). The stream is synchronised first (§5).
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `slot` is NULL or
/// points to an initialised `CSlot`; `cuda_stream` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_publish_after_stream(
    p: *mut CPublisher,
    slot: *const CSlot,
    cuda_stream: *mut std::ffi::c_void,
    pts_ns: i64,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle, `slot` NULL or a
        // valid cuframes_slot_t.
        let (p, slot) = unsafe { (input(p, "publisher")?, input(slot, "slot")?) };
        // SAFETY: the C contract: `cuda_stream` is NULL or a live CUstream of the current
        // context (cuframes.h); NULL is the ring's own context's legacy stream.
        let stream = unsafe { CudaStream::from_raw_or_none(cuda_stream) };
        p.0.publish_after_stream(to_core_slot(slot)?, stream, pts(pts_ns))
            .map(|_| ())
    })
}

/// CUDA rings: publish a slot written by GPU work on `cuda_stream` without waiting for it: the
/// frame becomes visible when the stream's work so far has completed, and this returns at once
/// (cuframes.h).
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `slot` is NULL or
/// points to an initialised `CSlot`; `cuda_stream` is NULL, `CU_STREAM_LEGACY` or a live
/// CUstream of the current context.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_publish_on_stream(
    p: *mut CPublisher,
    slot: *const CSlot,
    cuda_stream: *mut std::ffi::c_void,
    pts_ns: i64,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle, `slot` NULL or a
        // valid cuframes_slot_t.
        let (p, slot) = unsafe { (input(p, "publisher")?, input(slot, "slot")?) };
        // SAFETY: the C contract: `cuda_stream` is NULL/CU_STREAM_LEGACY with a context of
        // the ring's device current, or a live CUstream of the current context (cuframes.h).
        let stream = unsafe { CudaStream::from_raw(cuda_stream) };
        p.0.publish_on_stream(to_core_slot(slot)?, stream, pts(pts_ns))
            .map(|_| ())
    })
}

/// CUDA rings: `cuframes_publisher_publish_device` without waiting: the copy and the
/// publication are queued on `cuda_stream` (cuframes.h).
///
/// # Safety
/// As for `cuframes_publisher_publish_device`, with the source planes unchanged until the
/// stream has run the copy.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_publish_device_async(
    p: *mut CPublisher,
    planes: *const u64,
    pitches: *const usize,
    plane_count: c_int,
    cuda_stream: *mut std::ffi::c_void,
    pts_ns: i64,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle.
        let p = unsafe { input(p, "publisher") }?;
        // SAFETY: the C contract: arrays of `plane_count` elements or NULL (checked there).
        let (planes, pitches) = unsafe { plane_arrays(planes, pitches, plane_count) }?;
        // SAFETY: the C contract: `cuda_stream` is NULL (the ring's own stream) or a live
        // CUstream of the current context; each plane device memory of its rows at its
        // pitch, unchanged until the stream has run the copy (cuframes.h).
        unsafe {
            let stream = CudaStream::from_raw_or_none(cuda_stream);
            p.0.publish_device_planes_on_stream(planes, pitches, stream, pts(pts_ns))
        }
        .map(|_| ())
    })
}

/// The plane and pitch arrays of a device publish: `plane_count` (1..=3) elements each.
///
/// # Safety
/// `planes` and `pitches` are NULL or arrays of `plane_count` elements, unwritten while the
/// returned slices live.
unsafe fn plane_arrays<'a>(
    planes: *const u64,
    pitches: *const usize,
    plane_count: c_int,
) -> Result<(&'a [u64], &'a [usize])> {
    let n = usize::try_from(plane_count).map_err(|_| Error::invalid("plane_count"))?;
    if planes.is_null() || pitches.is_null() || n == 0 || n > 3 {
        return Err(Error::invalid(
            "planes/pitches NULL or plane_count not in 1..3",
        ));
    }
    // SAFETY: the caller's contract: arrays of `plane_count` = n elements (checked non-NULL
    // above), unwritten while the slices live.
    Ok(unsafe {
        (
            std::slice::from_raw_parts(planes, n),
            std::slice::from_raw_parts(pitches, n),
        )
    })
}

/// CUDA rings: copy a frame from device memory (one CUdeviceptr and pitch per plane),
/// ordered after earlier work on `cuda_stream` (NULL: the library's stream), and publish it.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `planes` is NULL or
/// holds `plane_count` elements; `pitches` is NULL or holds `plane_count` elements;
/// `cuda_stream` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_publish_device(
    p: *mut CPublisher,
    planes: *const u64,
    pitches: *const usize,
    plane_count: c_int,
    cuda_stream: *mut std::ffi::c_void,
    pts_ns: i64,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle.
        let p = unsafe { input(p, "publisher") }?;
        // SAFETY: the C contract: arrays of `plane_count` elements or NULL (checked there).
        let (planes, pitches) = unsafe { plane_arrays(planes, pitches, plane_count) }?;
        // SAFETY: the C contract: `cuda_stream` is NULL (the library's stream) or a live
        // CUstream of the current context, each plane device memory of its rows at its pitch
        // (cuframes.h).
        unsafe {
            let stream = CudaStream::from_raw_or_none(cuda_stream);
            p.0.publish_device_planes(planes, pitches, stream, pts(pts_ns))
        }
        .map(|_| ())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cuframes_publisher_open_shared` while another thread destroys the key's last handle
    /// (the filter and the muxer of one ffmpeg command closing and reopening): the open
    /// waits for that publisher's end and makes a new one, instead of failing with
    /// ALREADY_EXISTS ("share that publisher": exactly what it asked for).
    #[test]
    fn open_shared_beside_a_destroy_on_another_thread_succeeds() {
        let n = cuframes_core::testing::unique_suffix() & 0xFF_FFFF;
        let dir = std::env::temp_dir().join(format!("cuframes-shared-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = std::ffi::CString::new(format!("shared-{}-{n}", std::process::id())).unwrap();
        let dir_c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
        let failures = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..300 {
                        // SAFETY: a zeroed options struct filled by options_default; the
                        // strings outlive the calls; the handle is destroyed once.
                        unsafe {
                            let mut opts = std::mem::zeroed::<CPublisherOptions>();
                            cuframes_publisher_options_default(&mut opts);
                            opts.runtime_dir = dir_c.as_ptr();
                            let mut p = std::ptr::null_mut();
                            if cuframes_publisher_open_shared(key.as_ptr(), &opts, &mut p) != 0 {
                                failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                continue;
                            }
                            // A ring makes the end take a while (as a filter's does).
                            let mut cfg = std::mem::zeroed::<CFrameRingConfig>();
                            cuframes_frame_ring_config_default(&mut cfg);
                            (cfg.width, cfg.height) = (64, 32);
                            let _ = cuframes_publisher_enable_frames(p, &cfg);
                            let (y, uv) = (vec![0u8; 64 * 32], vec![0u8; 64 * 16]);
                            let planes = [y.as_ptr(), uv.as_ptr()];
                            let _ = cuframes_publisher_publish_host(
                                p,
                                planes.as_ptr(),
                                [64usize, 64].as_ptr(),
                                2,
                                i64::MIN,
                            );
                            cuframes_publisher_destroy(p);
                        }
                    }
                });
            }
        });
        let _ = std::fs::remove_dir_all(&dir);
        let name = key.to_str().unwrap();
        let _ = cuframes_core::shm::unlink(&format!("cuframes-{name}"));
        assert_eq!(
            failures.into_inner(),
            0,
            "opens failed while another thread destroyed the last handle"
        );
    }

    /// A C caller's stride is not trusted: one whose rows do not fit in memory is refused
    /// with INVALID_ARG naming the plane, never wrapped into a small span that a buffer of
    /// the wrong size passes.
    #[test]
    fn a_stride_whose_rows_overflow_is_refused() {
        let n = cuframes_core::testing::unique_suffix() & 0xFF_FFFF;
        let dir = std::env::temp_dir().join(format!("cuframes-stride-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = format!("stride-{}-{n}", std::process::id());
        let options = PublisherOptions {
            runtime_dir: Some(dir.clone()),
            ..Default::default()
        };
        let publisher = Publisher::create(&key, options).unwrap();
        publisher
            .enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
            .unwrap();
        let mut p = CPublisher(Arc::new(publisher));
        let (y, uv) = (vec![0u8; 64 * 32], vec![0u8; 64 * 16]);
        let planes = [y.as_ptr(), uv.as_ptr()];
        // 31 rows of this stride wrap around to 15 bytes.
        let strides = [usize::MAX / 31 + 1, 64];
        assert_eq!(strides[0].wrapping_mul(31), 15);
        // SAFETY: `p` is a live handle; `planes` and `strides` hold 2 elements each.
        let rc = unsafe {
            cuframes_publisher_publish_host(&mut p, planes.as_ptr(), strides.as_ptr(), 2, 0)
        };
        // SAFETY: NUL-terminated, this thread's, copied before the next call.
        let message = unsafe { std::ffi::CStr::from_ptr(crate::cuframes_last_error()) }
            .to_string_lossy()
            .into_owned();
        drop(p);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(rc, ErrorCode::InvalidArg as c_int, "{message}");
        assert!(
            message.contains("plane 0") && message.contains("stride"),
            "{message}"
        );
    }
}
