//! The HTTP side: hyper's HTTP/1.1 server on one thread, every connection independent and
//! bounded. At most `max_connections` are open (one more is answered 503 and closed at
//! once, never queued); each one waits at most `timeout` for a request's headers (also
//! between requests) and for a stalled write, and lives at most `max_age`; request headers
//! are capped in bytes and count; request bodies are never read. Accept errors (out of file
//! descriptors, a connection reset before it was taken) are waited out, not fatal.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future as _;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use http_body_util::Full;
use hyper::body::{Body as _, Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::render::{Renders, ServeCounters};
use super::stall::WriteDeadline;

/// What Prometheus is told the body is (prometheus-client writes OpenMetrics 1.0 text).
const METRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Request head bytes buffered per connection (hyper's minimum is 8 KiB). A scrape's head
/// is a few hundred bytes; a longer one is answered 431 and closed.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Request header lines per request (Prometheus sends about six).
const MAX_HEADERS: usize = 64;

/// How long to wait after an accept error before the next accept (out of file descriptors,
/// retrying at once would spin).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The answer of a connection over `max_connections`, written if the socket takes it now.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\
                      Connection: close\r\n\r\n";

#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub max_connections: usize,
    pub timeout: Duration,
    pub max_age: Duration,
}

/// Accept and serve until the listener itself breaks (the only way this returns).
pub async fn serve(
    listener: TcpListener,
    cfg: Config,
    renders: Renders,
    counters: ServeCounters,
) -> Result<Infallible> {
    let slots = Arc::new(Semaphore::new(cfg.max_connections));
    let idle = Idle::default();
    // The accept error said last, so that a run of them is said once.
    let mut failing: Option<String> = None;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                if let Some(e) = failing.take() {
                    eprintln!("cuframes exporter: accepting connections again (after: {e})");
                }
                stream
            }
            Err(e) if listener_broken(&e) => {
                return Err(anyhow!("cannot accept connections any more: {e}"));
            }
            Err(e) => {
                let msg = e.to_string();
                if failing.as_deref() != Some(msg.as_str()) {
                    eprintln!("cuframes exporter: cannot accept a connection ({msg}); retrying");
                    failing = Some(msg);
                }
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => Some(slot),
            // Every place taken: the connection idle the longest (between requests, or
            // never sent one) makes room. Refusing the newcomer instead let one client that
            // keeps `max_connections` keep-alive connections busy every few seconds lock
            // every scraper out (over 90% of scrapes refused while it held them).
            Err(_) if idle.evict_oldest() => {
                tokio::time::timeout(EVICTION_WAIT, slots.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(|s| s.ok())
            }
            Err(_) => None,
        };
        let Some(slot) = slot else {
            counters.refused.inc();
            // Best effort and never waited for: the client learns why before the close.
            let _ = stream.try_write(BUSY);
            continue;
        };
        let (id, close) = idle.register();
        let conn = connection(
            stream,
            slot,
            renders.clone(),
            cfg,
            (idle.clone(), id, close),
        );
        tokio::spawn(conn);
    }
}

/// How long a newcomer waits for the place of the connection evicted for it.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// The open connections, for choosing one to close when all places are taken: the one
/// idle the longest (not inside a request), told through its `Notify`.
#[derive(Clone, Default)]
struct Idle(Arc<std::sync::Mutex<IdleTable>>);

#[derive(Default)]
struct IdleTable {
    next: u64,
    /// Per connection: busy (inside a request), when it last started or ended one (or was
    /// accepted), and how to close it.
    conns: HashMap<u64, (bool, Instant, Arc<Notify>)>,
}

impl Idle {
    fn table(&self) -> std::sync::MutexGuard<'_, IdleTable> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self) -> (u64, Arc<Notify>) {
        let mut t = self.table();
        t.next += 1;
        let (id, close) = (t.next, Arc::new(Notify::new()));
        t.conns.insert(id, (false, Instant::now(), close.clone()));
        (id, close)
    }

    fn set_busy(&self, id: u64, busy: bool) {
        if let Some(c) = self.table().conns.get_mut(&id) {
            c.0 = busy;
            c.1 = Instant::now();
        }
    }

    /// Tell the connection idle the longest to close (forgotten at once, so that it is not
    /// chosen twice); false when every connection is inside a request.
    fn evict_oldest(&self) -> bool {
        let mut t = self.table();
        let oldest = t
            .conns
            .iter()
            .filter(|(_, (busy, _, _))| !busy)
            .min_by_key(|(_, (_, since, _))| *since)
            .map(|(id, _)| *id);
        match oldest.and_then(|id| t.conns.remove(&id)) {
            Some((_, _, close)) => {
                // Stored if its task is not waiting yet: the eviction is never lost.
                close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Forgets its connection when the connection's task ends.
struct Registered(Idle, u64);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.table().conns.remove(&self.1);
    }
}

/// Errors that say the listening socket itself is unusable; every other accept error is
/// about one connection or a passing shortage (EMFILE, ENFILE, ENOBUFS, ENOMEM,
/// ECONNABORTED, the network errors accept(2) passes on) and is waited out.
fn listener_broken(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EFAULT | libc::EOPNOTSUPP)
    )
}

async fn connection(
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    renders: Renders,
    cfg: Config,
    (idle, id, close): (Idle, u64, Arc<Notify>),
) {
    let _registered = Registered(idle.clone(), id);
    let io = TokioIo::new(WriteDeadline::new(stream, cfg.timeout));
    let service = service_fn(move |req| {
        let (renders, idle) = (renders.clone(), idle.clone());
        async move {
            idle.set_busy(id, true);
            let r = respond(req, &renders).await;
            idle.set_busy(id, false);
            Ok::<_, Infallible>(r)
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(cfg.timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        .serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    // Ends early (the connection is dropped) when a newcomer needs its place (`Idle`).
    let evicted = close.notified();
    let mut evicted = std::pin::pin!(evicted);
    let served_or_evicted = std::future::poll_fn(|cx| {
        if evicted.as_mut().poll(cx).is_ready() {
            return std::task::Poll::Ready(());
        }
        conn.as_mut().poll(cx).map(|_| ())
    });
    // Errors are the client's (a bad request, a timeout, a reset): the connection ends.
    if tokio::time::timeout(cfg.max_age, served_or_evicted)
        .await
        .is_err()
    {
        // Old enough: finish the response under way, if any, then close.
        conn.as_mut().graceful_shutdown();
        let _ = tokio::time::timeout(cfg.timeout, conn).await;
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r
}

async fn respond(req: Request<Incoming>, renders: &Renders) -> Response<Full<Bytes>> {
    let arrived = Instant::now();
    // A body is never read: a request that has one gets its answer and the connection is
    // closed after it (what follows on the connection is the body, not a request).
    let has_body = !req.body().is_end_stream();
    let mut r = if req.uri().path() != "/metrics" {
        text(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n",
        )
    } else if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        r
    } else if has_body {
        text(StatusCode::BAD_REQUEST, "a scrape has no request body\n")
    } else {
        match renders.get(arrived).await {
            Some(body) => {
                let mut r = Response::new(Full::new(body));
                r.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_TYPE));
                r
            }
            None => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error while gathering; see stderr\n",
            ),
        }
    };
    if has_body {
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    r
}
