//! The publisher's server thread: accepts subscribers and runs each one's handshake
//! (HELLO → SUBSCRIBE → VMM_FDS, §4) and lifetime (UNSUBSCRIBE, PING, SHUTDOWN) without ever
//! blocking on a peer. A peer that misbehaves gets an ERROR and is dropped; the others are
//! not affected.

use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::admission::{self, PendingVerdict};
use super::rejoin::Rejoins;
use super::shared::Inner;
use super::subscribers::Entry;
use crate::error::{Error, ErrorCode, Result};
use crate::frame_ring::ack_page::{AckPage, Counter};
use crate::sock::{self, Inbox, Outbox, Pumped};
use crate::tlv::{
    AckPageMsg, GopStoreMsg, HelloReq, HelloResp, HelloRespPackets, Message, SubscribeResp, VmmFds,
};
use crate::wire::ack_page::ACK_PAGE_SIZE;
use crate::wire::*;

/// Connections accepted per turn of the loop, at most: the others wait in the listen queue
/// while the connections already accepted are served.
const MAX_ACCEPTS_PER_TURN: usize = 256;

enum Phase {
    AwaitHello,
    /// With the frame ring generation HELLO_RESP described.
    AwaitSubscribe(HelloReq, u64),
    Active {
        bit: usize,
    },
    /// Declared dead (R11, R27) and told so with ERROR(TIMEOUT). The bit stays quarantined
    /// until the peer closes its end: the process may still be ACKing with it (see
    /// `subscribers`). A PING is still answered; nothing else is accepted.
    GivenUp,
}

impl Phase {
    /// Past the handshake: no handshake deadline applies.
    fn admitted(&self) -> bool {
        matches!(self, Phase::Active { .. } | Phase::GivenUp)
    }
}

struct Conn {
    id: u64,
    stream: UnixStream,
    inbox: Inbox,
    /// What the peer has not read yet: the server never waits for a peer to read.
    outbox: Outbox,
    phase: Phase,
    deadline: Instant,
    uid: u32,
    gid: u32,
    pid: u32,
}

/// What the server thread keeps besides its connections.
struct State {
    /// Uids whose frame subscribers were kicked, held back before they subscribe again.
    rejoins: Rejoins,
    /// The publisher's own uid.
    own_uid: u32,
}

impl State {
    /// Root and the publisher's own uid are neither capped nor held back: they could stop
    /// the publisher anyway, and the host's own readers must always get in.
    fn exempt(&self, uid: u32) -> bool {
        uid == 0 || uid == self.own_uid
    }
}

pub(crate) fn run(inner: Arc<Inner>, listener: UnixListener) {
    let wake_rx = &inner.wake_rx;
    let mut state = State {
        rejoins: Rejoins::default(),
        own_uid: nix::unistd::geteuid().as_raw(),
    };
    let mut conns: Vec<Conn> = Vec::new();
    let mut next_id = 1u64;
    while !inner.stopping.load(Ordering::SeqCst) {
        let timeout = conns
            .iter()
            .filter(|c| !c.phase.admitted())
            .map(|c| c.deadline.saturating_duration_since(Instant::now()))
            .min()
            .unwrap_or(STATS_MIRROR_PERIOD)
            .min(STATS_MIRROR_PERIOD);
        let ready: Vec<bool> = {
            let mut fds = Vec::with_capacity(conns.len() + 2);
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            fds.push(PollFd::new(wake_rx.as_fd(), PollFlags::POLLIN));
            for c in &conns {
                let events = if c.outbox.is_empty() {
                    PollFlags::POLLIN
                } else {
                    PollFlags::POLLIN | PollFlags::POLLOUT
                };
                fds.push(PollFd::new(c.stream.as_fd(), events));
            }
            let ms = timeout.as_millis().clamp(1, 1000) as u16;
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
            fds.iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect()
        };
        if ready[1] {
            let mut buf = [0u8; 64];
            while matches!(nix::unistd::read(wake_rx, &mut buf), Ok(n) if n > 0) {}
        }
        // Serve existing connections; drop the ones that are done.
        let mut keep = Vec::with_capacity(conns.len());
        for (i, mut c) in conns.into_iter().enumerate() {
            let alive = if ready[i + 2] {
                serve(&inner, &mut state, &mut c)
            } else {
                Ok(true)
            };
            let alive = alive
                .and_then(|a| {
                    if a {
                        check_deadline_and_kick(&inner, &mut state, &mut c)
                    } else {
                        Ok(false)
                    }
                })
                .and_then(|a| c.outbox.flush(c.stream.as_fd()).map(|()| a));
            match alive {
                Ok(true) => keep.push(c),
                Ok(false) => {
                    // A last answer (a refusal) goes out if the socket takes it now.
                    let _ = c.outbox.flush(c.stream.as_fd());
                    release(&inner, &c);
                }
                Err(e) => {
                    let _ = c.outbox.push(
                        &Message::Error {
                            code: e.code() as i32,
                            message: e.message().chars().take(512).collect(),
                        },
                        Vec::new(),
                    );
                    let _ = c.outbox.flush(c.stream.as_fd());
                    if give_up_on(&inner, &mut c) {
                        keep.push(c);
                    } else {
                        release(&inner, &c);
                    }
                }
            }
        }
        conns = keep;
        mirror_page_stats(&inner);
        if ready[0] {
            accept_all(&inner, &listener, &mut conns, &mut next_id);
        }
    }
    // Shutdown: tell every subscriber (§1 normal shutdown, step 2).
    for c in &mut conns {
        if c.phase.admitted() {
            let _ = c.outbox.push(
                &Message::Shutdown {
                    reason: ShutdownReason::Normal as u32,
                },
                Vec::new(),
            );
            let _ = c.outbox.flush(c.stream.as_fd());
        }
        release(&inner, c);
    }
}

/// Make room for one more pending handshake from (`uid`, `pid`) if the rules allow it
/// (`admission::pending_verdict`): false = refused; an evicted handshake is dropped here.
fn room_for(inner: &Inner, conns: &mut Vec<Conn>, uid: u32, pid: u32) -> bool {
    let pending: Vec<(usize, (u32, u32))> = conns
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.phase.admitted())
        .map(|(i, c)| (i, (c.uid, c.pid)))
        .collect();
    let peers: Vec<(u32, u32)> = pending.iter().map(|(_, p)| *p).collect();
    match admission::pending_verdict(&peers, uid, pid) {
        PendingVerdict::Admit => true,
        PendingVerdict::Refuse => false,
        PendingVerdict::Evict(k) => {
            let victim = conns.remove(pending[k].0);
            release(inner, &victim); // a pending handshake holds no bit; its socket closes
            true
        }
    }
}

fn accept_all(inner: &Inner, listener: &UnixListener, conns: &mut Vec<Conn>, next_id: &mut u64) {
    for _ in 0..MAX_ACCEPTS_PER_TURN {
        match listener.accept() {
            Ok((stream, _)) => {
                let Ok((uid, gid, pid)) = sock::peer_credentials(stream.as_fd()) else {
                    continue;
                };
                if stream.set_nonblocking(true).is_err() || !room_for(inner, conns, uid, pid) {
                    continue; // dropped: closes the connection
                }
                conns.push(Conn {
                    id: *next_id,
                    stream,
                    inbox: Inbox::default(),
                    outbox: Outbox::default(),
                    phase: Phase::AwaitHello,
                    deadline: Instant::now() + inner.options.handshake_timeout,
                    uid,
                    gid,
                    pid,
                });
                *next_id += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return, // EMFILE and friends: try again on the next wake-up
        }
    }
}

/// Drop peers that stall their handshake; tell subscribers the publisher declared dead, and
/// keep their bit quarantined until they close.
fn check_deadline_and_kick(inner: &Inner, state: &mut State, c: &mut Conn) -> Result<bool> {
    match c.phase {
        Phase::Active { bit } => {
            if inner.table().get(bit).is_some_and(|e| e.retired) {
                // Its ring was replaced: tell it why it ends, so that it comes back.
                c.outbox.push(
                    &Message::Shutdown {
                        reason: SHUTDOWN_NEW_RING,
                    },
                    Vec::new(),
                )?;
                return Ok(false);
            }
            if inner.table().get(bit).is_some_and(|e| e.kicked) {
                c.outbox.push(
                    &Message::Error {
                        code: ErrorCode::Timeout as i32,
                        message: format!(
                            "no ACK within the publisher's consumer_ack_timeout; subscriber bit {bit} dropped"
                        ),
                    },
                    Vec::new(),
                )?;
                c.phase = Phase::GivenUp;
                if !state.exempt(c.uid) {
                    // Its uid waits before its next frame subscription (`rejoin`).
                    let ack_timeout = inner
                        .ring()
                        .map_or(Duration::from_secs(1), |r| r.ack_timeout);
                    state.rejoins.kicked(c.uid, Instant::now(), ack_timeout);
                }
            }
            Ok(true)
        }
        Phase::GivenUp => Ok(true),
        _ if Instant::now() >= c.deadline => Err(Error::new(
            ErrorCode::Timeout,
            "handshake not completed in time",
        )),
        _ => Ok(true),
    }
}

/// Handle what a peer sent. Ok(false) = close quietly; Err = send ERROR and close.
fn serve(inner: &Inner, state: &mut State, c: &mut Conn) -> Result<bool> {
    let msgs = match c.inbox.pump(c.stream.as_fd())? {
        Pumped::Closed => return Ok(false),
        Pumped::Messages(m) => m,
    };
    for msg in msgs {
        let phase = std::mem::replace(&mut c.phase, Phase::AwaitHello);
        c.phase = match (phase, msg) {
            (phase, Message::Ping { token }) => {
                c.outbox.push(&Message::Pong { token }, Vec::new())?;
                phase
            }
            (Phase::AwaitHello, Message::HelloReq(h)) => {
                // The ring described and its generation, read together: SUBSCRIBE compares
                // the generation, so the meta and the slots it gets are of one ring.
                let (ring, generation) = inner.ring_and_generation();
                let resp = hello(inner, c, &h, ring.as_deref());
                let accepted = resp.result == 0;
                c.outbox.push(&Message::HelloResp(resp), Vec::new())?;
                if !accepted {
                    return Ok(false);
                }
                Phase::AwaitSubscribe(h, generation)
            }
            (Phase::AwaitSubscribe(h, generation), Message::SubscribeReq { proto_version }) => {
                // The frame ring HELLO_RESP described was replaced meanwhile: its meta is not
                // the ring VMM_FDS would carry. Refused as DISCONNECTED; the subscriber
                // starts over (ours does by itself when it follows a new ring).
                let (ring, now) = inner.ring_and_generation();
                let moved = wants(&h).0 && generation != now;
                if proto_version != PROTOCOL_VERSION || moved {
                    let resp = SubscribeResp {
                        result: if moved {
                            ErrorCode::Disconnected as i32
                        } else {
                            ErrorCode::Protocol as i32
                        },
                        assigned_bit: 0,
                        initial_seq: 0,
                    };
                    c.outbox.push(&Message::SubscribeResp(resp), Vec::new())?;
                    return Ok(false);
                }
                match subscribe(inner, state, c, &h, ring.as_deref(), generation)? {
                    Some(bit) => Phase::Active { bit },
                    None => return Ok(false),
                }
            }
            (Phase::Active { .. }, Message::Unsubscribe) => return Ok(false),
            (p @ Phase::Active { .. }, Message::Pong { .. }) => p,
            // Whatever a given-up peer says, its bit waits for the close of its socket.
            (p @ Phase::GivenUp, _) => p,
            (_, Message::Error { .. }) => return Ok(false),
            (_, other) => {
                return Err(Error::protocol(format!(
                    "unexpected {} at this point of the handshake",
                    other.name()
                )))
            }
        };
    }
    Ok(true)
}

fn wants(h: &HelloReq) -> (bool, bool) {
    let frames = h.subscribe_flags == 0 || h.subscribe_flags & SUBSCRIBE_WANTS_FRAMES != 0;
    let packets = h.subscribe_flags & SUBSCRIBE_WANTS_PACKETS != 0;
    (frames, packets)
}

/// The answer to HELLO_REQ: a refusal has a non-zero result.
fn hello(
    inner: &Inner,
    c: &Conn,
    h: &HelloReq,
    ring: Option<&crate::frame_ring::FrameWriter>,
) -> HelloResp {
    let refuse = |code: ErrorCode| HelloResp::failure(code as i32);
    if h.proto_version != PROTOCOL_VERSION {
        return refuse(ErrorCode::Protocol);
    }
    if SubscriberMode::from_u32(h.mode).is_none() {
        return refuse(ErrorCode::InvalidArg);
    }
    let root = c.uid == 0;
    if inner
        .options
        .allowed_uid
        .is_some_and(|u| u != c.uid && !root)
        || inner
            .options
            .allowed_gid
            .is_some_and(|g| g != c.gid && !root)
    {
        return refuse(ErrorCode::Permission);
    }
    let (want_frames, want_packets) = wants(h);
    if want_frames && ring.is_none() {
        return refuse(ErrorCode::NotFound);
    }
    if want_frames && !wants_ack_page(h) && !inner.options.allow_legacy_subscribers {
        // A plain v4 frame subscriber ACKs in the shared header, which is read-only to
        // subscribers unless the publisher allows legacy peers (docs/protocol.md, trust model).
        return refuse(ErrorCode::Permission);
    }
    let packets = inner.packets().as_ref().map(|w| HelloRespPackets {
        packet_shm_path: w.shm_name().to_owned(),
        codec_id: w.codec_id(),
        // §10.8: where a late subscriber starts (0: no keyframe yet, wait for one, R26).
        initial_packet_seq: w.last_keyframe_seq(),
    });
    if want_packets && packets.is_none() {
        return refuse(ErrorCode::NotFound);
    }
    let (ring_size, meta, shm_path) = match ring {
        Some(r) => (r.ring_size as u32, r.meta, r.shm_name.clone()),
        None => (0, Default::default(), String::new()),
    };
    HelloResp {
        result: 0,
        proto_version: PROTOCOL_VERSION,
        ring_size,
        ownership_mode: OWNERSHIP_LIBRARY as u32,
        meta,
        shm_path,
        publisher_flags: PUBLISHER_ACK_PAGES | PUBLISHER_GOP_STORE,
        packets,
    }
}

fn wants_gop_store(h: &HelloReq) -> bool {
    h.subscribe_flags & SUBSCRIBE_GOP_STORE != 0
}

/// GOP_STORE, last in the handshake of a packet subscriber that asked for it: a descriptor of
/// the packet ring's GOP store, or none when the ring keeps no store (or no descriptor is
/// left: the subscriber then starts as without a store). Every subscriber gets the same
/// store, so asking costs the publisher no memory.
fn send_gop_store(inner: &Inner, outbox: &mut Outbox) -> Result<()> {
    let store = inner.packets().as_ref().and_then(|w| {
        let size = w.gop_store_size() as u64;
        match w.gop_store_descriptor() {
            Ok(fd) => fd.map(|fd| (fd, size)),
            Err(e) => {
                crate::util::diag!("GOP store not sent to a subscriber: {e}");
                None
            }
        }
    });
    let (msg, fds) = match store {
        Some((fd, store_size)) => (
            GopStoreMsg {
                fd_count: 1,
                store_size,
            },
            vec![fd],
        ),
        None => (
            GopStoreMsg {
                fd_count: 0,
                store_size: 0,
            },
            Vec::new(),
        ),
    };
    outbox.push(&Message::GopStore(msg), fds)
}

fn wants_ack_page(h: &HelloReq) -> bool {
    h.subscribe_flags & SUBSCRIBE_ACK_PAGE != 0
}

/// Admit the subscriber: a bit, its SHM slot, SUBSCRIBE_RESP and VMM_FDS.
fn subscribe(
    inner: &Inner,
    state: &mut State,
    c: &mut Conn,
    h: &HelloReq,
    ring: Option<&crate::frame_ring::FrameWriter>,
    generation: u64,
) -> Result<Option<usize>> {
    let (want_frames, want_packets) = wants(h);
    let exempt = state.exempt(c.uid);
    if want_frames && !exempt {
        if let Some(backoff) = state.rejoins.check(c.uid, Instant::now()) {
            return refuse_subscribe(c, ErrorCode::Timeout, backoff.message(c.uid));
        }
    }
    let mut table = inner.table();
    let options = &inner.options;
    if let Some(cap) = admission::slot_cap_reached(
        &table,
        c.uid,
        c.pid,
        exempt,
        options.max_subscribers_per_uid,
        options.max_subscribers_per_pid,
    ) {
        drop(table);
        return refuse_subscribe(c, ErrorCode::TooMany, cap.message(c.uid, c.pid));
    }
    if want_frames && inner.generation.load(Ordering::SeqCst) != generation {
        // A new frame ring is being put in place (see `Publisher::replace_frames`).
        drop(table);
        let resp = SubscribeResp {
            result: ErrorCode::Disconnected as i32,
            assigned_bit: 0,
            initial_seq: 0,
        };
        c.outbox.push(&Message::SubscribeResp(resp), Vec::new())?;
        return Ok(None);
    }
    let Some(bit) = table.free_bit() else {
        drop(table);
        let resp = SubscribeResp {
            result: ErrorCode::TooMany as i32,
            assigned_bit: 0,
            initial_seq: 0,
        };
        c.outbox.push(&Message::SubscribeResp(resp), Vec::new())?;
        return Ok(None);
    };
    // From the writer's own record, not from the SHM (which a legacy peer could write).
    // A replacement ring (generation > 1) that has not reused a slot yet starts its
    // subscribers at its first frame: they are the old ring's readers coming back
    // (`replace_frames`), and the frames published before they could return are still in the
    // slots. The writer says so from its own record, under this table lock's ordering: its
    // first reuse marks the lap over before it asks the table who must ACK, so a subscriber
    // started at frame 1 here is waited for under STRICT_WAIT (and the first lap waits,
    // bounded, for the readers still away).
    let initial_seq = ring.map_or(0, |r| {
        if generation > 1 && r.first_lap_intact() {
            0
        } else {
            r.published_seq()
        }
    });
    let ack_page = match ring {
        Some(_) if want_frames && wants_ack_page(h) => match AckPage::create() {
            Ok((page, fd)) => Some((Arc::new(page), fd)),
            Err(e) => {
                drop(table);
                return Err(e);
            }
        },
        _ => None,
    };
    table.insert(
        bit,
        Entry {
            conn_id: c.id,
            uid: c.uid,
            pid: c.pid,
            name: h.consumer_name.clone(),
            initial_seq,
            wants_frames: want_frames,
            wants_packets: want_packets,
            kicked: false,
            retired: false,
            ack_page: ack_page.as_ref().map(|(page, _)| page.clone()),
        },
    );
    if let (Some(r), Some(_)) = (ring, &ack_page) {
        r.publication.page_readers.fetch_add(1, Ordering::SeqCst);
    }
    if let Some(r) = ring {
        // The bit's previous owner has closed its socket, so no ACK of its is in flight any
        // more; one that landed in a later frame's bitmap must not count for the new owner.
        r.shm.clear_ack_bit(bit);
        r.shm
            .fill_subscriber(bit, c.pid, &h.consumer_name, initial_seq);
        if want_frames {
            r.shm
                .subscriber_bitmap()
                .fetch_or(1u64 << bit, Ordering::AcqRel);
        }
    }
    drop(table);
    let resp = SubscribeResp {
        result: 0,
        assigned_bit: bit as u32,
        initial_seq,
    };
    let outbox = &mut c.outbox;
    let sent = outbox
        .push(&Message::SubscribeResp(resp), Vec::new())
        .and_then(|()| match ring {
            Some(r) if want_frames => {
                let fds = r.slots.export_fds()?;
                let msg = Message::VmmFds(VmmFds {
                    fd_count: fds.len() as u32,
                    frame_size_bytes: r.slots.mapped_size() as u64,
                    vmm_granularity: r.slots.granularity(),
                    memory_kind: r.slots.kind() as u32,
                });
                outbox.push(&msg, fds)?;
                match ack_page {
                    Some((_, fd)) => outbox.push(
                        &Message::AckPage(AckPageMsg {
                            fd_count: 1,
                            page_size: ACK_PAGE_SIZE as u32,
                        }),
                        vec![fd],
                    ),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        })
        .and_then(|()| match want_packets && wants_gop_store(h) {
            true => send_gop_store(inner, outbox),
            false => Ok(()),
        });
    if let Err(e) = sent {
        free_bit(inner, bit, c.id);
        return Err(e);
    }
    Ok(Some(bit))
}

/// Refuse a SUBSCRIBE and say why: an ERROR with the reason first (our subscriber reports
/// it), then the SUBSCRIBE_RESP with the same code that §4 prescribes (for peers that only
/// read the result).
fn refuse_subscribe(c: &mut Conn, code: ErrorCode, why: String) -> Result<Option<usize>> {
    c.outbox.push(
        &Message::Error {
            code: code as i32,
            message: why,
        },
        Vec::new(),
    )?;
    let resp = SubscribeResp {
        result: code as i32,
        assigned_bit: 0,
        initial_seq: 0,
    };
    c.outbox.push(&Message::SubscribeResp(resp), Vec::new())?;
    Ok(None)
}

fn release(inner: &Inner, c: &Conn) {
    // By connection id, not by phase: the phase may be mid-transition when a peer is dropped.
    let bits: Vec<usize> = inner
        .table()
        .iter()
        .filter(|(_, e)| e.conn_id == c.id)
        .map(|(b, _)| b)
        .collect();
    for bit in bits {
        free_bit(inner, bit, c.id);
    }
}

/// After an error on an admitted subscriber that ACKs in the header's bitmaps (a plain v4
/// peer): its bit is given up on like a kick (owed nothing, quarantined until the socket
/// closes) rather than freed at once, because the peer may still be ACKing with it and would
/// then ACK for the bit's next owner (found by the model check, `ack_model`). True when the
/// connection is kept. ACK-page subscribers are released at once: their ACKs land in their
/// own page, which nobody else is handed.
fn give_up_on(inner: &Inner, c: &mut Conn) -> bool {
    // By connection id, not by phase: `serve` may have left the phase mid-transition.
    let mut table = inner.table();
    let Some(bit) = table
        .iter()
        .find(|(_, e)| e.conn_id == c.id && e.ack_page.is_none())
        .map(|(b, _)| b)
    else {
        return false;
    };
    if let Some(e) = table.get_mut(bit) {
        e.kicked = true;
    }
    drop(table);
    if let Some(ring) = inner.ring() {
        ring.forget_subscriber(bit);
    }
    c.phase = Phase::GivenUp;
    true
}

/// How often ACK-page subscribers' counters are copied into the header for operators.
const STATS_MIRROR_PERIOD: Duration = Duration::from_millis(250);

/// Copy what ACK-page subscribers report about themselves (R23's last_seen_seq and
/// last_ack_ns, the counters) into their subscriber slots of the header, where `cuframes stat`
/// and other v4 tools read them. The publisher is the only writer of the header; a subscriber
/// can only misreport itself.
fn mirror_page_stats(inner: &Inner) {
    let Some(ring) = inner.ring() else {
        return;
    };
    let table = inner.table();
    for (bit, e) in table.iter() {
        let Some(page) = e.ack_page.as_ref().filter(|_| !e.retired) else {
            continue;
        };
        let shm = &ring.shm;
        shm.sub_last_seen(bit)
            .store(page.last_seen_seq(), Ordering::Release);
        shm.sub_last_ack_ns(bit)
            .store(page.last_ack_ns() as u64, Ordering::Release);
        for counter in Counter::ALL {
            shm.sub_counter(bit, counter.header_offset())
                .store(page.counter(counter), Ordering::Relaxed);
        }
    }
}

fn free_bit(inner: &Inner, bit: usize, conn_id: u64) {
    // The ring before the table (the publisher's lock hierarchy). The server thread is the
    // one that admits subscribers, so an entry of this connection is of this ring or an
    // older one (then retired, and its page not counted here).
    let ring = inner.ring();
    let mut table = inner.table();
    if table.get(bit).is_some_and(|e| e.conn_id == conn_id) {
        let entry = table.remove(bit);
        if let Some(r) = ring {
            r.shm.clear_subscriber(bit);
            // A retired subscriber's page counted for the old ring, not this one.
            if entry.is_some_and(|e| e.ack_page.is_some() && !e.retired) {
                r.publication.page_readers.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}
