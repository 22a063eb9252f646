//! The packet ring in the C API: a publisher's ring of encoded packets (configure, enable,
//! publish) and a subscriber's reading of it (§10).

use std::ffi::{c_int, c_void};
use std::time::Duration;

use cuframes_core::packet_ring::{GopStoreConfig, PacketRingConfig};
use cuframes_core::{Error, ErrorCode};

use super::publisher::CPublisher;
use super::subscriber::CSubscriber;
use crate::ffi::args::{bytes, copy_out, input, out};
use crate::ffi::status;

/// Mirrors `cuframes_packet_ring_config_t`.
#[repr(C)]
pub struct CPacketRingConfig {
    /// `CUFRAMES_CODEC_ID_*`: H.264 27, HEVC 173, AV1 226 (wire values).
    pub codec_id: u32,
    /// Slots of the ring: 1..1024 (default 64).
    pub ring_slots: u32,
    /// Bytes of the data ring: the largest packet that fits (default 8 MiB).
    pub data_size: u32,
    /// Bytes at `extradata`: at most 4096; 0 = set later.
    pub extradata_size: u32,
    /// Annex B SPS/PPS(/VPS), or the AV1 sequence header OBU (R30); copied.
    pub extradata: *const u8,
}

/// Mirrors `cuframes_packet_info_t`.
#[repr(C)]
pub struct CPacketInfo {
    /// Seq of the packet.
    pub seq: u64,
    /// Presentation time in ns; INT64_MIN = none (R25).
    pub pts_ns: i64,
    /// Decoding time in ns; INT64_MIN = none.
    pub dts_ns: i64,
    /// `CUFRAMES_PACKET_FLAG_*`.
    pub flags: u32,
    /// Bytes of the packet.
    pub size: u32,
}

/// Mirrors `cuframes_packet_stats_t`.
#[repr(C)]
pub struct CPacketStats {
    /// Packets read.
    pub packets: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Times the reader was lapped and resumed on a keyframe (R9).
    pub overruns: u64,
    /// Seq of the last packet read.
    pub last_seq: u64,
    /// Packets skipped for exceeding the subscriber's `max_packet_size`.
    pub oversized: u64,
}

/// Defaults: codec 0 (set it), 64 slots, 8 MiB data ring, no extradata.
///
/// # Safety
/// The C contract (crate docs): `cfg` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_packet_ring_config_default(cfg: *mut CPacketRingConfig) {
    // SAFETY: the C contract: `cfg` is NULL or a writable cuframes_packet_ring_config_t.
    if let Some(c) = unsafe { cfg.as_mut() } {
        let d = PacketRingConfig::default();
        *c = CPacketRingConfig {
            codec_id: 0,
            ring_slots: d.ring_slots,
            data_size: d.data_size,
            extradata_size: 0,
            extradata: std::ptr::null(),
        };
    }
}

/// Add the packet ring (once).
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `cfg` is NULL or points
/// to an initialised `CPacketRingConfig` (its pointers, where set, follow the same rules).
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_enable_packets(
    p: *mut CPublisher,
    cfg: *const CPacketRingConfig,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle, `cfg` NULL or a
        // valid config whose `extradata` is readable for `extradata_size` bytes (copied
        // here, before the call returns).
        let (p, extradata, c) = unsafe {
            let p = input(p, "publisher")?;
            let c = input(cfg, "config")?;
            let e = bytes(c.extradata, c.extradata_size as usize, "extradata")?;
            (p, e.to_vec(), c)
        };
        p.0.enable_packets(PacketRingConfig {
            codec_id: c.codec_id,
            extradata,
            ring_slots: c.ring_slots,
            data_size: c.data_size,
        })
    })
}

/// Set the extradata once, before the first packet (§10.3).
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `data` is NULL or
/// readable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_set_packet_extradata(
    p: *mut CPublisher,
    data: *const u8,
    size: usize,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle, `data` readable
        // for `size` bytes during the call.
        let (p, data) = unsafe { (input(p, "publisher")?, bytes(data, size, "extradata")?) };
        p.0.set_packet_extradata(data)
    })
}

/// Size the GOP store (`bytes_per_gop` 0: keep none); only before the first packet.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_set_gop_store(
    p: *mut CPublisher,
    bytes_per_gop: u32,
    packets_per_gop: u32,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle.
        let p = unsafe { input(p, "publisher")? };
        let config = (bytes_per_gop != 0).then_some(GopStoreConfig {
            bytes_per_gop,
            packets_per_gop,
        });
        p.0.set_gop_store(config)
    })
}

/// Publish one packet; `seq_out` (may be NULL) receives its seq. Missing pts/dts: INT64_MIN.
///
/// # Safety
/// The C contract (crate docs): `p` is NULL or a live publisher handle; `data` is NULL or
/// readable for `size` bytes; `seq_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_publisher_publish_packet(
    p: *mut CPublisher,
    data: *const u8,
    size: usize,
    pts_ns: i64,
    dts_ns: i64,
    flags: u32,
    seq_out: *mut u64,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `p` is NULL or a live publisher handle, `data` readable
        // for `size` bytes during the call.
        let (p, data) = unsafe { (input(p, "publisher")?, bytes(data, size, "data")?) };
        let seq = p.0.publish_packet(data, pts_ns, dts_ns, flags)?;
        // SAFETY: the C contract: `seq_out` is NULL or a writable uint64_t.
        if let Some(s) = unsafe { seq_out.as_mut() } {
            *s = seq;
        }
        Ok(())
    })
}

/// The packet ring's codec id.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle; `codec_id` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_packet_codec(
    s: *const CSubscriber,
    codec_id: *mut u32,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle.
        let id = unsafe { input(s, "subscriber") }?
            .view()
            .packet_codec
            .ok_or_else(|| {
                Error::new(
                    cuframes_core::ErrorCode::NotFound,
                    "this subscriber did not ask for packets",
                )
            })?;
        // SAFETY: the C contract: `codec_id` is NULL or a writable uint32_t.
        *unsafe { out(codec_id, "codec_id") }? = id;
        Ok(())
    })
}

/// Copy the extradata into `buf` (capacity `cap`); `size` receives its size. NO_MEMORY when
/// `cap` is too small (then `size` says how much is needed). `buf` may be NULL to ask.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle; `buf` is NULL or
/// writable for `cap` bytes; `size` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_packet_extradata(
    s: *mut CSubscriber,
    buf: *mut u8,
    cap: usize,
    size: *mut usize,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle (taken shared: its
        // reading calls serialise themselves).
        let s = unsafe { input(s, "subscriber") }?;
        let extradata = s.read(|sub, _| sub.packet_extradata())?;
        // SAFETY: the C contract: `size` is NULL or writable, `buf` NULL or writable for
        // `cap` bytes; `extradata` is ours, so they do not overlap.
        unsafe { copy_out(&extradata, buf, cap, size) }
    })
}

/// The next packet. `*data` points at its bytes (`info->size` of them), owned by the
/// subscriber and valid until its next call. The first packet is a keyframe; after an
/// overrun the next one carries CUFRAMES_PACKET_FLAG_DISCONTINUITY (R9). TIMEOUT, or
/// DISCONNECTED once the publisher is gone and every packet was read.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle; `data` is NULL or
/// writable (the packet's bytes it receives stay valid until the next reading call on `s`);
/// `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_next_packet(
    s: *mut CSubscriber,
    timeout_ms: i64,
    data: *mut *const u8,
    info: *mut CPacketInfo,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle (taken shared: its
        // reading calls serialise themselves); `data` and `info` are NULL or writable, and
        // distinct from it.
        let (s, data, info) = unsafe {
            (
                input(s, "subscriber")?,
                out(data, "data")?,
                out(info, "info")?,
            )
        };
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        // The bytes stay in the handle's packet buffer, untouched until its next reading call.
        let (i, bytes, size) = s.read(|sub, buf| {
            sub.next_packet(timeout, buf)
                .map(|i| (i, buf.as_ptr(), buf.len()))
        })?;
        *data = bytes;
        *info = CPacketInfo {
            seq: i.seq,
            pts_ns: i.pts_ns,
            dts_ns: i.dts_ns,
            flags: i.flags,
            size: size as u32,
        };
        Ok(())
    })
}

/// The C callback of `cuframes_subscriber_next_packet_into`, as a packet sink.
struct CallbackSink {
    buffer: extern "C" fn(*mut c_void, usize) -> *mut u8,
    opaque: *mut c_void,
}

impl cuframes_core::packet_ring::PacketSink for CallbackSink {
    fn buffer(&mut self, len: usize) -> cuframes_core::Result<&mut [u8]> {
        let p = (self.buffer)(self.opaque, len);
        if p.is_null() {
            return Err(Error::new(
                ErrorCode::NoMemory,
                format!("the packet buffer callback gave no buffer for {len} bytes"),
            ));
        }
        // SAFETY: the C contract of cuframes_subscriber_next_packet_into: a non-NULL result
        // is writable for `len` bytes until the callback is called again or the call
        // returns, and nothing else touches it meanwhile; the slice lives no longer (it is
        // used for one copy within this read attempt).
        Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }
}

/// The next packet, copied once from the ring straight into the buffer `buffer(opaque, size)`
/// returns (cuframes.h).
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle; `buffer` is a function returning NULL or a buffer writable for `size` bytes until
/// its next call or the return of this one; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_next_packet_into(
    s: *mut CSubscriber,
    timeout_ms: i64,
    buffer: Option<extern "C" fn(*mut c_void, usize) -> *mut u8>,
    opaque: *mut c_void,
    info: *mut CPacketInfo,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle (taken shared: its
        // reading calls serialise themselves); `info` is NULL or writable, distinct from it.
        let (s, info) = unsafe { (input(s, "subscriber")?, out(info, "info")?) };
        let buffer = buffer.ok_or_else(|| Error::invalid("buffer callback is NULL"))?;
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        let mut sink = CallbackSink { buffer, opaque };
        let mut size = 0usize;
        let mut sized = SizeRecorder {
            inner: &mut sink,
            size: &mut size,
        };
        let i = s.read(|sub, _| sub.next_packet_into(timeout, &mut sized))?;
        *info = CPacketInfo {
            seq: i.seq,
            pts_ns: i.pts_ns,
            dts_ns: i.dts_ns,
            flags: i.flags,
            size: size as u32,
        };
        Ok(())
    })
}

/// A sink that remembers the size of the last buffer asked for (the packet delivered).
struct SizeRecorder<'a> {
    inner: &'a mut dyn cuframes_core::packet_ring::PacketSink,
    size: &'a mut usize,
}

impl cuframes_core::packet_ring::PacketSink for SizeRecorder<'_> {
    fn buffer(&mut self, len: usize) -> cuframes_core::Result<&mut [u8]> {
        *self.size = len;
        self.inner.buffer(len)
    }
}

/// Packet counters of this subscriber.
///
/// # Safety
/// The C contract (crate docs): `s` is NULL or a live subscriber handle; `stats` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn cuframes_subscriber_packet_stats(
    s: *const CSubscriber,
    stats: *mut CPacketStats,
) -> c_int {
    status(|| {
        // SAFETY: the C contract: `s` is NULL or a live subscriber handle.
        let st = unsafe { input(s, "subscriber") }?
            .view()
            .packet_stats
            .ok_or_else(|| {
                Error::new(
                    cuframes_core::ErrorCode::NotFound,
                    "this subscriber did not ask for packets",
                )
            })?;
        // SAFETY: the C contract: `stats` is NULL or a writable cuframes_packet_stats_t.
        *unsafe { out(stats, "stats") }? = CPacketStats {
            packets: st.packets,
            bytes: st.bytes,
            overruns: st.overruns,
            last_seq: st.last_seq,
            oversized: st.oversized,
        };
        Ok(())
    })
}
