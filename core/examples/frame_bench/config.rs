//! One run's settings: the frame, the subscribers, the pacing, the ring's policy and memory,
//! and how frames are published.

use std::time::Duration;

use cuframes_core::wire::Policy;

/// 60 fps pacing.
pub const PERIOD_60FPS: Duration = Duration::from_micros(16_667);
/// 1 kHz pacing.
pub const PERIOD_1KHZ: Duration = Duration::from_micros(1_000);

/// Where subscribers ACK: their own ACK page (default) or the shared header (plain v4).
#[derive(Clone, Copy, PartialEq)]
pub enum Acks {
    Pages,
    Header,
}

/// How the publisher makes a frame visible.
#[derive(Clone, Copy, PartialEq)]
pub enum Publish {
    /// `publish_after_stream`: the publishing thread waits for the copy.
    AfterStream,
    /// `publish_on_stream`: a host function behind the copy publishes.
    OnStream,
    /// No GPU work per frame (the slot is not rewritten) and a plain `publish`: what the
    /// ring's handoff costs without the publisher's CUDA calls just before it.
    Plain,
}

/// One benchmark run.
#[derive(Clone, Copy)]
pub struct Config {
    pub w: u32,
    pub h: u32,
    pub subs: usize,
    pub frames: u64,
    pub pace: Option<Duration>,
    pub acks: Acks,
    pub policy: Policy,
    pub publish: Publish,
    pub spin: Duration,
    /// Subscribers in COPY mode (each copies every frame on the GPU in its own context).
    pub copy: bool,
    /// Slots in host memory instead of CUDA VMM (implies `Publish::Plain`).
    pub host: bool,
    /// The subscriber is the probe (`probe::child`: spins on the header itself, then reads).
    pub probe: bool,
    /// The publisher waits for each frame's due time spinning instead of sleeping: its core
    /// never idles between frames.
    pub publisher_spins: bool,
}

impl Config {
    pub fn new(w: u32, h: u32, subs: usize, frames: u64, pace: Option<Duration>) -> Config {
        Config {
            w,
            h,
            subs,
            frames,
            pace,
            acks: Acks::Pages,
            policy: Policy::StrictWait,
            publish: Publish::AfterStream,
            spin: Duration::ZERO,
            copy: false,
            host: false,
            probe: false,
            publisher_spins: false,
        }
    }
}
