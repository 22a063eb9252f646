//! A snapshot of a packet ring (§10.2, §10.4) read through a read-only mapping. The header is
//! checked by the readers' own [`check_header`]; every other value is checked here. A corrupt
//! object is an error, never a panic.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use core::mem::offset_of;

use super::objects::open_readonly;
use crate::error::{Error, Result};
use crate::packet_ring::shm_region::{check_header, Geometry};
use crate::shm::Mapping;
use crate::wire::packet::{
    packet_data_offset, packet_slot_offset, PacketRingHeader, PacketSlotEntry,
};
use crate::wire::{
    CODEC_ID_AV1, CODEC_ID_H264, CODEC_ID_HEVC, INVALID_SEQ, MAX_PACKET_RING_SLOTS, NO_PTS,
};

/// What a packet SHM object says, at one instant.
#[derive(Debug, Clone)]
pub struct PacketSnapshot {
    /// The object's name relative to /dev/shm.
    pub shm_name: String,
    /// Size of the whole object in bytes.
    pub size: usize,
    /// The publisher's pid, as it recorded it.
    pub producer_pid: u64,
    /// Slots in the ring.
    pub ring_slots: u32,
    /// Bytes of the data ring.
    pub data_size: u32,
    /// `AV_CODEC_ID_*` of the stream.
    pub codec_id: u32,
    /// Bytes of codec extradata in the header.
    pub extradata_size: u32,
    /// Seq of the newest packet (0 = none yet, R18).
    pub global_seq: u64,
    /// Seq of the newest KEY packet (0 = none yet).
    pub last_keyframe_seq: u64,
    /// Payload bytes written since creation (absolute cursor of the data ring).
    pub write_offset: u64,
    /// Whether the publisher has set the shutdown flag.
    pub shutdown: bool,
    /// pts of the newest packet and of the newest keyframe, when their slots still hold
    /// them and they have one (R25).
    pub newest_pts_ns: Option<i64>,
    /// pts of the newest keyframe (see `newest_pts_ns`).
    pub keyframe_pts_ns: Option<i64>,
    /// The newest keyframe is still in the ring. A late subscriber starts from it either way:
    /// from the ring, or from the publisher's GOP store when the ring has lost it.
    pub keyframe_in_ring: bool,
    /// Oddities that do not stop the snapshot.
    pub warnings: Vec<String>,
    /// When the snapshot was taken (for rates between two).
    pub taken: Instant,
}

impl PacketSnapshot {
    /// The codec's name (see [`codec_name`]).
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
    // The readers' own header checks (an object bigger than its geometry is refused by a
    // reader, only warned about here).
    let header = check_header(map, obj.size).map_err(|e| corrupt(name, e.message()))?;
    let taken = Instant::now();
    let u64_at = |off: usize| map.load_u64(off, Ordering::Acquire);
    let mut warnings = Vec::new();
    let Geometry {
        ring_slots,
        data_size,
    } = header.geometry;
    let need = header.geometry.shm_size();
    if obj.size > need {
        warnings.push(format!(
            "object is {} bytes, {} more than its geometry needs (readers refuse it)",
            obj.size,
            obj.size - need
        ));
    }
    let extradata_size = header.extradata_size;
    let codec_id = header.codec_id;
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
