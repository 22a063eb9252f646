//! The publisher side of the packet ring: create the SHM, publish packets (§10.6 as fixed by
//! R8, R18 and R29), wake sleepers (R13/R28), shut down.
//!
//! # Publish, step by step, and why
//!
//! The writer is the only process that writes the ring, so it keeps `global_seq`,
//! `write_offset` and `last_keyframe_seq` in private fields and only *stores* them to the SHM
//! (it never trusts what it would load back).
//!
//! 1. **Refuse before touching anything**: an empty payload, one larger than `data_size`
//!    (it would overwrite itself in the data ring), unknown flag bits (§10.5: bits 4..31 are
//!    reserved 0), or a publish after `shutdown`.
//! 2. `seq = global_seq + 1` (R18: the first packet is 1; `global_seq == 0` means "nothing
//!    yet"), slot `seq % ring_slots`.
//! 3. **R29**: store the slot's `seq = UINT64_MAX`. From here a reader that starts on this
//!    slot sees "not the seq I want" (overrun), and one that is in the middle of reading the
//!    slot's previous packet sees the seq change at its re-check.
//! 4. **R8**: store `write_offset = off + size` *before* copying the payload. Readers of older
//!    packets whose bytes this copy will overwrite then see, after their own copy, a
//!    `write_offset` that is more than `data_size` ahead of their packet and drop it.
//! 5. A **release fence**: orders the stores of 3 and 4 before every byte and field written
//!    below. A reader whose copy observed any of those bytes (its acquire fence pairing with
//!    this one) is guaranteed to observe the new `write_offset` and the invalid slot seq.
//! 6. Copy the payload at `off % data_size`, in two pieces when it wraps (§10.6).
//! 7. Write the slot fields (pts, dts, data_offset = off, data_size = size, flags).
//! 8. Store the slot `seq` with **release** (payload and fields become visible with it), then
//!    `global_seq` with release, then `last_keyframe_seq` for a KEY (§10.6 order).
//! 9. **R13/R28**: wake every futex waiter on the low 32 bits of `global_seq`. The packet header
//!    has no spare bytes for a waiter count, so the writer always wakes.
//! 10. Record the packet in the GOP store ([`super::gop_store`]), the copy of the newest GOPs
//!     that late subscribers start from when the ring has lost their keyframe.

use std::sync::atomic::{fence, Ordering};

use std::os::fd::OwnedFd;

use crate::error::{Error, ErrorCode, Result};
use crate::futex;
use crate::packet_ring::gop_store::{GopStoreConfig, GopStoreWriter};
use crate::packet_ring::shm_region::{self, Geometry};
use crate::packet_ring::shm_region::{
    HDR_CODEC_ID, HDR_DATA_SIZE, HDR_EXTRADATA, HDR_EXTRADATA_SIZE, HDR_GLOBAL_SEQ,
    HDR_LAST_KEYFRAME_SEQ, HDR_MAGIC, HDR_PRODUCER_PID, HDR_PROTO_VERSION, HDR_RING_SLOTS,
    HDR_SHUTDOWN_FLAG, HDR_WRITE_OFFSET, SLOT_DATA_OFFSET, SLOT_DATA_SIZE, SLOT_DTS, SLOT_FLAGS,
    SLOT_PTS, SLOT_SEQ,
};
use crate::paths::Key;
use crate::shm::{self, Mapping};
use crate::util::Origin;
use crate::wire::packet::packet_slot_offset;
use crate::wire::{
    DEFAULT_PACKET_DATA_SIZE, DEFAULT_PACKET_RING_SLOTS, INVALID_SEQ, PACKET_FLAGS_KNOWN,
    PACKET_FLAG_KEY, PACKET_MAGIC, PROTOCOL_VERSION,
};

/// What a publisher asks for when it enables packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketRingConfig {
    /// `AV_CODEC_ID_*` (§10.3).
    pub codec_id: u32,
    /// SPS/PPS(/VPS) in Annex B, or the AV1 sequence header OBU (R30); at most 4096 bytes.
    /// May be empty and set once later with [`PacketRingWriter::set_extradata`].
    pub extradata: Vec<u8>,
    /// Slot count, 1..=1024 (default 64).
    pub ring_slots: u32,
    /// Bytes of the data ring, > 0 (default 8 MiB). The largest packet that fits.
    pub data_size: u32,
}

impl Default for PacketRingConfig {
    fn default() -> Self {
        PacketRingConfig {
            codec_id: 0,
            extradata: Vec::new(),
            ring_slots: DEFAULT_PACKET_RING_SLOTS,
            data_size: DEFAULT_PACKET_DATA_SIZE,
        }
    }
}

/// Counters of a writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketWriterStats {
    /// Packets published (= the last seq, R18).
    pub packets: u64,
    /// Payload bytes published (= `write_offset`).
    pub bytes: u64,
    /// Seq of the newest KEY packet, 0 when none yet.
    pub last_keyframe_seq: u64,
}

/// The single writer of one packet ring. Dropping it shuts the ring down (readers get
/// `Disconnected` once they have read everything) and unlinks the SHM; dropping a copy
/// inherited by a child forked from the creating process only unmaps it there (the ring stays
/// the parent's).
pub struct PacketRingWriter {
    map: Mapping,
    name: String,
    geo: Geometry,
    codec_id: u32,
    /// Private copies of what the writer alone stores into the header.
    seq: u64,
    write_offset: u64,
    last_keyframe_seq: u64,
    extradata_len: usize,
    shut: bool,
    /// The copy of the newest GOPs for late subscribers (None: not kept).
    gop_store: Option<GopStoreWriter>,
    /// The creating process: a forked child's copy leaves the ring alone when dropped.
    origin: Origin,
}

impl PacketRingWriter {
    /// Create `/dev/shm/cuframes-<key>-packets` exclusively (the caller has removed a stale
    /// one; an existing object of ours gives `AlreadyExists`) and initialise it. It is built
    /// under its generation name and renamed into place complete; when another user holds
    /// the name (the sticky /dev/shm keeps it theirs), it stays under its generation name,
    /// which HELLO_RESP announces (R19). Readers only read the
    /// packet ring, so it is never writable by anyone but its owner, whatever `file_mode`
    /// grants the group and others: a reader that could write it could also truncate it, and
    /// every mapping of a truncated object faults (SIGBUS in the publisher and every reader).
    pub fn create(key: &Key, config: PacketRingConfig, file_mode: u32) -> Result<PacketRingWriter> {
        let geo = shm_region::validate_config(
            config.ring_slots,
            config.data_size,
            config.extradata.len(),
        )?;
        let (name, _fd, map) = shm::create_staged(
            &key.packet_shm_name(),
            geo.shm_size(),
            shm::readers_read_only(file_mode),
        )?;
        // Every page now, not on the first lap: no page fault on the latency path, and a
        // /dev/shm too small for the ring is an error here instead of a SIGBUS mid-stream.
        // Before the writer exists, whose Drop would write the shutdown flag into the header.
        if let Err(e) = map.populate() {
            let _ = shm::unlink(&name);
            return Err(Error::new(
                e.code(),
                format!(
                    "cannot allocate the {} bytes of packet ring /dev/shm/{name} (is /dev/shm \
                     large enough?): {}",
                    geo.shm_size(),
                    e.message()
                ),
            ));
        }
        // The object is ours from here: unlink it if anything below fails.
        let mut writer = PacketRingWriter {
            map,
            name,
            geo,
            codec_id: config.codec_id,
            seq: 0,
            write_offset: 0,
            last_keyframe_seq: 0,
            extradata_len: config.extradata.len(),
            shut: false,
            gop_store: default_gop_store(),
            origin: Origin::here(),
        };
        writer.init(&config.extradata);
        // On error the writer's Drop removes the staged object.
        let canonical = key.packet_shm_name();
        match shm::place(&writer.name, &canonical, false)? {
            shm::Placement::AtName => writer.name = canonical,
            shm::Placement::Kept { holder_uid } => crate::util::diag!(
                "/dev/shm/{canonical} is held by uid {holder_uid}, not by this publisher: the \
                 packet ring of key {key:?} is /dev/shm/{} instead (subscribers follow \
                 HELLO_RESP there); remove /dev/shm/{canonical} as root or uid {holder_uid}",
                writer.name
            ),
        }
        Ok(writer)
    }

    /// Keep the newest GOPs in a store of `config`'s size for late subscribers (the default
    /// is [`GopStoreConfig::default`]), or none (`None`: a late subscriber whose keyframe the
    /// ring lost waits for the next one). Only before the first packet.
    pub fn set_gop_store(&mut self, config: Option<GopStoreConfig>) -> Result<()> {
        if self.seq != 0 {
            return Err(Error::invalid(
                "the GOP store is set before the first packet is published",
            ));
        }
        self.gop_store = config.map(GopStoreWriter::create).transpose()?;
        Ok(())
    }

    /// A descriptor of the GOP store for a subscriber, None when none is kept.
    pub fn gop_store_descriptor(&self) -> Result<Option<OwnedFd>> {
        self.gop_store
            .as_ref()
            .map(GopStoreWriter::descriptor)
            .transpose()
    }

    /// The GOP store's size in bytes (0: none kept): what it costs at most.
    pub fn gop_store_size(&self) -> usize {
        self.gop_store.as_ref().map_or(0, GopStoreWriter::size)
    }

    /// GOPs too large for the GOP store (not kept).
    pub fn gop_store_overflows(&self) -> u64 {
        self.gop_store.as_ref().map_or(0, GopStoreWriter::overflows)
    }

    /// Fill the fresh (all-zero) mapping. The magic is stored last with release, so a reader
    /// that maps the object too early sees a bad magic rather than a half-written header.
    fn init(&self, extradata: &[u8]) {
        let m = &self.map;
        m.atomic_u32(HDR_PROTO_VERSION)
            .store(PROTOCOL_VERSION, Ordering::Relaxed);
        m.atomic_u32(HDR_RING_SLOTS)
            .store(self.geo.ring_slots, Ordering::Relaxed);
        m.atomic_u32(HDR_DATA_SIZE)
            .store(self.geo.data_size, Ordering::Relaxed);
        m.atomic_u32(HDR_CODEC_ID)
            .store(self.codec_id, Ordering::Relaxed);
        m.atomic_u64(HDR_PRODUCER_PID)
            .store(u64::from(std::process::id()), Ordering::Relaxed);
        m.write_bytes(HDR_EXTRADATA, extradata);
        m.atomic_u32(HDR_EXTRADATA_SIZE)
            .store(extradata.len() as u32, Ordering::Relaxed);
        for i in 0..self.geo.ring_slots as usize {
            m.atomic_u64(packet_slot_offset(i) + SLOT_SEQ)
                .store(INVALID_SEQ, Ordering::Relaxed);
        }
        m.atomic_u32(HDR_MAGIC)
            .store(PACKET_MAGIC, Ordering::Release);
    }

    /// Set the extradata once, before the first packet (§10.3: "at the first keyframe"),
    /// when `create` had none. Setting the same bytes again is a no-op; anything else is
    /// refused (a codec change needs a new key).
    pub fn set_extradata(&mut self, extradata: &[u8]) -> Result<()> {
        if extradata.len() > crate::wire::MAX_EXTRADATA_SIZE {
            return Err(Error::invalid(format!(
                "codec extradata is {} bytes; at most {} fit in the packet ring's header",
                extradata.len(),
                crate::wire::MAX_EXTRADATA_SIZE
            )));
        }
        if self.extradata_len != 0 {
            let mut cur = vec![0u8; self.extradata_len];
            self.map.read_bytes(HDR_EXTRADATA, &mut cur);
            if cur == extradata {
                return Ok(());
            }
            return Err(Error::invalid(
                "codec extradata is already set and fixed for the publisher's lifetime",
            ));
        }
        if self.seq != 0 {
            return Err(Error::invalid(
                "codec extradata must be set before the first packet is published",
            ));
        }
        // Bytes first, then the size with release: a reader that acquires the size sees them.
        self.map.write_bytes(HDR_EXTRADATA, extradata);
        self.map
            .atomic_u32(HDR_EXTRADATA_SIZE)
            .store(extradata.len() as u32, Ordering::Release);
        self.extradata_len = extradata.len();
        Ok(())
    }

    /// Publish one packet; returns its seq. See the module comment for each step's reason.
    pub fn publish(&mut self, data: &[u8], pts_ns: i64, dts_ns: i64, flags: u32) -> Result<u64> {
        // 1. Refusals, before anything in the ring is touched.
        if self.shut {
            return Err(Error::invalid(
                "publish on a packet ring that was shut down",
            ));
        }
        if data.is_empty() {
            return Err(Error::invalid("cannot publish an empty packet"));
        }
        if data.len() > self.geo.data_size as usize {
            return Err(Error::invalid(format!(
                "packet of {} bytes does not fit the {}-byte packet data ring (raise data_size)",
                data.len(),
                self.geo.data_size
            )));
        }
        if flags & !PACKET_FLAGS_KNOWN != 0 {
            return Err(Error::invalid(format!(
                "packet flags {flags:#x} set reserved bits (known: {PACKET_FLAGS_KNOWN:#x})"
            )));
        }
        let size = data.len() as u64;
        // 2. R18. (Neither can overflow in practice; refuse rather than wrap.)
        let seq = self.seq + 1;
        let off = self.write_offset;
        let new_off = off.checked_add(size).filter(|_| seq != INVALID_SEQ);
        let Some(new_off) = new_off else {
            return Err(Error::new(
                ErrorCode::Io,
                "packet ring sequence or byte cursor exhausted",
            ));
        };
        let m = &self.map;
        let slot = self.geo.slot_offset(seq);

        // 3. R29: invalidate the slot.
        m.atomic_u64(slot + SLOT_SEQ)
            .store(INVALID_SEQ, Ordering::Relaxed);
        // 4. R8: claim the bytes before writing them.
        m.atomic_u64(HDR_WRITE_OFFSET)
            .store(new_off, Ordering::Relaxed);
        // 5. Both stores above happen-before any byte below, for readers that see the bytes.
        fence(Ordering::Release);

        // 6. Payload, split on wrap.
        let [(o1, l1), (o2, l2)] = self.geo.data_ranges(off, data.len());
        m.write_bytes(o1, &data[..l1]);
        if l2 > 0 {
            m.write_bytes(o2, &data[l1..l1 + l2]);
        }

        // 7. Slot fields.
        m.atomic_u64(slot + SLOT_PTS)
            .store(pts_ns as u64, Ordering::Relaxed);
        m.atomic_u64(slot + SLOT_DTS)
            .store(dts_ns as u64, Ordering::Relaxed);
        m.atomic_u64(slot + SLOT_DATA_OFFSET)
            .store(off, Ordering::Relaxed);
        m.atomic_u32(slot + SLOT_DATA_SIZE)
            .store(size as u32, Ordering::Relaxed);
        m.atomic_u32(slot + SLOT_FLAGS)
            .store(flags, Ordering::Relaxed);

        // 8. Publish.
        m.atomic_u64(slot + SLOT_SEQ).store(seq, Ordering::Release);
        m.atomic_u64(HDR_GLOBAL_SEQ).store(seq, Ordering::Release);
        if flags & PACKET_FLAG_KEY != 0 {
            m.atomic_u64(HDR_LAST_KEYFRAME_SEQ)
                .store(seq, Ordering::Release);
            self.last_keyframe_seq = seq;
        }
        self.seq = seq;
        self.write_offset = new_off;

        // 9. R13/R28: always wake.
        futex::wake_all(m.atomic_u32(HDR_GLOBAL_SEQ));

        // 10. The GOP store, after the wake-up (live readers read the ring). Recorded before
        // the next publish can overwrite this packet's slot, so a reader that finds the
        // slot reused finds the packet here.
        if let Some(store) = &mut self.gop_store {
            store.record(seq, data, pts_ns, dts_ns, flags);
        }
        Ok(seq)
    }

    /// Set `shutdown_flag` and wake every reader; they return `Disconnected` once they have
    /// read what was published. Idempotent; `publish` is refused afterwards.
    pub fn shutdown(&mut self) {
        if self.shut {
            return;
        }
        self.shut = true;
        self.map
            .atomic_u64(HDR_SHUTDOWN_FLAG)
            .store(1, Ordering::Release);
        futex::wake_all(self.map.atomic_u32(HDR_GLOBAL_SEQ));
    }

    /// `cuframes-<key>-packets` (R19: relative to /dev/shm), what HELLO_RESP carries.
    pub fn shm_name(&self) -> &str {
        &self.name
    }

    /// `AV_CODEC_ID_*` of the stream.
    pub fn codec_id(&self) -> u32 {
        self.codec_id
    }

    /// Slots in the ring.
    pub fn ring_slots(&self) -> u32 {
        self.geo.ring_slots
    }

    /// Size of the data ring in bytes.
    pub fn data_size(&self) -> u32 {
        self.geo.data_size
    }

    /// The seq of the last published packet (0 before the first).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Payload bytes published so far (= `write_offset`).
    pub fn bytes_written(&self) -> u64 {
        self.write_offset
    }

    /// Seq of the newest KEY packet (0 when none yet): HELLO_RESP's `initial_packet_seq`.
    pub fn last_keyframe_seq(&self) -> u64 {
        self.last_keyframe_seq
    }

    /// The writer's counters.
    pub fn stats(&self) -> PacketWriterStats {
        PacketWriterStats {
            packets: self.seq,
            bytes: self.write_offset,
            last_keyframe_seq: self.last_keyframe_seq,
        }
    }
}

/// The store every packet ring starts with; a system where it cannot be made (a kernel
/// before 5.1 lacks the seal it needs) publishes without one and says so.
fn default_gop_store() -> Option<GopStoreWriter> {
    match GopStoreWriter::create(GopStoreConfig::default()) {
        Ok(store) => Some(store),
        Err(e) => {
            crate::util::diag!(
                "no GOP store for this packet ring ({e}): a late subscriber whose keyframe \
                 the ring lost waits for the next one"
            );
            None
        }
    }
}

impl Drop for PacketRingWriter {
    fn drop(&mut self) {
        if !self.origin.is_here() {
            // The parent's ring: only this process's mapping goes (with the field).
            return;
        }
        self.shutdown();
        let _ = shm::unlink(&self.name);
    }
}

impl std::fmt::Debug for PacketRingWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketRingWriter")
            .field("name", &self.name)
            .field("geometry", &self.geo)
            .field("codec_id", &self.codec_id)
            .field("seq", &self.seq)
            .field("write_offset", &self.write_offset)
            .field("shut", &self.shut)
            .finish()
    }
}
