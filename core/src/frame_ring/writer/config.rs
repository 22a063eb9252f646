//! What a frame ring carries ([`FrameRingConfig`], [`MemoryChoice`]) and the slot the writer
//! hands out for writing ([`AcquiredSlot`]).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::format::FrameGeometry;
use crate::wire::{Format, MemoryKind, Policy, MAX_RING_SIZE};

/// Where the publisher allocates its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryChoice {
    /// Host memfds (R14): CPU-only machines and tests.
    Host,
    /// CUDA VMM on this device ordinal.
    Cuda {
        /// The CUDA device ordinal.
        device: i32,
    },
}

/// What a publisher's frame ring carries.
#[derive(Debug, Clone)]
pub struct FrameRingConfig {
    /// The pixel format of every frame.
    pub format: Format,
    /// Frame width in pixels.
    pub width: u32,
    /// Frame height in pixels.
    pub height: u32,
    /// 1..=16 slots.
    pub ring_size: usize,
    /// DROP_OLDEST (the publisher never waits) or STRICT_WAIT (every subscriber sees every
    /// frame).
    pub policy: Policy,
    /// STRICT_WAIT: how long a publish waits for a subscriber's ACK before declaring it dead.
    /// Both policies: how long a ring replacement (STRICT_WAIT) and the publisher's end wait
    /// for the subscribers a replacement sent away to subscribe again.
    pub ack_timeout: Duration,
    /// Where the slots are allocated.
    pub memory: MemoryChoice,
    /// The stream's colour description and sample aspect ratio, announced to subscribers
    /// (frame meta extension, `wire::meta_ext`); None = not recorded.
    pub colour: Option<crate::colour::ColourInfo>,
}

impl FrameRingConfig {
    /// A ring of 4 host slots under DROP_OLDEST, with a 1 s ACK timeout and no colour
    /// description.
    pub fn new(format: Format, width: u32, height: u32) -> FrameRingConfig {
        FrameRingConfig {
            format,
            width,
            height,
            ring_size: 4,
            policy: Policy::DropOldest,
            ack_timeout: Duration::from_millis(1000),
            memory: MemoryChoice::Host,
            colour: None,
        }
    }

    /// Check the ring size and ACK timeout, and return the frame layout of the format and
    /// geometry.
    pub fn validate(&self) -> Result<FrameGeometry> {
        if self.ring_size == 0 || self.ring_size > MAX_RING_SIZE {
            return Err(Error::invalid(format!(
                "ring_size {} is not in 1..={MAX_RING_SIZE}",
                self.ring_size
            )));
        }
        if self.ack_timeout.is_zero() {
            return Err(Error::invalid("consumer_ack_timeout must be positive"));
        }
        FrameGeometry::new(self.format, self.width, self.height)
    }
}

/// A slot the caller is writing; give it back with `publish`.
#[derive(Debug)]
pub struct AcquiredSlot {
    /// The slot's index in the ring (the writer derives it from `seq` again; this is a copy).
    pub index: usize,
    /// The frame's seq, which the slot's publication makes visible.
    pub seq: u64,
    /// Host pointer or CUDA device pointer of plane 0.
    pub address: u64,
    /// Host memory or CUDA VMM.
    pub memory_kind: MemoryKind,
}
