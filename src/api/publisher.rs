//! `cuframes_publisher_t`: the publisher handle of the C API: options, create (one publisher
//! per key and process, shared by the components of one ffmpeg command), destroy, and what
//! its subscribers do (counts, statistics, where frames waited). Its frame ring is in
//! `frame_ring.rs` and `cuda_publish.rs`, its packet ring in `packet.rs`.

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use cuframes_core::publisher::{
    Publisher, PublisherOptions, DEFAULT_MAX_SUBSCRIBERS_PER_PID, DEFAULT_MAX_SUBSCRIBERS_PER_UID,
};
use cuframes_core::{Error, ErrorCode, Result};

use crate::ffi::args::{input, opt_path, out, str_arg};
use crate::ffi::{guard, status, value};

/// Opaque `cuframes_publisher_t`: a shared reference to the process's publisher of a key.
pub struct CPublisher(pub(crate) Arc<Publisher>);

/// Mirrors `cuframes_publisher_options_t`.
#[repr(C)]
pub struct CPublisherOptions {
    /// Directory of the socket; NULL: `$CUFRAMES_RUNTIME_DIR`, else /run/cuframes (R16).
    pub runtime_dir: *const c_char,
    /// Mode of the socket and SHM objects; 0 = 0660.
    pub file_mode: u32,
    /// Only this uid (or root) may subscribe; -1 = any.
    pub allowed_uid: i64,
    /// Only this gid (or root) may subscribe; -1 = any.
    pub allowed_gid: i64,
    /// A peer silent this long in the middle of a handshake is dropped; 0 = 5000.
    pub handshake_timeout_ms: u32,
    /// Non-zero: admit frame subscribers without ACK pages (plain protocol v4 peers).
    pub allow_legacy_subscribers: u32,
    /// Subscribers the processes of one uid may hold at once; 0 = the default.
    pub max_subscribers_per_uid: u32,
    /// Subscribers one process may hold at once; 0 = the default.
    pub max_subscribers_per_pid: u32,
}

/// Mirrors `cuframes_subscriber_info_t`.
#[repr(C)]
pub struct CSubscriberInfo {
    /// The subscriber's bit: 1..31.
    pub bit: u32,
    /// Its process id.
    pub pid: u32,
    /// Its name, NUL-terminated.
    pub name: [c_char; 32],
    /// 1 if it reads frames.
    pub wants_frames: u32,
    /// 1 if it reads packets.
    pub wants_packets: u32,
    /// The publisher's seq minus the subscriber's last ACK.
    pub lag: u64,
    /// The last seq it ACKed.
    pub last_seen_seq: u64,
    /// CLOCK_REALTIME of its last ACK, in ns; 0 = none.
    pub last_ack_ns: i64,
    /// Frames it received.
    pub delivered: u64,
    /// Frames overwritten before it read them.
    pub dropped_overrun: u64,
    /// Frames rewritten while it copied them.
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
                    format!("this process already publishes {key:?}; share it with cuframes_publisher_open_shared"),
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

/// Mirrors `cuframes_publisher_wait_stats_t`: where the frame ring's frames waited.
#[repr(C)]
pub struct CPublisherWaitStats {
    /// Acquires that waited for subscribers' ACKs (STRICT_WAIT).
    pub ack_waits: u64,
    /// Their time in all, in ns.
    pub ack_wait_ns: u64,
    /// Waits for a publication still queued on a CUDA stream.
    pub publication_waits: u64,
    /// Their time in all, in ns.
    pub publication_wait_ns: u64,
    /// Publications made by a host function on a CUDA stream.
    pub stream_publications: u64,
    /// Their time in all, in ns (each holds up its stream).
    pub stream_publication_ns: u64,
    /// The longest of them, in ns.
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

/// Frame subscribers that can read (`cuframes_publisher_ready_subscriber_count` without the
/// packet readers of the same key), or a negative error: what a frame publisher waits for.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_ready_frame_subscriber_count(
    p: *const CPublisher,
) -> c_int {
    // SAFETY: the C contract: `p` is NULL or a live publisher handle.
    value(|| match unsafe { p.as_ref() } {
        Some(p) => Ok(p.0.ready_frame_subscriber_count() as c_int),
        None => Err(Error::invalid("publisher is NULL")),
    })
}

/// Admitted packet subscribers (without the frame readers of the same key), or a negative
/// error: what a packet publisher waits for.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_packet_subscriber_count(p: *const CPublisher) -> c_int {
    // SAFETY: the C contract: `p` is NULL or a live publisher handle.
    value(|| match unsafe { p.as_ref() } {
        Some(p) => Ok(p.0.packet_subscriber_count() as c_int),
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
