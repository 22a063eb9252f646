//! The end of a reader's GPU state, after the publisher's: a reader that releases its imported
//! slots and its CUDA context the moment the publisher ends the stream competes with the
//! publisher's own teardown (its decoder, its ring, its context), because the driver serialises
//! the release of CUDA resources across the processes of a GPU. With 8 readers a decoder's close
//! took 0.6 s more (docs/investigations/run-start-and-end.md). Waiting for the publisher's
//! process to exit first puts the readers' teardown after it.

use std::os::fd::AsFd;
use std::time::Duration;

use crate::liveness;
use crate::sock;

use super::state::Subscriber;

impl Subscriber {
    /// After the publisher ended the stream, waits up to `timeout` for its process to exit,
    /// and tells whether it did: call it before dropping a subscriber whose stream ended, so
    /// that the release of this process's GPU state does not slow the publisher's teardown.
    ///
    /// Returns false at once while the stream has not ended (the publisher is alive and no
    /// wait would end early), and true at once when the publisher's process is not visible
    /// from here (another PID namespace: SO_PEERCRED gives pid 0) or is gone. A publisher
    /// that ended the stream and lives on (a process that closed one publisher and goes on)
    /// costs the whole `timeout`: keep it short.
    pub fn wait_publisher_exit(&self, timeout: Duration) -> bool {
        if self.closing.is_none() && self.ended.is_none() {
            return false;
        }
        // SO_PEERCRED holds the credentials of the connect, also after the peer closed.
        match sock::peer_credentials(self.stream.as_fd()) {
            Ok((_, _, pid)) => liveness::wait_exit(u64::from(pid), timeout),
            Err(_) => true,
        }
    }
}
