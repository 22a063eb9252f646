//! The connection to the publisher: its messages (SHUTDOWN, ERROR, PING), its end, and the
//! UNSUBSCRIBE of a dropped subscriber.

use std::os::fd::AsFd;

use crate::error::{Error, ErrorCode};
use crate::packet_ring::PacketRingReader;
use crate::sock::{self, Pumped};
use crate::tlv::Message;
use crate::wire::SHUTDOWN_NEW_RING;

use super::end::EndReason;
use super::state::Subscriber;

impl Subscriber {
    /// The connection is ending (SHUTDOWN, EOF, our own UNSUBSCRIBE): ACKs stop before
    /// anything else, because once the publisher sees the socket close it may hand our bit to
    /// someone else (`frame_ring::reader`, the ACK gate).
    /// `reason`: the kind of end (None: a replaced ring, followed rather than ended).
    pub(super) fn close(&mut self, why: Error, reason: Option<EndReason>) {
        if let Some(f) = &mut self.frames {
            f.ring.revoke_acks();
            f.end_here();
        }
        if self.closing.is_none() {
            self.packets_until = self.packets.as_ref().map(PacketRingReader::published_seq);
            self.closing = Some(why);
            self.closing_reason = reason;
        }
    }

    /// Look at the socket without blocking. SHUTDOWN, ERROR and EOF mark the connection as
    /// closing: the readers still deliver what was published, then report DISCONNECTED.
    pub(super) fn poll_connection(&mut self) {
        if self.closing.is_some() {
            return;
        }
        let msgs = match self.inbox.pump(self.stream.as_fd()) {
            Ok(Pumped::Messages(m)) => m,
            Ok(Pumped::Closed) => {
                self.close(
                    Error::new(
                        ErrorCode::Disconnected,
                        "the publisher closed the connection without a SHUTDOWN (it crashed \
                         or was killed)",
                    ),
                    Some(EndReason::PublisherLost),
                );
                return;
            }
            Err(e) => {
                let reason = if e.code() == ErrorCode::Protocol {
                    EndReason::ProtocolError
                } else {
                    EndReason::PublisherLost
                };
                self.close(
                    Error::new(ErrorCode::Disconnected, format!("connection broken: {e}")),
                    Some(reason),
                );
                return;
            }
        };
        for m in msgs {
            match m {
                Message::Shutdown { reason } if reason == SHUTDOWN_NEW_RING => {
                    self.new_ring = self.frames.is_some();
                    // A packet-only subscriber has no frame ring to follow: for it this
                    // publisher's connection ends here, and without `reconnect` the stream.
                    let end = (!self.new_ring).then_some(EndReason::PublisherLost);
                    self.close(
                        Error::new(
                            ErrorCode::Disconnected,
                            "the publisher replaced its frame ring",
                        ),
                        end,
                    );
                }
                Message::Shutdown { reason } => {
                    self.close(
                        Error::new(
                            ErrorCode::Disconnected,
                            format!("the publisher shut down (reason {reason})"),
                        ),
                        Some(EndReason::Shutdown),
                    );
                }
                Message::Error { code, message } => {
                    let code = ErrorCode::from_i32(code).map_or("unknown", |c| c.name());
                    let e = Error::new(
                        ErrorCode::Disconnected,
                        format!("the publisher dropped this subscriber ({code}): {message}"),
                    );
                    self.close(e.clone(), Some(EndReason::Kicked));
                    self.given_up = Some(e);
                }
                Message::Ping { token } => {
                    let _ = sock::send(self.stream.as_fd(), &Message::Pong { token }, &[]);
                }
                _ => {}
            }
        }
    }
}

/// Dropping unsubscribes (UNSUBSCRIBE) and unmaps the rings. A copy inherited by a child
/// forked from the connecting process only lets go of this process's copies: the connection
/// is the parent's, which goes on reading on it, so nothing is sent and no ACK is revoked or
/// made (the gate's lock may have been held by a thread of the parent at the fork, and stays
/// locked here). Host mappings and descriptors are closed; CUDA imports, streams and buffers
/// are leaked (CUDA is unusable after a fork: `cuda::driver` refuses every call there).
impl Drop for Subscriber {
    fn drop(&mut self) {
        if !self.origin.is_here() {
            return;
        }
        let was_open = self.closing.is_none();
        // Revoke before UNSUBSCRIBE and the close: frames still held by the user must not ACK
        // for whoever gets our bit next.
        self.close(Error::new(ErrorCode::Disconnected, "unsubscribed"), None);
        if was_open {
            let _ = sock::send(self.stream.as_fd(), &Message::Unsubscribe, &[]);
        }
    }
}
