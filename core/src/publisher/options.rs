//! How a publisher is created ([`PublisherOptions`]) and the defaults of its admission caps.

use std::path::PathBuf;
use std::time::Duration;

/// How a publisher is created.
#[derive(Debug, Clone)]
pub struct PublisherOptions {
    /// Socket directory; `None` = `$CUFRAMES_RUNTIME_DIR` or `/run/cuframes` (R16).
    pub runtime_dir: Option<PathBuf>,
    /// Mode of the socket and SHM objects (R16, default 0660).
    pub file_mode: u32,
    /// Only peers with this uid (or root) may subscribe (SO_PEERCRED).
    pub allowed_uid: Option<u32>,
    /// Only peers with this gid (or root) may subscribe.
    pub allowed_gid: Option<u32>,
    /// A peer that has not finished its handshake by then is dropped.
    pub handshake_timeout: Duration,
    /// Admit frame subscribers that do not know ACK pages (plain protocol v4 peers). They
    /// ACK in the shared header, so the frame SHM must then be writable by the group: any
    /// subscriber can forge ACKs, truncate the object and so hurt every other subscriber and
    /// the publisher (`docs/protocol.md`, trust model). Off by default.
    pub allow_legacy_subscribers: bool,
    /// Subscriber slots (of the 31, R2) that the processes of one uid may hold at once;
    /// further subscriptions of that uid get TOO_MANY. The publisher's own uid and root are
    /// not counted. Default 8: one other service then cannot take the table (it leaves at
    /// least 23 slots to everybody else, and four colluding uids are needed to fill it),
    /// while a service that runs a handful of readers fits. Services that run more readers
    /// under one uid raise it; 31 or more means no cap.
    pub max_subscribers_per_uid: usize,
    /// The same per process (a peer in another PID namespace, seen as pid 0, is counted by
    /// its uid only). Default 4: a process reads a key with one or two connections (frames,
    /// packets), rarely more; a single runaway process takes no more than that.
    pub max_subscribers_per_pid: usize,
}

/// [`PublisherOptions::max_subscribers_per_uid`]'s default (the C ABI's 0).
pub const DEFAULT_MAX_SUBSCRIBERS_PER_UID: usize = 8;
/// [`PublisherOptions::max_subscribers_per_pid`]'s default (the C ABI's 0).
pub const DEFAULT_MAX_SUBSCRIBERS_PER_PID: usize = 4;

impl Default for PublisherOptions {
    fn default() -> Self {
        PublisherOptions {
            runtime_dir: None,
            file_mode: 0o660,
            allowed_uid: None,
            allowed_gid: None,
            handshake_timeout: Duration::from_secs(5),
            allow_legacy_subscribers: false,
            max_subscribers_per_uid: DEFAULT_MAX_SUBSCRIBERS_PER_UID,
            max_subscribers_per_pid: DEFAULT_MAX_SUBSCRIBERS_PER_PID,
        }
    }
}
