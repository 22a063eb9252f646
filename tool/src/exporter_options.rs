//! The exporter's command line, parsed with the others (args.rs). The exporter itself is the
//! `cuframes` binary's own module (src/bin/cuframes/exporter): its HTTP and Prometheus crates
//! stay out of this library, which the Python extension links.

use std::time::Duration;

use cuframes_core::paths::Key;

/// The exporter's command line (defaults in [`Options::new`], said in the usage text).
#[derive(Debug, Clone)]
pub struct Options {
    pub listen: String,
    pub keys: Vec<Key>,
    /// Connections open at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// The longest wait on a client: for a request's headers (also between requests) and for
    /// a write it does not read.
    pub timeout: Duration,
    /// After this a connection takes no new request and is closed.
    pub max_connection_age: Duration,
    /// Keys (publishers) rendered per scrape.
    pub max_rings: usize,
    /// Subscribers rendered per scrape, over all keys.
    pub max_subscribers: usize,
    /// A scrape that arrives within this of a render's start is answered with that render.
    pub reuse: Duration,
}

impl Options {
    pub const DEFAULT_MAX_CONNECTIONS: usize = 32;
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_MAX_CONNECTION_AGE: Duration = Duration::from_secs(30);
    pub const DEFAULT_MAX_RINGS: usize = 256;
    pub const DEFAULT_MAX_SUBSCRIBERS: usize = 1024;
    pub const DEFAULT_REUSE: Duration = Duration::from_secs(1);

    pub fn new(listen: String) -> Options {
        Options {
            listen,
            keys: Vec::new(),
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            timeout: Self::DEFAULT_TIMEOUT,
            max_connection_age: Self::DEFAULT_MAX_CONNECTION_AGE,
            max_rings: Self::DEFAULT_MAX_RINGS,
            max_subscribers: Self::DEFAULT_MAX_SUBSCRIBERS,
            reuse: Self::DEFAULT_REUSE,
        }
    }
}
