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

use anyhow::{Context as _, Result};
use cuframes_tool::exporter_options::Options;

use render::{Limits, Renders, ServeCounters};
use serve::Config;

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
