//! Fuzz the packet-ring reader (§10.7) on arbitrary SHM contents: a valid header whose
//! geometry, seqs, cursors, slots and data come from the input. The reader must never panic,
//! read out of bounds or return a packet larger than the data ring; errors, overruns and
//! timeouts are fine.
#![no_main]

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cuframes_core::packet_ring::shm_region::{
    HDR_DATA_SIZE, HDR_EXTRADATA_SIZE, HDR_GLOBAL_SEQ, HDR_LAST_KEYFRAME_SEQ, HDR_MAGIC,
    HDR_PRODUCER_PID, HDR_PROTO_VERSION, HDR_RING_SLOTS, HDR_SHUTDOWN_FLAG, HDR_WRITE_OFFSET,
};
use cuframes_core::packet_ring::PacketRingReader;
use cuframes_core::shm::{self, Mapping};
use cuframes_core::wire::packet::{packet_shm_size, packet_slot_offset};
use cuframes_core::wire::{PACKET_MAGIC, PROTOCOL_VERSION};
use libfuzzer_sys::fuzz_target;

fn u64_at(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    for (i, v) in b.iter_mut().enumerate() {
        *v = data.get(at + i).copied().unwrap_or(0);
    }
    u64::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 48 {
        return;
    }
    let slots = 1 + u32::from(data[0]) % 16;
    let data_size = 1 + u32::from(u16::from_le_bytes([data[1], data[2]])) % 4096;
    let len = packet_shm_size(slots as usize, data_size as usize);
    let fd = shm::memfd("cuframes-fuzz-pkt", len).unwrap();
    let rw = Mapping::map(fd.as_fd(), len, true, "fuzz ring").unwrap();
    rw.atomic_u32(HDR_MAGIC)
        .store(PACKET_MAGIC, Ordering::Relaxed);
    rw.atomic_u32(HDR_PROTO_VERSION)
        .store(PROTOCOL_VERSION, Ordering::Relaxed);
    rw.atomic_u32(HDR_RING_SLOTS)
        .store(slots, Ordering::Relaxed);
    rw.atomic_u32(HDR_DATA_SIZE)
        .store(data_size, Ordering::Relaxed);
    rw.atomic_u32(HDR_EXTRADATA_SIZE)
        .store(u32::from(data[3]) * 20, Ordering::Relaxed);
    // A live pid, so a wait never turns into Disconnected by liveness.
    rw.atomic_u64(HDR_PRODUCER_PID)
        .store(u64::from(std::process::id()), Ordering::Relaxed);
    rw.atomic_u64(HDR_GLOBAL_SEQ)
        .store(u64_at(data, 8), Ordering::Relaxed);
    rw.atomic_u64(HDR_LAST_KEYFRAME_SEQ)
        .store(u64_at(data, 16), Ordering::Relaxed);
    rw.atomic_u64(HDR_WRITE_OFFSET)
        .store(u64_at(data, 24), Ordering::Relaxed);
    rw.atomic_u64(HDR_SHUTDOWN_FLAG)
        .store(u64::from(data[4] & 1), Ordering::Relaxed);
    // Slots and data ring from the rest of the input (zeros after it).
    let body = &data[40..];
    let room = len - packet_slot_offset(0);
    rw.write_bytes(packet_slot_offset(0), &body[..body.len().min(room)]);

    let ro = Mapping::map(fd.as_fd(), len, false, "fuzz ring ro").unwrap();
    let Ok(mut reader) = PacketRingReader::from_mapping(ro) else {
        return;
    };
    let _ = reader.extradata();
    reader.set_overrun_errors(data[5] & 1 == 1);
    match data[6] % 3 {
        0 => reader.start_at_last_keyframe(),
        1 => reader.start_at(u64_at(data, 32)),
        _ => reader.start_at(u64_at(data, 8).saturating_sub(u64::from(data[7]))),
    }
    let mut out = Vec::new();
    for _ in 0..16 {
        if let Ok(p) = reader.next_packet(Some(Duration::ZERO), &mut out) {
            assert!(!out.is_empty() && out.len() <= data_size as usize);
            assert_eq!(p.flags & !0xF, 0);
        }
    }
});
