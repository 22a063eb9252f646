//! A snapshot of a packet ring (§10.2, §10.4) read through a read-only mapping, from the wire
//! layout alone. Every value is checked; a corrupt object is an error, never a panic.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use core::mem::offset_of;

use super::objects::open_readonly;
use crate::error::{Error, Result};
use crate::shm::Mapping;
use crate::wire::packet::{
    packet_data_offset, packet_shm_size, packet_slot_offset, PacketRingHeader, PacketSlotEntry,
    PACKET_HEADER_SIZE,
};
use crate::wire::{
    CODEC_ID_AV1, CODEC_ID_H264, CODEC_ID_HEVC, FRAME_MAGIC, INVALID_SEQ, LEGACY_FRAME_MAGIC,
    MAX_EXTRADATA_SIZE, MAX_PACKET_RING_SLOTS, NO_PTS, PACKET_MAGIC, PROTOCOL_VERSION,
};

/// What a packet SHM object says, at one instant.
#[derive(Debug, Clone)]
pub struct PacketSnapshot {
    pub shm_name: String,
    /// Size of the whole object in bytes.
    pub size: usize,
    pub producer_pid: u64,
    pub ring_slots: u32,
    /// Bytes of the data ring.
    pub data_size: u32,
    pub codec_id: u32,
    pub extradata_size: u32,
    /// Seq of the newest packet (0 = none yet, R18).
    pub global_seq: u64,
    /// Seq of the newest KEY packet (0 = none yet).
    pub last_keyframe_seq: u64,
    /// Payload bytes written since creation (absolute cursor of the data ring).
    pub write_offset: u64,
    pub shutdown: bool,
    /// pts of the newest packet and of the newest keyframe, when their slots still hold
    /// them and they have one (R25).
    pub newest_pts_ns: Option<i64>,
    pub keyframe_pts_ns: Option<i64>,
    /// The newest keyframe is still in the ring (a late subscriber can start from it).
    pub keyframe_in_ring: bool,
    pub warnings: Vec<String>,
    pub taken: Instant,
}

impl PacketSnapshot {
    pub fn codec_name(&self) -> String {
        codec_name(self.codec_id)
    }

    /// Packets published since the newest keyframe (`None` when there is none yet).
    pub fn keyframe_age_packets(&self) -> Option<u64> {
        (self.last_keyframe_seq > 0).then(|| self.global_seq.saturating_sub(self.last_keyframe_seq))
    }

    /// Stream time from the newest keyframe to the newest packet (pts difference), when
    /// both are still in the ring and have a pts.
    pub fn keyframe_age(&self) -> Option<Duration> {
        let (n, k) = (self.newest_pts_ns?, self.keyframe_pts_ns?);
        u64::try_from(n.checked_sub(k)?)
            .ok()
            .map(Duration::from_nanos)
    }
}

/// Short name of an FFmpeg codec id (§10.3).
pub fn codec_name(id: u32) -> String {
    match id {
        CODEC_ID_H264 => "h264".into(),
        CODEC_ID_HEVC => "hevc".into(),
        CODEC_ID_AV1 => "av1".into(),
        0 => "none".into(),
        other => format!("codec-{other}"),
    }
}

fn corrupt(name: &str, what: impl std::fmt::Display) -> Error {
    Error::protocol(format!("/dev/shm/{name} is corrupt: {what}"))
}

/// The pts of packet `seq` if slot `seq % ring_slots` holds it, read as a seqlock (the seq
/// before and after must both be `seq`).
fn slot_pts(map: &Mapping, ring_slots: u32, seq: u64) -> Option<i64> {
    if seq == 0 || seq == INVALID_SEQ {
        return None;
    }
    let off = packet_slot_offset((seq % ring_slots as u64) as usize);
    let seq_at = map.atomic_u64(off + offset_of!(PacketSlotEntry, seq));
    if seq_at.load(Ordering::Acquire) != seq {
        return None;
    }
    let pts = map.load_u64(off + offset_of!(PacketSlotEntry, pts_ns), Ordering::Relaxed) as i64;
    std::sync::atomic::fence(Ordering::Acquire);
    if seq_at.load(Ordering::Relaxed) != seq || pts == NO_PTS {
        return None;
    }
    Some(pts)
}

/// Snapshot `/dev/shm/<name>` (a packet SHM) read-only. Only the header and slots are mapped;
/// the data ring is never touched.
pub fn read_packet_shm(name: &str) -> Result<PacketSnapshot> {
    let max_map = packet_data_offset(MAX_PACKET_RING_SLOTS as usize);
    let obj = open_readonly(name, max_map)?;
    let map = &obj.map;
    if obj.size < 4 {
        return Err(corrupt(name, format!("it is only {} bytes", obj.size)));
    }
    let magic = map.load_u32(0, Ordering::Acquire);
    match magic {
        PACKET_MAGIC => {}
        FRAME_MAGIC | LEGACY_FRAME_MAGIC => {
            return Err(corrupt(
                name,
                format!("magic 0x{magic:08X} is a frame ring's, not the packet-ring magic"),
            ))
        }
        other => {
            return Err(corrupt(
                name,
                format!("magic 0x{other:08X} is not the packet-ring magic 0xCC7C1DCD"),
            ))
        }
    }
    if obj.size < PACKET_HEADER_SIZE {
        return Err(corrupt(
            name,
            format!(
                "it is {} bytes, smaller than the {PACKET_HEADER_SIZE}-byte header",
                obj.size
            ),
        ));
    }
    let taken = Instant::now();
    let u32_at = |off: usize| map.load_u32(off, Ordering::Acquire);
    let u64_at = |off: usize| map.load_u64(off, Ordering::Acquire);
    let mut warnings = Vec::new();
    let version = u32_at(offset_of!(PacketRingHeader, proto_version));
    if version != PROTOCOL_VERSION {
        return Err(corrupt(
            name,
            format!("proto_version {version}, not {PROTOCOL_VERSION}"),
        ));
    }
    let ring_slots = u32_at(offset_of!(PacketRingHeader, ring_slots));
    if ring_slots == 0 || ring_slots > MAX_PACKET_RING_SLOTS {
        return Err(corrupt(
            name,
            format!("ring_slots {ring_slots} is not in 1..={MAX_PACKET_RING_SLOTS}"),
        ));
    }
    let data_size = u32_at(offset_of!(PacketRingHeader, data_size));
    if data_size == 0 {
        return Err(corrupt(name, "data_size is 0"));
    }
    let need = packet_shm_size(ring_slots as usize, data_size as usize);
    if obj.size < need {
        return Err(corrupt(
            name,
            format!(
                "it is {} bytes but ring_slots {ring_slots} and data_size {data_size} need {need}",
                obj.size
            ),
        ));
    }
    if obj.size > need {
        warnings.push(format!(
            "object is {} bytes, {} more than its geometry needs",
            obj.size,
            obj.size - need
        ));
    }
    let extradata_size = u32_at(offset_of!(PacketRingHeader, codec_extradata_size));
    if extradata_size as usize > MAX_EXTRADATA_SIZE {
        return Err(corrupt(
            name,
            format!("codec_extradata_size {extradata_size} exceeds {MAX_EXTRADATA_SIZE}"),
        ));
    }
    let codec_id = u32_at(offset_of!(PacketRingHeader, codec_id));
    let producer_pid = u64_at(offset_of!(PacketRingHeader, producer_pid));
    // Keyframe first: a writer stores global_seq before last_keyframe_seq (§10.6), so this
    // order never sees a keyframe newer than the newest packet.
    let last_keyframe_seq = u64_at(offset_of!(PacketRingHeader, last_keyframe_seq));
    let global_seq = u64_at(offset_of!(PacketRingHeader, global_seq));
    let write_offset = u64_at(offset_of!(PacketRingHeader, write_offset));
    if last_keyframe_seq > global_seq {
        warnings.push(format!(
            "last_keyframe_seq {last_keyframe_seq} is beyond global_seq {global_seq}"
        ));
    }
    if global_seq > 0 && write_offset == 0 {
        warnings.push(format!(
            "global_seq is {global_seq} but write_offset is 0 (only empty packets?)"
        ));
    }
    let shutdown = match u64_at(offset_of!(PacketRingHeader, shutdown_flag)) {
        0 => false,
        1 => true,
        v => {
            warnings.push(format!("shutdown_flag is {v}, not 0 or 1"));
            true
        }
    };
    let newest_pts_ns = slot_pts(map, ring_slots, global_seq);
    let keyframe_pts_ns = slot_pts(map, ring_slots, last_keyframe_seq);
    let keyframe_in_ring = last_keyframe_seq > 0
        && map.load_u64(
            packet_slot_offset((last_keyframe_seq % ring_slots as u64) as usize)
                + offset_of!(PacketSlotEntry, seq),
            Ordering::Acquire,
        ) == last_keyframe_seq;
    Ok(PacketSnapshot {
        shm_name: name.to_owned(),
        size: obj.size,
        producer_pid,
        ring_slots,
        data_size,
        codec_id,
        extradata_size,
        global_seq,
        last_keyframe_seq,
        write_offset,
        shutdown,
        newest_pts_ns,
        keyframe_pts_ns,
        keyframe_in_ring,
        warnings,
        taken,
    })
}
