//! The GOP store (extension, `docs/protocol.md` "GOP store"): the publisher's copy of the
//! newest GOPs, so that a late subscriber starts on the newest keyframe at once even when the
//! packet ring has already overwritten it (a GOP longer than the ring).
//!
//! # Why this shape
//!
//! - **A sealed memfd handed out by descriptor**, not a name in `/dev/shm`: nobody can plant
//!   or squat it, and it goes away with its last descriptor. It is sealed against growing,
//!   shrinking and any write but through the publisher's own mapping (F_SEAL_FUTURE_WRITE),
//!   so a subscriber that holds it cannot change a byte another subscriber reads, nor make
//!   anyone's mapping fault.
//! - **Two banks of fixed size**: the GOP being written and the one before it. The memory is
//!   bounded by the store's size whatever readers do (every subscriber gets a descriptor of
//!   the same store); pages are only used as far as GOPs fill them. A reader that was still
//!   copying from the older bank has a whole GOP's time before it is reused.
//! - **The publisher decides from its own state**: it records what it publishes, keeps its
//!   own cursors, and never reads the store back.
//! - **A GOP too large for a bank is not kept** (its bank is invalidated): a late subscriber
//!   then waits for the next keyframe as without the store, and the publisher says so once.
//!
//! # Consistency (the packet ring's seqlock, per bank)
//!
//! Entries of a bank below its `count` never change while its `key_seq` stays the same. To
//! reuse a bank the writer stores `key_seq = UINT64_MAX` and `count = 0`, then a release
//! fence, then writes the new bytes; it stores `count` (release) after each entry and the new
//! `key_seq` (release) after the first. A reader loads `key_seq` and `count` (acquire), copies
//! the entry, then an acquire fence and `key_seq` again: unchanged means nothing it read was
//! from a later GOP.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

use nix::fcntl::{fcntl, FcntlArg, SealFlag};

use crate::error::{Error, Result};
use crate::packet_ring::output::{PacketInfo, PacketSink};
use crate::shm::{self, Mapping};
use crate::wire::gop_store::*;
use crate::wire::{INVALID_SEQ, PACKET_FLAGS_KNOWN, PACKET_FLAG_KEY};

/// Payload bytes a bank holds by default: 32 MiB, an 8 s GOP of 4K HEVC at 30 Mbit/s.
pub const DEFAULT_GOP_STORE_BYTES: u32 = 32 << 20;
/// Packets a bank holds by default: 17 s at 240 packets per second.
pub const DEFAULT_GOP_STORE_PACKETS: u32 = 4096;

/// The size of a publisher's GOP store (per bank: the store holds two GOPs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GopStoreConfig {
    /// Payload bytes of the longest GOP kept (> 0).
    pub bytes_per_gop: u32,
    /// Packets of the longest GOP kept, 1..=65536.
    pub packets_per_gop: u32,
}

impl Default for GopStoreConfig {
    fn default() -> Self {
        GopStoreConfig {
            bytes_per_gop: DEFAULT_GOP_STORE_BYTES,
            packets_per_gop: DEFAULT_GOP_STORE_PACKETS,
        }
    }
}

impl GopStoreConfig {
    fn geometry(&self) -> Result<GopStoreGeometry> {
        if self.bytes_per_gop == 0 {
            return Err(Error::invalid("the GOP store's bytes_per_gop must be > 0"));
        }
        if self.packets_per_gop == 0 || self.packets_per_gop > MAX_GOP_STORE_ENTRIES {
            return Err(Error::invalid(format!(
                "the GOP store's packets_per_gop {} is out of range 1..={MAX_GOP_STORE_ENTRIES}",
                self.packets_per_gop
            )));
        }
        Ok(GopStoreGeometry {
            bank_entries: self.packets_per_gop,
            bank_data_size: self.bytes_per_gop,
        })
    }
}

/// The publisher's side: records every packet from the first keyframe on.
pub struct GopStoreWriter {
    fd: OwnedFd,
    map: Mapping,
    geo: GopStoreGeometry,
    /// The bank the current GOP goes to.
    bank: usize,
    /// A GOP is being recorded in `bank` (false before the first keyframe and after an
    /// overflow, until the next keyframe).
    recording: bool,
    /// Entries and payload bytes of the current GOP (the writer's own record).
    count: u32,
    used: u64,
    /// Seq of the current GOP's keyframe.
    key_seq: u64,
    /// Whether the last overflow was reported (once until a GOP fits again).
    overflow_said: bool,
    overflows: u64,
}

impl GopStoreWriter {
    /// A fresh, empty store of `config`'s size (its pages are used only as GOPs fill them).
    pub fn create(config: GopStoreConfig) -> Result<GopStoreWriter> {
        let geo = config.geometry()?;
        let fd = shm::sealable_memfd("cuframes-gop-store", geo.size())?;
        let map = Mapping::map(fd.as_fd(), geo.size(), true, "GOP store")?;
        map.atomic_u32(GS_VERSION)
            .store(GOP_STORE_VERSION, Ordering::Relaxed);
        map.atomic_u32(GS_BANK_ENTRIES)
            .store(geo.bank_entries, Ordering::Relaxed);
        map.atomic_u64(GS_BANK_DATA_SIZE)
            .store(u64::from(geo.bank_data_size), Ordering::Relaxed);
        map.atomic_u32(GS_MAGIC)
            .store(GOP_STORE_MAGIC, Ordering::Release);
        // Our mapping stays writable; no other one can be made, nor the size changed.
        fcntl(
            fd.as_fd(),
            FcntlArg::F_ADD_SEALS(
                SealFlag::F_SEAL_SHRINK
                    | SealFlag::F_SEAL_GROW
                    | SealFlag::F_SEAL_FUTURE_WRITE
                    | SealFlag::F_SEAL_SEAL,
            ),
        )
        .map_err(|e| Error::os("seal the GOP store", e))?;
        Ok(GopStoreWriter {
            fd,
            map,
            geo,
            bank: 1,
            recording: false,
            count: 0,
            used: 0,
            key_seq: 0,
            overflow_said: false,
            overflows: 0,
        })
    }

    /// A descriptor of the store for a subscriber (the GOP_STORE message).
    pub fn descriptor(&self) -> Result<OwnedFd> {
        self.fd
            .try_clone()
            .map_err(|e| Error::new(crate::ErrorCode::Io, format!("dup GOP store: {e}")))
    }

    /// The store's size in bytes (its bound: two GOPs of `bytes_per_gop` and their entries).
    pub fn size(&self) -> usize {
        self.geo.size()
    }

    /// GOPs that were too large to keep.
    pub fn overflows(&self) -> u64 {
        self.overflows
    }

    /// Seq of the keyframe whose GOP is being kept now (0: none).
    pub fn kept_key_seq(&self) -> u64 {
        if self.recording {
            self.key_seq
        } else {
            0
        }
    }

    /// Record packet `seq`, just published to the ring (the caller checked size and flags).
    pub fn record(&mut self, seq: u64, data: &[u8], pts_ns: i64, dts_ns: i64, flags: u32) {
        let m = &self.map;
        if flags & PACKET_FLAG_KEY != 0 {
            if self.recording {
                // The GOP that ends here fitted: report the next overflow again.
                self.overflow_said = false;
            }
            self.bank ^= 1;
            let h = self.geo.bank_header(self.bank);
            m.atomic_u64(h + GS_BANK_KEY_SEQ)
                .store(INVALID_SEQ, Ordering::Relaxed);
            m.atomic_u64(h + GS_BANK_COUNT).store(0, Ordering::Relaxed);
            // Readers that see any byte written below see the invalid key_seq.
            fence(Ordering::Release);
            self.recording = true;
            self.count = 0;
            self.used = 0;
            self.key_seq = seq;
        }
        if !self.recording {
            return;
        }
        let len = data.len() as u64;
        if self.count >= self.geo.bank_entries
            || self.used + len > u64::from(self.geo.bank_data_size)
        {
            self.overflow(seq);
            return;
        }
        let bank = self.bank;
        let e = self.geo.entry(bank, self.count as usize);
        m.write_bytes(self.geo.data(bank) + self.used as usize, data);
        m.atomic_u64(e + GE_PTS)
            .store(pts_ns as u64, Ordering::Relaxed);
        m.atomic_u64(e + GE_DTS)
            .store(dts_ns as u64, Ordering::Relaxed);
        m.atomic_u64(e + GE_DATA_OFFSET)
            .store(self.used, Ordering::Relaxed);
        m.atomic_u32(e + GE_DATA_SIZE)
            .store(data.len() as u32, Ordering::Relaxed);
        m.atomic_u32(e + GE_FLAGS).store(flags, Ordering::Relaxed);
        self.count += 1;
        self.used += len;
        let h = self.geo.bank_header(bank);
        m.atomic_u64(h + GS_BANK_COUNT)
            .store(u64::from(self.count), Ordering::Release);
        if self.count == 1 {
            m.atomic_u64(h + GS_BANK_KEY_SEQ)
                .store(self.key_seq, Ordering::Release);
        }
    }

    /// The current GOP does not fit: drop it whole (a late subscriber must not start a GOP it
    /// cannot finish) and say so once.
    fn overflow(&mut self, seq: u64) {
        let h = self.geo.bank_header(self.bank);
        self.map
            .atomic_u64(h + GS_BANK_KEY_SEQ)
            .store(INVALID_SEQ, Ordering::Release);
        self.recording = false;
        self.overflows += 1;
        if !self.overflow_said {
            self.overflow_said = true;
            crate::util::diag!(
                "the GOP from packet {} reached packet {seq}, more than the GOP store keeps \
                 ({} packets, {} bytes): subscribers that join during this GOP start at the \
                 next keyframe when the packet ring no longer holds this one (raise the GOP \
                 store's size or shorten the GOP); said once until a GOP fits again",
                self.key_seq,
                self.geo.bank_entries,
                self.geo.bank_data_size
            );
        }
    }
}

impl std::fmt::Debug for GopStoreWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GopStoreWriter")
            .field("geometry", &self.geo)
            .field("key_seq", &self.key_seq)
            .field("count", &self.count)
            .field("recording", &self.recording)
            .finish()
    }
}

/// What a read of the store found.
#[derive(Debug)]
pub enum StoreRead {
    /// The packet, copied into the sink, and its size.
    Hit(PacketInfo, usize),
    /// The store does not hold it (any more).
    Miss,
    /// The store holds it, but it is larger than the reader accepts (not copied).
    Oversized(u32),
}

/// A subscriber's view of a publisher's GOP store, mapped read-only. Everything in it is
/// checked before use: a store that lies produces a miss or a `Protocol` error, never an
/// access outside the mapping.
pub struct GopStoreReader {
    map: Mapping,
    geo: GopStoreGeometry,
}

impl GopStoreReader {
    /// Map the store the publisher sent, after checking that nobody can resize or write it
    /// (its seals) and that its header describes exactly its size. `max_bank_bytes` bounds
    /// the mapping (a reader's `max_packet_ring_size`).
    pub fn import(fd: OwnedFd, max_bank_bytes: u64) -> Result<GopStoreReader> {
        let seals = fcntl(fd.as_fd(), FcntlArg::F_GET_SEALS).map_err(|e| {
            Error::protocol(format!("GOP store is not a sealable memfd: {}", e.desc()))
        })?;
        let seals = SealFlag::from_bits_truncate(seals);
        let fixed = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW;
        let read_only = seals.intersects(SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_FUTURE_WRITE);
        if !seals.contains(fixed) || !read_only {
            return Err(Error::protocol(format!(
                "GOP store is not sealed against resizing and writing (seals {:#x})",
                seals.bits()
            )));
        }
        let size = shm::file_size(fd.as_fd())?;
        if size < GS_ENTRIES {
            return Err(Error::protocol(format!(
                "GOP store is {size} bytes, smaller than its header"
            )));
        }
        let head = Mapping::map(fd.as_fd(), GS_ENTRIES, false, "GOP store header")?;
        let magic = head.load_u32(GS_MAGIC, Ordering::Acquire);
        let version = head.load_u32(GS_VERSION, Ordering::Relaxed);
        if magic != GOP_STORE_MAGIC || version != GOP_STORE_VERSION {
            return Err(Error::protocol(format!(
                "GOP store has magic {magic:#010x} version {version}; expected \
                 {GOP_STORE_MAGIC:#010x} version {GOP_STORE_VERSION}"
            )));
        }
        let entries = head.load_u32(GS_BANK_ENTRIES, Ordering::Relaxed);
        let bytes = head.load_u64(GS_BANK_DATA_SIZE, Ordering::Relaxed);
        if entries == 0
            || entries > MAX_GOP_STORE_ENTRIES
            || bytes == 0
            || bytes > u64::from(u32::MAX)
        {
            return Err(Error::protocol(format!(
                "GOP store has {entries} entries and {bytes} bytes per bank"
            )));
        }
        if bytes > max_bank_bytes {
            return Err(Error::new(
                crate::ErrorCode::NoMemory,
                format!(
                    "the GOP store keeps {bytes} bytes per GOP, more than this reader maps \
                     ({max_bank_bytes}, max_packet_ring_size)"
                ),
            ));
        }
        let geo = GopStoreGeometry {
            bank_entries: entries,
            bank_data_size: bytes as u32,
        };
        if size != geo.size() {
            return Err(Error::protocol(format!(
                "GOP store is {size} bytes; its header needs exactly {}",
                geo.size()
            )));
        }
        let map = Mapping::map(fd.as_fd(), size, false, "GOP store")?;
        Ok(GopStoreReader { map, geo })
    }

    /// Packet `want` from whichever bank holds it, copied into `sink` when it is at most
    /// `max_packet` bytes.
    pub fn read(&self, want: u64, max_packet: u32, sink: &mut dyn PacketSink) -> Result<StoreRead> {
        for bank in 0..GOP_STORE_BANKS {
            match self.read_bank(bank, want, max_packet, sink)? {
                StoreRead::Miss => continue,
                found => return Ok(found),
            }
        }
        Ok(StoreRead::Miss)
    }

    fn read_bank(
        &self,
        bank: usize,
        want: u64,
        max_packet: u32,
        sink: &mut dyn PacketSink,
    ) -> Result<StoreRead> {
        let m = &self.map;
        let h = self.geo.bank_header(bank);
        let key = m.load_u64(h + GS_BANK_KEY_SEQ, Ordering::Acquire);
        if key == 0 || key == INVALID_SEQ || want < key {
            return Ok(StoreRead::Miss);
        }
        let count = m.load_u64(h + GS_BANK_COUNT, Ordering::Acquire);
        let index = want - key;
        if index >= count.min(u64::from(self.geo.bank_entries)) {
            return Ok(StoreRead::Miss);
        }
        let e = self.geo.entry(bank, index as usize);
        let pts_ns = m.load_u64(e + GE_PTS, Ordering::Relaxed) as i64;
        let dts_ns = m.load_u64(e + GE_DTS, Ordering::Relaxed) as i64;
        let offset = m.load_u64(e + GE_DATA_OFFSET, Ordering::Relaxed);
        let size = m.load_u32(e + GE_DATA_SIZE, Ordering::Relaxed);
        let flags = m.load_u32(e + GE_FLAGS, Ordering::Relaxed);
        let bank_bytes = u64::from(self.geo.bank_data_size);
        let problem = if size == 0 {
            Some("payload size 0".to_owned())
        } else if !matches!(offset.checked_add(u64::from(size)), Some(end) if end <= bank_bytes) {
            Some(format!(
                "payload [{offset}, +{size}) lies outside the bank's {bank_bytes} bytes"
            ))
        } else if flags & !PACKET_FLAGS_KNOWN != 0 {
            Some(format!("reserved flag bits set ({flags:#x})"))
        } else if index == 0 && flags & PACKET_FLAG_KEY == 0 {
            Some("the GOP's first packet is not a keyframe".to_owned())
        } else {
            None
        };
        let unchanged = || {
            fence(Ordering::Acquire);
            m.load_u64(h + GS_BANK_KEY_SEQ, Ordering::Relaxed) == key
        };
        if let Some(problem) = problem {
            if !unchanged() {
                return Ok(StoreRead::Miss);
            }
            return Err(Error::protocol(format!(
                "GOP store entry for packet {want} is corrupt: {problem}"
            )));
        }
        if size > max_packet {
            return Ok(if unchanged() {
                StoreRead::Oversized(size)
            } else {
                StoreRead::Miss
            });
        }
        let len = size as usize;
        let out = sink.buffer(len)?;
        if out.len() != len {
            return Err(Error::invalid(format!(
                "the packet sink gave {} bytes for a {len}-byte packet",
                out.len()
            )));
        }
        m.read_bytes(self.geo.data(bank) + offset as usize, out);
        if !unchanged() {
            return Ok(StoreRead::Miss);
        }
        let info = PacketInfo {
            seq: want,
            pts_ns,
            dts_ns,
            flags,
        };
        Ok(StoreRead::Hit(info, len))
    }
}

impl std::fmt::Debug for GopStoreReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GopStoreReader")
            .field("geometry", &self.geo)
            .finish()
    }
}
