//! How a [`super::Batch`] reads its cameras: [`BatchOptions`] and the assembly
//! [`BatchPolicy`].

use std::time::Duration;

use crate::subscriber::SubscriberOptions;

/// Which frame of each camera goes into a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchPolicy {
    /// Each camera's newest frame at the moment the batch is made, never waiting. A camera
    /// with no new frame since the last batch contributes its newest frame again; a camera
    /// that has not delivered any frame yet (or is disconnected) is invalid.
    Latest,
    /// Wait until every connected camera has a frame newer than the one it gave the last
    /// batch, at most `timeout`; cameras still without one then are invalid in this batch.
    /// Disconnected cameras do not hold the batch up.
    All {
        /// The longest a batch waits for its slowest camera.
        timeout: Duration,
    },
    /// Frames whose timestamps lie within `window` of the newest camera's newest frame
    /// (cameras of a synchronised rig stamping frames from one clock), each newer than the
    /// one its camera gave the last batch; waits at most `timeout`, after which cameras
    /// still outside the window are invalid in this batch.
    Aligned {
        /// The largest distance of a frame's pts from the newest frame's pts.
        window: Duration,
        /// The longest a batch waits for the cameras to line up.
        timeout: Duration,
    },
}

/// How a batch connects to its cameras and assembles batches.
#[derive(Debug, Clone)]
pub struct BatchOptions {
    /// Every camera's subscriber is connected with these (mode, runtime directory, spin,
    /// `reconnect`, `cuda_device`, ...). `want_frames` is forced on and `want_packets` off.
    pub subscriber: SubscriberOptions,
    /// How long [`super::Batch::open`] waits for cameras whose publisher is not there (yet).
    /// Cameras still missing then are not an error: they are connected in the background
    /// as their publishers appear and are invalid until then.
    pub wait_publisher: Duration,
    /// How often a missing or lost camera is looked for again (each attempt runs on a thread
    /// of its own and never holds a batch up).
    pub retry_interval: Duration,
    /// Which frames go into a batch.
    pub policy: BatchPolicy,
}

impl Default for BatchOptions {
    /// Default subscriber options, no wait for missing publishers, a retry every 250 ms,
    /// [`BatchPolicy::Latest`].
    fn default() -> BatchOptions {
        BatchOptions {
            subscriber: SubscriberOptions::default(),
            wait_publisher: Duration::ZERO,
            retry_interval: Duration::from_millis(250),
            policy: BatchPolicy::Latest,
        }
    }
}
