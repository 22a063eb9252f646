//! The subscriber: connects to a publisher, imports its slots once, and reads frames (and,
//! with packets enabled, packets) without copies where the mode allows.
//!
//! One file per concept: [`SubscriberOptions`] (`options`), the [`Subscriber`]'s state and
//! accessors (`state`), connecting (`connect`, `handshake`), following a new ring or a
//! restarted publisher (`reopen`, `continuity`), reading (`next_frame`, `next_packet`), the
//! socket and the end of the stream (`connection`, `end`, and `linger`: a reader's teardown after
//! the publisher's; `warm_up`: CUDA made ready while waiting for one); the frames handed out
//! (`frame_handle`, read from the ring by `frame_source`, released behind a CUDA stream by
//! `stream_release` and the release thread in `deferred`).

mod connect;
mod connection;
mod continuity;
pub(crate) mod deferred;
mod end;
mod frame_handle;
mod frame_source;
mod handshake;
mod linger;
mod next_frame;
mod next_packet;
mod options;
mod reopen;
mod state;
mod stream_release;
#[cfg(test)]
mod tests;
mod warm_up;

pub use end::EndReason;
pub use frame_handle::{Frame, FrameStats, PrivateView};
pub use options::SubscriberOptions;
pub use state::Subscriber;
pub use stream_release::stream_acks_queued;
