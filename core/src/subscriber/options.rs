//! How a subscriber connects: [`SubscriberOptions`], what
//! [`super::Subscriber::connect`] takes.

use std::path::PathBuf;
use std::time::Duration;

use crate::wire::SubscriberMode;

/// How a subscriber connects.
#[derive(Debug, Clone)]
pub struct SubscriberOptions {
    /// The directory of the publishers' sockets (None: `$CUFRAMES_RUNTIME_DIR`, else
    /// `/run/cuframes`).
    pub runtime_dir: Option<PathBuf>,
    /// Shown to operators (printable ASCII, at most 31 bytes).
    pub name: String,
    /// The GPU to import CUDA rings on: [`crate::cuda::DEVICE_AUTO`] (-1, the default) = the
    /// publisher's GPU, found by its UUID whatever its ordinal is in this process; N = this
    /// process's device N, which must be the publisher's GPU (otherwise the connect is
    /// refused naming both UUIDs). Publishers that announce no UUID: N, or 0 for auto.
    /// Ignored for host rings.
    pub cuda_device: i32,
    /// COPY (frames are the subscriber's own copies) or ZERO_COPY (frames borrow the ring's
    /// slots, granted under STRICT_WAIT or with `accept_zero_copy_overwrite`).
    pub mode: SubscriberMode,
    /// Subscribe to the frame ring.
    pub want_frames: bool,
    /// Subscribe to the packet ring.
    pub want_packets: bool,
    /// How long the handshake may take (also the bound for following a new frame ring).
    pub connect_timeout: Duration,
    /// R12: ZERO_COPY under DROP_OLDEST risks frames being overwritten while held; without
    /// this flag the subscriber copies instead.
    pub accept_zero_copy_overwrite: bool,
    /// Behave as a plain v4 peer: ask for no ACK page, so that this subscriber's ACKs go into
    /// the shared header's bitmaps (the publisher must set `allow_legacy_subscribers`). For
    /// interoperability tests and as the benchmark baseline; never needed otherwise.
    pub plain_v4_acks: bool,
    /// Before each sleep of `next_frame` (and of `next_packet`:
    /// [`PacketRingReader::set_spin`](crate::packet_ring::PacketRingReader::set_spin)), poll the ring this long for a new frame (zero: sleep at
    /// once, the default). For latency-critical consumers: a frame published during the
    /// spin is seen within about a microsecond instead of after a futex wake-up, and the spin
    /// costs a busy CPU for its duration (spin for at least the frame interval to catch every
    /// frame this way). The socket is looked at every 100 µs of a spin, so the publisher's
    /// messages (shutdown, ping) are not left waiting for the spin to end.
    pub spin: Duration,
    /// Keep going across a publisher restart under the same key: when the
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
