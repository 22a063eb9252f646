//! The publisher: owns a key's socket and rings, admits subscribers on a background thread,
//! and publishes frames (and, with `enable_packets`, packets).
//!
//! [`Publisher`] (this file) picks the ring and the slot; the frame ring's writer
//! (`frame_ring::writer`) does the copying and publishing. Its helpers, one job per file:
//! - `options`: [`PublisherOptions`] and the admission caps' defaults;
//! - `shared`: what the publisher's threads share (`Inner`: rings, subscriber table, the
//!   slot that is out, the server's wake-up pipe) and the table's answers to the writer's
//!   STRICT_WAIT questions;
//! - `registry`: one publisher per key in a process (R6), [`wait_until_released`];
//! - `socket`: the runtime directory and the mode-safe bind of the key's socket;
//! - `stale`: the judge of a dead predecessor's socket and SHM objects at create (§1);
//! - `server`: the server thread (handshakes, messages, kicks), with `admission` (per-uid
//!   and per-pid caps, pending-handshake fairness) and `rejoin` (backoff after kicks);
//! - [`subscribers`]: the subscriber table (bit ownership, quarantine), and
//!   `subscriber_info`: what [`Publisher::subscribers`] reports of each;
//! - `ack_model` (tests only): the model check of the table and the ACK protocol.
//!
//! # Lock hierarchy
//!
//! A publisher is used from several threads at once: the host's publishing thread, a control
//! thread replacing the ring (a size change), a monitoring thread reading the subscriber
//! table, the server thread admitting and dropping subscribers. Its locks are taken in this
//! order, outermost first; a thread that holds one takes only locks further down the list:
//!
//! 1. `Inner::frames` (`RwLock`): written only by `enable_frames`, `replace_frames` and the
//!    publisher's end; everybody else clones the current ring's `Arc` and lets go of the lock
//!    at once (`Inner::ring`, `Inner::ring_and_generation`) before taking anything else;
//! 2. the writer state of one ring (`FrameWriter`'s mutex): a STRICT_WAIT acquire holds it
//!    for up to the ACK timeout;
//! 3. `Inner::table`, the subscriber table (what an ACK wait asks and a kick changes);
//! 4. leaves, which never take another lock: `Inner::held` (the ring of the slot that is
//!    out), `Inner::packets`, `KEYS_IN_PROCESS`.
//!
//! So whoever needs the ring and the table clones the ring first, and whoever waits for ACKs
//! holding a ring's writer state never needs the `frames` lock (a kick forgets its bits in
//! the ring it waits on). `tests/replace_under_load.rs` runs these paths against each other.

#[cfg(test)]
mod ack_model;
mod admission;
mod options;
mod registry;
mod rejoin;
mod server;
mod shared;
mod socket;
mod stale;
mod subscriber_info;
pub mod subscribers;

pub use crate::frame_ring::{AcquiredSlot, FrameRingConfig, MemoryChoice};
pub use options::{
    PublisherOptions, DEFAULT_MAX_SUBSCRIBERS_PER_PID, DEFAULT_MAX_SUBSCRIBERS_PER_UID,
};
pub use registry::wait_until_released;
pub use subscriber_info::SubscriberInfo;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use self::shared::{Held, Inner};
use crate::cuda::CudaStream;
use crate::error::{Error, ErrorCode, Result};
use crate::frame_ring::FrameWriter;
use crate::packet_ring::{GopStoreConfig, PacketRingConfig, PacketRingWriter, PacketWriterStats};
use crate::paths::{self, Key};
use crate::shm;
use crate::util::Origin;

/// A publisher of one key. Dropping it shuts down cleanly (SHUTDOWN to every subscriber,
/// every socket and SHM object removed). A copy inherited by a child forked from the
/// creating process is not that publisher: dropping it leaves the parent's publisher, its
/// socket, rings and subscribers as they are (see `leave_to_parent`).
pub struct Publisher {
    inner: Arc<Inner>,
    server: Option<JoinHandle<()>>,
}

impl Publisher {
    /// Create the publisher of `key`: recover a dead predecessor's leftovers (§1), refuse a
    /// live one (ALREADY_EXISTS), bind the socket and start serving handshakes.
    pub fn create(key: &str, options: PublisherOptions) -> Result<Publisher> {
        let key = Key::new(key)?;
        registry::claim(&key)?;
        match Publisher::create_unregistered(key.clone(), options) {
            Ok(p) => Ok(p),
            Err(e) => {
                registry::forget(&key);
                Err(e)
            }
        }
    }

    fn create_unregistered(key: Key, options: PublisherOptions) -> Result<Publisher> {
        let dir = paths::runtime_dir(options.runtime_dir.as_deref());
        socket::ensure_runtime_dir(&dir)?;
        let socket_path = paths::socket_path(&dir, &key)?;
        stale::recover(&key, &socket_path)?;
        let listener = socket::bind(&socket_path, options.file_mode)?;
        let cleanup_socket = |e: Error| {
            let _ = std::fs::remove_file(&socket_path);
            e
        };
        listener
            .set_nonblocking(true)
            .map_err(|e| cleanup_socket(Error::new(ErrorCode::Io, format!("socket: {e}"))))?;
        let (wake_rx, wake_tx) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .map_err(|e| cleanup_socket(Error::os("pipe", e)))?;
        let inner = Arc::new(Inner {
            key,
            options,
            socket_path,
            frames: RwLock::new(None),
            generation: AtomicU64::new(0),
            held: Mutex::new(None),
            packets: Mutex::new(None),
            table: Mutex::new(subscribers::Table::default()),
            stopping: AtomicBool::new(false),
            wake_tx,
            wake_rx,
            origin: Origin::here(),
        });
        let server_inner = inner.clone();
        let server = std::thread::Builder::new()
            .name(format!("cuframes-pub-{}", inner.key))
            .spawn(move || server::run(server_inner, listener))
            .map_err(|e| {
                let _ = std::fs::remove_file(&inner.socket_path);
                Error::new(
                    ErrorCode::Io,
                    format!("cannot start the publisher's server thread: {e}"),
                )
            })?;
        Ok(Publisher {
            inner,
            server: Some(server),
        })
    }

    /// The key this publisher publishes.
    pub fn key(&self) -> &str {
        self.inner.key.as_str()
    }

    /// The path of the key's listening socket.
    pub fn socket_path(&self) -> &std::path::Path {
        &self.inner.socket_path
    }

    /// Add the frame ring (once): allocates the slots and the frame SHM.
    pub fn enable_frames(&self, config: FrameRingConfig) -> Result<()> {
        self.check_here()?;
        let mut frames = self.inner.frames.write().unwrap_or_else(|p| p.into_inner());
        if frames.is_some() {
            return Err(Error::new(
                ErrorCode::AlreadyExists,
                "this publisher already has a frame ring",
            ));
        }
        let mut ring = self.create_ring(&config)?;
        ring.install(&self.inner.key, false)?;
        *frames = Some(Arc::new(ring));
        self.inner.generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn create_ring(&self, config: &FrameRingConfig) -> Result<FrameWriter> {
        let options = &self.inner.options;
        // Subscribers with ACK pages only read the frame SHM; only plain v4 peers write it.
        let mode = if options.allow_legacy_subscribers {
            options.file_mode
        } else {
            shm::readers_read_only(options.file_mode)
        };
        FrameWriter::create_staged(&self.inner.key, config, mode)
    }

    /// A new generation of the frame ring (a camera switching 1080p to 720p, say): the
    /// old ring ends (its subscribers drain what it holds, get SHUTDOWN with reason
    /// NEW_RING and subscribe again, our subscriber by itself), the new one has `config`'s
    /// geometry, format and colour. Under STRICT_WAIT this waits, up to the ack timeout, until
    /// as many frame subscribers as the old ring had are back; under both policies the
    /// publisher's end waits for them the same way, so that the last generation reaches them.
    /// Subscribers that join a replacement ring before it has wrapped start at its first frame
    /// (they are the old ring's readers coming back), so a returning reader misses none of its
    /// frames. Packet subscribers are not affected.
    pub fn replace_frames(&self, config: FrameRingConfig) -> Result<()> {
        self.check_here()?;
        if self.inner.ring().is_none() {
            return Err(Error::new(
                ErrorCode::NotFound,
                "this publisher has no frame ring to replace",
            ));
        }
        // The new ring is made first, its SHM under a private name: whatever fails here
        // (descriptors, memory, a device) leaves the old ring and its readers as they were.
        let mut ring = self.create_ring(&config)?;
        let fresh = {
            let mut frames = self.inner.frames.write().unwrap_or_else(|p| p.into_inner());
            let Some(old) = frames.clone() else {
                return Err(Error::new(
                    ErrorCode::NotFound,
                    "this publisher has no frame ring to replace",
                ));
            };
            // Renamed over the old ring's SHM in one step: the name is never free for
            // someone else to take, and a refusal leaves the old ring in place. An old
            // ring under its generation name (another user held the key's name) is not at
            // the name: then nothing there is replaced, whoever we are (root could), and
            // the new ring takes the name only if it is free.
            ring.install(&self.inner.key, old.at_key_name())?;
            // The old ring's readers stop at its end (its frames still queued on a stream
            // made visible first, nothing published after); they have it mapped still.
            old.retire();
            old.shm.shutdown_flag().store(1, Ordering::SeqCst);
            crate::futex::wake_all(old.shm.global_seq_word());
            // The generation moves before the old subscribers are retired: a SUBSCRIBE that
            // the server admits (it checks the generation under the table lock) is either
            // in the table before the retirement, and retired with the others, or of the
            // new generation.
            self.inner.generation.fetch_add(1, Ordering::SeqCst);
            let moved = self.inner.table().retire_frame_subscribers();
            *frames = Some(Arc::new(ring));
            moved
        };
        self.inner.wake_server();
        if config.policy == crate::wire::Policy::StrictWait && fresh > 0 {
            self.wait_for_returns(config.ack_timeout);
        }
        Ok(())
    }

    /// Wait, at most `bound`, until the subscribers that ring replacements sent away have
    /// subscribed again (as many admissions as there were retirements). Those still away
    /// then are waited for no more: one that died or left would otherwise cost every later
    /// wait its whole bound.
    fn wait_for_returns(&self, bound: Duration) {
        let deadline = std::time::Instant::now() + bound;
        loop {
            let mut table = self.inner.table();
            if !table.awaiting_returns() {
                return;
            }
            if std::time::Instant::now() >= deadline {
                table.forgive_returns();
                return;
            }
            drop(table);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The current frame ring's SHM name (relative to /dev/shm, what HELLO_RESP announces):
    /// `cuframes-<key>`, or its generation name while another user holds that name.
    pub fn frame_shm_name(&self) -> Option<String> {
        self.inner.ring().map(|r| r.shm_name.clone())
    }

    /// The packet ring's SHM name, like [`Self::frame_shm_name`].
    pub fn packet_shm_name(&self) -> Option<String> {
        self.inner
            .packets()
            .as_ref()
            .map(|w| w.shm_name().to_owned())
    }

    fn ring(&self) -> Result<Arc<FrameWriter>> {
        self.check_here()?;
        self.inner
            .ring()
            .ok_or_else(|| Error::new(ErrorCode::NotFound, "this publisher has no frame ring"))
    }

    /// Whether this process created the publisher (false in a child forked from it, whose
    /// copy must leave the parent's rings and socket alone).
    pub fn created_here(&self) -> bool {
        self.inner.origin.is_here()
    }

    /// What changes the rings is refused in a forked child: they are the parent's.
    fn check_here(&self) -> Result<()> {
        if self.created_here() {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::InvalidArg,
            format!(
                "the publisher of {:?} belongs to the process that created it (this one was \
                 forked from it): a child publishes with a publisher of its own, under \
                 another key",
                self.inner.key.as_str()
            ),
        ))
    }

    /// Where the current frame ring's frames waited so far: for ACKs, for publications
    /// queued on a stream, and the host functions' time; None without a ring.
    pub fn frame_wait_stats(&self) -> Option<crate::frame_ring::wait_stats::WaitStats> {
        self.inner.ring().map(|r| r.wait_stats())
    }

    /// The frame layout (pitches and plane offsets) subscribers will see.
    pub fn frame_layout(&self) -> Option<crate::format::FrameGeometry> {
        self.inner.ring().map(|r| r.layout.clone())
    }

    /// The device of a CUDA frame ring; `None` for a host ring or before `enable_frames`.
    pub fn cuda_device(&self) -> Option<Arc<crate::cuda::CudaDevice>> {
        self.inner
            .ring()
            .and_then(|r| r.slots.cuda_device().cloned())
    }

    /// Take the next slot of the current ring to write (waits for ACKs under STRICT_WAIT).
    /// The slot's memory stays mapped until it is published or abandoned, even if the ring
    /// is replaced meanwhile (then publishing it fails with DISCONNECTED).
    pub fn acquire(&self) -> Result<AcquiredSlot> {
        loop {
            let ring = self.ring()?;
            // Also a slot of a replaced ring: it stays mapped until given back. (The held
            // lock is a leaf: let go of it before asking the ring.)
            let out = self
                .inner
                .held()
                .as_ref()
                .map(|out| (out.seq, Arc::clone(&out.ring)));
            if let Some((seq, out_ring)) = out {
                return Err(Error::invalid(format!(
                    "the slot of frame {seq} is still out: publish or abandon it before \
                     acquiring another (one slot at a time{})",
                    if out_ring.is_retired() {
                        "; its ring was replaced, so publishing it fails"
                    } else {
                        ""
                    }
                )));
            }
            match ring.acquire(&*self.inner) {
                Ok(slot) => {
                    *self.inner.held() = Some(Held {
                        ring,
                        seq: slot.seq,
                        address: slot.address,
                    });
                    return Ok(slot);
                }
                // Replaced while this waited for ACKs: the new ring is in place once the
                // replacement lets go of the `frames` lock.
                Err(_) if ring.is_retired() => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The ring `slot` was acquired from: the one kept for it, or else the current one
    /// (which then refuses a slot it did not hand out).
    fn ring_of(&self, slot: &AcquiredSlot) -> Result<Arc<FrameWriter>> {
        self.check_here()?;
        let mut held = self.inner.held();
        match held.take() {
            Some(out) if out.is(slot) => Ok(out.ring),
            other => {
                *held = other;
                drop(held);
                self.ring()
            }
        }
    }

    /// The ring kept for the slot that is out, if `slot` is it.
    fn held_ring(&self, slot: &AcquiredSlot) -> Result<Arc<FrameWriter>> {
        self.check_here()?;
        match &*self.inner.held() {
            Some(out) if out.is(slot) => Ok(Arc::clone(&out.ring)),
            _ => Err(Error::invalid(format!(
                "slot of frame {} is not the slot that is out",
                slot.seq
            ))),
        }
    }

    /// The layout of the ring `slot` was acquired from: the geometry its frame has, even if
    /// another thread replaced the ring since.
    pub fn slot_layout(&self, slot: &AcquiredSlot) -> Result<crate::format::FrameGeometry> {
        Ok(self.held_ring(slot)?.layout.clone())
    }

    /// Copy a host frame (planes with their own strides) into an acquired slot, in the
    /// layout of the slot's own ring ([`Publisher::slot_layout`]).
    pub fn write_host_planes(
        &self,
        slot: &AcquiredSlot,
        planes: &[&[u8]],
        strides: &[usize],
    ) -> Result<()> {
        self.held_ring(slot)?
            .write_host_planes(slot, planes, strides)
    }

    /// Publish a slot whose contents are complete.
    pub fn publish(&self, slot: AcquiredSlot, pts_ns: Option<i64>) -> Result<u64> {
        self.ring_of(&slot)?.publish(slot, pts_ns)
    }

    /// Give back a slot without publishing it.
    pub fn abandon(&self, slot: AcquiredSlot) {
        if let Ok(ring) = self.ring_of(&slot) {
            ring.abandon(slot);
        }
    }

    /// Convenience for host rings: copy planes (with their strides) and publish, in the
    /// layout the ring has when the call starts.
    pub fn publish_host_planes(
        &self,
        planes: &[&[u8]],
        strides: &[usize],
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        self.publish_host_planes_in(None, planes, strides, pts_ns)
    }

    /// `publish_host_planes` of a frame laid out as `layout`: refused (FORMAT) when the ring
    /// has another layout, as after a replacement by another thread, instead of copying the
    /// frame into the wrong geometry (or reading the caller's buffers past their end).
    pub fn publish_host_frame(
        &self,
        layout: &crate::format::FrameGeometry,
        planes: &[&[u8]],
        strides: &[usize],
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        self.publish_host_planes_in(Some(layout), planes, strides, pts_ns)
    }

    fn publish_host_planes_in(
        &self,
        expected: Option<&crate::format::FrameGeometry>,
        planes: &[&[u8]],
        strides: &[usize],
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let ring = self.ring()?;
        if let Some(expected) = expected.filter(|l| **l != ring.layout) {
            return Err(Error::new(
                ErrorCode::Format,
                format!(
                    "the frame ring is {} {}x{} now (replaced), the frame is {} {}x{}: \
                     read the new layout and publish a frame of it",
                    ring.layout.format.name(),
                    ring.layout.width,
                    ring.layout.height,
                    expected.format.name(),
                    expected.width,
                    expected.height
                ),
            ));
        }
        ring.publish_host_planes(&*self.inner, planes, strides, pts_ns)
    }

    /// CUDA: publish a slot written by GPU work on `stream`, now: the stream is synchronised
    /// first, so no frame is visible before its data is complete (§5). A caller's stream is
    /// of the context current on this thread (a context of the ring's device); `None` is the
    /// legacy default stream of the ring's own context. On a failed synchronize the slot is
    /// given back.
    pub fn publish_after_stream(
        &self,
        slot: AcquiredSlot,
        stream: Option<CudaStream<'_>>,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        self.ring_of(&slot)?
            .publish_after_stream(slot, stream, pts_ns)
    }

    /// CUDA: publish a slot written by GPU work on `stream` without waiting for that work:
    /// the frame becomes visible when the work queued so far on the stream has completed (a
    /// host function queued behind it makes it visible, §5), and this returns at once. The
    /// next acquire of the same slot, a synchronous publish and the ring's teardown wait for
    /// it. `stream` is of the context current on this thread, a context of the ring's device
    /// (for the legacy and per-thread default streams, the context whose stream is meant). On
    /// error the slot is given back.
    ///
    /// The order of frames rests on two things the caller keeps: the stream named is the one
    /// the slot's writes were queued on (a default stream of another device's context is
    /// another stream, and the frame may become visible before its writes end), and a stream
    /// stays alive until its publications are visible (the writer tells streams apart by
    /// handle, so a stream destroyed with publications queued and a new one the driver gives
    /// the same handle count as one, and are not ordered against each other).
    pub fn publish_on_stream(
        &self,
        slot: AcquiredSlot,
        stream: CudaStream<'_>,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        self.ring_of(&slot)?.publish_on_stream(slot, stream, pts_ns)
    }

    /// CUDA: copy a frame from other device memory into the next slot, ordered after the
    /// caller's work on `stream` (`None`: the ring's own stream, ordered after nothing of the
    /// caller's), wait for the copy and publish it. A caller's stream is of the context
    /// current on this thread.
    ///
    /// # Safety
    /// Each `planes[i]` is device memory of the ring's device, readable for plane i's rows at
    /// `pitches[i]` until this returns.
    pub unsafe fn publish_device_planes(
        &self,
        planes: &[u64],
        pitches: &[usize],
        stream: Option<CudaStream<'_>>,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let ring = self.ring()?;
        // SAFETY: our contract is the writer's.
        unsafe { ring.publish_device_planes(&*self.inner, planes, pitches, stream, pts_ns) }
    }

    /// CUDA: `publish_device_planes` on the stream, without waiting: the copy and then the
    /// publication are queued on `stream` (`None`: the ring's own stream), and this returns
    /// at once.
    ///
    /// # Safety
    /// Each `planes[i]` is device memory of the ring's device, holding plane i's rows at
    /// `pitches[i]` unchanged until the stream has run the copy (work queued later on the
    /// same stream may reuse it, as FFmpeg's frame pools do).
    pub unsafe fn publish_device_planes_on_stream(
        &self,
        planes: &[u64],
        pitches: &[usize],
        stream: Option<CudaStream<'_>>,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let ring = self.ring()?;
        // SAFETY: our contract is the writer's.
        unsafe {
            ring.publish_device_planes_on_stream(&*self.inner, planes, pitches, stream, pts_ns)
        }
    }

    /// Add the packet ring (once): codec (`AV_CODEC_ID_*`), Annex B extradata (may be empty,
    /// then set once with `set_packet_extradata` before the first packet), geometry.
    pub fn enable_packets(&self, config: PacketRingConfig) -> Result<()> {
        self.check_here()?;
        let mut packets = self.inner.packets();
        if packets.is_some() {
            return Err(Error::new(
                ErrorCode::AlreadyExists,
                "this publisher already has a packet ring",
            ));
        }
        *packets = Some(PacketRingWriter::create(
            &self.inner.key,
            config,
            self.inner.options.file_mode,
        )?);
        Ok(())
    }

    /// Set the extradata of the packet ring (once, before the first packet, §10.3).
    pub fn set_packet_extradata(&self, extradata: &[u8]) -> Result<()> {
        self.check_here()?;
        match self.inner.packets().as_mut() {
            Some(w) => w.set_extradata(extradata),
            None => Err(Error::new(
                ErrorCode::NotFound,
                "this publisher has no packet ring",
            )),
        }
    }

    /// The packet ring's GOP store (late subscribers start at once on a keyframe the ring
    /// lost): its size, or `None` for none. On by default; only before the first packet.
    pub fn set_gop_store(&self, config: Option<GopStoreConfig>) -> Result<()> {
        self.check_here()?;
        match self.inner.packets().as_mut() {
            Some(w) => w.set_gop_store(config),
            None => Err(Error::new(
                ErrorCode::NotFound,
                "this publisher has no packet ring",
            )),
        }
    }

    /// Publish one packet (§10.6), its slot and data seqlocked against readers that lap
    /// (R8, R29); returns its seq.
    pub fn publish_packet(&self, data: &[u8], pts_ns: i64, dts_ns: i64, flags: u32) -> Result<u64> {
        self.check_here()?;
        match self.inner.packets().as_mut() {
            Some(w) => w.publish(data, pts_ns, dts_ns, flags),
            None => Err(Error::new(
                ErrorCode::NotFound,
                "this publisher has no packet ring",
            )),
        }
    }

    /// Packet ring counters, if there is a packet ring.
    pub fn packet_stats(&self) -> Option<PacketWriterStats> {
        self.inner.packets().as_ref().map(PacketRingWriter::stats)
    }

    /// The seq of the last published frame (0 = none).
    pub fn frame_seq(&self) -> u64 {
        self.inner.ring().map_or(0, |r| r.last_seq())
    }

    /// Every admitted subscriber with its lag and counters.
    pub fn subscribers(&self) -> Vec<SubscriberInfo> {
        // The ring before the table (lock hierarchy).
        let ring = self.inner.ring();
        subscriber_info::list(ring.as_deref(), &self.inner.table())
    }

    /// Number of admitted subscribers.
    pub fn subscriber_count(&self) -> usize {
        self.inner.table().len()
    }

    /// Admitted subscribers that can read: a frame subscriber with an ACK page counts once
    /// it has mapped the ring's slots (it says so in its page; importing CUDA slots takes a
    /// new process ~0.1 s, one process after another), every other one once admitted (plain
    /// v4 peers have no way to say it; packets need no mapping). What `wait_subscribers`
    /// waits for, so that publishing starts when the readers can follow.
    pub fn ready_subscriber_count(&self) -> usize {
        self.inner
            .table()
            .iter()
            .filter(|(_, e)| e.ack_page.as_ref().map_or(true, |page| page.is_ready()))
            .count()
    }

    /// [`ready_subscriber_count`](Self::ready_subscriber_count) of the frame subscribers
    /// only: what a frame publisher waits for. A packet reader of the same key (the FFmpeg
    /// command that publishes both rings) is no frame reader.
    pub fn ready_frame_subscriber_count(&self) -> usize {
        self.inner
            .table()
            .iter()
            .filter(|(_, e)| e.wants_frames)
            .filter(|(_, e)| e.ack_page.as_ref().map_or(true, |page| page.is_ready()))
            .count()
    }

    /// Admitted subscribers that read packets: what a packet publisher waits for. A frame
    /// reader of the same key is no packet reader.
    pub fn packet_subscriber_count(&self) -> usize {
        self.inner
            .table()
            .iter()
            .filter(|(_, e)| e.wants_packets)
            .count()
    }

    fn shutdown(&mut self) {
        if !self.inner.origin.is_here() {
            self.leave_to_parent();
            return;
        }
        // Readers sent away by the last ring replacement can only read the new ring's frames
        // once they have subscribed to it, which needs this publisher's socket: give them up
        // to the ring's ack timeout to come back before the socket goes (under DROP_OLDEST
        // too: a short stream's last generation would otherwise be lost to every reader
        // still draining the old ring when the stream ends).
        if let Some(ring) = self.inner.ring() {
            self.wait_for_returns(ring.ack_timeout);
        }
        if self.inner.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(ring) = self.inner.ring() {
            // Frames still queued on a stream become visible first: subscribers that see the
            // flag then read every frame published before it (STRICT_WAIT: every frame).
            ring.flush_publications();
            ring.shm.shutdown_flag().store(1, Ordering::SeqCst);
            crate::futex::wake_all(ring.shm.global_seq_word());
        }
        if let Some(w) = self.inner.packets().as_mut() {
            w.shutdown();
        }
        #[cfg(feature = "testing")]
        crate::testing::hooks::before_shutdown_wake(self.inner.key.as_str());
        self.inner.wake_server();
        if let Some(h) = self.server.take() {
            let _ = h.join();
        }
        let _ = std::fs::remove_file(&self.inner.socket_path);
        if let Some(ring) = self.inner.ring() {
            let _ = shm::unlink(&ring.shm_name);
        }
        // Dropping the writer unlinks the packet SHM.
        drop(self.inner.packets().take());
        registry::forget(&self.inner.key);
    }

    /// The end of a copy inherited by a child forked from the creating process: the socket,
    /// the rings, the subscribers and the server thread are the parent's, which goes on
    /// publishing, so nothing of theirs is touched (no shutdown flag, no SHUTDOWN, no unlink).
    /// The server thread does not exist here: it is not joined. The rings are not dropped
    /// either: their teardown waits for publications queued on the parent's CUDA streams and
    /// frees CUDA memory, and CUDA is unusable after a fork. Their mappings and descriptors
    /// stay in this process until it exits or execs (they are close-on-exec). No lock that
    /// another thread of the parent may have held at the fork is waited for: such a lock
    /// stays locked in the child forever.
    fn leave_to_parent(&mut self) {
        if let Some(thread) = self.server.take() {
            std::mem::forget(thread);
        }
        std::mem::forget(Arc::clone(&self.inner));
        registry::forget_inherited(&self.inner.key);
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.shutdown();
    }
}
