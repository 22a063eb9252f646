//! The subscriber: connects to a publisher, imports its slots once, and reads frames (and,
//! with packets enabled, packets) without copies where the mode allows.

mod continuity;
pub(crate) mod deferred;
mod end;
mod frames;
mod handshake;

pub use end::EndReason;
pub use frames::{stream_acks_queued, Frame, FrameStats, PrivateView};

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};
use crate::format::FrameLayout;
use crate::frame_ring::ack_page::AckPage;
use crate::frame_ring::reader::{FrameReader, RingView};
use crate::frame_ring::shm_region::FrameShm;
use crate::memory::host::{HostImport, SlotFds};
use crate::memory::{SlotImport, SlotSize};
use crate::packet_ring::PacketLimits;
use crate::packet_ring::{PacketInfo, PacketReaderStats, PacketRingReader};
use crate::paths::{self, Key};
use crate::sock::{self, Inbox, Pumped};
use crate::tlv::{HelloReq, Message};
use crate::util::Origin;
use crate::wire::meta_ext::MetaExt;
use crate::wire::*;
use continuity::Continuity;
use frames::{FrameSource, Got};

/// How a subscriber connects.
#[derive(Debug, Clone)]
pub struct SubscriberOptions {
    pub runtime_dir: Option<PathBuf>,
    /// Shown to operators (printable ASCII, at most 31 bytes).
    pub name: String,
    /// The GPU to import CUDA rings on: [`crate::cuda::DEVICE_AUTO`] (-1, the default) = the
    /// publisher's GPU, found by its UUID whatever its ordinal is in this process; N = this
    /// process's device N, which must be the publisher's GPU (otherwise the connect is
    /// refused naming both UUIDs). Publishers that announce no UUID: N, or 0 for auto.
    /// Ignored for host rings.
    pub cuda_device: i32,
    pub mode: SubscriberMode,
    pub want_frames: bool,
    pub want_packets: bool,
    pub connect_timeout: Duration,
    /// R12: ZERO_COPY under DROP_OLDEST risks frames being overwritten while held; without
    /// this flag the subscriber copies instead.
    pub accept_zero_copy_overwrite: bool,
    /// Behave as a plain v4 peer: ask for no ACK page, so that this subscriber's ACKs go into
    /// the shared header's bitmaps (the publisher must set `allow_legacy_subscribers`). For
    /// interoperability tests and as the benchmark baseline; never needed otherwise.
    pub plain_v4_acks: bool,
    /// Before each sleep of `next_frame` (and of `next_packet`:
    /// [`PacketRingReader::set_spin`]), poll the ring this long for a new frame (zero: sleep at
    /// once, the default). For latency-critical consumers: a frame published during the
    /// spin is seen within about a microsecond instead of after a futex wake-up, and the spin
    /// costs a busy CPU for its duration (spin for at least the frame interval to catch every
    /// frame this way). The socket is looked at every 100 µs of a spin, so the publisher's
    /// messages (shutdown, ping) are not left waiting for the spin to end.
    pub spin: Duration,
    /// Keep going across a publisher restart under the same key (issue #14): when the
    /// publisher goes (SIGKILL, crash, shutdown), deliver what its rings still hold, then wait
    /// up to this long for a new publisher of the key and subscribe to it. Frames and packets
    /// continue (packets at the new publisher's newest keyframe, the first flagged
    /// DISCONTINUITY), timestamps shifted where needed to stay increasing. None (default): the
    /// stream ends with DISCONNECTED. Not after the publisher gave up on this subscriber.
    pub reconnect: Option<Duration>,
    /// Accept only a publisher that runs as this uid (SO_PEERCRED of the connection, which
    /// no peer can forge), on every connection including the first: a publisher of another
    /// uid is refused with PERMISSION before anything is sent to it. None (default): the
    /// first connection accepts any uid, and every later one (`reconnect`, a new frame ring)
    /// must come from the uid the first saw, so that nobody who can create names in the
    /// runtime directory takes the key over while its publisher is away.
    pub publisher_uid: Option<u32>,
    /// The largest packet data ring (the publisher's `data_size`, bytes) this subscriber maps:
    /// every reader maps and populates the whole ring, so a larger one is refused at
    /// subscribe (`NoMemory`, naming this option). 0: the default,
    /// [`crate::packet_ring::DEFAULT_MAX_PACKET_RING_SIZE`] (256 MiB).
    pub max_packet_ring_size: u64,
    /// The largest packet (bytes) this subscriber reads: a larger one is skipped before any
    /// buffer is allocated for it, counted (`PacketReaderStats::oversized`) and handled as a
    /// loss (the stream resumes at the next keyframe, flagged DISCONTINUITY). 0: the default,
    /// [`crate::packet_ring::DEFAULT_MAX_PACKET_SIZE`] (64 MiB, an incompressible 8K
    /// 4:2:0 10-bit picture).
    pub max_packet_size: u64,
}

impl Default for SubscriberOptions {
    fn default() -> Self {
        SubscriberOptions {
            runtime_dir: None,
            name: String::from("subscriber"),
            cuda_device: crate::cuda::DEVICE_AUTO,
            mode: SubscriberMode::Copy,
            want_frames: true,
            want_packets: false,
            connect_timeout: Duration::from_secs(5),
            accept_zero_copy_overwrite: false,
            plain_v4_acks: false,
            spin: Duration::ZERO,
            reconnect: None,
            publisher_uid: None,
            max_packet_ring_size: crate::packet_ring::DEFAULT_MAX_PACKET_RING_SIZE,
            max_packet_size: crate::packet_ring::DEFAULT_MAX_PACKET_SIZE,
        }
    }
}

/// A connected subscriber.
pub struct Subscriber {
    key: Key,
    stream: UnixStream,
    inbox: Inbox,
    bit: usize,
    frames: Option<FrameSource>,
    packets: Option<PacketRingReader>,
    /// Why the connection is ending, once it is (SHUTDOWN, ERROR, EOF).
    closing: Option<Error>,
    /// The kind of that end; None while open, and for a replaced ring (followed, no end).
    closing_reason: Option<EndReason>,
    /// The end a read has reported (DISCONNECTED returned): what `end_reason` says.
    ended: Option<EndReason>,
    /// Set when the publisher gave up on this subscriber (ERROR): frames stop at once.
    given_up: Option<Error>,
    /// The wait for a new ring or a restarted publisher ran out: what is left is delivered,
    /// then the stream ends, without another wait.
    reopens_over: bool,
    /// The end each timeline returned (DISCONNECTED): every later read returns it again, and
    /// nothing published after it is handed out.
    frames_ended: Option<Error>,
    packets_ended: Option<Error>,
    /// The packet seq published when the connection ended: later packets are not delivered.
    packets_until: Option<u64>,
    /// Rings of ended connections (a replaced frame ring, a publisher gone before a
    /// reconnect) that still hold what was published before their end, oldest first. Reads
    /// deliver it before the current rings' (docs/protocol.md), whichever read noticed the end.
    retired_frames: VecDeque<Retired<FrameSource>>,
    retired_packets: VecDeque<Retired<PacketRingReader>>,
    /// How it connected: what it connects with again to follow a new frame ring.
    options: SubscriberOptions,
    /// The publisher replaced its frame ring (SHUTDOWN with reason NEW_RING): once the old
    /// ring is drained, subscribe to the new one instead of ending.
    new_ring: bool,
    /// Frame rings followed so far (0: still the first).
    generations: u64,
    /// Publishers followed after a restart.
    restarts: u64,
    /// A new connection being waited for (a new ring, or a restarted publisher).
    reopening: Option<Reopen>,
    /// The uid the publisher ran as at the first connection: every later connection must be
    /// to a publisher of this uid (see `SubscriberOptions::publisher_uid`).
    publisher_uid: u32,
    /// The last listener of another uid refused during the current wait (a reconnect or a new
    /// ring): said while waiting, and the end of the stream if the wait runs out.
    refused: Option<Error>,
    /// Timestamps kept increasing across restarts, per timeline.
    frame_times: Continuity,
    packet_times: Continuity,
    /// The next packet is the first of a restarted publisher: flag DISCONTINUITY.
    packet_gap: bool,
    /// The process that connected: in a child forked from it, the subscriber is a copy whose
    /// connection and rings are the parent's (see `Drop`).
    origin: Origin,
}

/// A ring left behind by [`Subscriber::reopen`], still to be drained.
struct Retired<T> {
    source: T,
    /// Its publisher was followed by a restarted one: that timeline re-anchors once it is
    /// drained (continuity), and the first packet after it is flagged DISCONTINUITY.
    restart: bool,
    /// Packets: the seq published when the connection ended (frames keep theirs, `until`).
    until: Option<u64>,
}

/// Retired frame rings kept at most: each keeps its slots mapped, and a ring replaced more
/// often than frames are read loses its frames to lapping anyway.
const MAX_RETIRED: usize = 4;

/// What [`Subscriber::reopen`] is waiting for, and until when.
#[derive(Debug, Clone, Copy)]
struct Reopen {
    /// A restarted publisher (frames and packets anew), not only a new frame ring.
    restart: bool,
    until: Instant,
}

/// The outcome of one attempt to reopen.
enum Reopened {
    /// Connected: read on.
    Yes,
    /// Still waiting (the caller's timeout is up first).
    NotYet,
    /// Nothing to reopen: the stream ends.
    No,
}

/// How long one futex sleep lasts before the socket is looked at again: bounds how late a
/// publisher crash is noticed, and costs ~10 wake-ups a second when idle.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// While spinning, the socket is looked at this often. A frame seen by the spin is then read
/// at once, without a socket poll first: a message (SHUTDOWN, ERROR, PING) is handled at most
/// this late, and the spin's hot path has no system call between the publication and the
/// return. Short against any frame interval; one `recv` per 100 µs is ~1 % of the spinning core.
const POLL_WHILE_SPINNING: Duration = Duration::from_micros(100);

impl Subscriber {
    pub fn connect(key: &str, options: &SubscriberOptions) -> Result<Subscriber> {
        Subscriber::connect_to(key, options, None)
    }

    /// Connect, accepting only a publisher of `pinned`'s uid when given (a reconnect), and of
    /// the `publisher_uid` option's when set.
    fn connect_to(
        key: &str,
        options: &SubscriberOptions,
        pinned: Option<u32>,
    ) -> Result<Subscriber> {
        let key = Key::new(key)?;
        if !options.want_frames && !options.want_packets {
            return Err(Error::invalid("subscribe to frames, packets, or both"));
        }
        let dir = paths::runtime_dir(options.runtime_dir.as_deref());
        let socket_path = paths::socket_path(&dir, &key)?;
        let mut flags = 0;
        if options.want_frames {
            // ACK pages (extension): our ACKs never touch the shared header.
            flags |= SUBSCRIBE_WANTS_FRAMES;
            if !options.plain_v4_acks {
                flags |= SUBSCRIBE_ACK_PAGE;
            }
        }
        if options.want_packets {
            flags |= SUBSCRIBE_WANTS_PACKETS;
        }
        let hello = HelloReq {
            proto_version: PROTOCOL_VERSION,
            consumer_name: sanitize_name(&options.name),
            cuda_device: options.cuda_device,
            mode: options.mode as u32,
            subscribe_flags: flags,
        };
        let deadline = Instant::now() + options.connect_timeout;
        // The option is checked on the first connection, so a pinned uid never differs from
        // it; the option names the reason in the error where it is set.
        let expected = match (options.publisher_uid, pinned) {
            (Some(uid), _) => Some(handshake::Expected { uid, pinned: false }),
            (None, Some(uid)) => Some(handshake::Expected { uid, pinned: true }),
            (None, None) => None,
        };
        let est = handshake::run(
            &key,
            &socket_path,
            &hello,
            options.want_frames,
            expected,
            deadline,
        )?;
        #[cfg(feature = "testing")]
        crate::testing::hooks::after_handshake(key.as_str());
        let bit = est.subscribed.assigned_bit as usize;
        let frames = match (est.frames, est.frame_shm) {
            (Some((layout, vmm, fds)), Some((shm_fd, map))) => {
                // Check the SHM first (the handshake mapped it: with an ACK page read-only, for
                // a plain v4 publisher writable for our ACKs): it is cheap, and once mapped it
                // stays valid even if the publisher goes away while the (slow) device imports
                // run.
                let page = est.ack_page.map(AckPage::import).transpose()?;
                let shm = FrameShm::new(map)?;
                shm.validate(est.hello.ring_size as usize, &est.hello.meta)?;
                // What each slot may be: the frame's size (R17), rounded up (R20).
                let size = SlotSize {
                    announced: vmm.frame_size_bytes,
                    granularity: vmm.vmm_granularity,
                    frame_size: layout.frame_size,
                };
                let policy = shm
                    .policy()
                    .ok_or_else(|| Error::protocol("frame SHM has an unknown policy"))?;
                let zero_copy = options.mode == SubscriberMode::ZeroCopy
                    && (policy == Policy::StrictWait || options.accept_zero_copy_overwrite);
                // Only a zero-copy host subscription maps the slots again (its planes'
                // private views); every other import closes the descriptors (§3.7 step 4).
                let keep = if zero_copy {
                    SlotFds::KeepForPrivateViews
                } else {
                    SlotFds::Close
                };
                let slots: Box<dyn SlotImport> = match MemoryKind::from_u32(vmm.memory_kind) {
                    Some(MemoryKind::HostMemfd) => Box::new(HostImport::import(fds, size, keep)?),
                    Some(MemoryKind::CudaVmm) => crate::memory::import_cuda_slots(
                        est.cuda_device.unwrap_or(options.cuda_device.max(0)),
                        fds,
                        size,
                    )?,
                    None => {
                        return Err(Error::new(
                            ErrorCode::Format,
                            format!(
                                "publisher offers memory kind {}, which this library cannot use",
                                vmm.memory_kind
                            ),
                        ))
                    }
                };
                let ring = Arc::new(RingView::new(
                    shm,
                    shm_fd,
                    slots,
                    bit,
                    policy,
                    est.hello.ring_size as usize,
                    page,
                ));
                let cuda = match ring.slots.cuda_device() {
                    Some(dev) if !zero_copy => Some(frames::CudaReader {
                        stream: crate::cuda::Stream::new(dev)?,
                        pool: Default::default(),
                    }),
                    _ => None,
                };
                // Everything is mapped: frames can be read from here on. A publisher waiting
                // for its subscribers to be ready (`ready_subscriber_count`) counts us now.
                if let Some(page) = &ring.page {
                    page.mark_ready();
                }
                Some(FrameSource {
                    ring,
                    layout: Arc::new(layout),
                    colour: MetaExt::read(&est.hello.meta).colour,
                    reader: FrameReader::new(est.subscribed.initial_seq),
                    zero_copy,
                    cuda,
                    until: None,
                })
            }
            _ => None,
        };
        let packets = if options.want_packets {
            let p = est
                .hello
                .packets
                .as_ref()
                .filter(|p| !p.packet_shm_path.is_empty())
                .ok_or_else(|| {
                    Error::new(ErrorCode::NotFound, "the publisher has no packet ring")
                })?;
            let name = paths::parse_wire_shm_name(&p.packet_shm_path)?;
            if !key.is_packet_shm(&name) {
                return Err(Error::protocol(format!(
                    "HELLO_RESP names packet SHM {name:?}; key {key:?} must use {:?} (or a \
                     generation name of it)",
                    key.packet_shm_name()
                )));
            }
            let limits =
                PacketLimits::or_defaults(options.max_packet_ring_size, options.max_packet_size);
            // Opened only if the publisher owns it, like the frame SHM (`handshake`): a
            // name in /dev/shm is anyone's to create first.
            let (shm_fd, map) =
                crate::shm::open(&name, crate::wire::packet::PACKET_HEADER_SIZE, false)?;
            handshake::refuse_unless_publishers(est.stream.as_fd(), shm_fd.as_fd(), &name)?;
            let mut reader = PacketRingReader::from_mapping_with(map, limits)?;
            if reader.codec_id() != p.codec_id {
                return Err(Error::protocol(format!(
                    "packet SHM codec {} differs from HELLO_RESP's {}",
                    reader.codec_id(),
                    p.codec_id
                )));
            }
            // §10.8/R26: start on the keyframe the publisher named (0: wait for the first).
            reader.start_at(p.initial_packet_seq);
            reader.set_spin(options.spin);
            // The socket tells us when the publisher dies; its pid may be from another PID
            // namespace (containers), where a pid check would end the stream by mistake.
            reader.set_producer_pid_check(false);
            Some(reader)
        } else {
            None
        };
        est.stream
            .set_nonblocking(true)
            .map_err(|e| Error::new(ErrorCode::Io, format!("socket: {e}")))?;
        Ok(Subscriber {
            key,
            stream: est.stream,
            inbox: Inbox::default(),
            bit,
            frames,
            packets,
            closing: None,
            closing_reason: None,
            ended: None,
            given_up: None,
            reopens_over: false,
            frames_ended: None,
            packets_ended: None,
            packets_until: None,
            retired_frames: VecDeque::new(),
            retired_packets: VecDeque::new(),
            options: options.clone(),
            new_ring: false,
            generations: 0,
            restarts: 0,
            reopening: None,
            publisher_uid: est.publisher_uid,
            refused: None,
            frame_times: Continuity::default(),
            packet_times: Continuity::default(),
            packet_gap: false,
            origin: Origin::here(),
        })
    }

    /// Change `SubscriberOptions::spin` (zero: sleep at once), for frames and packets.
    pub fn set_spin(&mut self, spin: Duration) {
        // Frames read it from here, and a reopened connection (reconnect, a new ring) takes
        // its packet reader's from here too.
        self.options.spin = spin;
        if let Some(p) = self.packets.as_mut() {
            p.set_spin(spin);
        }
    }

    /// The uid the publisher runs as (SO_PEERCRED at the first connection; every later one
    /// is to a publisher of the same uid).
    pub fn publisher_uid(&self) -> u32 {
        self.publisher_uid
    }

    /// True for the error that ends a timeline for good: DISCONNECTED, or the PERMISSION of a
    /// wait for the publisher that only an impostor answered.
    fn is_end(&self, e: &Error) -> bool {
        e.code() == ErrorCode::Disconnected
            || (self.reopens_over && e.code() == ErrorCode::Permission)
    }

    /// How many times this subscriber followed a restarted publisher (`reconnect`).
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// How many times the publisher replaced its frame ring and this subscriber followed
    /// (frames of a new ring may have another size or format: each [`Frame`] has its
    /// layout).
    pub fn ring_generations(&self) -> u64 {
        self.generations
    }

    /// The connection ended and what it delivered is drained: subscribe again where that is
    /// wanted (issue #14). A new frame ring (SHUTDOWN NEW_RING) is followed always, within the
    /// connect timeout, keeping the packet reader (the packet ring did not change); a
    /// restarted publisher only with `reconnect`, within that bound, with fresh frame and
    /// packet readers. One call tries until the caller's `deadline` at most (NotYet after
    /// it), so that callers that poll stay responsive.
    fn reopen(&mut self, deadline: Option<Instant>) -> Result<Reopened> {
        let plan = match self.reopening {
            Some(plan) => plan,
            None if self.reopens_over => return Ok(Reopened::No),
            None if self.new_ring && self.frames.is_some() => Reopen {
                restart: false,
                until: Instant::now() + self.options.connect_timeout,
            },
            None => match (self.options.reconnect, &self.given_up) {
                (Some(bound), None) => Reopen {
                    restart: true,
                    until: Instant::now() + bound,
                },
                _ => return Ok(Reopened::No),
            },
        };
        self.reopening = Some(plan);
        let stop = deadline.map_or(plan.until, |d| d.min(plan.until));
        let mut opts = self.options.clone();
        if !plan.restart {
            opts.want_frames = true;
            opts.want_packets = false;
        }
        let mut fresh = loop {
            let left = plan.until.saturating_duration_since(Instant::now());
            opts.connect_timeout = left
                .min(self.options.connect_timeout)
                .max(Duration::from_millis(10));
            let e = match Subscriber::connect_to(self.key.as_str(), &opts, Some(self.publisher_uid))
            {
                Ok(s) => break s,
                Err(e) => e,
            };
            // A listener of another uid is not our publisher, and is never subscribed to. It
            // does not end the wait: the key's socket can only be taken while the publisher is
            // away, ours can come back once the impostor leaves, and until then the reader
            // waits as it would for an absent publisher. The refusal is what reads return
            // while waiting, and the end of the stream (PERMISSION) if the wait runs out.
            let impostor = handshake::is_impostor(&e);
            if impostor {
                if self.refused.is_none() {
                    // Once per wait on stderr too: a reader that only sees TIMEOUTs (a tool
                    // that retries them) still tells its operator why.
                    crate::util::diag!("cuframes: {}: {}", self.key.as_str(), e.message());
                }
                self.refused = Some(e.clone());
            }
            // No publisher (yet), a stale socket, one without the rings asked for yet, or one
            // mid-replacement: wait for it. So for a ring whose name another uid took between
            // HELLO_RESP and the open (the publisher we waited for went again, or replaced
            // the ring): the next attempt meets the publisher's ring or its absence.
            let retryable = impostor
                || handshake::is_foreign_object(&e)
                || matches!(
                    e.code(),
                    ErrorCode::Disconnected
                        | ErrorCode::NotFound
                        | ErrorCode::Format
                        | ErrorCode::Timeout
                        | ErrorCode::Io
                );
            if retryable && Instant::now() < plan.until {
                if Instant::now() >= stop {
                    return Ok(Reopened::NotYet);
                }
                // An impostor is asked again less often: each attempt is a connection to it.
                let pause = if impostor { 100 } else { 10 };
                std::thread::sleep(Duration::from_millis(pause));
                continue;
            }
            self.reopening = None;
            let what = if plan.restart {
                "the publisher did not come back in time"
            } else {
                "cannot follow the publisher's new frame ring"
            };
            let refused = self.refused.take();
            if !retryable {
                return Err(Error::new(e.code(), format!("{what}: {}", e.message())));
            }
            // The wait is over: the stream ends as a stream ends (DISCONNECTED, or PERMISSION
            // when only an impostor answered), for good (no further wait on the next call),
            // once what is left is read.
            let end = match refused {
                Some(r) => Error::new(ErrorCode::Permission, format!("{what}: {}", r.message())),
                None => Error::new(ErrorCode::Disconnected, format!("{what} ({})", e.message())),
            };
            self.closing = Some(end);
            // A clean shutdown stays one when no publisher followed it; anything else is a
            // publisher lost (a new ring that could not be followed included).
            self.closing_reason.get_or_insert(EndReason::PublisherLost);
            self.reopens_over = true;
            self.new_ring = false;
            return Ok(Reopened::No);
        };
        // The old connection and rings go with `fresh`: its drop revokes the old ring's ACKs.
        // The old socket is closed by the publisher (or dead): no UNSUBSCRIBE on it.
        std::mem::swap(&mut self.stream, &mut fresh.stream);
        std::mem::swap(&mut self.inbox, &mut fresh.inbox);
        std::mem::swap(&mut self.bit, &mut fresh.bit);
        std::mem::swap(&mut self.frames, &mut fresh.frames);
        // What the old rings hold is delivered first (their ACKs were revoked at the close);
        // the timelines re-anchor on the new publisher once it is.
        if let Some(mut old) = fresh.frames.take() {
            old.ring.revoke_acks();
            old.end_here();
            self.retire(Retired {
                source: old,
                restart: plan.restart,
                until: None,
            });
        }
        if plan.restart {
            std::mem::swap(&mut self.packets, &mut fresh.packets);
            if let Some(old) = fresh.packets.take() {
                self.retired_packets.push_back(Retired {
                    source: old,
                    restart: true,
                    until: self.packets_until,
                });
            }
            self.restarts += 1;
        } else {
            self.generations += 1;
        }
        self.packets_until = None;
        fresh.closing = Some(Error::new(ErrorCode::Disconnected, "replaced"));
        drop(fresh);
        self.closing = None;
        self.closing_reason = None;
        self.given_up = None;
        self.new_ring = false;
        self.reopening = None;
        self.refused = None;
        Ok(Reopened::Yes)
    }

    /// Keep an old frame ring for its frames, dropping the oldest beyond [`MAX_RETIRED`].
    fn retire(&mut self, old: Retired<FrameSource>) {
        if self.retired_frames.len() >= MAX_RETIRED {
            if let Some(oldest) = self.retired_frames.pop_front() {
                self.drained_frames(oldest);
            }
        }
        self.retired_frames.push_back(old);
    }

    /// A retired frame ring is done with: after a restarted publisher's ring, the frame
    /// timeline re-anchors on the next frame.
    fn drained_frames(&mut self, old: Retired<FrameSource>) {
        if old.restart {
            self.frame_times.restarted();
        }
    }

    /// The next frame of a retired ring, oldest ring first; None when they are all drained.
    fn next_retired_frame(&mut self) -> Option<Result<Frame>> {
        while let Some(old) = self.retired_frames.front_mut() {
            match old.source.try_read() {
                Got::Frame(mut f) => {
                    f.pts_ns += self.frame_times.shift_for(Some(f.pts_ns));
                    return Some(Ok(f));
                }
                Got::Skipped => continue,
                Got::Empty => {
                    let old = self.retired_frames.pop_front().expect("front");
                    self.drained_frames(old);
                }
                Got::Failed(e) => {
                    // A ring in error has nothing more to give: the next read goes on.
                    let old = self.retired_frames.pop_front().expect("front");
                    self.drained_frames(old);
                    return Some(Err(e));
                }
            }
        }
        None
    }

    /// The next packet of a retired packet ring (a publisher followed by a restarted one), up
    /// to what it published before its end; None when they are all drained.
    fn next_retired_packet(
        &mut self,
        out: &mut dyn crate::packet_ring::PacketSink,
    ) -> Option<Result<PacketInfo>> {
        while let Some(old) = self.retired_packets.front_mut() {
            let got = old.source.next_packet_into(Some(Duration::ZERO), &mut *out);
            match got {
                Ok(info) if !old.until.is_some_and(|until| info.seq > until) => {
                    return Some(Ok(info))
                }
                // Not consumed: the next call reads the same packet again.
                Err(e) if e.code() == ErrorCode::NoMemory => return Some(Err(e)),
                // Drained (Timeout, Disconnected, past its end), or in error: the restarted
                // publisher's packets follow, the first flagged DISCONTINUITY.
                other => {
                    let old = self.retired_packets.pop_front().expect("front");
                    if old.restart {
                        self.packet_times.restarted();
                        self.packet_gap = true;
                    }
                    match other {
                        Err(e)
                            if !matches!(
                                e.code(),
                                ErrorCode::Timeout | ErrorCode::Disconnected
                            ) =>
                        {
                            return Some(Err(e))
                        }
                        _ => {}
                    }
                }
            }
        }
        None
    }

    fn reopen_or_end(&mut self, deadline: Option<Instant>) -> Result<()> {
        match self.reopen(deadline)? {
            Reopened::Yes => Ok(()),
            Reopened::NotYet => Err(Error::new(
                ErrorCode::Timeout,
                match &self.refused {
                    Some(r) => format!("waiting for the publisher to come back ({})", r.message()),
                    None => String::from("waiting for the publisher to come back"),
                },
            )),
            Reopened::No => Err(self
                .closing
                .clone()
                .unwrap_or_else(|| Error::new(ErrorCode::Disconnected, "disconnected"))),
        }
    }

    /// After the shutdown flag was seen: give the socket a moment to say why (a SHUTDOWN
    /// follows the flag), so that a new ring is told from the end of the stream.
    fn wait_for_reason(&mut self) {
        let deadline = Instant::now() + Duration::from_millis(500);
        while self.closing.is_none() && Instant::now() < deadline {
            let mut fds = [nix::poll::PollFd::new(
                self.stream.as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(20u16));
            self.poll_connection();
        }
    }

    pub fn key(&self) -> &str {
        self.key.as_str()
    }

    /// The subscriber bit (1..=31) the publisher assigned.
    pub fn bit(&self) -> usize {
        self.bit
    }

    pub fn frame_layout(&self) -> Option<&FrameLayout> {
        self.frames.as_ref().map(|f| &*f.layout)
    }

    /// True when frames are handed out without a copy (ZERO_COPY granted, R12).
    pub fn is_zero_copy(&self) -> bool {
        self.frames.as_ref().is_some_and(|f| f.zero_copy)
    }

    /// The colour description the publisher announced for its frame ring (None: none
    /// recorded, or no frames subscribed).
    pub fn colour(&self) -> Option<crate::colour::ColourInfo> {
        self.frames.as_ref().and_then(|f| f.colour)
    }

    /// This process's ordinal of the GPU the frame ring is on (CUDA rings; None for host
    /// rings). Resolved from the publisher's GPU UUID where it announces one.
    pub fn cuda_device(&self) -> Option<i32> {
        self.frames
            .as_ref()
            .and_then(|f| f.ring.slots.cuda_device())
            .map(|d| d.ordinal())
    }

    pub fn memory_kind(&self) -> Option<MemoryKind> {
        self.frames.as_ref().map(|f| f.ring.slots.kind())
    }

    pub fn frame_stats(&self) -> FrameStats {
        self.frames
            .as_ref()
            .map(|f| f.reader.stats)
            .unwrap_or_default()
    }

    /// Reads are refused in a child forked from the subscribing process: the connection,
    /// its messages (SHUTDOWN, a new ring) and the ACKs are the parent's, which goes on
    /// reading.
    fn check_here(&self) -> Result<()> {
        if self.origin.is_here() {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::InvalidArg,
            format!(
                "this subscriber of {:?} belongs to the process that connected it (this one \
                 was forked from it): a child reads with a subscriber of its own",
                self.key.as_str()
            ),
        ))
    }

    /// The next frame, waiting at most `timeout` (None = forever). Errors: TIMEOUT,
    /// DISCONNECTED (SHUTDOWN, publisher death, or dropped by the publisher).
    pub fn next_frame(&mut self, timeout: Option<Duration>) -> Result<Frame> {
        self.check_here()?;
        let deadline = timeout.map(|t| Instant::now() + t);
        if self.frames.is_none() {
            return Err(Error::new(
                ErrorCode::NotFound,
                "this subscriber did not ask for frames",
            ));
        }
        if let Some(e) = &self.frames_ended {
            return Err(e.clone());
        }
        // True right after a spin saw a publication: the socket was polled at most
        // POLL_WHILE_SPINNING ago (by the spin, or before it at the top of this loop).
        let mut skip_poll = false;
        loop {
            if !std::mem::take(&mut skip_poll) {
                self.poll_connection();
            }
            // What rings of ended connections still hold comes first (their frames are older
            // than any of the current ring's).
            if let Some(got) = self.next_retired_frame() {
                return got;
            }
            if let Some(e) = &self.given_up {
                // Dropped by the publisher: our bit is no longer ours and frames are no longer
                // kept for us, so none is delivered past this point (not even a COPY).
                let e = e.clone();
                self.ended.get_or_insert(EndReason::Kicked);
                return Err(e);
            }
            let source = self.frames.as_mut().expect("checked above");
            // The shutdown flag is loaded *before* the ring is looked at: a publisher that
            // publishes its last frame and leaves between the two loads is then caught by the
            // ring read, never reported as DISCONNECTED with that frame unread.
            let shut_down = source.ring.shm.shutdown_flag().load(Ordering::Acquire) != 0;
            #[cfg(test)]
            tests::between_shutdown_and_ring_loads();
            match source.try_read() {
                Got::Frame(mut f) => {
                    f.pts_ns += self.frame_times.shift_for(Some(f.pts_ns));
                    return Ok(f);
                }
                Got::Skipped => continue,
                Got::Failed(e) => return Err(e),
                Got::Empty => {}
            }
            // Everything published was delivered: now the end of the stream may be reported.
            if shut_down && self.closing.is_none() {
                self.wait_for_reason();
                if self.closing.is_none() {
                    self.close(
                        Error::new(ErrorCode::Disconnected, "the publisher shut down"),
                        Some(EndReason::Shutdown),
                    );
                }
            }
            if self.closing.is_some() {
                // The old ring is drained (Empty above): follow a new ring or a restarted
                // publisher, or end, for good: nothing published after the end is delivered.
                if let Err(e) = self.reopen_or_end(deadline) {
                    if self.is_end(&e) {
                        self.frames_ended = Some(e.clone());
                        self.mark_ended();
                    }
                    return Err(e);
                }
                continue;
            }
            let source = self.frames.as_mut().expect("checked above");
            let left = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::new(
                            ErrorCode::Timeout,
                            "no frame within the timeout",
                        ));
                    }
                    left
                }
                None => WAIT_SLICE,
            };
            let ring = &source.ring;
            if !self.options.spin.is_zero() {
                let (ring, last_seq) = (Arc::clone(ring), source.reader.last_seq);
                if self.spin_for_publish(&ring, last_seq, self.options.spin.min(left)) {
                    skip_poll = true;
                    continue;
                }
            }
            let source = self.frames.as_mut().expect("checked above");
            let ring = &source.ring;
            if ring.counts_waiters() {
                ring.shm.waiters().fetch_add(1, Ordering::SeqCst);
            }
            // The 64-bit field as the publisher stores it (no 32-bit atomic view of it); the
            // futex compares its low half, which changes with every publish.
            let seen = ring.shm.global_seq().load(Ordering::SeqCst);
            if seen == source.reader.last_seq {
                crate::futex::wait(
                    ring.shm.global_seq_word(),
                    seen as u32,
                    Some(left.min(WAIT_SLICE)),
                );
            }
            if ring.counts_waiters() {
                ring.shm.waiters().fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Poll `global_seq` for up to `budget` until it moves past `last_seq` (true) or the
    /// budget is spent (false); true also when a socket poll on the way (every
    /// [`POLL_WHILE_SPINNING`]) found the connection closing, so that the caller looks at once.
    /// Reads only: a spinning reader costs the publisher nothing (no waiter count, no wake).
    /// The clock is read every 64 loads: cheap, and still within a few microseconds.
    fn spin_for_publish(&mut self, ring: &RingView, last_seq: u64, budget: Duration) -> bool {
        let start = Instant::now();
        let mut polled = start;
        loop {
            for _ in 0..64 {
                if ring.shm.global_seq().load(Ordering::Acquire) != last_seq {
                    return true;
                }
                std::hint::spin_loop();
            }
            let now = Instant::now();
            if now.duration_since(start) >= budget {
                return false;
            }
            if now.duration_since(polled) >= POLL_WHILE_SPINNING {
                self.poll_connection();
                if self.closing.is_some() {
                    return true;
                }
                polled = now;
            }
        }
    }

    /// The connection is ending (SHUTDOWN, EOF, our own UNSUBSCRIBE): ACKs stop before
    /// anything else, because once the publisher sees the socket close it may hand our bit to
    /// someone else (`frame_ring::reader`, the ACK gate).
    /// `reason`: the kind of end (None: a replaced ring, followed rather than ended).
    fn close(&mut self, why: Error, reason: Option<EndReason>) {
        if let Some(f) = &mut self.frames {
            f.ring.revoke_acks();
            f.end_here();
        }
        if self.closing.is_none() {
            self.packets_until = self.packets.as_ref().map(PacketRingReader::published_seq);
            self.closing = Some(why);
            self.closing_reason = reason;
        }
    }

    /// A read is returning the end of the stream: from now on `end_reason` says why. Without
    /// a recorded reason the end is the packet ring's own shutdown flag, which only its
    /// publisher sets (a killed publisher leaves it clear, and its socket says so).
    fn mark_ended(&mut self) {
        if self.ended.is_none() {
            self.ended = Some(self.closing_reason.unwrap_or(EndReason::Shutdown));
        }
    }

    /// Why the stream ended, once a read has returned its end (DISCONNECTED, or PERMISSION
    /// after a reconnect only an impostor answered); None before. A shutdown is the normal
    /// end; the others ([`EndReason::is_clean`] false) are failures a reader should report.
    /// A new frame ring or a restarted publisher that is followed (`reconnect`) is no end.
    pub fn end_reason(&self) -> Option<EndReason> {
        self.ended
    }

    fn packet_reader(&mut self) -> Result<&mut PacketRingReader> {
        self.packets.as_mut().ok_or_else(|| {
            Error::new(
                ErrorCode::NotFound,
                "this subscriber did not ask for packets",
            )
        })
    }

    /// The packet ring's codec (`AV_CODEC_ID_*`).
    pub fn packet_codec_id(&self) -> Option<u32> {
        self.packets.as_ref().map(PacketRingReader::codec_id)
    }

    /// The packet ring's extradata (Annex B SPS/PPS/VPS, or the AV1 sequence header).
    pub fn packet_extradata(&mut self) -> Result<Vec<u8>> {
        self.check_here()?;
        self.packet_reader()?.extradata()
    }

    pub fn packet_stats(&self) -> Option<PacketReaderStats> {
        self.packets.as_ref().map(PacketRingReader::stats)
    }

    /// The next packet into `out` (§10.7 with R8/R9/R29): the first one is a keyframe;
    /// after an overrun the reader re-anchors on the newest keyframe and flags the packet
    /// DISCONTINUITY. TIMEOUT, or DISCONNECTED at the end of the stream.
    pub fn next_packet(
        &mut self,
        timeout: Option<Duration>,
        out: &mut Vec<u8>,
    ) -> Result<PacketInfo> {
        self.next_packet_into(timeout, out)
    }

    /// `next_packet` copying the payload once, straight into the buffer `sink` hands out
    /// ([`PacketRingReader::next_packet_into`]).
    pub fn next_packet_into(
        &mut self,
        timeout: Option<Duration>,
        out: &mut dyn crate::packet_ring::PacketSink,
    ) -> Result<PacketInfo> {
        self.check_here()?;
        self.packet_reader()?;
        if let Some(e) = &self.packets_ended {
            return Err(e.clone());
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let got = self.read_packet(deadline, out);
        if let Err(e) = &got {
            if self.is_end(e) {
                self.packets_ended = Some(e.clone());
                self.mark_ended();
            }
        }
        got
    }

    fn read_packet(
        &mut self,
        deadline: Option<Instant>,
        out: &mut dyn crate::packet_ring::PacketSink,
    ) -> Result<PacketInfo> {
        loop {
            self.poll_connection();
            if self.new_ring {
                // Its socket is the old ring's: the new connection carries the liveness. The
                // old ring's frames stay for the frame reads.
                self.reopen_or_end(deadline)?;
            }
            if let Some(got) = self.next_retired_packet(&mut *out) {
                return got.map(|info| self.delivered_packet(info));
            }
            let closing = self.closing.clone();
            let slice = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).min(WAIT_SLICE),
                None => WAIT_SLICE,
            };
            // Once the connection is closing, only what is already published is read.
            let slice = if closing.is_some() {
                Duration::ZERO
            } else {
                slice
            };
            match self
                .packet_reader()?
                .next_packet_into(Some(slice), &mut *out)
            {
                Err(e) if e.code() == ErrorCode::Timeout => {
                    if closing.is_some() {
                        // Drained: a restarted publisher (`reconnect`), or the end.
                        self.reopen_or_end(deadline)?;
                        continue;
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(e);
                    }
                }
                // The packet ring's own end (its shutdown flag): as a closed connection.
                Err(e)
                    if e.code() == ErrorCode::Disconnected && self.options.reconnect.is_some() =>
                {
                    self.close(e, Some(EndReason::Shutdown));
                    self.reopen_or_end(deadline)?;
                }
                // Published after the end: not for this subscriber; drained.
                Ok(info) if self.packets_until.is_some_and(|until| info.seq > until) => {
                    self.reopen_or_end(deadline)?;
                }
                Ok(info) => return Ok(self.delivered_packet(info)),
                other => return other,
            }
        }
    }

    /// A packet on its way out: timestamps kept increasing across restarts, the first of a
    /// restarted publisher flagged DISCONTINUITY.
    fn delivered_packet(&mut self, mut info: PacketInfo) -> PacketInfo {
        let anchor = [info.dts_ns, info.pts_ns]
            .into_iter()
            .find(|t| *t != NO_PTS);
        let pts = Some(info.pts_ns).filter(|t| *t != NO_PTS);
        let shift = self.packet_times.shift_for_packet(anchor, pts);
        info.pts_ns = continuity::shifted(info.pts_ns, shift);
        info.dts_ns = continuity::shifted(info.dts_ns, shift);
        if std::mem::take(&mut self.packet_gap) {
            info.flags |= PACKET_FLAG_DISCONTINUITY;
        }
        info
    }

    /// Look at the socket without blocking. SHUTDOWN, ERROR and EOF mark the connection as
    /// closing: the readers still deliver what was published, then report DISCONNECTED.
    fn poll_connection(&mut self) {
        if self.closing.is_some() {
            return;
        }
        let msgs = match self.inbox.pump(self.stream.as_fd()) {
            Ok(Pumped::Messages(m)) => m,
            Ok(Pumped::Closed) => {
                self.close(
                    Error::new(
                        ErrorCode::Disconnected,
                        "the publisher closed the connection without a SHUTDOWN (it crashed \
                         or was killed)",
                    ),
                    Some(EndReason::PublisherLost),
                );
                return;
            }
            Err(e) => {
                let reason = if e.code() == ErrorCode::Protocol {
                    EndReason::ProtocolError
                } else {
                    EndReason::PublisherLost
                };
                self.close(
                    Error::new(ErrorCode::Disconnected, format!("connection broken: {e}")),
                    Some(reason),
                );
                return;
            }
        };
        for m in msgs {
            match m {
                Message::Shutdown { reason } if reason == SHUTDOWN_NEW_RING => {
                    self.new_ring = self.frames.is_some();
                    // A packet-only subscriber has no frame ring to follow: for it this
                    // publisher's connection ends here, and without `reconnect` the stream.
                    let end = (!self.new_ring).then_some(EndReason::PublisherLost);
                    self.close(
                        Error::new(
                            ErrorCode::Disconnected,
                            "the publisher replaced its frame ring",
                        ),
                        end,
                    );
                }
                Message::Shutdown { reason } => {
                    self.close(
                        Error::new(
                            ErrorCode::Disconnected,
                            format!("the publisher shut down (reason {reason})"),
                        ),
                        Some(EndReason::Shutdown),
                    );
                }
                Message::Error { code, message } => {
                    let code = ErrorCode::from_i32(code).map_or("unknown", |c| c.name());
                    let e = Error::new(
                        ErrorCode::Disconnected,
                        format!("the publisher dropped this subscriber ({code}): {message}"),
                    );
                    self.close(e.clone(), Some(EndReason::Kicked));
                    self.given_up = Some(e);
                }
                Message::Ping { token } => {
                    let _ = sock::send(self.stream.as_fd(), &Message::Pong { token }, &[]);
                }
                _ => {}
            }
        }
    }
}

/// Dropping unsubscribes (UNSUBSCRIBE) and unmaps the rings. A copy inherited by a child
/// forked from the connecting process only lets go of this process's copies: the connection
/// is the parent's, which goes on reading on it, so nothing is sent and no ACK is revoked or
/// made (the gate's lock may have been held by a thread of the parent at the fork, and stays
/// locked here). Host mappings and descriptors are closed; CUDA imports, streams and buffers
/// are leaked (CUDA is unusable after a fork: `cuda::driver` refuses every call there).
impl Drop for Subscriber {
    fn drop(&mut self) {
        if !self.origin.is_here() {
            return;
        }
        let was_open = self.closing.is_none();
        // Revoke before UNSUBSCRIBE and the close: frames still held by the user must not ACK
        // for whoever gets our bit next.
        self.close(Error::new(ErrorCode::Disconnected, "unsubscribed"), None);
        if was_open {
            let _ = sock::send(self.stream.as_fd(), &Message::Unsubscribe, &[]);
        }
    }
}

fn sanitize_name(name: &str) -> String {
    name.chars()
        .filter(|c| (' '..='~').contains(c))
        .take(MAX_CONSUMER_NAME_LEN)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::time::Duration;

    use super::*;
    use crate::publisher::{FrameRingConfig, Publisher, PublisherOptions};
    use crate::wire::Format;

    thread_local! {
        /// Runs once, between `next_frame`'s load of the shutdown flag and its ring read.
        static HOOK: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    }

    pub(super) fn between_shutdown_and_ring_loads() {
        if let Some(hook) = HOOK.with(|h| h.borrow_mut().take()) {
            hook();
        }
    }

    /// Defect: `next_frame` loaded the ring first and the shutdown flag second, so a publisher
    /// that published its last frame and shut down between the two loads made it report
    /// DISCONNECTED with that frame unread (FFmpeg's EOF: the last STRICT_WAIT frame lost).
    #[test]
    fn the_last_frame_before_shutdown_is_delivered_before_disconnected() {
        let dir = std::env::temp_dir().join(format!(
            "cuframes-unit-{}-{:x}",
            std::process::id(),
            crate::util::unique_suffix()
        ));
        let key = format!("u-last-{}", std::process::id());
        let publisher = Publisher::create(
            &key,
            PublisherOptions {
                runtime_dir: Some(dir.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        let mut cfg = FrameRingConfig::new(Format::Rgba, 16, 16);
        cfg.policy = Policy::StrictWait;
        publisher.enable_frames(cfg).unwrap();
        let planes = [vec![1u8; 64 * 16]];
        let publish = |p: &Publisher, v: u8| {
            let plane = vec![v; 64 * 16];
            p.publish_host_planes(&[&plane], &[64], None).unwrap()
        };
        let mut sub = Subscriber::connect(
            &key,
            &SubscriberOptions {
                runtime_dir: Some(dir.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        publisher
            .publish_host_planes(&[&planes[0]], &[64], None)
            .unwrap();
        assert_eq!(sub.next_frame(Some(Duration::from_secs(2))).unwrap().seq, 1);

        HOOK.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                publish(&publisher, 2);
                drop(publisher); // sets the shutdown flag, sends SHUTDOWN, removes the key
            }))
        });
        let last = sub.next_frame(Some(Duration::from_secs(2)));
        let _ = std::fs::remove_dir_all(&dir);
        let last = last.expect("the frame published before the shutdown");
        assert_eq!(last.seq, 2);
        assert_eq!(last.bytes().unwrap()[0], 2);
        drop(last);
        let end = sub.next_frame(Some(Duration::from_secs(2))).err().unwrap();
        assert_eq!(end.code(), ErrorCode::Disconnected);
    }

    /// Issue 34, item 9: the connection ends while the publisher lives on and keeps
    /// publishing (it no longer counts this subscriber, so nothing it publishes now is kept
    /// for it). The subscriber delivers what was published up to the moment it saw the end,
    /// then DISCONNECTED, and DISCONNECTED again at every later read: before, a frame
    /// published after the end was handed out by the read after DISCONNECTED. With
    /// `reconnect` it connects again instead, and the publisher counts it again.
    #[test]
    fn nothing_published_after_the_end_is_delivered() {
        for reconnect in [false, true] {
            let dir = std::env::temp_dir().join(format!(
                "cuframes-unit-{}-{:x}",
                std::process::id(),
                crate::util::unique_suffix()
            ));
            let key = format!("u-end-{}-{}", std::process::id(), u8::from(reconnect));
            let publisher = Publisher::create(
                &key,
                PublisherOptions {
                    runtime_dir: Some(dir.clone()),
                    ..Default::default()
                },
            )
            .unwrap();
            let run = || {
                publisher
                    .enable_frames(FrameRingConfig::new(Format::Rgba, 16, 16))
                    .unwrap();
                let publish = |v: u8| {
                    let plane = vec![v; 64 * 16];
                    publisher
                        .publish_host_planes(&[&plane], &[64], None)
                        .unwrap()
                };
                let wait = Some(Duration::from_secs(2));
                let mut sub = Subscriber::connect(
                    &key,
                    &SubscriberOptions {
                        runtime_dir: Some(dir.clone()),
                        reconnect: reconnect.then_some(Duration::from_secs(5)),
                        ..Default::default()
                    },
                )
                .unwrap();
                publish(1);
                publish(2);
                // The connection ends without a SHUTDOWN: the publisher sees it close and
                // drops this subscriber, the ring goes on.
                sub.stream.shutdown(std::net::Shutdown::Both).unwrap();
                assert_eq!(sub.next_frame(wait).unwrap().seq, 1);
                assert!(sub.closing.is_some(), "the end is seen by now");
                let t = std::time::Instant::now();
                while publisher.subscriber_count() != 0 {
                    assert!(t.elapsed() < Duration::from_secs(5), "still counted");
                    std::thread::sleep(Duration::from_millis(5));
                }
                assert_eq!(publish(3), 3);
                assert_eq!(sub.next_frame(wait).unwrap().seq, 2);
                if reconnect {
                    // Reconnected at the end of what was delivered: frame 3 was published
                    // while it was away (R26), frame 4 is for it.
                    let e = sub.next_frame(Some(Duration::from_millis(100))).err();
                    assert_eq!(e.map(|e| e.code()), Some(ErrorCode::Timeout));
                    assert_eq!((sub.restarts(), publisher.subscriber_count()), (1, 1));
                    assert_eq!(publish(4), 4);
                    assert_eq!(sub.next_frame(wait).unwrap().seq, 4);
                    return;
                }
                for v in [4, 5] {
                    let e = sub.next_frame(wait).err().unwrap();
                    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
                    publish(v);
                }
                let e = sub.next_frame(wait).err().unwrap();
                assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
            };
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
            drop(publisher);
            let _ = std::fs::remove_dir_all(&dir);
            if let Err(p) = outcome {
                std::panic::resume_unwind(p);
            }
        }
    }

    /// A publisher of 16x16 RGBA frames in a private runtime directory, for the end-reason
    /// tests; the directory is removed by `EndFixture`'s drop (also when a test fails).
    struct EndFixture {
        dir: PathBuf,
        key: String,
        publisher: Option<Publisher>,
    }

    impl EndFixture {
        fn new(tag: &str, policy: Policy) -> EndFixture {
            let dir = std::env::temp_dir().join(format!(
                "cuframes-unit-{}-{:x}",
                std::process::id(),
                crate::util::unique_suffix()
            ));
            let key = format!(
                "u-{tag}-{}-{:x}",
                std::process::id(),
                crate::util::unique_suffix()
            );
            let publisher = Publisher::create(
                &key,
                PublisherOptions {
                    runtime_dir: Some(dir.clone()),
                    ..Default::default()
                },
            )
            .unwrap();
            let mut cfg = FrameRingConfig::new(Format::Rgba, 16, 16);
            cfg.policy = policy;
            cfg.ring_size = 4;
            cfg.ack_timeout = Duration::from_millis(200);
            publisher.enable_frames(cfg).unwrap();
            EndFixture {
                dir,
                key,
                publisher: Some(publisher),
            }
        }

        fn subscribe(&self, mode: SubscriberMode) -> Subscriber {
            Subscriber::connect(
                &self.key,
                &SubscriberOptions {
                    runtime_dir: Some(self.dir.clone()),
                    mode,
                    ..Default::default()
                },
            )
            .unwrap()
        }

        fn publish(&self, v: u8) -> u64 {
            let plane = vec![v; 64 * 16];
            self.publisher
                .as_ref()
                .unwrap()
                .publish_host_planes(&[&plane], &[64], None)
                .unwrap()
        }
    }

    impl Drop for EndFixture {
        fn drop(&mut self) {
            drop(self.publisher.take());
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Reads until the end; the end must come within a few seconds.
    fn read_to_end(sub: &mut Subscriber) -> Error {
        for _ in 0..100 {
            match sub.next_frame(Some(Duration::from_secs(5))) {
                Ok(_) => continue,
                Err(e) => return e,
            }
        }
        panic!("no end after 100 frames");
    }

    /// Issue 30, item 4: a clean shutdown ends the stream with reason Shutdown, and only once
    /// a read has returned the end (None while frames are still delivered).
    #[test]
    fn end_reason_of_a_shutdown() {
        let mut fx = EndFixture::new("end-shut", Policy::DropOldest);
        let mut sub = fx.subscribe(SubscriberMode::Copy);
        fx.publish(1);
        drop(fx.publisher.take());
        assert_eq!(sub.next_frame(Some(Duration::from_secs(5))).unwrap().seq, 1);
        assert_eq!(sub.end_reason(), None, "the end is not read yet");
        let e = read_to_end(&mut sub);
        assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
        assert_eq!(sub.end_reason(), Some(EndReason::Shutdown));
        assert!(EndReason::Shutdown.is_clean());
    }

    /// A zero-copy reader holding every slot of a STRICT_WAIT ring is dropped by the
    /// publisher after its ack timeout (ERROR): the end says Kicked, not a shutdown.
    #[test]
    fn end_reason_of_a_kick() {
        let fx = EndFixture::new("end-kick", Policy::StrictWait);
        let mut sub = fx.subscribe(SubscriberMode::ZeroCopy);
        assert!(sub.is_zero_copy());
        let mut held = Vec::new();
        for v in 1..=4 {
            fx.publish(v);
            held.push(sub.next_frame(Some(Duration::from_secs(5))).unwrap());
        }
        // The fifth needs a held slot: the publisher waits 200 ms, then drops the reader.
        fx.publish(5);
        let e = read_to_end(&mut sub);
        assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
        assert!(e.message().contains("dropped this subscriber"), "{e}");
        assert_eq!(sub.end_reason(), Some(EndReason::Kicked));
        assert!(!EndReason::Kicked.is_clean());
        drop(held);
    }

    /// The connection ends without a SHUTDOWN (as when the publisher is killed): the end is
    /// PublisherLost, and the error says the publisher went without a shutdown.
    #[test]
    fn end_reason_of_a_lost_publisher() {
        let fx = EndFixture::new("end-lost", Policy::DropOldest);
        let mut sub = fx.subscribe(SubscriberMode::Copy);
        sub.stream.shutdown(std::net::Shutdown::Both).unwrap();
        let e = read_to_end(&mut sub);
        assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
        assert!(e.message().contains("without a SHUTDOWN"), "{e}");
        assert_eq!(sub.end_reason(), Some(EndReason::PublisherLost));
    }

    /// Bytes on the connection that are no message (a header declaring a 4 GiB payload):
    /// the end is ProtocolError.
    #[test]
    fn end_reason_of_a_protocol_error() {
        use std::io::Write;
        let fx = EndFixture::new("end-proto", Policy::DropOldest);
        let mut sub = fx.subscribe(SubscriberMode::Copy);
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        // The publisher's connection closes with the old end (it drops the subscriber).
        drop(std::mem::replace(&mut sub.stream, ours));
        theirs.write_all(&[0xff; 8]).unwrap();
        let e = read_to_end(&mut sub);
        assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
        assert_eq!(sub.end_reason(), Some(EndReason::ProtocolError));
        drop(theirs);
    }
}
