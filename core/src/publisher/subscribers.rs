//! The publisher's table of subscribers (bits 1..=31, R2), shared by the server thread that
//! admits and removes them and the publishing thread that waits for their ACKs (R11).

use crate::wire::MAX_SUBSCRIBERS;

/// One admitted subscriber.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Which server connection owns this bit.
    pub conn_id: u64,
    pub pid: u32,
    pub name: String,
    /// `global_seq` when it subscribed: it reads, and must ACK, only later frames (R26).
    pub initial_seq: u64,
    pub wants_frames: bool,
    pub wants_packets: bool,
    /// Set by the publishing thread when the subscriber missed its ACK deadline (R11, R27):
    /// the server thread then sends ERROR(TIMEOUT) and closes the connection.
    pub kicked: bool,
}

/// Bits 1..=31; index 0 is never used.
#[derive(Default)]
pub struct Table {
    entries: [Option<Entry>; MAX_SUBSCRIBERS + 1],
}

impl Table {
    /// The lowest free bit, or None when 31 are taken.
    pub fn free_bit(&self) -> Option<usize> {
        (1..=MAX_SUBSCRIBERS).find(|b| self.entries[*b].is_none())
    }

    pub fn insert(&mut self, bit: usize, entry: Entry) {
        self.entries[bit] = Some(entry);
    }

    pub fn remove(&mut self, bit: usize) -> Option<Entry> {
        self.entries.get_mut(bit).and_then(Option::take)
    }

    pub fn get(&self, bit: usize) -> Option<&Entry> {
        self.entries.get(bit).and_then(Option::as_ref)
    }

    pub fn get_mut(&mut self, bit: usize) -> Option<&mut Entry> {
        self.entries.get_mut(bit).and_then(Option::as_mut)
    }

    pub fn iter(&self) -> impl Iterator<Item = (usize, &Entry)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(b, e)| e.as_ref().map(|e| (b, e)))
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bits that must have ACKed frame `seq` before its slot may be overwritten (R11): live
    /// frame subscribers that joined before it and were not already declared dead.
    pub fn required_acks(&self, seq: u64) -> u64 {
        self.iter()
            .filter(|(_, e)| e.wants_frames && !e.kicked && e.initial_seq < seq)
            .fold(0u64, |mask, (b, _)| mask | (1u64 << b))
    }
}
