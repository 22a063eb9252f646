//! The publisher's table of subscribers (bits 1..=31, R2), shared by the server thread that
//! admits and removes them and the publishing thread that waits for their ACKs (R11).
//!
//! A bit is owned by one server connection at a time. Two rules keep an ACK from counting for
//! the wrong subscriber:
//! - a kick names the owner it meant ([`Table::kick`] with the `RequiredAcks` the wait was
//!   computed from), so a bit that changed hands in between is spared;
//! - a kicked bit stays in the table, owed nothing, until its connection closes (the server
//!   thread removes it then): the kicked process may still be ACKing with it, and only once
//!   its socket is closed (it revokes its ACKs before closing, or it is dead) can the bit go to
//!   somebody else.

use std::sync::Arc;

use crate::frame_ring::ack_page::AckPage;
use crate::frame_ring::RequiredAcks;
use crate::wire::MAX_SUBSCRIBERS;

/// The bits set in `mask`, lowest first.
pub fn bits(mask: u64) -> impl Iterator<Item = usize> {
    (1..=MAX_SUBSCRIBERS).filter(move |b| mask & (1u64 << b) != 0)
}

/// One admitted subscriber.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Which server connection owns this bit.
    pub conn_id: u64,
    /// The connection's peer (SO_PEERCRED): what the slot caps count (`admission`).
    pub uid: u32,
    /// The peer's process id (0 for a peer in another PID namespace).
    pub pid: u32,
    /// The name the peer gave at HELLO.
    pub name: String,
    /// `global_seq` when it subscribed: it reads, and must ACK, only later frames (R26).
    pub initial_seq: u64,
    /// It subscribed to frames.
    pub wants_frames: bool,
    /// It subscribed to packets.
    pub wants_packets: bool,
    /// Set by the publishing thread when the subscriber missed its ACK deadline (R11, R27):
    /// the server thread then sends ERROR(TIMEOUT); the bit stays quarantined (owed nothing,
    /// not free) until the connection closes.
    pub kicked: bool,
    /// Where this subscriber ACKs: its own page (our extension), or, for a plain v4 peer
    /// that the publisher admits, the header's bitmaps.
    pub ack_page: Option<Arc<AckPage>>,
    /// Its frame ring was replaced by a new generation ([`Table::retire_frame_subscribers`]):
    /// owed nothing from the new ring; the server thread sends SHUTDOWN(NEW_RING) and
    /// closes the connection, and the subscriber comes back for the new ring.
    pub retired: bool,
}

/// Bits 1..=31; index 0 is never used.
#[derive(Default)]
pub struct Table {
    entries: [Option<Entry>; MAX_SUBSCRIBERS + 1],
    /// Frame subscribers admitted so far (every generation).
    frame_admissions: u64,
    /// The admission count at which every subscriber retired by a replacement is back
    /// (counting those still away from earlier replacements): the publisher's own record of
    /// who it sent away, never the subscribers' word.
    returns_due: u64,
}

impl Table {
    /// The lowest free bit, or None when 31 are taken.
    pub fn free_bit(&self) -> Option<usize> {
        (1..=MAX_SUBSCRIBERS).find(|b| self.entries[*b].is_none())
    }

    /// Give `bit` to `entry` (admission).
    pub fn insert(&mut self, bit: usize, entry: Entry) {
        self.frame_admissions += u64::from(entry.wants_frames);
        self.entries[bit] = Some(entry);
    }

    /// Free `bit`, returning its entry.
    pub fn remove(&mut self, bit: usize) -> Option<Entry> {
        self.entries.get_mut(bit).and_then(Option::take)
    }

    /// The entry that owns `bit`.
    pub fn get(&self, bit: usize) -> Option<&Entry> {
        self.entries.get(bit).and_then(Option::as_ref)
    }

    /// The entry that owns `bit`, to change.
    pub fn get_mut(&mut self, bit: usize) -> Option<&mut Entry> {
        self.entries.get_mut(bit).and_then(Option::as_mut)
    }

    /// Every owned bit with its entry, lowest bit first.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Entry)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(b, e)| e.as_ref().map(|e| (b, e)))
    }

    /// The number of owned bits.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// No bit is owned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A new frame ring replaces the old: every frame subscriber of the old one is retired
    /// (wants no frames of the new ring, owes no ACKs). Returns how many live ones there were.
    pub fn retire_frame_subscribers(&mut self) -> usize {
        let mut n = 0;
        for e in self.entries.iter_mut().flatten() {
            if e.wants_frames && !e.retired {
                n += usize::from(!e.kicked);
                e.wants_frames = false;
                e.retired = true;
            }
        }
        self.returns_due = self.returns_due.max(self.frame_admissions) + n as u64;
        n
    }

    /// Subscribers that a ring replacement sent away have not all been admitted again (one
    /// admission counts for one of them, whoever it is: the wait for them is bounded, not
    /// exact).
    pub fn awaiting_returns(&self) -> bool {
        self.frame_admissions < self.returns_due
    }

    /// The retired subscribers still away are awaited no more (a bounded wait for them ended).
    pub fn forgive_returns(&mut self) {
        self.returns_due = self.frame_admissions;
    }

    /// Live frame subscribers of the current ring (the tests' view of retirement; the
    /// publisher waits on `awaiting_returns`).
    #[cfg(test)]
    pub fn frame_subscribers(&self) -> usize {
        self.iter()
            .filter(|(_, e)| e.wants_frames && !e.kicked && !e.retired)
            .count()
    }

    /// Who must have ACKed frame `seq` before its slot may be overwritten (R11): live frame
    /// subscribers that joined before it and were not already declared dead, with the
    /// connection that owns each bit now.
    pub fn required_acks(&self, seq: u64) -> RequiredAcks {
        let mut required = RequiredAcks::default();
        for (b, e) in self.iter() {
            if e.wants_frames && !e.kicked && e.initial_seq < seq {
                required.mask |= 1u64 << b;
                required.owners[b] = e.conn_id;
                required.pages[b] = e.ack_page.clone();
            }
        }
        required
    }

    /// Declare dead the bits of `missing` whose owner is still the one `required` was computed
    /// for; returns the bits kicked now.
    pub fn kick(&mut self, required: &RequiredAcks, missing: u64) -> u64 {
        let mut kicked = 0;
        for b in bits(missing & required.mask) {
            if let Some(e) = self.entries[b].as_mut() {
                if e.conn_id == required.owners[b] && !e.kicked {
                    e.kicked = true;
                    kicked |= 1u64 << b;
                }
            }
        }
        kicked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(conn_id: u64, initial_seq: u64) -> Entry {
        Entry {
            conn_id,
            uid: 1000,
            pid: 1,
            name: format!("conn{conn_id}"),
            initial_seq,
            wants_frames: true,
            wants_packets: false,
            kicked: false,
            retired: false,
            ack_page: None,
        }
    }

    /// A replaced frame ring: its subscribers owe the new ring nothing (a STRICT_WAIT
    /// publish of the new ring must not wait for them) and are not counted as its readers;
    /// packet-only subscribers stay.
    #[test]
    fn retired_frame_subscribers_owe_the_new_ring_nothing() {
        let mut t = Table::default();
        t.insert(1, entry(10, 0));
        t.insert(2, entry(11, 0));
        let mut packets_only = entry(12, 0);
        packets_only.wants_frames = false;
        packets_only.wants_packets = true;
        t.insert(3, packets_only);
        assert_eq!(t.frame_subscribers(), 2);
        assert_eq!(t.required_acks(1).mask, 0b110);
        assert_eq!(t.retire_frame_subscribers(), 2);
        assert_eq!(t.frame_subscribers(), 0);
        assert_eq!(t.required_acks(1).mask, 0);
        assert!(t.get(1).unwrap().retired && !t.get(3).unwrap().retired);
        t.insert(4, entry(13, 0));
        assert_eq!(t.frame_subscribers(), 1);
        assert_eq!(t.required_acks(1).mask, 1 << 4);
        assert_eq!(
            t.retire_frame_subscribers(),
            1,
            "already retired ones count once"
        );
    }

    /// Returns owed across replacements: one that has not come back from the first
    /// replacement is still awaited after the second, and newcomers count like returns.
    #[test]
    fn retired_subscribers_are_awaited_until_as_many_are_admitted_again() {
        let mut t = Table::default();
        assert!(!t.awaiting_returns(), "nothing replaced yet");
        t.insert(1, entry(10, 0));
        t.insert(2, entry(11, 0));
        assert_eq!(t.retire_frame_subscribers(), 2);
        assert!(t.awaiting_returns());
        t.remove(1);
        t.insert(1, entry(12, 0)); // the first is back
        assert!(t.awaiting_returns(), "one of two is back");
        assert_eq!(t.retire_frame_subscribers(), 1, "a second replacement");
        t.remove(1);
        t.insert(1, entry(13, 0)); // the one of the second replacement
        assert!(
            t.awaiting_returns(),
            "the first replacement's slow one is still away"
        );
        t.remove(2);
        let mut packets_only = entry(14, 0);
        packets_only.wants_frames = false;
        t.insert(3, packets_only);
        assert!(
            t.awaiting_returns(),
            "a packet subscriber is no frame reader's return"
        );
        t.insert(2, entry(15, 0));
        assert!(!t.awaiting_returns());
        // One that never comes back is forgiven when a wait for it ends, and not carried into
        // the next replacement's count.
        assert_eq!(t.retire_frame_subscribers(), 2);
        t.remove(1);
        t.insert(1, entry(16, 0));
        assert!(t.awaiting_returns());
        t.forgive_returns();
        assert!(!t.awaiting_returns());
        assert_eq!(t.retire_frame_subscribers(), 1);
        t.remove(1);
        t.insert(1, entry(17, 0));
        assert!(
            !t.awaiting_returns(),
            "the forgiven one is not awaited again"
        );
    }

    /// A kick names the owners the required ACKs were computed for, not whoever holds a
    /// missing bit at kick time: a bit freed and given to a new subscriber between the
    /// computation and the kick would otherwise drop the innocent newcomer with TIMEOUT.
    #[test]
    fn a_kick_spares_a_bit_that_changed_hands() {
        let mut t = Table::default();
        t.insert(1, entry(10, 0));
        t.insert(2, entry(11, 0));
        let required = t.required_acks(5);
        assert_eq!(required.mask, 0b110);
        // Bit 1's owner leaves; a newcomer gets bit 1 before the publisher's timeout fires.
        t.remove(1);
        t.insert(1, entry(12, 5));
        let kicked = t.kick(&required, 0b110);
        assert_eq!(kicked, 0b100, "only bit 2's original owner is kicked");
        assert!(
            !t.get(1).unwrap().kicked,
            "the newcomer on bit 1 was kicked"
        );
        assert!(t.get(2).unwrap().kicked);
    }

    #[test]
    fn a_kicked_bit_is_owed_nothing_and_not_free() {
        let mut t = Table::default();
        t.insert(1, entry(10, 0));
        let required = t.required_acks(3);
        assert_eq!(t.kick(&required, required.mask), 0b10);
        assert_eq!(
            t.required_acks(4).mask,
            0,
            "a kicked subscriber is owed nothing"
        );
        assert_eq!(
            t.free_bit(),
            Some(2),
            "a kicked bit stays taken until its socket closes"
        );
        assert_eq!(t.kick(&required, required.mask), 0, "kicked once");
    }
}
