//! Connecting: the handshake with the publisher, then the frame and packet rings it
//! announces, mapped and checked before the first read.

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, ErrorCode, Result};
use crate::frame_ring::ack_page::AckPage;
use crate::frame_ring::reader::{FrameReader, RingView};
use crate::frame_ring::shm_region::FrameShm;
use crate::memory::host::{HostImport, SlotFds};
use crate::memory::{SlotImport, SlotSize};
use crate::packet_ring::PacketLimits;
use crate::packet_ring::{GopStoreReader, PacketRingReader};
use crate::paths::{self, Key};
use crate::sock::Inbox;
use crate::tlv::HelloReq;
use crate::util::Origin;
use crate::wire::meta_ext::MetaExt;
use crate::wire::*;

use super::continuity::Continuity;
use super::frame_handle::CudaReader;
use super::frame_source::FrameSource;
use super::handshake;
use super::options::SubscriberOptions;
use super::state::Subscriber;

impl Subscriber {
    /// Connect to the publisher of `key`: the handshake, then the rings asked for are mapped
    /// and checked (frames, packets, or both). Fails when no publisher answers, the publisher
    /// lacks a ring asked for, the handshake outlasts `connect_timeout`, the publisher runs as
    /// another uid than the one required, or it refuses the subscription.
    pub fn connect(key: &str, options: &SubscriberOptions) -> Result<Subscriber> {
        Subscriber::connect_to(key, options, None)
    }

    /// Connect, accepting only a publisher of `pinned`'s uid when given (a reconnect), and of
    /// the `publisher_uid` option's when set.
    pub(super) fn connect_to(
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
            // The GOP store (extension): a late start on a keyframe the ring lost is instant.
            flags |= SUBSCRIBE_WANTS_PACKETS | SUBSCRIBE_GOP_STORE;
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
                    Some(dev) if !zero_copy => Some(CudaReader {
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
                    downloads: Default::default(),
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
            if let Some(fd) = est.gop_store {
                match GopStoreReader::import(fd, limits.max_ring_size) {
                    Ok(store) => reader.set_gop_store(store),
                    // Larger than this reader maps: it starts as without a store.
                    Err(e) if e.code() == ErrorCode::NoMemory => {
                        crate::util::diag!("GOP store not used: {e}")
                    }
                    Err(e) => return Err(e),
                }
            }
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
}

fn sanitize_name(name: &str) -> String {
    name.chars()
        .filter(|c| (' '..='~').contains(c))
        .take(MAX_CONSUMER_NAME_LEN)
        .collect()
}
