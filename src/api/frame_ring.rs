//! A publisher's frame ring in the C API: its configuration, enabling and replacing it, and
//! publishing frames from host memory, either into a slot the caller writes (acquire, then
//! publish or abandon) or copied from the caller's planes.

use std::ffi::c_int;
use std::time::Duration;

use cuframes_core::publisher::{AcquiredSlot, FrameRingConfig, MemoryChoice};
use cuframes_core::wire::{Format, MemoryKind, Policy};
use cuframes_core::{Error, ErrorCode, Result};

use super::publisher::CPublisher;
use super::types::{CColour, CFrameLayout};
use crate::ffi::args::{input, out};
use crate::ffi::{guard, status};

/// Mirrors `cuframes_frame_ring_config_t`.
#[repr(C)]
pub struct CFrameRingConfig {
    /// Pixel format (`cuframes_format_t`).
    pub format: u32,
    /// Width in pixels: 1..16384.
    pub width: u32,
    /// Height in pixels: 1..16384.
    pub height: u32,
    /// Slots of the ring: 1..16.
    pub ring_size: u32,
    /// `CUFRAMES_POLICY_*`: drop the oldest frame, or wait for every subscriber.
    pub policy: u32,
    /// STRICT_WAIT: a subscriber whose ACK is this late is declared dead (R11).
    pub ack_timeout_ms: u32,
    /// `CUFRAMES_MEMORY_CUDA_VMM` or `CUFRAMES_MEMORY_HOST_MEMFD`.
    pub memory_kind: u32,
    /// CUDA device ordinal of a CUDA VMM ring.
    pub cuda_device: i32,
    /// The colour description announced to subscribers; `present` = 0: none.
    pub colour: CColour,
}

/// Mirrors `cuframes_slot_t`.
#[repr(C)]
pub struct CSlot {
    /// The seq the frame gets when this slot is published.
    pub seq: u64,
    /// Index of the slot in the ring.
    pub index: u32,
    /// `CUFRAMES_MEMORY_*` of the ring.
    pub memory_kind: u32,
    /// Where to write: a host pointer (host memory) or a CUdeviceptr (CUDA).
    pub address: u64,
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

/// The core's slot for a C caller's `cuframes_slot_t` (its memory kind checked).
pub(crate) fn to_core_slot(s: &CSlot) -> Result<AcquiredSlot> {
    Ok(AcquiredSlot {
        index: s.index as usize,
        seq: s.seq,
        address: s.address,
        memory_kind: MemoryKind::from_u32(s.memory_kind)
            .ok_or_else(|| Error::invalid("slot memory kind"))?,
    })
}

/// A frame's pts argument: INT64_MIN is none given (the publisher stamps the frame with the
/// time it is published).
pub(crate) fn pts(pts_ns: i64) -> Option<i64> {
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
