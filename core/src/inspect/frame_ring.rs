//! A snapshot of a frame ring (§2) read through a read-only mapping. Size, magic and version
//! are the subscribers' own checks (`FrameShm::new`, `FrameShm::check_identity`); every
//! other value is checked here (a subscriber compares them with its handshake instead). A
//! corrupt object gives an error that says what is wrong, never a panic.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use core::mem::offset_of;

use super::objects::open_readonly;
use crate::error::{Error, Result};
use crate::frame_ring::shm_region::{
    FrameShm, FRAME_MEMORY_KIND_OFFSET, SUB_DELIVERED_OFFSET, SUB_DROPPED_OVERRUN_OFFSET,
    SUB_DROPPED_TORN_OFFSET,
};
use crate::liveness::is_alive;
use crate::wire::frame::{FrameMeta, SharedHeader, FRAME_SHM_SIZE};
use crate::wire::{
    Format, MemoryKind, Policy, SubscriberState, MAX_RING_SIZE, MAX_SUBSCRIBERS,
    MAX_SUBSCRIBER_SLOTS,
};

/// One subscriber slot in use (§2.3 plus the counters of docs/protocol.md).
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriberSnapshot {
    /// The subscriber bit, 1..=31 (R2).
    pub bit: usize,
    /// The slot's state.
    pub state: SubscriberState,
    /// The subscriber's pid, as it recorded it.
    pub pid: u64,
    /// Whether `pid` is alive in our PID namespace.
    pub pid_alive: bool,
    /// The subscriber's name (`consumer_name`).
    pub name: String,
    /// Its bit is in `subscriber_bitmap`: it reads frames (a packets-only subscriber, or
    /// one the publisher declared dead, has a slot but no bit).
    pub reads_frames: bool,
    /// The seq of the last frame it ACKed.
    pub last_seen_seq: u64,
    /// CLOCK_REALTIME ns of the last ACK; 0 = none yet.
    pub last_ack_ns: i64,
    /// `global_seq - last_seen_seq`: frames published that it has not ACKed.
    pub lag: u64,
    /// Time since its last ACK, when it has ACKed.
    pub ack_age: Option<Duration>,
    /// Frames delivered to it.
    pub delivered: u64,
    /// Frames it lost to lapping (DROP_OLDEST).
    pub dropped_overrun: u64,
    /// Frames it dropped because they were rewritten while it copied them.
    pub dropped_torn: u64,
}

impl SubscriberSnapshot {
    /// Frames lost, whatever the reason.
    pub fn drops(&self) -> u64 {
        self.dropped_overrun.saturating_add(self.dropped_torn)
    }

    /// The state's name (see [`state_name`]).
    pub fn state_name(&self) -> &'static str {
        state_name(self.state)
    }
}

/// The name of a subscriber state, as the tool prints it.
pub fn state_name(s: SubscriberState) -> &'static str {
    match s {
        SubscriberState::Free => "free",
        SubscriberState::Connecting => "connecting",
        SubscriberState::Active => "active",
        SubscriberState::Draining => "draining",
    }
}

/// What a frame SHM object says, at one instant.
#[derive(Debug, Clone)]
pub struct FrameSnapshot {
    /// The object's name relative to /dev/shm.
    pub shm_name: String,
    /// Size of the object in bytes (7424, R1).
    pub size: usize,
    /// The publisher library's version (major, minor, patch).
    pub lib_version: (u32, u32, u32),
    /// The publisher's pid, as it recorded it.
    pub producer_pid: u64,
    /// Slots in the ring.
    pub ring_size: usize,
    /// DROP_OLDEST or STRICT_WAIT.
    pub policy: Policy,
    /// The frames' pixel format.
    pub format: Format,
    /// Frame width in pixels.
    pub width: u32,
    /// Frame height in pixels.
    pub height: u32,
    /// Bytes per row of the luma plane.
    pub pitch_y: u32,
    /// Bytes per row of the chroma plane(s).
    pub pitch_uv: u32,
    /// Bytes of one frame (all planes).
    pub frame_size_bytes: u64,
    /// The ring's memory (extension at 0x00DC); `None` = not recorded.
    pub memory_kind: Option<MemoryKind>,
    /// The seq of the newest published frame.
    pub global_seq: u64,
    /// The subscriber bits in use.
    pub subscriber_bitmap: u64,
    /// Whether the publisher has set the shutdown flag.
    pub shutdown: bool,
    /// R28: subscribers asleep on the futex right now.
    pub waiters: u32,
    /// The subscriber slots in use.
    pub subscribers: Vec<SubscriberSnapshot>,
    /// Oddities that do not stop the snapshot (a stale bit, an unknown state value).
    pub warnings: Vec<String>,
    /// When the snapshot was taken (for rates between two).
    pub taken: Instant,
}

fn corrupt(name: &str, what: impl std::fmt::Display) -> Error {
    Error::protocol(format!("/dev/shm/{name} is corrupt: {what}"))
}

/// Snapshot `/dev/shm/<name>` (a frame SHM) read-only.
pub fn read_frame_shm(name: &str) -> Result<FrameSnapshot> {
    let obj = open_readonly(name, FRAME_SHM_SIZE)?;
    // A packet ring smaller than a frame ring: say what it is rather than "too small".
    if obj.size < FRAME_SHM_SIZE
        && obj.map.len() >= 4
        && obj.map.load_u32(0, Ordering::Acquire) == crate::wire::PACKET_MAGIC
    {
        return Err(corrupt(
            name,
            "it has the packet-ring magic 0xCC7C1DCD, not the frame-ring magic",
        ));
    }
    let taken = Instant::now();
    let now_ns = crate::util::realtime_ns();
    let size = obj.size;
    // The subscribers' own checks: size (FrameShm::new), magic and version.
    let shm = FrameShm::new(obj.map).map_err(|e| corrupt(name, e.message()))?;
    shm.check_identity()
        .map_err(|e| corrupt(name, e.message()))?;
    let m = shm.mapping();
    let u32_at = |off: usize| m.load_u32(off, Ordering::Acquire);
    let u64_at = |off: usize| m.load_u64(off, Ordering::Acquire);
    let mut warnings = Vec::new();

    if size != FRAME_SHM_SIZE {
        warnings.push(format!(
            "object is {size} bytes, not {FRAME_SHM_SIZE} (the one size of a frame SHM)"
        ));
    }
    let lib_version = (
        u32_at(offset_of!(SharedHeader, lib_version_major)),
        u32_at(offset_of!(SharedHeader, lib_version_minor)),
        u32_at(offset_of!(SharedHeader, lib_version_patch)),
    );
    let ring_size = u64_at(offset_of!(SharedHeader, ring_size));
    if ring_size == 0 || ring_size > MAX_RING_SIZE as u64 {
        return Err(corrupt(
            name,
            format!("ring_size {ring_size} is not in 1..={MAX_RING_SIZE}"),
        ));
    }
    let ring_size = ring_size as usize;
    let raw_policy = u64_at(offset_of!(SharedHeader, policy));
    let policy = Policy::from_u64(raw_policy)
        .ok_or_else(|| corrupt(name, format!("unknown policy {raw_policy}")))?;
    let max_subs = u64_at(offset_of!(SharedHeader, max_subscribers));
    if max_subs != MAX_SUBSCRIBER_SLOTS as u64 {
        warnings.push(format!(
            "max_subscribers is {max_subs}, not {MAX_SUBSCRIBER_SLOTS}"
        ));
    }
    let meta_off = offset_of!(SharedHeader, meta);
    let f = |field: usize| u32_at(meta_off + field);
    let raw_format = f(offset_of!(FrameMeta, format));
    let format = Format::from_u32(raw_format)
        .ok_or_else(|| corrupt(name, format!("unknown frame format {raw_format}")))?;
    let (width, height) = (
        f(offset_of!(FrameMeta, width)),
        f(offset_of!(FrameMeta, height)),
    );
    if format != Format::None && (width == 0 || height == 0) {
        return Err(corrupt(
            name,
            format!("frame size {width}x{height} has a zero dimension"),
        ));
    }
    let pitch_y = f(offset_of!(FrameMeta, pitch_y));
    let pitch_uv = f(offset_of!(FrameMeta, pitch_uv));
    let frame_size_bytes = u64_at(meta_off + offset_of!(FrameMeta, frame_size_bytes));
    let raw_kind = u32_at(FRAME_MEMORY_KIND_OFFSET);
    let memory_kind = match raw_kind {
        0 => None,
        v => {
            let k = MemoryKind::from_u32(v - 1);
            if k.is_none() {
                warnings.push(format!("unknown memory kind value {v} at 0x00DC"));
            }
            k
        }
    };
    let global_seq = shm.global_seq().load(Ordering::Acquire);
    let bitmap = shm.subscriber_bitmap().load(Ordering::Acquire);
    if bitmap & !(((1u64 << (MAX_SUBSCRIBERS + 1)) - 1) & !1) != 0 {
        warnings.push(format!(
            "subscriber_bitmap 0x{bitmap:016X} has bits outside 1..=31"
        ));
    }
    let shutdown = match shm.shutdown_flag().load(Ordering::Acquire) {
        0 => false,
        1 => true,
        v => {
            warnings.push(format!("shutdown_flag is {v}, not 0 or 1"));
            true
        }
    };
    let waiters = shm.waiters().load(Ordering::Relaxed);

    if shm.sub_state(0).load(Ordering::Acquire) != 0 {
        warnings.push("subscriber slot 0 (reserved, never assigned) is in use".into());
    }
    let mut subscribers = Vec::new();
    for bit in 1..=MAX_SUBSCRIBERS {
        let raw_state = shm.sub_state(bit).load(Ordering::Acquire);
        let in_bitmap = bitmap & (1u64 << bit) != 0;
        let Some(state) = SubscriberState::from_u64(raw_state) else {
            warnings.push(format!(
                "subscriber slot {bit} has unknown state {raw_state}"
            ));
            continue;
        };
        if state == SubscriberState::Free {
            if in_bitmap {
                warnings.push(format!(
                    "bit {bit} is set in subscriber_bitmap but its slot is free"
                ));
            }
            continue;
        }
        let pid = shm.sub_pid(bit).load(Ordering::Relaxed);
        let last_seen_seq = shm.sub_last_seen(bit).load(Ordering::Acquire);
        let last_ack_ns = shm.sub_last_ack_ns(bit).load(Ordering::Acquire) as i64;
        if last_seen_seq > global_seq {
            warnings.push(format!(
                "subscriber {bit} ACKed seq {last_seen_seq}, beyond global_seq {global_seq}"
            ));
        }
        let ack_age = (last_ack_ns > 0)
            .then(|| Duration::from_nanos(now_ns.saturating_sub(last_ack_ns).max(0) as u64));
        subscribers.push(SubscriberSnapshot {
            bit,
            state,
            pid,
            pid_alive: is_alive(pid),
            name: shm.sub_name(bit),
            reads_frames: in_bitmap,
            last_seen_seq,
            last_ack_ns,
            lag: global_seq.saturating_sub(last_seen_seq),
            ack_age,
            delivered: shm
                .sub_counter(bit, SUB_DELIVERED_OFFSET)
                .load(Ordering::Relaxed),
            dropped_overrun: shm
                .sub_counter(bit, SUB_DROPPED_OVERRUN_OFFSET)
                .load(Ordering::Relaxed),
            dropped_torn: shm
                .sub_counter(bit, SUB_DROPPED_TORN_OFFSET)
                .load(Ordering::Relaxed),
        });
    }
    Ok(FrameSnapshot {
        shm_name: name.to_owned(),
        size,
        lib_version,
        producer_pid: shm.producer_pid(),
        ring_size,
        policy,
        format,
        width,
        height,
        pitch_y,
        pitch_uv,
        frame_size_bytes,
        memory_kind,
        global_seq,
        subscriber_bitmap: bitmap,
        shutdown,
        waiters,
        subscribers,
        warnings,
        taken,
    })
}
