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

/// Magic of a GOP store (the packet-ring magic's neighbour).
pub const GOP_STORE_MAGIC: u32 = 0xCC7C_1DC6;
/// Layout version of the GOP store.
pub const GOP_STORE_VERSION: u32 = 1;
/// Banks in a store: the GOP being written and the one before it.
pub const GOP_STORE_BANKS: usize = 2;
/// The most packets one bank may hold.
pub const MAX_GOP_STORE_ENTRIES: u32 = 65_536;

/// Offset of `magic`.
pub const GS_MAGIC: usize = 0x00;
/// Offset of `version`.
pub const GS_VERSION: usize = 0x04;
/// Offset of `bank_entries`.
pub const GS_BANK_ENTRIES: usize = 0x08;
/// Offset of `bank_data_size`.
pub const GS_BANK_DATA_SIZE: usize = 0x10;
/// Offset of bank header 0; bank `b`'s is `GS_BANKS + b * GS_BANK_HEADER_SIZE`.
pub const GS_BANKS: usize = 0x40;
/// Size of one bank header.
pub const GS_BANK_HEADER_SIZE: usize = 64;
/// Offset of `key_seq` in a bank header.
pub const GS_BANK_KEY_SEQ: usize = 0x00;
/// Offset of `count` in a bank header.
pub const GS_BANK_COUNT: usize = 0x08;
/// Offset of bank 0's first entry.
pub const GS_ENTRIES: usize = GS_BANKS + GOP_STORE_BANKS * GS_BANK_HEADER_SIZE;

/// Size of one entry.
pub const GOP_STORE_ENTRY_SIZE: usize = 32;
/// Offset of an entry's `pts_ns`.
pub const GE_PTS: usize = 0x00;
/// Offset of an entry's `dts_ns`.
pub const GE_DTS: usize = 0x08;
/// Offset of an entry's `data_offset`.
pub const GE_DATA_OFFSET: usize = 0x10;
/// Offset of an entry's `data_size`.
pub const GE_DATA_SIZE: usize = 0x18;
/// Offset of an entry's `flags`.
pub const GE_FLAGS: usize = 0x1C;

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
