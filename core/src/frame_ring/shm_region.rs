//! The frame SHM (§2) as both sides see it: typed, atomic access to every header, slot and
//! subscriber-slot field at offsets from [`crate::wire::frame`], and the checks a subscriber
//! makes of what it mapped.

use crate::error::{Error, ErrorCode, Result};
use crate::shm;
use crate::sync::Ordering;
use crate::sync::{Mapping, Shared32, Shared64};
use crate::util::{fill_cstr, read_cstr};
use crate::wire::frame::{
    slot_offset, subscriber_offset, FrameMeta, SharedHeader, FRAME_SHM_SIZE, FRAME_WAITERS_OFFSET,
};
pub use crate::wire::frame::{
    FRAME_MEMORY_KIND_OFFSET, SUB_DELIVERED_OFFSET, SUB_DROPPED_OVERRUN_OFFSET,
    SUB_DROPPED_TORN_OFFSET,
};
use crate::wire::*;
use core::mem::offset_of;
use zerocopy::{FromBytes, FromZeros};

use crate::wire::frame::{SlotDescriptor as Slot, SubscriberSlot as Sub};

/// The frame SHM object of one publisher.
///
/// The publisher and subscribers map it read-write, `inspect` read-only. Every getter works on
/// both: the field handles ([`Shared64`], [`Shared32`]) load validly from a read-only mapping
/// and panic on a write through one (the setters are for the publisher and subscribers).
pub struct FrameShm {
    map: Mapping,
}

impl FrameShm {
    /// The frame SHM in `map`, which must be at least `FRAME_SHM_SIZE` bytes (nothing is read yet).
    pub fn new(map: shm::Mapping) -> Result<FrameShm> {
        if map.len() < FRAME_SHM_SIZE {
            return Err(Error::protocol(format!(
                "frame SHM is {} bytes; protocol v4 needs {FRAME_SHM_SIZE}",
                map.len()
            )));
        }
        Ok(FrameShm {
            map: crate::sync::wrap(map),
        })
    }

    /// Loom models: a frame SHM of loom-tracked memory, zeroed (no header written), and
    /// another view of the same memory with [`FrameShm::share`].
    #[cfg(loom)]
    pub fn model() -> FrameShm {
        FrameShm {
            map: Mapping::model(FRAME_SHM_SIZE),
        }
    }

    #[cfg(loom)]
    pub fn share(&self) -> FrameShm {
        FrameShm {
            map: self.map.share(),
        }
    }

    /// The mapping underneath.
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    /// Write a fresh header (publisher, before anyone can connect).
    pub fn initialise(
        &self,
        meta: &FrameMeta,
        ring_size: usize,
        policy: Policy,
        memory: MemoryKind,
        pid: u32,
    ) {
        self.map.zero(0, FRAME_SHM_SIZE);
        let mut header = SharedHeader::new_zeroed();
        header.magic = FRAME_MAGIC;
        header.proto_version = PROTOCOL_VERSION;
        (
            header.lib_version_major,
            header.lib_version_minor,
            header.lib_version_patch,
        ) = LIB_VERSION;
        header.producer_pid = pid as u64;
        header.ring_size = ring_size as u64;
        header.ownership_mode = OWNERSHIP_LIBRARY;
        header.policy = policy as u64;
        header.max_subscribers = MAX_SUBSCRIBER_SLOTS as u64;
        header.meta = *meta;
        for slot in header.slots.iter_mut() {
            slot.seq = INVALID_SEQ;
        }
        self.map
            .write_bytes(0, zerocopy::IntoBytes::as_bytes(&header));
        self.map
            .atomic_u32(FRAME_MEMORY_KIND_OFFSET)
            .store(memory as u32 + 1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
    }

    /// Check that the mapped object is a protocol v4 frame ring (magic and version): the
    /// first checks of [`FrameShm::validate`], and all the operator tool (`inspect`) can
    /// check before it reads the rest.
    pub fn check_identity(&self) -> Result<()> {
        let magic = self.u32_at(offset_of!(SharedHeader, magic));
        if magic == LEGACY_FRAME_MAGIC {
            return Err(Error::protocol(
                "frame SHM has the v1–v3 magic 0xCC7C1DCC; upgrade the publisher",
            ));
        }
        if magic != FRAME_MAGIC {
            return Err(Error::protocol(format!(
                "frame SHM magic 0x{magic:08X} is not 0xCC7C1DCE"
            )));
        }
        let version = self.u32_at(offset_of!(SharedHeader, proto_version));
        if version != PROTOCOL_VERSION {
            return Err(Error::protocol(format!(
                "frame SHM speaks protocol {version}, not 4"
            )));
        }
        Ok(())
    }

    /// Check what a subscriber mapped against what the handshake announced.
    pub fn validate(&self, ring_size: usize, meta: &FrameMeta) -> Result<()> {
        self.check_identity()?;
        let shm_ring = self.u64_at(offset_of!(SharedHeader, ring_size));
        if shm_ring != ring_size as u64 {
            return Err(Error::protocol(format!(
                "frame SHM ring_size {shm_ring} differs from HELLO_RESP's {ring_size}"
            )));
        }
        let mut raw = [0u8; 64];
        self.map
            .read_bytes(offset_of!(SharedHeader, meta), &mut raw);
        let shm_meta =
            FrameMeta::read_from_bytes(&raw).map_err(|_| Error::protocol("frame meta"))?;
        if shm_meta.format != meta.format
            || shm_meta.width != meta.width
            || shm_meta.height != meta.height
            || shm_meta.pitch_y != meta.pitch_y
            || shm_meta.pitch_uv != meta.pitch_uv
            || shm_meta.frame_size_bytes != meta.frame_size_bytes
        {
            return Err(Error::new(
                ErrorCode::Format,
                "frame SHM meta differs from HELLO_RESP's",
            ));
        }
        Ok(())
    }

    fn u32_at(&self, offset: usize) -> u32 {
        self.map.load_u32(offset, Ordering::Acquire)
    }

    fn u64_at(&self, offset: usize) -> u64 {
        self.map.load_u64(offset, Ordering::Acquire)
    }

    /// The header's `producer_pid`.
    pub fn producer_pid(&self) -> u64 {
        self.u64_at(offset_of!(SharedHeader, producer_pid))
    }

    /// The header's policy; `None` for a value no policy has.
    pub fn policy(&self) -> Option<Policy> {
        Policy::from_u64(self.u64_at(offset_of!(SharedHeader, policy)))
    }

    /// The header's `global_seq`: the seq of the newest published frame.
    pub fn global_seq(&self) -> Shared64<'_> {
        self.map.atomic_u64(offset_of!(SharedHeader, global_seq))
    }

    /// The R13 futex word: the low 32 bits of `global_seq` (little-endian).
    pub fn global_seq_word(&self) -> Shared32<'_> {
        self.map.atomic_u32(offset_of!(SharedHeader, global_seq))
    }

    /// R28 waiter count.
    pub fn waiters(&self) -> Shared32<'_> {
        self.map.atomic_u32(FRAME_WAITERS_OFFSET)
    }

    /// The header's bitmap of the subscriber bits in use.
    pub fn subscriber_bitmap(&self) -> Shared64<'_> {
        self.map
            .atomic_u64(offset_of!(SharedHeader, subscriber_bitmap))
    }

    /// The header's `shutdown_flag` (non-zero once the publisher ends).
    pub fn shutdown_flag(&self) -> Shared64<'_> {
        self.map.atomic_u64(offset_of!(SharedHeader, shutdown_flag))
    }

    /// Slot `k`'s `seq` (`INVALID_SEQ` while it is written).
    pub fn slot_seq(&self, k: usize) -> Shared64<'_> {
        self.map.atomic_u64(slot_offset(k) + offset_of!(Slot, seq))
    }

    /// Slot `k`'s `pts_ns`.
    pub fn slot_pts(&self, k: usize) -> Shared64<'_> {
        self.map
            .atomic_u64(slot_offset(k) + offset_of!(Slot, pts_ns))
    }

    /// Slot `k`'s `ack_bitmap`.
    pub fn slot_ack(&self, k: usize) -> Shared64<'_> {
        self.map
            .atomic_u64(slot_offset(k) + offset_of!(Slot, ack_bitmap))
    }

    /// Futex word for ACK waits: the low 32 bits of `ack_bitmap` hold every usable bit (1..31).
    pub fn slot_ack_word(&self, k: usize) -> Shared32<'_> {
        self.map
            .atomic_u32(slot_offset(k) + offset_of!(Slot, ack_bitmap))
    }

    /// Slot `k`'s `written_bytes`.
    pub fn slot_written(&self, k: usize) -> Shared64<'_> {
        self.map
            .atomic_u64(slot_offset(k) + offset_of!(Slot, written_bytes))
    }

    /// Subscriber slot `i`'s `state` (`SubscriberState`).
    pub fn sub_state(&self, i: usize) -> Shared64<'_> {
        self.map
            .atomic_u64(subscriber_offset(i) + offset_of!(Sub, state))
    }

    /// Subscriber slot `i`'s `consumer_pid`.
    pub fn sub_pid(&self, i: usize) -> Shared64<'_> {
        self.map
            .atomic_u64(subscriber_offset(i) + offset_of!(Sub, consumer_pid))
    }

    /// Subscriber slot `i`'s `last_seen_seq`.
    pub fn sub_last_seen(&self, i: usize) -> Shared64<'_> {
        self.map
            .atomic_u64(subscriber_offset(i) + offset_of!(Sub, last_seen_seq))
    }

    /// Subscriber slot `i`'s `last_ack_ns`.
    pub fn sub_last_ack_ns(&self, i: usize) -> Shared64<'_> {
        self.map
            .atomic_u64(subscriber_offset(i) + offset_of!(Sub, last_ack_ns))
    }

    /// Subscriber slot `i`'s counter at offset `which` within the slot (`SUB_*_OFFSET`).
    pub fn sub_counter(&self, i: usize, which: usize) -> Shared64<'_> {
        self.map.atomic_u64(subscriber_offset(i) + which)
    }

    /// Subscriber slot `i`'s `consumer_name`.
    pub fn sub_name(&self, i: usize) -> String {
        let mut raw = [0u8; 32];
        self.map.read_bytes(
            subscriber_offset(i) + offset_of!(Sub, consumer_name),
            &mut raw,
        );
        read_cstr(&raw)
    }

    /// Publisher: claim subscriber slot `i` for a new peer (R23).
    pub fn fill_subscriber(&self, i: usize, pid: u32, name: &str, initial_seq: u64) {
        let mut raw = [0u8; 32];
        fill_cstr(&mut raw, name);
        self.map
            .zero(subscriber_offset(i) + SUB_DELIVERED_OFFSET, 64);
        self.map
            .write_bytes(subscriber_offset(i) + offset_of!(Sub, consumer_name), &raw);
        self.sub_pid(i).store(pid as u64, Ordering::Relaxed);
        self.sub_last_seen(i).store(initial_seq, Ordering::Relaxed);
        self.sub_last_ack_ns(i).store(0, Ordering::Relaxed);
        self.sub_state(i)
            .store(SubscriberState::Active as u64, Ordering::Release);
    }

    /// Publisher, admitting a new owner of bit `i`: clear the bit from every slot's ACK bitmap.
    /// A previous owner's ACK that was in flight when it was given up on (it checked the slot's
    /// seq, then the slot was reused) may have landed in a later frame's bitmap; left there, it
    /// would count as the new owner's ACK of a frame it never read.
    pub fn clear_ack_bit(&self, i: usize) {
        for k in 0..MAX_RING_SIZE {
            self.slot_ack(k).fetch_and(!(1u64 << i), Ordering::AcqRel);
        }
    }

    /// Publisher: free subscriber slot `i`.
    pub fn clear_subscriber(&self, i: usize) {
        self.subscriber_bitmap()
            .fetch_and(!(1u64 << i), Ordering::AcqRel);
        self.sub_state(i)
            .store(SubscriberState::Free as u64, Ordering::Release);
        self.sub_pid(i).store(0, Ordering::Relaxed);
    }
}
