//! The model's transitions: every step of the publishing thread, the server thread and the
//! subscriber sessions, each calling the production subscriber table, the invariants checked
//! in every state, and the canonical form of a state.

use std::fmt;

use super::model::*;
use crate::frame_ring::RequiredAcks;
use crate::publisher::subscribers::{bits, Table};

// ---------------------------------------------------------------------------------------------
// Transitions

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PubStep {
    /// Acquire the next slot; under STRICT_WAIT compute `required_acks(old_seq)`.
    Acquire,
    /// Every required ACK is there.
    AcksComplete,
    /// An ACK is missing; wait and recompute.
    WaitMore,
    /// An ACK is missing and the timeout has expired.
    TimeOut,
    DeclareDead,
    Invalidate,
    WritePublish,
    /// `Publisher::replace_frames`: a new generation, the old ring's subscribers retired.
    Replace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SrvStep {
    Admit,
    /// SUBSCRIBE refused: the ring was replaced since HELLO_RESP (DISCONNECTED).
    Refuse,
    /// A retired subscriber's connection: SHUTDOWN(NEW_RING), then `release` and close.
    NewRing,
    SendError,
    /// The peer's socket closed: `release`.
    Release,
    /// An error path (`Err` in the server loop): ERROR, `release`, close, all at once.
    ErrorRelease,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SubStep {
    /// COPY: `next()`, then start copying.
    Read,
    /// COPY: the seqlock recheck after the copy, and `ack()`'s checks (gate, slot seq).
    Recheck,
    /// ZERO_COPY: `next()` and borrow.
    Borrow,
    /// ZERO_COPY: the frame's release runs `ack()`'s checks (gate, slot seq).
    Release,
    /// The `fetch_or` (or page store) of an ACK in flight.
    AckLand,
    /// Read ERROR (or the server's close) from the socket: revoke, stop reading.
    TakeError,
    /// Drop the subscriber: revoke, UNSUBSCRIBE, close the socket.
    Leave,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Pub(PubStep),
    Srv(SrvStep, Label),
    Sub(SubStep, Label),
    Connect(Who),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Pub(s) => write!(f, "publisher  {s:?}"),
            Action::Srv(s, l) => write!(f, "server     {s:?} {l}"),
            Action::Sub(s, l) => write!(f, "{l}         {s:?}"),
            Action::Connect(who) => write!(f, "{who:?}          connect"),
        }
    }
}

/// What `next()` found.
#[derive(Clone, Copy)]
pub(super) enum Next {
    At { k: u8, seq: u8 },
    Empty,
    Skipped,
}

pub(super) fn slot_of(seq: u8, cfg: &Config) -> usize {
    usize::from(seq % cfg.ring_size)
}

pub(super) type Successors = Vec<(Action, State)>;

impl State {
    pub(super) fn initial(cfg: &Config) -> State {
        assert!(cfg.ring_size > 0 && usize::from(cfg.ring_size) <= MAX_RING);
        assert!(cfg.sessions[0] >= 1);
        let mut s = State {
            ring: Ring::fresh(),
            table: TableImage::default(),
            publisher: Publisher {
                last_seq: 0,
                pc: Pc::Idle,
            },
            sessions: [Session::default(); MAX_SESSIONS],
            live: 0,
            joins: [0, 0],
            generation: 1,
        };
        s.connect(Who::A);
        s
    }

    pub(super) fn live(&self) -> &[Session] {
        &self.sessions[..usize::from(self.live)]
    }

    pub(super) fn session_mut(&mut self, l: Label) -> &mut Session {
        let live = usize::from(self.live);
        self.sessions[..live]
            .iter_mut()
            .find(|s| s.label == l)
            .expect("a live session")
    }

    pub(super) fn session_by_conn(&mut self, conn: u8) -> &mut Session {
        let live = usize::from(self.live);
        self.sessions[..live]
            .iter_mut()
            .find(|s| s.conn == conn)
            .expect("a live connection")
    }

    /// The publisher still counts on this session: its connection owns its bit, not kicked.
    pub(super) fn counted_on(&self, s: &Session) -> bool {
        s.srv != Srv::Pending
            && self
                .table
                .owner(s.bit)
                .is_some_and(|o| o.conn == s.conn && !o.kicked && !o.retired)
    }

    pub(super) fn successors(&self, cfg: &Config) -> Successors {
        let mut out = Vec::new();
        // Read-only questions to the production table share one copy of it.
        let table = self.table.load();
        self.publisher_steps(cfg, &table, &mut out);
        for s in self.live() {
            self.server_steps(cfg, &table, s, &mut out);
            self.subscriber_steps(cfg, s, &mut out);
        }
        for who in [Who::A, Who::B] {
            let open = self
                .live()
                .iter()
                .any(|s| s.label.who == who && s.side != Side::Closed);
            if !open && self.joins[who as usize] < cfg.sessions[who as usize] {
                self.push(&mut out, Action::Connect(who), |t| t.connect(who));
            }
        }
        for (_, t) in &mut out {
            t.canonicalize(cfg);
        }
        out
    }

    pub(super) fn push(&self, out: &mut Successors, a: Action, f: impl FnOnce(&mut State)) {
        let mut t = self.clone();
        f(&mut t);
        out.push((a, t));
    }

    pub(super) fn connect(&mut self, who: Who) {
        let i = usize::from(self.live);
        self.joins[who as usize] += 1;
        self.sessions[i] = Session {
            label: Label {
                who,
                nth: self.joins[who as usize],
            },
            conn: narrow(i as u64 + 1),
            generation: self.generation,
            ..Session::default()
        };
        self.live += 1;
    }

    /// Drop finished sessions and renumber connections 1.. in order of creation (connection
    /// ids are only ever compared for equality, so this changes no behaviour). In page mode a
    /// session whose page the publisher's wait still reads is not finished.
    pub(super) fn canonicalize(&mut self, cfg: &Config) {
        let mut renamed = [GONE; MAX_SESSIONS + 1];
        let mut waited = [false; MAX_SESSIONS + 1];
        if cfg.ack_pages {
            for conn in self.waited_for() {
                waited[usize::from(conn)] = true;
            }
        }
        let mut kept = 0;
        for i in 0..usize::from(self.live) {
            let mut s = self.sessions[i];
            let waited = waited[usize::from(s.conn)];
            if s.finished() && !waited {
                continue;
            }
            if s.srv == Srv::Released && !waited {
                s.page = [0; MAX_RING]; // nobody reads it any more
            }
            if !cfg.ack_pages {
                if let Some(a) = &mut s.ack {
                    a.seq = 0; // a bitmap ACK carries no seq
                }
            }
            // The publisher only ever asks `acked_seq[k] == the frame in slot k`, and seqs in
            // a slot only grow: any other value is as good as none.
            for (acked, frame) in s.page.iter_mut().zip(self.ring.data) {
                if *acked != frame {
                    *acked = 0;
                }
            }
            renamed[usize::from(s.conn)] = narrow(kept as u64 + 1);
            s.conn = narrow(kept as u64 + 1);
            s.canonicalize();
            self.sessions[kept] = s;
            kept += 1;
        }
        for s in &mut self.sessions[kept..] {
            *s = Session::default();
        }
        self.live = narrow(kept as u64);
        for o in self.table.0.iter_mut().flatten() {
            o.conn = renamed[usize::from(o.conn)];
            assert_ne!(o.conn, GONE, "a table entry outlived its connection");
        }
        if let Pc::ReadAcks(r) | Pc::DeclareDead(r, _) = &mut self.publisher.pc {
            for b in bits(r.mask.into()) {
                let o = &mut r.owners[b];
                *o = if *o == GONE {
                    GONE
                } else {
                    renamed[usize::from(*o)]
                };
            }
        }
    }

    // --- the publishing thread (FrameWriter::acquire, wait_for_acks, publish) ---

    pub(super) fn publisher_steps(&self, cfg: &Config, table: &Table, out: &mut Successors) {
        let seq = self.publisher.last_seq + 1;
        let k = slot_of(seq, cfg);
        let step = Action::Pub;
        let frames = if self.generation == 1 {
            cfg.frames
        } else {
            cfg.frames_after_replacement
        };
        if self.publisher.pc == Pc::Idle && self.generation == 1 && cfg.frames_after_replacement > 0
        {
            self.push(out, step(PubStep::Replace), |t| t.replace(cfg));
        }
        match self.publisher.pc {
            Pc::Idle if seq > frames => {}
            Pc::Idle => {
                // wait_for_acks: a slot that never held a frame needs no ACK (and nobody can
                // have ACKed into it: it is INVALID, and admission cleared the bit anyway).
                let (pc, reuse) = match self.ring.seq[k] {
                    INVALID => (Pc::WritePublish, false),
                    old => (
                        Pc::ReadAcks(Required::from_production(&table.required_acks(old.into()))),
                        true,
                    ),
                };
                self.push(out, step(PubStep::Acquire), |t| {
                    t.publisher.pc = pc;
                    t.ring.first_lap_over |= reuse;
                });
            }
            Pc::ReadAcks(required) => {
                let missing = self.missing(cfg, required, k);
                if missing == 0 {
                    self.push(out, step(PubStep::AcksComplete), |t| {
                        t.publisher.pc = Pc::Invalidate
                    });
                } else {
                    self.push(out, step(PubStep::WaitMore), |t| t.publisher.pc = Pc::Idle);
                    self.push(out, step(PubStep::TimeOut), |t| {
                        t.publisher.pc = Pc::DeclareDead(required, missing)
                    });
                }
            }
            Pc::DeclareDead(required, missing) => self.push(out, step(PubStep::DeclareDead), |t| {
                t.declare_dead(cfg, required, missing, t.ring.seq[k]);
                t.publisher.pc = Pc::Invalidate;
            }),
            // One step for two stores: between them only an ACK landing in `ack[k]` could
            // matter, and it is erased by the clear either way.
            Pc::Invalidate => self.push(out, step(PubStep::Invalidate), |t| {
                t.ring.seq[k] = INVALID;
                t.ring.ack[k] = 0;
                t.publisher.pc = Pc::WritePublish;
            }),
            Pc::WritePublish => self.push(out, step(PubStep::WritePublish), |t| {
                t.ring.data[k] = seq;
                t.ring.seq[k] = seq;
                t.ring.global_seq = seq;
                t.publisher = Publisher {
                    last_seq: seq,
                    pc: Pc::Idle,
                };
            }),
        }
    }

    /// `Publisher::replace_frames`, one step: it holds the rings' write lock (no SUBSCRIBE
    /// reads a ring meanwhile) and the table lock for the retirement. The generation moves,
    /// the old ring's frame subscribers are retired (owed nothing), and the new ring starts
    /// empty, its frames numbered from 1.
    pub(super) fn replace(&mut self, cfg: &Config) {
        self.generation += 1;
        if cfg.fixes.retire_on_replacement {
            self.table.with(|table| table.retire_frame_subscribers());
        }
        self.ring = Ring::fresh();
        self.publisher = Publisher {
            last_seq: 0,
            pc: Pc::Idle,
        };
    }

    /// `wait_for_acks`: the required bits whose ACK of the frame in slot `k` is not there. A
    /// bitmap subscriber's is its bit in the slot's bitmap; a page subscriber's is its page
    /// saying `acked_seq[k] == old_seq`, read from the page of the owner the wait was
    /// computed for (whose session is kept alive for that, see `canonicalize`).
    pub(super) fn missing(&self, cfg: &Config, required: Required, k: usize) -> u8 {
        if !cfg.ack_pages {
            return required.mask & !self.ring.ack[k];
        }
        let old_seq = self.ring.seq[k];
        let mut missing = 0;
        for b in bits(required.mask.into()) {
            let conn = required.owners[b];
            let page = self.live().iter().find(|s| s.conn == conn).map(|s| s.page);
            if page.expect("a waited-for page is kept")[k] != old_seq {
                missing |= 1 << b;
            }
        }
        missing
    }

    /// The connections whose pages the publisher's current wait reads.
    pub(super) fn waited_for(&self) -> impl Iterator<Item = u8> + '_ {
        let required = match &self.publisher.pc {
            Pc::ReadAcks(r) | Pc::DeclareDead(r, _) => Some(*r),
            _ => None,
        };
        required
            .into_iter()
            .flat_map(|r| bits(r.mask.into()).map(move |b| r.owners[b]))
    }

    /// `Inner::declare_dead` (or a defective variant of it) for frame `old_seq`.
    pub(super) fn declare_dead(
        &mut self,
        cfg: &Config,
        required: Required,
        missing: u8,
        old_seq: u8,
    ) {
        let fixes = cfg.fixes;
        let kicked: Vec<(u8, bool)> = self.table.with(|table| {
            let required = if fixes.kick_by_owner {
                required.to_production()
            } else {
                // Defect 2: the owners are whoever holds the bits at kick time.
                owners_now(table, required.mask)
            };
            let kicked = table.kick(&required, missing.into());
            let victims = bits(kicked)
                .map(|b| {
                    let e = table.get(b).expect("just kicked");
                    (narrow(e.conn_id), e.initial_seq >= old_seq.into())
                })
                .collect();
            if !fixes.quarantine {
                // Defect 1: the bit is free for the next subscriber at once.
                for b in bits(kicked) {
                    table.remove(b);
                }
            }
            victims
        });
        // A subscriber of a replaced ring owes the new one nothing either: it reads the old.
        let generation = self.generation;
        for (conn, owed_nothing) in kicked {
            let s = self.session_by_conn(conn);
            s.kicked_innocent |= owed_nothing || s.generation != generation;
        }
    }

    // --- the server thread (server::subscribe, check_deadline_and_kick, release) ---

    pub(super) fn server_steps(
        &self,
        cfg: &Config,
        table: &Table,
        s: &Session,
        out: &mut Successors,
    ) {
        let l = s.label;
        let step = |a| Action::Srv(a, l);
        // A peer that closed during its handshake is no different from one that never
        // connected, and an ERROR to a closed socket goes nowhere: neither is explored.
        if s.srv == Srv::Pending && s.side == Side::Connecting {
            if s.generation != self.generation && cfg.fixes.refuse_stale_subscribe {
                self.push(out, step(SrvStep::Refuse), |t| {
                    let s = t.session_mut(l);
                    s.srv = Srv::Released;
                    s.side = Side::Closed; // it starts over as a new connection
                });
            } else {
                self.push(out, step(SrvStep::Admit), |t| t.admit(cfg, l));
            }
        }
        // `check_deadline_and_kick`: a retired bit's connection gets SHUTDOWN(NEW_RING) and
        // is closed (`release`); the subscriber then comes back as a new connection.
        let retired = table.get(usize::from(s.bit)).is_some_and(|e| e.retired);
        if s.srv == Srv::Active && s.side != Side::Closed && retired {
            self.push(out, step(SrvStep::NewRing), |t| t.release(l));
        }
        if s.srv == Srv::Active && s.side != Side::Closed && server_sees_kick(cfg, table, s) {
            self.push(out, step(SrvStep::SendError), |t| {
                t.session_mut(l).srv = Srv::ErrorSent
            });
        }
        if s.side == Side::Closed && s.srv != Srv::Released {
            self.push(out, step(SrvStep::Release), |t| t.release(l));
        }
        let admitted = matches!(s.srv, Srv::Active | Srv::ErrorSent);
        if cfg.peer_errors && admitted && s.side != Side::Closed {
            if cfg.fixes.quarantine_on_error && !cfg.ack_pages {
                // `server::run`: the bit is given up on like a kick and waits for the close.
                if s.srv == Srv::Active {
                    self.push(out, step(SrvStep::ErrorRelease), |t| {
                        let s = t.session_mut(l);
                        let (bit, conn) = (usize::from(s.bit), u64::from(s.conn));
                        s.srv = Srv::ErrorSent;
                        t.table.with(|table| {
                            if let Some(e) = table.get_mut(bit).filter(|e| e.conn_id == conn) {
                                e.kicked = true;
                            }
                        });
                    });
                }
            } else {
                self.push(out, step(SrvStep::ErrorRelease), |t| t.release(l));
            }
        }
    }

    /// `server::subscribe` (all of it under the table lock). `initial_seq` by its rule, from
    /// the writer's record (here `global_seq`, the last published seq): a replacement ring
    /// whose writer has not reused a slot yet (`first_lap_over`) starts its subscribers at its
    /// first frame.
    pub(super) fn admit(&mut self, cfg: &Config, l: Label) {
        let published = self.ring.global_seq;
        let initial_seq = if self.generation > 1 && !self.ring.first_lap_over {
            0
        } else {
            published
        };
        let generation = self.generation;
        let conn = self.session_mut(l).conn;
        let bit = self.table.with(|table| {
            let bit = table.free_bit().expect("the model never runs out of bits");
            table.insert(bit, entry(conn, initial_seq, false, false));
            narrow(bit as u64)
        });
        if cfg.fixes.clear_stale_bits_at_admission {
            for a in &mut self.ring.ack {
                *a &= !(1 << bit);
            }
        }
        let s = self.session_mut(l);
        s.srv = Srv::Active;
        s.side = Side::Reading;
        s.bit = bit;
        s.last_seq = initial_seq;
        s.wrong_ring |= s.generation != generation;
    }

    /// `server::release`: free every bit the connection owns.
    pub(super) fn release(&mut self, l: Label) {
        let conn = u64::from(self.session_mut(l).conn);
        self.table.with(|table| {
            let owned: Vec<usize> = table
                .iter()
                .filter(|(_, e)| e.conn_id == conn)
                .map(|(b, _)| b)
                .collect();
            for bit in owned {
                if table.get(bit).is_some_and(|e| e.conn_id == conn) {
                    table.remove(bit);
                }
            }
        });
        self.session_mut(l).srv = Srv::Released;
    }

    // --- the subscribers (frame_ring::reader, subscriber::Subscriber and Frame) ---

    pub(super) fn subscriber_steps(&self, cfg: &Config, s: &Session, out: &mut Successors) {
        let l = s.label;
        let step = |a| Action::Sub(a, l);
        // A session of a replaced ring reads nothing more of the current one.
        let current = s.generation == self.generation;
        if s.side == Side::Reading && s.main_thread_free() && current {
            if s.copy_mode() {
                self.push_read(cfg, s, step(SubStep::Read), out);
            } else if s.held.is_none() {
                self.push_read(cfg, s, step(SubStep::Borrow), out);
            }
        }
        if let Some((k, seq)) = s.copying {
            self.push(out, step(SubStep::Recheck), |t| t.recheck(l, k, seq));
        }
        // The release (a CUDA host function, or the user's thread) may run at any time, even
        // after the subscriber is gone: the frame keeps the ring mapped.
        if let (Some((k, seq)), None) = (s.held, s.ack) {
            self.push(out, step(SubStep::Release), |t| {
                let ring = t.ring;
                let s = t.session_mut(l);
                s.held = None;
                // A frame of a replaced ring is ACKed there, where nobody waits any more.
                if current {
                    s.start_ack(&ring, k, seq);
                }
            });
        }
        if let Some(InFlight { k, seq }) = s.ack {
            self.push(out, step(SubStep::AckLand), |t| {
                let k = usize::from(k);
                let s = t.session_mut(l);
                s.ack = None;
                if cfg.ack_pages {
                    s.page[k] = seq; // AckPage::record_ack
                } else if current {
                    let bit = s.bit;
                    t.ring.ack[k] |= 1 << bit;
                } // else: into the replaced ring's bitmap, which nobody reads any more
            });
        }
        // With the fix, revoking waits for an ACK in flight (the gate lock); without it the
        // subscriber does not revoke at all, and its ACKs go on after the close.
        let revoke = cfg.fixes.revoke_before_close;
        let may_stop = s.main_thread_free() && (!revoke || s.gate_free());
        let told = matches!(s.srv, Srv::ErrorSent | Srv::Released);
        if s.side == Side::Reading && told && may_stop {
            self.push(out, step(SubStep::TakeError), |t| {
                let s = t.session_mut(l);
                s.side = Side::GivenUp;
                s.revoked |= revoke;
            });
        }
        if matches!(s.side, Side::Reading | Side::GivenUp) && may_stop {
            self.push(out, step(SubStep::Leave), |t| {
                let s = t.session_mut(l);
                s.side = Side::Closed;
                s.revoked |= revoke;
            });
        }
    }

    /// `FrameReader::next` (§6 step 1 with lapping), then the start of a copy or a borrow.
    pub(super) fn push_read(&self, cfg: &Config, s: &Session, a: Action, out: &mut Successors) {
        let mut last_seq = s.last_seq;
        let (next, lapped) = self.next(cfg, &mut last_seq);
        if matches!(next, Next::Empty) {
            return; // nothing changes
        }
        let lost = lapped || matches!(next, Next::Skipped);
        let missed = lost && self.counted_on(s);
        let l = s.label;
        self.push(out, a, |t| {
            let s = t.session_mut(l);
            s.last_seq = last_seq;
            s.missed |= missed;
            if let Next::At { k, seq } = next {
                if s.copy_mode() {
                    s.copying = Some((k, seq));
                } else {
                    s.held = Some((k, seq));
                    s.last_seq = seq;
                }
            }
        });
    }

    /// What `next()` finds, moving `last_seq` past a frame that is gone; and whether it lapped.
    pub(super) fn next(&self, cfg: &Config, last_seq: &mut u8) -> (Next, bool) {
        let g = self.ring.global_seq;
        assert!(g >= *last_seq, "global_seq moved backwards");
        if g == *last_seq {
            return (Next::Empty, false);
        }
        let mut want = *last_seq + 1;
        let lapped = g - want >= cfg.ring_size;
        if lapped {
            want = g;
        }
        let k = slot_of(want, cfg);
        let s1 = self.ring.seq[k];
        if s1 == want {
            // The caller moves last_seq on when it delivers the frame (or finds it torn).
            let k = narrow(k as u64);
            return (Next::At { k, seq: want }, lapped);
        }
        assert!(s1 == INVALID || s1 > want, "corrupt ring");
        *last_seq = want;
        (Next::Skipped, lapped)
    }

    /// COPY: the seqlock recheck after the copy (`try_copy`), then `ack()`'s checks. The
    /// two are one step: they load the same word, and a change in between only makes the ACK
    /// fail, which a torn copy also does.
    pub(super) fn recheck(&mut self, l: Label, k: u8, seq: u8) {
        if self.session_mut(l).generation != self.generation {
            // A copy from a replaced ring: whatever it finds, nothing here changes.
            let s = self.session_mut(l);
            s.copying = None;
            s.last_seq = seq;
            return;
        }
        let intact = self.ring.seq[usize::from(k)] == seq;
        let s = *self.session_mut(l);
        let counted = self.counted_on(&s);
        let ring = self.ring;
        let s = self.session_mut(l);
        s.copying = None;
        s.last_seq = seq;
        if intact {
            s.start_ack(&ring, k, seq);
        } else {
            s.missed |= counted; // torn
        }
    }

    // --- invariants ---

    pub(super) fn violation(&self, cfg: &Config) -> Option<String> {
        for s in self.live() {
            let name = format!("{} (bit {})", s.label, s.bit);
            if s.wrong_ring {
                return Some(format!(
                    "{name} was admitted to generation {} of the ring but mapped generation {}",
                    self.generation, s.generation
                ));
            }
            if let Some((k, seq)) = s.held.filter(|_| s.generation == self.generation) {
                let data = self.ring.data[usize::from(k)];
                if data != seq && self.counted_on(s) {
                    return Some(format!(
                        "{name} holds frame {seq} and is counted on, but slot {k} was \
                         overwritten with frame {data}"
                    ));
                }
            }
            if s.missed && cfg.check_lost_frames {
                return Some(format!(
                    "{name} lost a frame although the publisher counts on it"
                ));
            }
            if s.kicked_innocent {
                return Some(format!(
                    "{name} was kicked over a frame it owed nothing for"
                ));
            }
        }
        None
    }
}

/// `check_deadline_and_kick` for an Active connection. Without quarantine a kicked entry is
/// removed at once, so the server notices that the bit is no longer this connection's.
pub(super) fn server_sees_kick(cfg: &Config, table: &Table, s: &Session) -> bool {
    let bit = usize::from(s.bit);
    let mine = table
        .get(bit)
        .is_some_and(|e| e.conn_id == u64::from(s.conn));
    table.get(bit).is_some_and(|e| e.kicked) || (!cfg.fixes.quarantine && !mine)
}

/// The defective kick of defect 2: owners recomputed at kick time.
pub(super) fn owners_now(table: &Table, mask: u8) -> RequiredAcks {
    let mut r = RequiredAcks {
        mask: mask.into(),
        ..RequiredAcks::default()
    };
    for b in bits(mask.into()) {
        if let Some(e) = table.get(b) {
            r.owners[b] = e.conn_id;
        }
    }
    r
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "global_seq {}, slots", self.ring.global_seq)?;
        for k in 0..MAX_RING {
            let (seq, data) = (self.ring.seq[k], self.ring.data[k]);
            if seq == INVALID && data == 0 {
                continue;
            }
            let seq = if seq == INVALID {
                "-".to_owned()
            } else {
                seq.to_string()
            };
            let acks = self.ring.ack[k];
            write!(f, " [{k}: seq {seq} acks {acks:#b} data {data}]")?;
        }
        write!(f, ", table")?;
        for (b, o) in self.table.0.iter().enumerate() {
            if let Some(o) = o {
                let owner = self.live().iter().find(|s| s.conn == o.conn);
                let owner = owner.map_or("?".to_owned(), |s| s.label.to_string());
                let kicked = if o.kicked { " kicked" } else { "" };
                let retired = if o.retired { " retired" } else { "" };
                write!(f, " {b}:{owner}{kicked}{retired}")?;
            }
        }
        write!(
            f,
            ", publisher at frame {} of generation {}",
            self.publisher.last_seq, self.generation
        )?;
        for s in self.live() {
            write!(
                f,
                "\n       {} {:?}/{:?} bit {} held {:?} ack {:?} generation {}",
                s.label, s.side, s.srv, s.bit, s.held, s.ack, s.generation
            )?;
        }
        Ok(())
    }
}
