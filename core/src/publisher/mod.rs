//! The publisher: owns a key's socket and rings, admits subscribers on a background thread,
//! and publishes frames (and, with `enable_packets`, packets).
//!
//! # Lock hierarchy
//!
//! A publisher is used from several threads at once: the host's publishing thread, a control
//! thread replacing the ring (a size change), a monitoring thread reading the subscriber
//! table, the server thread admitting and dropping subscribers. Its locks are taken in this
//! order, outermost first; a thread that holds one takes only locks further down the list:
//!
//! 1. [`Inner::frames`] (`RwLock`): written only by `enable_frames`, `replace_frames` and the
//!    publisher's end; everybody else clones the current ring's `Arc` and lets go of the lock
//!    at once ([`Inner::ring`], [`Inner::ring_and_generation`]) before taking anything else;
//! 2. the writer state of one ring (`FrameWriter`'s mutex): a STRICT_WAIT acquire holds it
//!    for up to the ACK timeout;
//! 3. [`Inner::table`], the subscriber table (what an ACK wait asks and a kick changes);
//! 4. leaves, which never take another lock: [`Inner::held`] (the ring of the slot that is
//!    out), [`Inner::packets`], `KEYS_IN_PROCESS`.
//!
//! So whoever needs the ring and the table clones the ring first, and whoever waits for ACKs
//! holding a ring's writer state never needs the `frames` lock (a kick forgets its bits in
//! the ring it waits on). `tests/replace_under_load.rs` drives runs these paths against each other.

#[cfg(test)]
mod ack_model;
mod admission;
mod rejoin;
mod server;
mod stale;
pub mod subscribers;

pub use crate::frame_ring::{AcquiredSlot, FrameRingConfig, MemoryChoice};

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, ErrorCode, Result};
use crate::frame_ring::ack_page::Counter;
use crate::frame_ring::shm_region::{
    SUB_DELIVERED_OFFSET, SUB_DROPPED_OVERRUN_OFFSET, SUB_DROPPED_TORN_OFFSET,
};
use crate::frame_ring::writer::AckAuthority;
use crate::frame_ring::{FrameWriter, RequiredAcks};
use crate::packet_ring::{PacketRingConfig, PacketRingWriter, PacketWriterStats};
use crate::paths::{self, Key};
use crate::shm;
use crate::util::Origin;

/// How a publisher is created.
#[derive(Debug, Clone)]
pub struct PublisherOptions {
    /// Socket directory; `None` = `$CUFRAMES_RUNTIME_DIR` or `/run/cuframes` (R16).
    pub runtime_dir: Option<PathBuf>,
    /// Mode of the socket and SHM objects (R16, default 0660).
    pub file_mode: u32,
    /// Only peers with this uid (or root) may subscribe (SO_PEERCRED).
    pub allowed_uid: Option<u32>,
    /// Only peers with this gid (or root) may subscribe.
    pub allowed_gid: Option<u32>,
    /// A peer that has not finished its handshake by then is dropped.
    pub handshake_timeout: Duration,
    /// Admit frame subscribers that do not know ACK pages (plain protocol v4 peers). They
    /// ACK in the shared header, so the frame SHM must then be writable by the group: any
    /// subscriber can forge ACKs, truncate the object and so hurt every other subscriber and
    /// the publisher (`docs/protocol.md`, trust model). Off by default.
    pub allow_legacy_subscribers: bool,
    /// Subscriber slots (of the 31, R2) that the processes of one uid may hold at once;
    /// further subscriptions of that uid get TOO_MANY. The publisher's own uid and root are
    /// not counted. Default 8: one other service then cannot take the table (it leaves at
    /// least 23 slots to everybody else, and four colluding uids are needed to fill it),
    /// while a service that runs a handful of readers fits. Services that run more readers
    /// under one uid raise it; 31 or more means no cap.
    pub max_subscribers_per_uid: usize,
    /// The same per process (a peer in another PID namespace, seen as pid 0, is counted by
    /// its uid only). Default 4: a process reads a key with one or two connections (frames,
    /// packets), rarely more; a single runaway process takes no more than that.
    pub max_subscribers_per_pid: usize,
}

/// [`PublisherOptions::max_subscribers_per_uid`]'s default (the C ABI's 0).
pub const DEFAULT_MAX_SUBSCRIBERS_PER_UID: usize = 8;
/// [`PublisherOptions::max_subscribers_per_pid`]'s default (the C ABI's 0).
pub const DEFAULT_MAX_SUBSCRIBERS_PER_PID: usize = 4;

impl Default for PublisherOptions {
    fn default() -> Self {
        PublisherOptions {
            runtime_dir: None,
            file_mode: 0o660,
            allowed_uid: None,
            allowed_gid: None,
            handshake_timeout: Duration::from_secs(5),
            allow_legacy_subscribers: false,
            max_subscribers_per_uid: DEFAULT_MAX_SUBSCRIBERS_PER_UID,
            max_subscribers_per_pid: DEFAULT_MAX_SUBSCRIBERS_PER_PID,
        }
    }
}

/// One subscriber as the publisher sees it (operator statistics, issue: stats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriberInfo {
    pub bit: usize,
    pub pid: u32,
    pub name: String,
    pub wants_frames: bool,
    pub wants_packets: bool,
    /// Publisher seq minus the subscriber's last ACK (frames).
    pub lag: u64,
    pub last_seen_seq: u64,
    /// CLOCK_REALTIME of the last ACK, 0 = none yet.
    pub last_ack_ns: i64,
    /// Counters the subscriber keeps in its slot (extension, docs/protocol.md).
    pub delivered: u64,
    pub dropped_overrun: u64,
    pub dropped_torn: u64,
}

/// The slot that is out and the ring it belongs to ([`Inner::held`]).
pub(crate) struct Held {
    ring: Arc<FrameWriter>,
    seq: u64,
    address: u64,
}

impl Held {
    fn is(&self, slot: &AcquiredSlot) -> bool {
        self.seq == slot.seq && self.address == slot.address
    }
}

/// Keys that have a publisher in this process (R6), each with the process that created it: a
/// child forked from a publishing process inherits the record, and the parent's entries are
/// not this process's (a create of the same key then meets the parent's live socket).
static KEYS_IN_PROCESS: Mutex<Option<HashMap<String, Origin>>> = Mutex::new(None);
/// Signalled when a key leaves `KEYS_IN_PROCESS` (a publisher's end).
static KEY_RELEASED: std::sync::Condvar = std::sync::Condvar::new();

pub(crate) struct Inner {
    pub key: Key,
    pub options: PublisherOptions,
    pub socket_path: PathBuf,
    /// The current frame ring. Replaced whole by [`Publisher::replace_frames`] (a new ring
    /// generation); users hold an `Arc` of the generation they work on.
    pub frames: RwLock<Option<Arc<FrameWriter>>>,
    /// Bumped with every new frame ring: connections remember the generation they were told
    /// about, so a handshake that straddles a replacement is restarted.
    pub generation: AtomicU64,
    /// The slot that is out ([`Publisher::acquire`] until its publish or abandon) and its
    /// ring: it keeps that ring's slots mapped even if a replacement takes the ring away
    /// meanwhile, so the caller's writes into the slot never hit unmapped memory. Seqs
    /// start at 1 in every generation, so the slot is known by its seq *and* address (two
    /// mapped slots never share an address).
    pub held: Mutex<Option<Held>>,
    /// The packet ring, once `enable_packets` was called.
    pub packets: Mutex<Option<PacketRingWriter>>,
    pub table: Mutex<subscribers::Table>,
    pub stopping: AtomicBool,
    /// Written to wake the server thread (a kick, a new ring, shutdown).
    pub wake_tx: OwnedFd,
    /// The server thread polls this. Its owner is `Inner`, not the thread: the pipe has a
    /// reader for as long as anybody can call [`Inner::wake_server`], so a wake after the
    /// thread has ended never meets a closed pipe (EPIPE, and SIGPIPE, which kills a host
    /// that keeps the default disposition).
    pub wake_rx: OwnedFd,
    /// The process that created the publisher: in a child forked from it, the publisher is
    /// a copy that must leave the parent's socket, rings and thread alone (`Publisher::drop`).
    pub origin: Origin,
}

impl Inner {
    /// Wake the server thread. Never blocks (the pipe is non-blocking: when it is full a wake
    /// is pending anyway) and never raises SIGPIPE (`wake_rx` lives as long as `self`).
    pub fn wake_server(&self) {
        let _ = nix::unistd::write(self.wake_tx.as_fd(), &[1u8]);
    }

    pub fn packets(&self) -> std::sync::MutexGuard<'_, Option<PacketRingWriter>> {
        self.packets.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn table(&self) -> std::sync::MutexGuard<'_, subscribers::Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current frame ring and its generation, read together (a replacement swaps the
    /// ring and bumps the generation under the write lock).
    pub fn ring_and_generation(&self) -> (Option<Arc<FrameWriter>>, u64) {
        let frames = self.frames.read().unwrap_or_else(|p| p.into_inner());
        (frames.clone(), self.generation.load(Ordering::SeqCst))
    }

    /// The current frame ring, if any.
    pub fn ring(&self) -> Option<Arc<FrameWriter>> {
        self.frames
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl AckAuthority for Inner {
    fn required_acks(&self, seq: u64) -> RequiredAcks {
        self.table().required_acks(seq)
    }

    fn declare_dead(&self, required: &RequiredAcks, missing: u64) -> u64 {
        // The caller holds its ring's writer state: no `frames` lock here (lock hierarchy).
        let kicked = self.table().kick(required, missing);
        if kicked != 0 {
            self.wake_server();
        }
        kicked
    }

    fn returns_awaited(&self) -> bool {
        self.table().awaiting_returns()
    }
}

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
        {
            let mut keys = KEYS_IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
            let map = keys.get_or_insert_with(HashMap::new);
            if map.get(key.as_str()).is_some_and(|o| o.is_here()) {
                return Err(Error::new(
                    ErrorCode::AlreadyExists,
                    format!(
                        "this process already publishes key {key:?}; share that publisher (R6)"
                    ),
                ));
            }
            map.insert(key.as_str().to_owned(), Origin::here());
        }
        match Publisher::create_unregistered(key.clone(), options) {
            Ok(p) => Ok(p),
            Err(e) => {
                forget_key(&key);
                Err(e)
            }
        }
    }

    fn create_unregistered(key: Key, options: PublisherOptions) -> Result<Publisher> {
        let dir = paths::runtime_dir(options.runtime_dir.as_deref());
        ensure_runtime_dir(&dir)?;
        let socket_path = paths::socket_path(&dir, &key)?;
        stale::recover(&key, &socket_path)?;
        let listener = bind_socket(&socket_path, options.file_mode)?;
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

    pub fn key(&self) -> &str {
        self.inner.key.as_str()
    }

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

    /// A new generation of the frame ring (issue #14: a camera switching 1080p to 720p): the
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
    pub fn frame_layout(&self) -> Option<crate::format::FrameLayout> {
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
    pub fn slot_layout(&self, slot: &AcquiredSlot) -> Result<crate::format::FrameLayout> {
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
        layout: &crate::format::FrameLayout,
        planes: &[&[u8]],
        strides: &[usize],
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        self.publish_host_planes_in(Some(layout), planes, strides, pts_ns)
    }

    fn publish_host_planes_in(
        &self,
        expected: Option<&crate::format::FrameLayout>,
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
        let slot = ring.acquire(&*self.inner)?;
        if let Err(e) = ring.write_host_planes(&slot, planes, strides) {
            ring.abandon(slot);
            return Err(e);
        }
        ring.publish(slot, pts_ns)
    }

    /// CUDA: publish a slot written by GPU work on `stream` (raw `CUstream`, null = legacy
    /// default stream): the stream is synchronised first, so no frame is visible before its
    /// data is complete (§5).
    ///
    /// # Safety
    /// `stream` is null or a live `CUstream` of the context current on this thread (a
    /// context of the ring's device).
    pub unsafe fn publish_after_stream(
        &self,
        slot: AcquiredSlot,
        stream: *mut std::ffi::c_void,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let ring = self.ring_of(&slot)?;
        // SAFETY: our contract is sync_stream's.
        if let Err(e) = unsafe { ring.sync_stream(stream) } {
            ring.abandon(slot);
            return Err(e);
        }
        ring.publish(slot, pts_ns)
    }

    /// CUDA: publish a slot written by GPU work on `stream` without waiting for that work:
    /// the frame becomes visible when the work queued so far on the stream has completed (a
    /// host function queued behind it makes it visible, §5), and this returns at once. The
    /// next acquire of the same slot, a synchronous publish and the ring's teardown wait for
    /// it. On error the slot is abandoned.
    ///
    /// # Safety
    /// `stream` is a live `CUstream` of the context current on this thread, or null /
    /// `CU_STREAM_LEGACY` with a context of the ring's device current.
    pub unsafe fn publish_on_stream(
        &self,
        slot: AcquiredSlot,
        stream: *mut std::ffi::c_void,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let ring = self.ring_of(&slot)?;
        let seq = slot.seq;
        // SAFETY: our contract is publish_on_stream's.
        match unsafe { ring.publish_on_stream(slot, stream, pts_ns) } {
            Ok(seq) => Ok(seq),
            Err(e) => {
                ring.abandon_seq(seq);
                Err(e)
            }
        }
    }

    /// CUDA: `publish_device_planes` without waiting: the copy and then the publication are
    /// queued on `stream` (null: the ring's own stream, ordered after nothing of the
    /// caller's), and this returns at once.
    ///
    /// # Safety
    /// `stream` is null or a live `CUstream` of the context current on this thread; each
    /// `planes[i]` is device memory of the ring's device, holding plane i's rows at
    /// `pitches[i]` unchanged until the stream has run the copy (work queued later on the
    /// same stream may reuse it, as FFmpeg's frame pools do).
    pub unsafe fn publish_device_planes_async(
        &self,
        planes: &[u64],
        pitches: &[usize],
        stream: *mut std::ffi::c_void,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let ring = self.ring()?;
        let slot = ring.acquire(&*self.inner)?;
        let seq = slot.seq;
        // SAFETY: our contract is queue_device_copy's (the source stays valid until the
        // stream has run the copy).
        let queued =
            unsafe { ring.queue_device_copy(&slot, planes, pitches, stream) }.and_then(|used| {
                // The publication goes behind the copy, on the stream the copy runs on; the
                // ring's own stream needs the ring's context current for cuLaunchHostFunc.
                let _current = match &used {
                    crate::frame_ring::writer::StreamRef::Own(_) => Some(ring.push_ring_context()?),
                    crate::frame_ring::writer::StreamRef::Caller(_) => None,
                };
                // SAFETY: `used` is the caller's live stream (its context current) or our own
                // stream with our context pushed.
                unsafe { ring.publish_on_stream(slot, used.get().raw(), pts_ns) }
            });
        queued.inspect_err(|_| ring.abandon_seq(seq))
    }

    /// CUDA: copy a frame from other device memory (ordered after the caller's work on
    /// `stream`) and publish it.
    ///
    /// # Safety
    /// `stream` is null or a live `CUstream` of the context current on this thread; each
    /// `planes[i]` is device memory of the ring's device, readable for plane i's rows at
    /// `pitches[i]` until this returns.
    pub unsafe fn publish_device_planes(
        &self,
        planes: &[u64],
        pitches: &[usize],
        stream: *mut std::ffi::c_void,
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let ring = self.ring()?;
        let slot = ring.acquire(&*self.inner)?;
        // SAFETY: our contract is write_device_planes'.
        if let Err(e) = unsafe { ring.write_device_planes(&slot, planes, pitches, stream) } {
            ring.abandon(slot);
            return Err(e);
        }
        ring.publish(slot, pts_ns)
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

    /// Publish one packet (§10.6 with R8/R29); returns its seq.
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
        let ring = ring.as_deref();
        let table = self.inner.table();
        table
            .iter()
            .map(|(bit, e)| {
                let (last_seen, last_ack, delivered, overrun, torn, seq) = match (ring, &e.ack_page)
                {
                    (Some(r), Some(page)) => (
                        page.last_seen_seq(),
                        page.last_ack_ns(),
                        page.counter(Counter::Delivered),
                        page.counter(Counter::DroppedOverrun),
                        page.counter(Counter::DroppedTorn),
                        r.published_seq(),
                    ),
                    (Some(r), None) => (
                        r.shm.sub_last_seen(bit).load(Ordering::Acquire),
                        r.shm.sub_last_ack_ns(bit).load(Ordering::Acquire) as i64,
                        r.shm
                            .sub_counter(bit, SUB_DELIVERED_OFFSET)
                            .load(Ordering::Relaxed),
                        r.shm
                            .sub_counter(bit, SUB_DROPPED_OVERRUN_OFFSET)
                            .load(Ordering::Relaxed),
                        r.shm
                            .sub_counter(bit, SUB_DROPPED_TORN_OFFSET)
                            .load(Ordering::Relaxed),
                        r.published_seq(),
                    ),
                    (None, _) => (0, 0, 0, 0, 0, 0),
                };
                SubscriberInfo {
                    bit,
                    pid: e.pid,
                    name: e.name.clone(),
                    wants_frames: e.wants_frames,
                    wants_packets: e.wants_packets,
                    lag: if e.wants_frames {
                        seq.saturating_sub(last_seen.max(e.initial_seq))
                    } else {
                        0
                    },
                    last_seen_seq: last_seen,
                    last_ack_ns: last_ack,
                    delivered,
                    dropped_overrun: overrun,
                    dropped_torn: torn,
                }
            })
            .collect()
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
        forget_key(&self.inner.key);
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
        // R6's record is a copy of the parent's: this process does not publish the key.
        let mut keys = match KEYS_IN_PROCESS.try_lock() {
            Ok(keys) => Some(keys),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        if let Some(map) = keys.as_mut().and_then(|k| k.as_mut()) {
            map.remove(self.inner.key.as_str());
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// This process's record of `key` goes (not an entry a fork inherited: that is the parent's).
fn forget_key(key: &Key) {
    let mut keys = KEYS_IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(map) = keys.as_mut() {
        if map.get(key.as_str()).is_some_and(|o| o.is_here()) {
            map.remove(key.as_str());
        }
    }
    KEY_RELEASED.notify_all();
}

/// Wait, at most `timeout`, until this process has no publisher of `key` (one whose last
/// handle is being dropped on another thread is ending: its end removes the socket and
/// rings, which takes a moment). True when the key is free here.
pub fn wait_until_released(key: &str, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    let mut keys = KEYS_IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let held = keys
            .as_ref()
            .and_then(|m| m.get(key))
            .is_some_and(|o| o.is_here());
        let now = std::time::Instant::now();
        if !held {
            return true;
        }
        if now >= deadline {
            return false;
        }
        keys = KEY_RELEASED
            .wait_timeout(keys, deadline - now)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// Create the runtime directory 0755 if missing (R16).
fn ensure_runtime_dir(dir: &std::path::Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::PermissionDenied {
                ErrorCode::Permission
            } else {
                ErrorCode::Io
            };
            Error::new(
                code,
                format!(
                    "cannot create runtime directory {}: {e} (create it as root, or set {})",
                    dir.display(),
                    paths::RUNTIME_DIR_ENV
                ),
            )
        })
}

/// Bind the listening socket at `path` with `mode`, never changing a mode through a path that
/// someone else could have redirected. The runtime directory is writable by the group, so a
/// member could replace the socket by a symlink between `bind` and a `chmod` by path, and a
/// root publisher would then chmod the symlink's target. Instead the socket gets its mode
/// from `bind` itself: Linux creates the socket file with the socket's own inode mode (set
/// with `fchmod` before `bind`) masked by the umask. The umask belongs to the whole process,
/// and other threads (an application's) may be creating files, so the `bind` with umask 0
/// runs in a forked child that only calls `umask`, `bind`, `write` and `_exit` (all
/// async-signal-safe) on the same socket. The path is bound directly, so `/proc/net/unix`
/// names it.
///
/// The child reports bind's result through a close-on-exec pipe, not through its exit status:
/// the host's signal dispositions then do not matter. With SIGCHLD ignored the kernel reaps
/// the child itself and `waitpid` fails with ECHILD; a host's SIGCHLD handler may reap it
/// first. The `waitpid` here only keeps a zombie from staying where nobody else reaps.
fn bind_socket(path: &std::path::Path, mode: u32) -> Result<UnixListener> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType, SockaddrLike, UnixAddr};
    use std::os::fd::AsRawFd;
    let io = |what: &str, e: nix::errno::Errno| {
        Error::new(ErrorCode::Io, format!("{what} {}: {e}", path.display()))
    };
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| io("socket for", e))?;
    nix::sys::stat::fchmod(&fd, nix::sys::stat::Mode::from_bits_truncate(mode & 0o777))
        .map_err(|e| io("fchmod the socket for", e))?;
    let addr = UnixAddr::new(path).map_err(|e| io("address", e))?;
    let (report_rx, report_tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| io("pipe for the bind of", e))?;
    let report_fd = report_tx.as_raw_fd();
    // SAFETY: the child only calls async-signal-safe functions (umask, bind, write, _exit) on
    // memory and descriptors that were set up before the fork (`addr`, `fd`, `report_fd`) and
    // exits without returning into Rust code, as required after fork in a multithreaded
    // process.
    let child = unsafe { libc::fork() };
    let fork_error = nix::errno::Errno::last();
    if child == 0 {
        // SAFETY: in the child; see above. The parent holds the read end open until it has
        // read the report, so the write cannot raise SIGPIPE.
        unsafe {
            libc::umask(0);
            let rc = libc::bind(fd.as_raw_fd(), addr.as_ptr().cast(), addr.len());
            let err: i32 = if rc == 0 {
                0
            } else {
                *libc::__errno_location()
            };
            let report = err.to_ne_bytes();
            libc::write(report_fd, report.as_ptr().cast(), report.len());
            libc::_exit(0);
        }
    }
    // Only the child holds the write end now: a child that ends without reporting ends the
    // read with EOF.
    drop(report_tx);
    if child < 0 {
        return Err(io("fork to bind", fork_error));
    }
    let mut report = [0u8; 4];
    let mut got = 0;
    let read = loop {
        if got == report.len() {
            break Ok(());
        }
        match nix::unistd::read(&report_rx, &mut report[got..]) {
            Ok(0) => break Ok(()),
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => break Err(e),
        }
    };
    // ECHILD: already reaped (SIGCHLD ignored, or the host's handler); nothing is lost.
    while let Err(nix::errno::Errno::EINTR) =
        nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None)
    {}
    read.map_err(|e| io("read the bind result of", e))?;
    if got < report.len() {
        // The child ended (killed?) before reporting: the socket is ours exactly when it is
        // bound, which the socket itself tells.
        let bound = nix::sys::socket::getsockname::<UnixAddr>(fd.as_raw_fd())
            .is_ok_and(|a| a.path().is_some_and(|p| !p.as_os_str().is_empty()));
        if !bound {
            return Err(Error::new(
                ErrorCode::Io,
                format!(
                    "bind {}: the binding child ended without reporting a result",
                    path.display()
                ),
            ));
        }
    } else {
        match i32::from_ne_bytes(report) {
            0 => {}
            libc::EADDRINUSE => {
                return Err(Error::new(
                    ErrorCode::AlreadyExists,
                    format!("{} is taken by another publisher", path.display()),
                ))
            }
            code => return Err(io("bind", nix::errno::Errno::from_raw(code))),
        }
    }
    let cleanup = |e: Error| {
        let _ = std::fs::remove_file(path);
        e
    };
    nix::sys::socket::listen(
        &fd,
        nix::sys::socket::Backlog::new(128).unwrap_or(nix::sys::socket::Backlog::MAXCONN),
    )
    .map_err(|e| cleanup(io("listen on", e)))?;
    Ok(UnixListener::from(fd))
}
