//! The model's state: the bounds, the switches of the fixes, the subscriber table stored as
//! a value (the production `Table` is rebuilt from it at each step), the SHM, the publishing
//! thread, the server's view of each connection and the subscriber sessions.

use std::fmt;

use crate::frame_ring::RequiredAcks;
use crate::publisher::subscribers::{Entry, Table};

/// A slot's seq while the publisher rewrites it (`INVALID_SEQ`, in the model's u8 seqs).
pub(super) const INVALID: u8 = u8::MAX;
/// Largest ring the model is run with.
pub(super) const MAX_RING: usize = 2;
/// Bits 1..BITS of the table are modelled (the sessions alive at once never need more).
pub(super) const BITS: usize = 6;
/// Connections alive at once, at most (two per process, one open and one closing).
pub(super) const MAX_SESSIONS: usize = 4;
/// The owner recorded in a wait's required ACKs for a connection that is gone since: it
/// can never equal a live connection (those are numbered 1..=MAX_SESSIONS).
pub(super) const GONE: u8 = 0xFE;

/// The fixes, each of which can be turned off to see the defect it prevents.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fixes {
    /// A kicked bit stays taken (owed nothing) until its connection closes.
    pub(super) quarantine: bool,
    /// A subscriber closes its ACK gate before it closes its socket.
    pub(super) revoke_before_close: bool,
    /// Admission clears the new bit from every slot's ACK bitmap.
    pub(super) clear_stale_bits_at_admission: bool,
    /// `declare_dead` kicks only the owners the required ACKs were computed for.
    pub(super) kick_by_owner: bool,
    /// An error on an admitted header-ACK connection gives its bit up like a kick (ERROR,
    /// owed nothing, quarantined until the socket closes) instead of freeing it at once.
    pub(super) quarantine_on_error: bool,
    /// SUBSCRIBE is refused (DISCONNECTED) when the ring was replaced since HELLO_RESP
    /// described it: the subscriber mapped the ring HELLO_RESP named.
    pub(super) refuse_stale_subscribe: bool,
    /// A replacement retires the old ring's frame subscribers (owed nothing from the new ring).
    pub(super) retire_on_replacement: bool,
}

pub(super) const ALL_FIXES: Fixes = Fixes {
    quarantine: true,
    revoke_before_close: true,
    clear_stale_bits_at_admission: true,
    kick_by_owner: true,
    quarantine_on_error: true,
    refuse_stale_subscribe: true,
    retire_on_replacement: true,
};

#[derive(Debug, Clone, Copy)]
pub(super) struct Config {
    pub(super) ring_size: u8,
    /// Frames the publisher publishes in all.
    pub(super) frames: u8,
    /// Sessions (connections, one after the other) that A and B may open.
    pub(super) sessions: [u8; 2],
    pub(super) fixes: Fixes,
    /// Subscribers ACK in an ACK page of their connection's own (the extension, and what this
    /// library's subscribers do) instead of the header's bitmap (plain v4 peers, admitted with
    /// `allow_legacy_subscribers`). Mixed rings are not modelled: a page subscriber never
    /// writes the bitmap and the publisher never reads it for one, so only bitmap-to-bitmap
    /// hand-overs of a bit can carry a stray ACK, and those are what `ack_pages: false` checks.
    pub(super) ack_pages: bool,
    /// The server may take one of its error paths on an admitted connection (a malformed or
    /// unexpected message, 64 KiB unread in its outbox, a failed write) and `release` it at
    /// once, while the peer's socket is still open and the peer has not revoked.
    pub(super) peer_errors: bool,
    /// Check the invariant that a counted-on session loses no frame. A stray ACK usually
    /// shows first as a frame lost by the new owner of its bit; with this off, the search
    /// goes on to the overwrite of a frame the new owner holds.
    pub(super) check_lost_frames: bool,
    /// Frames of a replacement ring (`Publisher::replace_frames`), which the publisher may put
    /// in place once, at any point between two frames; 0: no replacement.
    pub(super) frames_after_replacement: u8,
}

/// The two subscriber processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Who {
    /// Reads in COPY mode; connecting from the start.
    #[default]
    A,
    /// Reads ZERO_COPY; joins later.
    B,
}

// ---------------------------------------------------------------------------------------------
// The production table, stored as a value

/// One table entry as far as the protocol cares (the rest of `Entry` is constant here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Owner {
    pub(super) conn: u8,
    pub(super) initial_seq: u8,
    pub(super) kicked: bool,
    /// Its ring was replaced (`Table::retire_frame_subscribers`).
    pub(super) retired: bool,
}

/// The production [`Table`] as a plain value, rebuilt for every operation on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct TableImage(pub(super) [Option<Owner>; BITS]);

impl TableImage {
    pub(super) fn load(&self) -> Table {
        let mut table = Table::default();
        for (bit, owner) in self.0.iter().enumerate() {
            if let Some(o) = owner {
                table.insert(bit, entry(o.conn, o.initial_seq, o.kicked, o.retired));
            }
        }
        table
    }

    pub(super) fn store(table: &Table) -> TableImage {
        let mut image = TableImage::default();
        for (bit, e) in table.iter() {
            assert!(bit < BITS, "the model hands out at most {} bits", BITS - 1);
            assert!(e.wants_frames != e.retired && !e.wants_packets);
            image.0[bit] = Some(Owner {
                conn: narrow(e.conn_id),
                initial_seq: narrow(e.initial_seq),
                kicked: e.kicked,
                retired: e.retired,
            });
        }
        image
    }

    /// Run production code on the table (what runs under the table lock in production).
    pub(super) fn with<R>(&mut self, f: impl FnOnce(&mut Table) -> R) -> R {
        let mut table = self.load();
        let r = f(&mut table);
        *self = TableImage::store(&table);
        r
    }

    pub(super) fn owner(&self, bit: u8) -> Option<Owner> {
        self.0[usize::from(bit)]
    }
}

/// An entry as the table holds it. The table's count of admissions and of returns due after a
/// replacement is not in the image: the publisher's wait for returns is not modelled (see
/// "Ring replacement" above), so nothing asks for it.
pub(super) fn entry(conn: u8, initial_seq: u8, kicked: bool, retired: bool) -> Entry {
    Entry {
        conn_id: conn.into(),
        uid: 0,
        pid: 0,
        name: String::new(),
        initial_seq: initial_seq.into(),
        wants_frames: !retired,
        wants_packets: false,
        kicked,
        retired,
        // Real pages are memfds, which a state cannot hold: with `Config::ack_pages` the model
        // keeps each connection's page itself (`Session::page`) and reads it where
        // `wait_for_acks` reads `required.pages[bit]`, the page of the owner it waits for.
        ack_page: None,
    }
}

pub(super) fn narrow(v: u64) -> u8 {
    u8::try_from(v).expect("model values are small")
}

/// [`RequiredAcks`] as a plain value, kept by the publisher between its steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Required {
    pub(super) mask: u8,
    pub(super) owners: [u8; BITS],
}

impl Required {
    pub(super) fn from_production(r: &RequiredAcks) -> Required {
        let mut owners = [0; BITS];
        for (b, o) in owners.iter_mut().enumerate() {
            *o = narrow(r.owners[b]);
        }
        Required {
            mask: narrow(r.mask),
            owners,
        }
    }

    pub(super) fn to_production(self) -> RequiredAcks {
        let mut r = RequiredAcks {
            mask: self.mask.into(),
            ..RequiredAcks::default()
        };
        for (b, o) in self.owners.iter().enumerate() {
            r.owners[b] = (*o).into();
        }
        r
    }
}

// ---------------------------------------------------------------------------------------------
// The state

/// The frame SHM as plain fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ring {
    pub(super) global_seq: u8,
    pub(super) seq: [u8; MAX_RING],
    pub(super) ack: [u8; MAX_RING],
    /// Which frame's pixels the slot holds (what a ZERO_COPY holder looks at).
    pub(super) data: [u8; MAX_RING],
    /// The writer's `first_lap_over`: set by the acquire that first reuses a slot, in the
    /// step that computes who must ACK (production sets it just before).
    pub(super) first_lap_over: bool,
}

impl Ring {
    /// A new ring: nothing published, every slot invalid.
    pub(super) fn fresh() -> Ring {
        Ring {
            global_seq: 0,
            seq: [INVALID; MAX_RING],
            ack: [0; MAX_RING],
            data: [0; MAX_RING],
            first_lap_over: false,
        }
    }
}

/// Where the publishing thread is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pc {
    /// About to acquire the next slot (and, under STRICT_WAIT, compute the required ACKs).
    Idle,
    /// Required ACKs computed; the ACKs (bitmap or pages) are read next.
    ReadAcks(Required),
    /// Timed out: `declare_dead(required, missing)` runs next.
    DeclareDead(Required, u8),
    /// Store INVALID_SEQ in the slot and clear its ACK bitmap.
    Invalidate,
    WritePublish,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Publisher {
    pub(super) last_seq: u8,
    pub(super) pc: Pc,
}

/// The subscriber side of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Side {
    /// Waiting for SUBSCRIBE_RESP.
    #[default]
    Connecting,
    Reading,
    /// Got ERROR: ACKs revoked, reads no more frames, still connected.
    GivenUp,
    /// Socket closed (after revoking, with the fix).
    Closed,
}

/// The server side of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Srv {
    #[default]
    Pending,
    Active,
    /// ERROR(TIMEOUT) sent (Phase::GivenUp).
    ErrorSent,
    /// The connection is gone and its bits freed.
    Released,
}

/// An `ack()` that passed the gate and the slot seq check and holds the gate lock: its
/// `fetch_or` into slot `k`'s bitmap (or its store of `seq` into the page) lands next: the
/// ACK *in flight*.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct InFlight {
    pub(super) k: u8,
    pub(super) seq: u8,
}

/// Names a session across renumberings of connections: the `nth` session of process `who`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Label {
    pub(super) who: Who,
    pub(super) nth: u8,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}{}", self.who, self.nth)
    }
}

/// One connection: a `Subscriber` object in its process and a `Conn` in the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Session {
    pub(super) label: Label,
    /// The server's connection id (renumbered 1.. in order of creation after each step).
    pub(super) conn: u8,
    pub(super) side: Side,
    pub(super) srv: Srv,
    pub(super) bit: u8,
    /// The reader's `last_seq`.
    pub(super) last_seq: u8,
    pub(super) revoked: bool,
    /// COPY: `(slot, seq)` found by `next()`, being copied (before the seqlock recheck).
    pub(super) copying: Option<(u8, u8)>,
    /// ZERO_COPY: the borrowed frame `(slot, seq)`.
    pub(super) held: Option<(u8, u8)>,
    pub(super) ack: Option<InFlight>,
    /// The connection's ACK page (`Config::ack_pages`): `acked_seq[k]`.
    pub(super) page: [u8; MAX_RING],
    /// The generation of the ring this session mapped (the one HELLO_RESP described). The
    /// model keeps only the current ring: a session of an older one reads nothing more, and
    /// its ACKs land in the old ring's memory (bitmap) or its own page, which the new ring's
    /// publisher never reads for it (retired: owed nothing).
    pub(super) generation: u8,
    /// Ghost: admitted to a ring generation other than the one it mapped.
    pub(super) wrong_ring: bool,
    /// Ghost: lost a frame while the publisher counted on it.
    pub(super) missed: bool,
    /// Ghost: kicked over a frame it owed nothing for.
    pub(super) kicked_innocent: bool,
}

impl Session {
    pub(super) fn copy_mode(&self) -> bool {
        self.label.who == Who::A
    }

    /// A COPY subscriber's thread is inside `try_copy` (copy, recheck, `ack`) and can do
    /// nothing else; a ZERO_COPY release runs on a thread of its own.
    pub(super) fn main_thread_free(&self) -> bool {
        self.copying.is_none() && !(self.copy_mode() && self.ack.is_some())
    }

    /// `revoke_acks` takes the gate lock, which an ACK in flight holds.
    pub(super) fn gate_free(&self) -> bool {
        self.ack.is_none()
    }

    /// `ack(k, seq)` up to the `fetch_or`: under the gate lock, check `revoked` and the seq.
    pub(super) fn start_ack(&mut self, ring: &Ring, k: u8, seq: u8) {
        let passes = !self.revoked && ring.seq[usize::from(k)] == seq;
        self.ack = passes.then_some(InFlight { k, seq });
    }

    pub(super) fn finished(&self) -> bool {
        self.side == Side::Closed
            && self.srv == Srv::Released
            && self.ack.is_none()
            && self.held.is_none()
    }

    /// Forget what can no longer influence anything, so that equivalent states are equal.
    pub(super) fn canonicalize(&mut self) {
        if matches!(self.side, Side::GivenUp | Side::Closed) {
            self.last_seq = 0; // reads no more frames
        }
        if self.side == Side::Closed {
            if self.srv == Srv::ErrorSent {
                self.srv = Srv::Active; // only the release is left for the server to do
            }
            if self.ack.is_none() && self.held.is_none() {
                self.bit = 0;
                self.revoked = false;
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct State {
    pub(super) ring: Ring,
    pub(super) table: TableImage,
    pub(super) publisher: Publisher,
    /// Live connections, oldest first; the rest of the array is `Session::default()`.
    pub(super) sessions: [Session; MAX_SESSIONS],
    pub(super) live: u8,
    /// Sessions each process has opened so far.
    pub(super) joins: [u8; 2],
    /// The frame ring's generation: 1, and 2 once replaced.
    pub(super) generation: u8,
}
