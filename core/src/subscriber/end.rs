//! Why a subscriber's stream ended: a reader that only sees DISCONNECTED cannot tell a clean
//! shutdown from a kick or a crash, and only the first is a normal end of the stream.

/// Why the stream ended ([`super::Subscriber::end_reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// The publisher shut down cleanly (SHUTDOWN, or its ring's shutdown flag).
    Shutdown,
    /// The publisher dropped this subscriber (ERROR), e.g. no ACK within its ack timeout.
    Kicked,
    /// The connection ended without a SHUTDOWN (the publisher crashed or was killed), or a
    /// publisher that went away did not come back within `reconnect`.
    PublisherLost,
    /// The publisher sent something that breaks the protocol.
    ProtocolError,
}

impl EndReason {
    /// A short snake_case name, the same in every binding ("shutdown", "kicked", ...).
    pub fn name(self) -> &'static str {
        match self {
            EndReason::Shutdown => "shutdown",
            EndReason::Kicked => "kicked",
            EndReason::PublisherLost => "publisher_lost",
            EndReason::ProtocolError => "protocol_error",
        }
    }

    /// True for the one normal end of a stream: everything else is a failure to report.
    pub fn is_clean(self) -> bool {
        self == EndReason::Shutdown
    }
}

impl std::fmt::Display for EndReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
