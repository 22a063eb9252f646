//! `cuframes exporter --listen ADDR [OPTIONS] [KEY...]`: the numbers of `stat --json`, for
//! Prometheus, at `http://ADDR/metrics`.
//!
//! [`serve`] is the HTTP side (hyper, with bounded connections, timeouts and header limits);
//! [`render`] turns one snapshot of every publisher (only `KEY`s when given) into the
//! metrics text, on a thread of its own, capped in what it shows. The process runs until it
//! is stopped; it ends only on an error that leaves it unable to serve, and then with a
//! non-zero status.

mod render;
mod serve;
mod stall;

use std::convert::Infallible;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};
use cuframes_core::paths::Key;

use render::{Limits, Renders, ServeCounters};
use serve::Config;

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

/// Serve until stopped; returns only with the error that stopped it.
pub fn exporter(dir: &Path, opts: &Options) -> Result<bool> {
    let listener = std::net::TcpListener::bind(&opts.listen)
        .with_context(|| format!("cannot listen on {}", opts.listen))?;
    // tokio takes the socket over; it must not block its thread.
    listener
        .set_nonblocking(true)
        .context("cannot make the listening socket non-blocking")?;
    let addr = listener
        .local_addr()
        .context("cannot tell where the exporter listens")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("cannot start the exporter's event loop")?;
    let counters = ServeCounters::default();
    let limits = Limits {
        max_rings: opts.max_rings,
        max_subscribers: opts.max_subscribers,
        reuse: opts.reuse,
    };
    let renders = Renders::start(
        dir.to_owned(),
        opts.keys.clone(),
        limits,
        counters.clone(),
        opts.max_connections,
    )
    .context("cannot start the render thread")?;
    let cfg = Config {
        max_connections: opts.max_connections,
        timeout: opts.timeout,
        max_age: opts.max_connection_age,
    };
    // First line on stdout: where it listens (the port when `:0` was asked for).
    let mut out = std::io::stdout();
    writeln!(out, "cuframes exporter: serving http://{addr}/metrics")?;
    out.flush()?;
    let stopped: Result<Infallible> = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)
            .context("cannot register the listening socket")?;
        serve::serve(listener, cfg, renders, counters).await
    });
    match stopped {
        Err(e) => Err(e.context(format!("exporter on {addr} stopped"))),
        Ok(never) => match never {},
    }
}
