//! The publisher: owns a key's socket and rings, admits subscribers on a background thread,
//! and publishes frames (and, with `enable_packets`, packets).

#[cfg(test)]
mod ack_model;
mod server;
mod stale;
pub mod subscribers;

pub use crate::frames::{AcquiredSlot, FrameRingConfig, MemoryChoice};

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, ErrorCode, Result};
use crate::frames::ack_page::Counter;
use crate::frames::layout::{
    SUB_DELIVERED_OFFSET, SUB_DROPPED_OVERRUN_OFFSET, SUB_DROPPED_TORN_OFFSET,
};
use crate::frames::writer::AckAuthority;
use crate::frames::{FrameWriter, RequiredAcks};
use crate::packet::{PacketRingConfig, PacketRingWriter, PacketWriterStats};
use crate::paths::{self, Key};
use crate::shm;

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
}

impl Default for PublisherOptions {
    fn default() -> Self {
        PublisherOptions {
            runtime_dir: None,
            file_mode: 0o660,
            allowed_uid: None,
            allowed_gid: None,
            handshake_timeout: Duration::from_secs(5),
            allow_legacy_subscribers: false,
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

/// Keys that have a publisher in this process (R6).
static KEYS_IN_PROCESS: Mutex<Option<HashSet<String>>> = Mutex::new(None);

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
    /// The packet ring, once `enable_packets` was called.
    pub packets: Mutex<Option<PacketRingWriter>>,
    pub table: Mutex<subscribers::Table>,
    pub stopping: AtomicBool,
    /// Written to wake the server thread (a kick, a new ring, shutdown).
    pub wake_tx: OwnedFd,
}

impl Inner {
    pub fn wake_server(&self) {
        let _ = nix::unistd::write(self.wake_tx.as_fd(), &[1u8]);
    }

    pub fn packets(&self) -> std::sync::MutexGuard<'_, Option<PacketRingWriter>> {
        self.packets.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn table(&self) -> std::sync::MutexGuard<'_, subscribers::Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
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

    fn declare_dead(&self, required: &RequiredAcks, missing: u64) {
        let kicked = self.table().kick(required, missing);
        if let Some(ring) = self.ring() {
            for bit in subscribers::bits(kicked) {
                ring.forget_subscriber(bit);
            }
        }
        if kicked != 0 {
            self.wake_server();
        }
    }
}

/// A publisher of one key. Dropping it shuts down cleanly (SHUTDOWN to every subscriber,
/// every socket and SHM object removed).
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
            let set = keys.get_or_insert_with(HashSet::new);
            if !set.insert(key.as_str().to_owned()) {
                return Err(Error::new(
                    ErrorCode::AlreadyExists,
                    format!(
                        "this process already publishes key {key:?}; share that publisher (R6)"
                    ),
                ));
            }
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
            packets: Mutex::new(None),
            table: Mutex::new(subscribers::Table::default()),
            stopping: AtomicBool::new(false),
            wake_tx,
        });
        let server_inner = inner.clone();
        let server = std::thread::Builder::new()
            .name(format!("cuframes-pub-{}", inner.key))
            .spawn(move || server::run(server_inner, listener, wake_rx))
            .map_err(|e| Error::new(ErrorCode::Io, format!("spawn server thread: {e}")))?;
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
        let mut frames = self.inner.frames.write().unwrap_or_else(|p| p.into_inner());
        if frames.is_some() {
            return Err(Error::new(
                ErrorCode::AlreadyExists,
                "this publisher already has a frame ring",
            ));
        }
        *frames = Some(Arc::new(self.create_ring(&config)?));
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
        FrameWriter::create(&self.inner.key, config, mode)
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
        let fresh = {
            let mut frames = self.inner.frames.write().unwrap_or_else(|p| p.into_inner());
            let Some(old) = frames.take() else {
                return Err(Error::new(
                    ErrorCode::NotFound,
                    "this publisher has no frame ring to replace",
                ));
            };
            // The old ring's readers stop at its end (its frames still queued on a stream
            // made visible first); the new ring needs the name.
            old.flush_publications();
            old.shm.shutdown_flag().store(1, Ordering::SeqCst);
            crate::futex::wake_all(old.shm.global_seq_word());
            let _ = shm::unlink(&old.shm_name);
            // The generation moves before the old subscribers are retired: a SUBSCRIBE that
            // the server admits (it checks the generation under the table lock) is either
            // in the table before the retirement, and retired with the others, or of the
            // new generation.
            self.inner.generation.fetch_add(1, Ordering::SeqCst);
            let moved = self.inner.table().retire_frame_subscribers();
            match self.create_ring(&config) {
                Ok(ring) => *frames = Some(Arc::new(ring)),
                Err(e) => {
                    drop(frames);
                    self.inner.wake_server();
                    return Err(e);
                }
            }
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

    fn ring(&self) -> Result<Arc<FrameWriter>> {
        self.inner
            .ring()
            .ok_or_else(|| Error::new(ErrorCode::NotFound, "this publisher has no frame ring"))
    }

    /// Where the current frame ring's frames waited so far: for ACKs, for publications
    /// queued on a stream, and the host functions' time; None without a ring.
    pub fn frame_wait_stats(&self) -> Option<crate::frames::wait_stats::WaitStats> {
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

    /// Take the next slot to write (waits for ACKs under STRICT_WAIT).
    pub fn acquire(&self) -> Result<AcquiredSlot> {
        let ring = self.ring()?;
        ring.acquire(&*self.inner)
    }

    /// Publish a slot whose contents are complete.
    pub fn publish(&self, slot: AcquiredSlot, pts_ns: Option<i64>) -> Result<u64> {
        self.ring()?.publish(slot, pts_ns)
    }

    /// Give back a slot without publishing it.
    pub fn abandon(&self, slot: AcquiredSlot) {
        if let Ok(ring) = self.ring() {
            ring.abandon(slot);
        }
    }

    /// Convenience for host rings: copy planes (with their strides) and publish.
    pub fn publish_host_planes(
        &self,
        planes: &[&[u8]],
        strides: &[usize],
        pts_ns: Option<i64>,
    ) -> Result<u64> {
        let ring = self.ring()?;
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
        let ring = self.ring()?;
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
        let ring = self.ring()?;
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
                    crate::frames::writer::StreamRef::Own(_) => Some(ring.push_ring_context()?),
                    crate::frames::writer::StreamRef::Caller(_) => None,
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
        let table = self.inner.table();
        let ring = self.inner.ring();
        let ring = ring.as_deref();
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
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn forget_key(key: &Key) {
    let mut keys = KEYS_IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(set) = keys.as_mut() {
        set.remove(key.as_str());
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
/// runs in a forked child that only calls `umask`, `bind` and `_exit` (all async-signal-safe)
/// on the same socket. The path is bound directly, so `/proc/net/unix` names it.
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
    // SAFETY: the child only calls async-signal-safe functions (umask, bind, _exit) on memory
    // that was set up before the fork (`addr`) and exits without returning into Rust code, as
    // required after fork in a multithreaded process.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: in the child; see above.
        unsafe {
            libc::umask(0);
            let rc = libc::bind(fd.as_raw_fd(), addr.as_ptr().cast(), addr.len());
            libc::_exit(if rc == 0 {
                0
            } else {
                *libc::__errno_location() & 0xFF
            });
        }
    }
    if child < 0 {
        return Err(io("fork to bind", nix::errno::Errno::last()));
    }
    let status = loop {
        match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other.map_err(|e| io("wait for the bind of", e))?,
        }
    };
    match status {
        nix::sys::wait::WaitStatus::Exited(_, 0) => {}
        nix::sys::wait::WaitStatus::Exited(_, code) if code == libc::EADDRINUSE => {
            return Err(Error::new(
                ErrorCode::AlreadyExists,
                format!("{} is taken by another publisher", path.display()),
            ))
        }
        nix::sys::wait::WaitStatus::Exited(_, code) => {
            return Err(io("bind", nix::errno::Errno::from_raw(code)))
        }
        other => {
            return Err(Error::new(
                ErrorCode::Io,
                format!(
                    "bind {}: the binding child ended with {other:?}",
                    path.display()
                ),
            ))
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
