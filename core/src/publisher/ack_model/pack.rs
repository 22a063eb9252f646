//! The visited set's keys: a lossless packing of a state into 320 bits, hashed with FxHash.

use std::hash::Hasher;

use super::model::*;

// ---------------------------------------------------------------------------------------------
// The checker

/// FxHash: the states are small and trusted, SipHash's protection is not needed here.
#[derive(Default)]
pub(super) struct FxHasher(pub(super) u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        for &b in chunks.remainder() {
            self.write_u64(b.into());
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    // Derived `Hash` feeds small integers (fields, enum discriminants) one by one: one round
    // each, not one per byte.
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v.into());
    }

    fn write_u16(&mut self, v: u16) {
        self.write_u64(v.into());
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(v.into());
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    fn write_isize(&mut self, v: isize) {
        self.write_u64(v as u64);
    }

    /// MurmurHash3's finaliser: hashbrown takes its buckets from the low bits and its tags
    /// from the top ones, and a product's low bits depend only on the factors' low bits.
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

const _: () = assert!(MAX_RING <= 2 && BITS <= 8, "Packer's widths");

/// A state packed into 320 bits: what the visited set stores (a fraction of a `State`,
/// compared and hashed a word at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(super) struct Key(pub(super) [u64; 5]);

#[derive(Default)]
pub(super) struct Packer {
    pub(super) key: Key,
    pub(super) at: usize,
}

impl Packer {
    pub(super) fn put(&mut self, value: u8, width: usize) {
        let value = u64::from(value);
        assert!(value < 1 << width, "{value} does not fit in {width} bits");
        let (word, offset) = (self.at / 64, self.at % 64);
        self.key.0[word] |= value << offset;
        if offset + width > 64 {
            self.key.0[word + 1] |= value >> (64 - offset);
        }
        self.at += width;
        assert!(self.at <= 64 * self.key.0.len(), "the key is full");
    }

    pub(super) fn flag(&mut self, b: bool) {
        self.put(b.into(), 1);
    }

    /// A seq (at most 14) or INVALID.
    pub(super) fn seq(&mut self, seq: u8) {
        self.put(if seq == INVALID { 15 } else { seq }, 4);
    }

    /// A connection (1..=MAX_SESSIONS), 0, or GONE.
    pub(super) fn conn(&mut self, conn: u8) {
        self.put(if conn == GONE { 7 } else { conn }, 3);
    }

    pub(super) fn mask(&mut self, mask: u8) {
        self.put(mask, BITS);
    }

    pub(super) fn frame(&mut self, frame: Option<(u8, u8)>) {
        let (k, seq) = frame.unwrap_or((0, 0));
        self.flag(frame.is_some());
        self.put(k, 1);
        self.seq(seq);
    }
}

impl State {
    /// Every field, packed without loss (so equal keys are equal states). Connection ids are
    /// left out: after `canonicalize` a session's id is its position plus one.
    pub(super) fn key(&self) -> Key {
        let mut p = Packer::default();
        p.seq(self.ring.global_seq);
        p.flag(self.ring.first_lap_over);
        for k in 0..MAX_RING {
            p.seq(self.ring.seq[k]);
            p.mask(self.ring.ack[k]);
            p.seq(self.ring.data[k]);
        }
        for o in &self.table.0[1..] {
            p.conn(o.map_or(0, |o| o.conn));
            p.seq(o.map_or(0, |o| o.initial_seq));
            p.flag(o.is_some_and(|o| o.kicked));
            p.flag(o.is_some_and(|o| o.retired));
        }
        p.put(self.generation - 1, 1);
        p.seq(self.publisher.last_seq);
        let (tag, required, missing) = match self.publisher.pc {
            Pc::Idle => (0, None, 0),
            Pc::ReadAcks(r) => (1, Some(r), 0),
            Pc::DeclareDead(r, missing) => (2, Some(r), missing),
            Pc::Invalidate => (3, None, 0),
            Pc::WritePublish => (4, None, 0),
        };
        p.put(tag, 3);
        p.mask(required.map_or(0, |r| r.mask));
        for b in 1..BITS {
            p.conn(required.map_or(0, |r| r.owners[b]));
        }
        p.mask(missing);
        p.put(self.live, 3);
        for (i, s) in self.live().iter().enumerate() {
            assert_eq!(usize::from(s.conn), i + 1, "canonical connection ids");
            p.put(s.label.who as u8, 1);
            p.put(s.label.nth, 2);
            p.put(s.side as u8, 2);
            p.put(s.srv as u8, 2);
            p.put(s.bit, 3);
            p.seq(s.last_seq);
            p.flag(s.revoked);
            p.frame(s.copying);
            p.frame(s.held);
            p.flag(s.ack.is_some());
            p.put(s.ack.map_or(0, |a| a.k), 1);
            p.seq(s.ack.map_or(0, |a| a.seq));
            for seq in s.page {
                p.seq(seq);
            }
            p.flag(s.missed);
            p.flag(s.kicked_innocent);
            p.put(s.generation - 1, 1);
            p.flag(s.wrong_ring);
        }
        for j in self.joins {
            p.put(j, 2);
        }
        p.key
    }
}
