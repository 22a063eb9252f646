//! What a frame ring carries ([`FrameRingConfig`], [`MemoryChoice`]) and the slot the writer
//! hands out for writing ([`AcquiredSlot`]).

use std::time::Duration;

use crate::error::{Error, Result};
use crate::format::FrameLayout;
use crate::wire::{Format, MemoryKind, Policy, MAX_RING_SIZE};

/// Where the publisher allocates its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryChoice {
    /// Host memfds (R14): CPU-only machines and tests.
    Host,
    /// CUDA VMM on this device ordinal.
    Cuda { device: i32 },
}

/// What a publisher's frame ring carries.
#[derive(Debug, Clone)]
pub struct FrameRingConfig {
    pub format: Format,
    pub width: u32,
    pub height: u32,
    /// 1..=16 slots.
    pub ring_size: usize,
    pub policy: Policy,
    /// STRICT_WAIT: how long a publish waits for a subscriber's ACK before declaring it dead.
    /// Both policies: how long a ring replacement (STRICT_WAIT) and the publisher's end wait
    /// for the subscribers a replacement sent away to subscribe again.
    pub ack_timeout: Duration,
    pub memory: MemoryChoice,
    /// The stream's colour description and sample aspect ratio, announced to subscribers
    /// (frame meta extension, `wire::meta_ext`); None = not recorded.
    pub colour: Option<crate::colour::ColourInfo>,
}

impl FrameRingConfig {
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

    pub fn validate(&self) -> Result<FrameLayout> {
        if self.ring_size == 0 || self.ring_size > MAX_RING_SIZE {
            return Err(Error::invalid(format!(
                "ring_size {} is not in 1..={MAX_RING_SIZE}",
                self.ring_size
            )));
        }
        if self.ack_timeout.is_zero() {
            return Err(Error::invalid("consumer_ack_timeout must be positive"));
        }
        FrameLayout::new(self.format, self.width, self.height)
    }
}

/// A slot the caller is writing; give it back with `publish`.
#[derive(Debug)]
pub struct AcquiredSlot {
    pub index: usize,
    pub seq: u64,
    /// Host pointer or CUDA device pointer of plane 0.
    pub address: u64,
    pub memory_kind: MemoryKind,
}
