//! Byte layout of the GOP store (extension, `docs/protocol.md` "GOP store"): a sealed memfd
//! the publisher hands to subscribers that ask for it, holding the packets of the newest GOPs
//! so that a late subscriber starts on the newest keyframe at once even when the packet ring
//! no longer holds it.
//!
//! ```text
//! 0x00   4  magic (LE u32)            GOP_STORE_MAGIC
//! 0x04   4  version (LE u32)          GOP_STORE_VERSION
//! 0x08   4  bank_entries (LE u32)     packets one bank holds, 1..=MAX_GOP_STORE_ENTRIES
//! 0x0C   4  reserved                  0
//! 0x10   8  bank_data_size (LE u64)   payload bytes one bank holds, 1..=u32::MAX
//! 0x18  40  reserved                  0
//! 0x40  64  bank header 0             key_seq (u64, atomic), count (u64, atomic), 48 reserved
//! 0x80  64  bank header 1
//! 0xC0  E×32  bank 0 entries          GOP_STORE_ENTRY_SIZE each
//!       E×32  bank 1 entries
//!       D     bank 0 payload bytes
//!       D     bank 1 payload bytes
//! ```
//!
//! Entry `i` of a bank is the packet `key_seq + i`: `pts_ns` (i64), `dts_ns` (i64),
//! `data_offset` (u64, from the start of the bank's payload bytes), `data_size` (u32), `flags`
//! (u32, §10.5). A bank's `key_seq` is 0 while it is empty and `UINT64_MAX` while the
//! publisher rewrites it; entries below `count` never change while `key_seq` stays the same.

use core::mem::{offset_of, size_of};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Magic of a GOP store (the packet-ring magic's neighbour).
pub const GOP_STORE_MAGIC: u32 = 0xCC7C_1DC6;
/// Layout version of the GOP store.
pub const GOP_STORE_VERSION: u32 = 1;
/// Banks in a store: the GOP being written and the one before it.
pub const GOP_STORE_BANKS: usize = 2;
/// The most packets one bank may hold.
pub const MAX_GOP_STORE_ENTRIES: u32 = 65_536;

/// The store's header (`GS_ENTRIES` bytes): geometry, then the two bank headers.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct GopStoreHeader {
    /// [`GOP_STORE_MAGIC`], stored last (release) when the store is made.
    pub magic: u32,
    /// [`GOP_STORE_VERSION`].
    pub version: u32,
    /// Packets one bank holds, 1..=[`MAX_GOP_STORE_ENTRIES`].
    pub bank_entries: u32,
    /// 0.
    pub reserved_a: u32,
    /// Payload bytes one bank holds, 1..=`u32::MAX`.
    pub bank_data_size: u64,
    /// 0.
    pub reserved_b: [u8; 40],
    /// Bank 0 and bank 1.
    pub banks: [GopStoreBank; GOP_STORE_BANKS],
}

/// One bank's header.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct GopStoreBank {
    /// Atomic: seq of the keyframe that opens the bank's GOP; 0 empty, `UINT64_MAX` while it
    /// is rewritten or after its GOP turned out too large.
    pub key_seq: u64,
    /// Atomic: entries written, stored (release) after each one.
    pub count: u64,
    /// 0.
    pub reserved: [u8; 48],
}

/// One packet of a bank: entry `i` is the packet `key_seq + i`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct GopStoreEntry {
    /// Presentation time in ns (R25).
    pub pts_ns: i64,
    /// Decoding time in ns (R25).
    pub dts_ns: i64,
    /// Where its payload starts, from byte 0 of the bank's payload bytes.
    pub data_offset: u64,
    /// Payload size, > 0.
    pub data_size: u32,
    /// §10.5 flags.
    pub flags: u32,
}

/// Offset of `magic`.
pub const GS_MAGIC: usize = offset_of!(GopStoreHeader, magic);
/// Offset of `version`.
pub const GS_VERSION: usize = offset_of!(GopStoreHeader, version);
/// Offset of `bank_entries`.
pub const GS_BANK_ENTRIES: usize = offset_of!(GopStoreHeader, bank_entries);
/// Offset of `bank_data_size`.
pub const GS_BANK_DATA_SIZE: usize = offset_of!(GopStoreHeader, bank_data_size);
/// Offset of bank header 0; bank `b`'s is `GS_BANKS + b * GS_BANK_HEADER_SIZE`.
pub const GS_BANKS: usize = offset_of!(GopStoreHeader, banks);
/// Size of one bank header.
pub const GS_BANK_HEADER_SIZE: usize = size_of::<GopStoreBank>();
/// Offset of `key_seq` in a bank header.
pub const GS_BANK_KEY_SEQ: usize = offset_of!(GopStoreBank, key_seq);
/// Offset of `count` in a bank header.
pub const GS_BANK_COUNT: usize = offset_of!(GopStoreBank, count);
/// Offset of bank 0's first entry: the header's size.
pub const GS_ENTRIES: usize = size_of::<GopStoreHeader>();

/// Size of one entry.
pub const GOP_STORE_ENTRY_SIZE: usize = size_of::<GopStoreEntry>();
/// Offset of an entry's `pts_ns`.
pub const GE_PTS: usize = offset_of!(GopStoreEntry, pts_ns);
/// Offset of an entry's `dts_ns`.
pub const GE_DTS: usize = offset_of!(GopStoreEntry, dts_ns);
/// Offset of an entry's `data_offset`.
pub const GE_DATA_OFFSET: usize = offset_of!(GopStoreEntry, data_offset);
/// Offset of an entry's `data_size`.
pub const GE_DATA_SIZE: usize = offset_of!(GopStoreEntry, data_size);
/// Offset of an entry's `flags`.
pub const GE_FLAGS: usize = offset_of!(GopStoreEntry, flags);

/// The documented layout (`docs/protocol.md` "GOP store").
const _: () = {
    assert!(GS_MAGIC == 0x00 && GS_VERSION == 0x04 && GS_BANK_ENTRIES == 0x08);
    assert!(GS_BANK_DATA_SIZE == 0x10 && GS_BANKS == 0x40 && GS_BANK_HEADER_SIZE == 64);
    assert!(GS_BANK_KEY_SEQ == 0x00 && GS_BANK_COUNT == 0x08 && GS_ENTRIES == 0xC0);
    assert!(GOP_STORE_ENTRY_SIZE == 32 && GE_PTS == 0x00 && GE_DTS == 0x08);
    assert!(GE_DATA_OFFSET == 0x10 && GE_DATA_SIZE == 0x18 && GE_FLAGS == 0x1C);
};

/// Where everything of one store's geometry lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GopStoreGeometry {
    /// Packets per bank (1..=[`MAX_GOP_STORE_ENTRIES`]).
    pub bank_entries: u32,
    /// Payload bytes per bank (> 0).
    pub bank_data_size: u32,
}

impl GopStoreGeometry {
    /// Offset of bank `bank`'s header.
    pub fn bank_header(&self, bank: usize) -> usize {
        GS_BANKS + bank * GS_BANK_HEADER_SIZE
    }

    /// Offset of entry `index` of bank `bank` (`index < bank_entries`).
    pub fn entry(&self, bank: usize, index: usize) -> usize {
        GS_ENTRIES + (bank * self.bank_entries as usize + index) * GOP_STORE_ENTRY_SIZE
    }

    /// Offset of byte 0 of bank `bank`'s payload bytes.
    pub fn data(&self, bank: usize) -> usize {
        GS_ENTRIES
            + GOP_STORE_BANKS * self.bank_entries as usize * GOP_STORE_ENTRY_SIZE
            + bank * self.bank_data_size as usize
    }

    /// Size of the whole store.
    pub fn size(&self) -> usize {
        self.data(GOP_STORE_BANKS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_the_documented_one() {
        let g = GopStoreGeometry {
            bank_entries: 4,
            bank_data_size: 100,
        };
        assert_eq!(GS_ENTRIES, 0xC0);
        assert_eq!(g.bank_header(1), 0x80);
        assert_eq!(g.entry(0, 0), 0xC0);
        assert_eq!(g.entry(1, 0), 0xC0 + 4 * 32);
        assert_eq!(g.data(0), 0xC0 + 8 * 32);
        assert_eq!(g.data(1), 0xC0 + 8 * 32 + 100);
        assert_eq!(g.size(), 0xC0 + 8 * 32 + 200);
        assert_eq!(GE_FLAGS + 4, GOP_STORE_ENTRY_SIZE);
    }
}
