//! Field offsets of the packet SHM (§10.2, §10.4) and the checks that make a mapping safe to
//! use.
//!
//! Nothing hands out references to the mapped structs: the other process writes them while we
//! read, so every field is accessed as an atomic at the offset computed here (the structs of
//! [`crate::wire::packet`] define the offsets and are asserted against the spec there).
//!
//! The geometry (`ring_slots`, `data_size`) is read **once** and cached in [`Geometry`]: a
//! reader never re-reads it from the SHM, so a peer that rewrites the header later cannot make
//! us index outside the mapping. The mapping's length must equal `packet_shm_size` of that
//! geometry, which makes every `slot_offset`/`data_base + i` (with `i < data_size`) in bounds.

use core::mem::offset_of;
use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::shm::Mapping;
use crate::wire::packet::{
    packet_data_offset, packet_shm_size, packet_slot_offset, PacketRingHeader, PacketSlotEntry,
    PACKET_HEADER_SIZE,
};
use crate::wire::{
    FRAME_MAGIC, LEGACY_FRAME_MAGIC, MAX_EXTRADATA_SIZE, MAX_PACKET_RING_SLOTS, PACKET_MAGIC,
    PROTOCOL_VERSION,
};

/// Offset of the header's `magic`.
pub const HDR_MAGIC: usize = offset_of!(PacketRingHeader, magic);
/// Offset of the header's `proto_version`.
pub const HDR_PROTO_VERSION: usize = offset_of!(PacketRingHeader, proto_version);
/// Offset of the header's `ring_slots`.
pub const HDR_RING_SLOTS: usize = offset_of!(PacketRingHeader, ring_slots);
/// Offset of the header's `data_size`.
pub const HDR_DATA_SIZE: usize = offset_of!(PacketRingHeader, data_size);
/// Offset of the header's `codec_id`.
pub const HDR_CODEC_ID: usize = offset_of!(PacketRingHeader, codec_id);
/// Offset of the header's `codec_extradata_size`.
pub const HDR_EXTRADATA_SIZE: usize = offset_of!(PacketRingHeader, codec_extradata_size);
/// Offset of the header's `producer_pid`.
pub const HDR_PRODUCER_PID: usize = offset_of!(PacketRingHeader, producer_pid);
/// Also the R13 futex word (its low 32 bits; little-endian, so the same address).
pub const HDR_GLOBAL_SEQ: usize = offset_of!(PacketRingHeader, global_seq);
/// Offset of the header's `last_keyframe_seq`.
pub const HDR_LAST_KEYFRAME_SEQ: usize = offset_of!(PacketRingHeader, last_keyframe_seq);
/// Offset of the header's `write_offset`.
pub const HDR_WRITE_OFFSET: usize = offset_of!(PacketRingHeader, write_offset);
/// Offset of the header's `shutdown_flag`.
pub const HDR_SHUTDOWN_FLAG: usize = offset_of!(PacketRingHeader, shutdown_flag);
/// Offset of the header's `codec_extradata`.
pub const HDR_EXTRADATA: usize = offset_of!(PacketRingHeader, codec_extradata);

/// Offset of a slot's `seq`.
pub const SLOT_SEQ: usize = offset_of!(PacketSlotEntry, seq);
/// Offset of a slot's `pts_ns`.
pub const SLOT_PTS: usize = offset_of!(PacketSlotEntry, pts_ns);
/// Offset of a slot's `dts_ns`.
pub const SLOT_DTS: usize = offset_of!(PacketSlotEntry, dts_ns);
/// Offset of a slot's `data_offset`.
pub const SLOT_DATA_OFFSET: usize = offset_of!(PacketSlotEntry, data_offset);
/// Offset of a slot's `data_size`.
pub const SLOT_DATA_SIZE: usize = offset_of!(PacketSlotEntry, data_size);
/// Offset of a slot's `flags`.
pub const SLOT_FLAGS: usize = offset_of!(PacketSlotEntry, flags);

/// The validated, cached shape of one packet ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// 1..=1024.
    pub ring_slots: u32,
    /// > 0.
    pub data_size: u32,
}

impl Geometry {
    /// Offset of the slot that holds `seq` (R18: `seq % ring_slots`).
    pub fn slot_offset(&self, seq: u64) -> usize {
        packet_slot_offset((seq % u64::from(self.ring_slots)) as usize)
    }

    /// Offset of byte 0 of the data ring.
    pub fn data_base(&self) -> usize {
        packet_data_offset(self.ring_slots as usize)
    }

    /// Total size of the SHM object (§10.2).
    pub fn shm_size(&self) -> usize {
        packet_shm_size(self.ring_slots as usize, self.data_size as usize)
    }

    /// The one or two mapping ranges `(offset, len)` that hold `len` bytes starting at the
    /// absolute cursor `cursor` (§10.4: the data ring wraps; the second range is empty when
    /// no wrap is needed). `len` must be `<= data_size`.
    pub fn data_ranges(&self, cursor: u64, len: usize) -> [(usize, usize); 2] {
        let ds = self.data_size as usize;
        debug_assert!(len <= ds);
        let idx = (cursor % u64::from(self.data_size)) as usize;
        let first = len.min(ds - idx);
        [
            (self.data_base() + idx, first),
            (self.data_base(), len - first),
        ]
    }
}

/// Check a writer's requested geometry and extradata (InvalidArg with what is wrong).
pub fn validate_config(ring_slots: u32, data_size: u32, extradata_len: usize) -> Result<Geometry> {
    if ring_slots == 0 || ring_slots > MAX_PACKET_RING_SLOTS {
        return Err(Error::invalid(format!(
            "packet ring_slots {ring_slots} is out of range 1..={MAX_PACKET_RING_SLOTS}"
        )));
    }
    if data_size == 0 {
        return Err(Error::invalid("packet data_size must be > 0"));
    }
    if extradata_len > MAX_EXTRADATA_SIZE {
        return Err(Error::invalid(format!(
            "codec extradata is {extradata_len} bytes; at most {MAX_EXTRADATA_SIZE} fit in the \
             packet ring's header"
        )));
    }
    Ok(Geometry {
        ring_slots,
        data_size,
    })
}

/// What [`check_header`] found in a packet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderCheck {
    /// The ring's validated shape.
    pub geometry: Geometry,
    /// `AV_CODEC_ID_*` of the stream.
    pub codec_id: u32,
    /// `codec_extradata_size`, checked against [`MAX_EXTRADATA_SIZE`].
    pub extradata_size: u32,
}

/// The checks of a packet header, for readers ([`validate_header`]) and the operator tool
/// (`inspect`) alike: `size` is the size of the whole object, `map` a mapping of at least its
/// first `min(size, PACKET_HEADER_SIZE)` bytes (the inspector maps only the header and
/// slots). The object must be at least as big as its geometry needs; whether a bigger one is
/// acceptable is the caller's call (readers refuse it, the inspector warns).
/// Errors are `Protocol` and say which field is wrong.
pub fn check_header(map: &Mapping, size: usize) -> Result<HeaderCheck> {
    let readable = size.min(map.len());
    let magic = (readable >= 4).then(|| map.load_u32(HDR_MAGIC, Ordering::Acquire));
    if readable < PACKET_HEADER_SIZE {
        let magic_note = match magic {
            Some(PACKET_MAGIC) => String::new(),
            Some(m) => format!(" (and its magic {m:#010x} is not the packet-ring magic)"),
            None => String::new(),
        };
        return Err(Error::protocol(format!(
            "packet SHM is {size} bytes, smaller than its {PACKET_HEADER_SIZE}-byte header\
             {magic_note}"
        )));
    }
    match magic.unwrap_or(0) {
        PACKET_MAGIC => {}
        FRAME_MAGIC => {
            return Err(Error::protocol(format!(
                "SHM has the frame-ring magic {FRAME_MAGIC:#010x}, not the packet-ring magic \
                 {PACKET_MAGIC:#010x}: this is a frame ring, not a packet ring"
            )))
        }
        LEGACY_FRAME_MAGIC => {
            return Err(Error::protocol(format!(
                "SHM has the legacy (protocol v1-v3) frame magic {LEGACY_FRAME_MAGIC:#010x}: \
                 the publisher must be upgraded to protocol v4"
            )))
        }
        other => {
            return Err(Error::protocol(format!(
                "bad packet-ring magic {other:#010x} (expected {PACKET_MAGIC:#010x})"
            )))
        }
    }
    let version = map.load_u32(HDR_PROTO_VERSION, Ordering::Relaxed);
    if version != PROTOCOL_VERSION {
        return Err(Error::protocol(format!(
            "packet ring has proto_version {version}; this library speaks {PROTOCOL_VERSION}"
        )));
    }
    let ring_slots = map.load_u32(HDR_RING_SLOTS, Ordering::Relaxed);
    if ring_slots == 0 || ring_slots > MAX_PACKET_RING_SLOTS {
        return Err(Error::protocol(format!(
            "packet ring_slots {ring_slots} is out of range 1..={MAX_PACKET_RING_SLOTS}"
        )));
    }
    let data_size = map.load_u32(HDR_DATA_SIZE, Ordering::Relaxed);
    if data_size == 0 {
        return Err(Error::protocol("packet ring data_size is 0"));
    }
    let geometry = Geometry {
        ring_slots,
        data_size,
    };
    if size < geometry.shm_size() {
        return Err(size_mismatch(size, geometry));
    }
    let extradata_size = map.load_u32(HDR_EXTRADATA_SIZE, Ordering::Acquire);
    if extradata_size as usize > MAX_EXTRADATA_SIZE {
        return Err(Error::protocol(format!(
            "codec_extradata_size {extradata_size} exceeds {MAX_EXTRADATA_SIZE}"
        )));
    }
    let codec_id = map.load_u32(HDR_CODEC_ID, Ordering::Relaxed);
    Ok(HeaderCheck {
        geometry,
        codec_id,
        extradata_size,
    })
}

fn size_mismatch(size: usize, geo: Geometry) -> Error {
    Error::protocol(format!(
        "packet SHM is {size} bytes but ring_slots {} and data_size {} need exactly {}",
        geo.ring_slots,
        geo.data_size,
        geo.shm_size()
    ))
}

/// Everything a reader checks in a mapped header before it touches anything else:
/// [`check_header`] of the whole mapping, whose length must also be exactly what the geometry
/// needs (that makes every offset of [`Geometry`] in bounds). Errors are `Protocol`.
pub fn validate_header(map: &Mapping) -> Result<(Geometry, u32)> {
    let h = check_header(map, map.len())?;
    if map.len() != h.geometry.shm_size() {
        return Err(size_mismatch(map.len(), h.geometry));
    }
    Ok((h.geometry, h.codec_id))
}

/// Read the extradata (size field acquired, then the bytes), validating the size.
pub fn read_extradata(map: &Mapping) -> Result<Vec<u8>> {
    let size = map.load_u32(HDR_EXTRADATA_SIZE, Ordering::Acquire) as usize;
    if size > MAX_EXTRADATA_SIZE {
        return Err(Error::protocol(format!(
            "codec_extradata_size {size} exceeds {MAX_EXTRADATA_SIZE}"
        )));
    }
    let mut out = vec![0u8; size];
    map.read_bytes(HDR_EXTRADATA, &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem(len: usize) -> Mapping {
        let fd = crate::shm::memfd("layout-test", len).unwrap();
        Mapping::map(std::os::fd::AsFd::as_fd(&fd), len, true, "layout test").unwrap()
    }

    /// The reader and the inspector share one header check: on an object smaller than a
    /// header it names both faults (the size and the magic), and only the reader's exact-size
    /// rule differs (an object bigger than its geometry is refused by the reader, shown by the
    /// inspector).
    #[test]
    fn one_header_check_for_readers_and_the_inspector() {
        let tiny = mem(256);
        let e = check_header(&tiny, 256).unwrap_err();
        assert!(e.message().contains("smaller than"), "{e}");
        assert!(e.message().contains("magic 0x00000000"), "{e}");
        assert_eq!(validate_header(&tiny).unwrap_err().message(), e.message());

        let need = packet_shm_size(4, 256);
        let big = mem(need + 4096);
        big.atomic_u32(HDR_MAGIC)
            .store(PACKET_MAGIC, Ordering::Relaxed);
        big.atomic_u32(HDR_PROTO_VERSION)
            .store(PROTOCOL_VERSION, Ordering::Relaxed);
        big.atomic_u32(HDR_RING_SLOTS).store(4, Ordering::Relaxed);
        big.atomic_u32(HDR_DATA_SIZE).store(256, Ordering::Relaxed);
        big.atomic_u32(HDR_EXTRADATA_SIZE)
            .store(7, Ordering::Relaxed);
        let h = check_header(&big, need + 4096).unwrap();
        assert_eq!(h.geometry.shm_size(), need);
        assert_eq!(h.extradata_size, 7);
        let e = validate_header(&big).unwrap_err();
        assert!(e.message().contains("need exactly"), "{e}");
        // Smaller than the geometry: both refuse, with the same words.
        let e = check_header(&big, need - 1).unwrap_err();
        assert!(e.message().contains("need exactly"), "{e}");
    }

    #[test]
    fn ranges_split_on_wrap() {
        let g = Geometry {
            ring_slots: 4,
            data_size: 100,
        };
        let b = g.data_base();
        assert_eq!(g.data_ranges(10, 20), [(b + 10, 20), (b, 0)]);
        assert_eq!(g.data_ranges(190, 20), [(b + 90, 10), (b, 10)]);
        assert_eq!(g.data_ranges(300, 100), [(b, 100), (b, 0)]);
        assert_eq!(g.data_ranges(u64::MAX, 100), [(b + 15, 85), (b, 15)]);
        assert_eq!(g.slot_offset(5), packet_slot_offset(1));
    }

    #[test]
    fn config_limits() {
        assert!(validate_config(1, 1, 0).is_ok());
        assert!(validate_config(1024, u32::MAX, 4096).is_ok());
        for (s, d, e) in [(0, 1, 0), (1025, 1, 0), (1, 0, 0), (1, 1, 4097)] {
            assert_eq!(
                validate_config(s, d, e).unwrap_err().code(),
                crate::ErrorCode::InvalidArg
            );
        }
    }
}
