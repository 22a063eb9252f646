//! What the publisher's threads share ([`Inner`]): the key, the current frame ring and its
//! generation, the slot that is out ([`Held`]), the packet ring, the subscriber table and the
//! server's wake-up pipe; and the subscriber table's answers to the writer's STRICT_WAIT
//! questions ([`AckAuthority`]).

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::options::PublisherOptions;
use super::subscribers;
use crate::frame_ring::writer::AckAuthority;
use crate::frame_ring::{AcquiredSlot, FrameWriter, RequiredAcks};
use crate::packet_ring::PacketRingWriter;
use crate::paths::Key;
use crate::util::Origin;

/// The slot that is out and the ring it belongs to ([`Inner::held`]).
pub(crate) struct Held {
    pub ring: Arc<FrameWriter>,
    pub seq: u64,
    pub address: u64,
}

impl Held {
    pub fn is(&self, slot: &AcquiredSlot) -> bool {
        self.seq == slot.seq && self.address == slot.address
    }
}

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

    pub fn held(&self) -> std::sync::MutexGuard<'_, Option<Held>> {
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
