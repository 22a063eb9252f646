//! What `Subscriber` and `PacketSubscriber` share: connecting (waiting for a missing
//! publisher), waiting for the next item in slices without the GIL, telling a clean end of the
//! stream from an abnormal one, the read timeout, and the item read by an `anext()` whose
//! awaiting task was cancelled (kept for the next read, never lost).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cuframes_core::subscriber::{EndReason, Subscriber as CoreSubscriber, SubscriberOptions};
use cuframes_core::ErrorCode;
use pyo3::exceptions::{PyDeprecationWarning, PyStopAsyncIteration, PyTypeError};
use pyo3::prelude::*;

use crate::exception::{error, to_py};
use crate::values::{duration, lock};

/// How long one wait without the GIL lasts before signals (Ctrl-C) are looked at.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// The pause between two attempts to connect to a publisher that is not there yet.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// A read that returned no item.
pub(crate) struct ReadError {
    pub error: cuframes_core::Error,
    /// Set when the error is the end of the stream.
    pub end: Option<EndReason>,
}

impl ReadError {
    /// A read error of `sub`, with its end reason when the error ended the stream.
    pub fn of(sub: &CoreSubscriber, error: cuframes_core::Error) -> ReadError {
        ReadError {
            end: sub.end_reason(),
            error,
        }
    }
}

/// Why a wait stopped without an item.
enum Stop {
    /// The caller's timeout ran out.
    Timeout,
    /// The subscriber was closed (`close()`, maybe from another thread while waiting).
    Closed,
    /// The asyncio task awaiting the read was cancelled.
    Cancelled,
    Failed(ReadError),
    /// A Python exception: KeyboardInterrupt from a signal, a bad timeout.
    Py(PyErr),
}

/// One read attempt of at most the slice it is given, without the GIL: None when the
/// subscriber is closed.
pub(crate) trait Attempt<T>: FnMut(Duration) -> Option<Result<T, ReadError>> + Send {}
impl<T, F: FnMut(Duration) -> Option<Result<T, ReadError>> + Send> Attempt<T> for F {}

/// The options of the FFmpeg inputs' vocabulary that concern reading, and the state of reads
/// that every subscriber class keeps.
pub(crate) struct Reading {
    /// `read_timeout`: a read without a timeout of its own fails after this long (None: waits
    /// forever).
    read_timeout: Option<f64>,
    /// What `end_reason` says: the core's reason once a read returned the end, "closed" once
    /// closed first.
    end: Mutex<Option<&'static str>>,
    /// Shared with the frames (an export of a frame of a closed subscriber is refused).
    pub closed: Arc<AtomicBool>,
    /// The process that connected: a child forked from it inherits the object, but not the
    /// subscription (nor the threads that may hold its locks at the fork).
    owner: u32,
}

impl Reading {
    pub fn new(read_timeout: Option<f64>) -> PyResult<Reading> {
        let read_timeout = match read_timeout {
            Some(t) => Some(duration("read_timeout", t)?.as_secs_f64()).filter(|t| *t > 0.0),
            None => None,
        };
        Ok(Reading {
            read_timeout,
            end: Mutex::new(None),
            closed: Arc::new(AtomicBool::new(false)),
            owner: std::process::id(),
        })
    }

    /// True in a child forked from the process that connected: the subscription is the
    /// parent's, and its locks may be held by a parent thread that does not exist here, so
    /// the child must neither read nor take them.
    pub fn forked(&self) -> bool {
        std::process::id() != self.owner
    }

    /// Refuses a read in a forked child (see `forked`).
    pub fn check_owner(&self, what: &str) -> PyResult<()> {
        if !self.forked() {
            return Ok(());
        }
        Err(error(
            ErrorCode::Disconnected,
            format!(
                "this {what} was inherited through fork() from process {}: the subscription \
                 stays the parent's; connect a new {what} in this process",
                self.owner
            ),
        ))
    }

    pub fn end_reason(&self) -> Option<&'static str> {
        *lock(&self.end)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closed by its owner: "closed" unless the stream had ended before.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        lock(&self.end).get_or_insert("closed");
    }

    /// "live", "closed" or "ended: <reason>", for `repr`.
    pub fn state(&self) -> String {
        match self.end_reason() {
            None if self.is_closed() => String::from("closed"),
            None => String::from("live"),
            Some("closed") => String::from("closed"),
            Some(r) => format!("ended: {r}"),
        }
    }

    /// Wait for an item at most `timeout` seconds (None: forever), in slices without the GIL;
    /// signals, and `cancel` (a `threading.Event`), are looked at between slices.
    fn wait<T: Send>(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        cancel: Option<&Bound<'_, PyAny>>,
        mut attempt: impl Attempt<T>,
    ) -> Result<T, Stop> {
        let deadline = match timeout {
            Some(t) => Some(Instant::now() + duration("timeout", t).map_err(Stop::Py)?),
            None => None,
        };
        loop {
            let slice = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).min(WAIT_SLICE),
                None => WAIT_SLICE,
            };
            match py.allow_threads(|| attempt(slice)) {
                None => return Err(Stop::Closed),
                Some(Ok(item)) => return Ok(item),
                Some(Err(e)) if e.error.code() == ErrorCode::Timeout && e.end.is_none() => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(Stop::Timeout);
                    }
                    py.check_signals().map_err(Stop::Py)?;
                    if let Some(c) = cancel {
                        let set = c.call_method0("is_set").and_then(|s| s.is_truthy());
                        if set.map_err(Stop::Py)? {
                            return Err(Stop::Cancelled);
                        }
                    }
                }
                Some(Err(e)) => {
                    if let Some(r) = e.end {
                        lock(&self.end).get_or_insert(r.name());
                    }
                    return Err(Stop::Failed(e));
                }
            }
        }
    }

    /// `next(timeout)`: None after an explicit `timeout`; without one, waits `read_timeout`
    /// (then `cuframes.Error` TIMEOUT) or forever. At the end of the stream, whatever the
    /// reason: `cuframes.Error` DISCONNECTED (the message names an abnormal end).
    pub fn next<T: Send>(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        attempt: impl Attempt<T>,
    ) -> PyResult<Option<T>> {
        match self.wait(py, timeout.or(self.read_timeout), None, attempt) {
            Ok(item) => Ok(Some(item)),
            Err(Stop::Timeout) if timeout.is_some() => Ok(None),
            Err(Stop::Cancelled) => Ok(None),
            Err(stop) => Err(self.raise(stop)),
        }
    }

    /// `__next__`: None (StopIteration) at a clean end (a shutdown, or closed by its owner);
    /// an abnormal end (kicked, publisher lost, protocol error) raises `cuframes.Error`, as
    /// does a `read_timeout` without an item.
    pub fn iter_next<T: Send>(
        &self,
        py: Python<'_>,
        attempt: impl Attempt<T>,
    ) -> PyResult<Option<T>> {
        self.iter_wait(py, None, attempt)
    }

    fn iter_wait<T: Send>(
        &self,
        py: Python<'_>,
        cancel: Option<&Bound<'_, PyAny>>,
        attempt: impl Attempt<T>,
    ) -> PyResult<Option<T>> {
        match self.wait(py, self.read_timeout, cancel, attempt) {
            Ok(item) => Ok(Some(item)),
            Err(Stop::Closed | Stop::Cancelled) => Ok(None),
            Err(Stop::Failed(e)) if clean_end(&e) => Ok(None),
            Err(stop) => Err(self.raise(stop)),
        }
    }

    /// The blocking half of `anext()` / `__anext__` (`cuframes._aio`): reads the next item
    /// into the subscriber's pending slot (`attempt` does), where the coroutine takes it once
    /// it resumes, so that an item read for a task cancelled meanwhile stays for the next
    /// read. True: an item is pending; False: `timeout` ran out (or cancelled); at the end of
    /// an iteration StopAsyncIteration.
    pub fn wait_pending(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        iterating: bool,
        cancel: &Bound<'_, PyAny>,
        attempt: impl Attempt<()>,
    ) -> PyResult<bool> {
        if iterating {
            return match self.iter_wait(py, Some(cancel), attempt)? {
                Some(()) => Ok(true),
                None if cancel.call_method0("is_set")?.is_truthy()? => Ok(false),
                None => Err(PyStopAsyncIteration::new_err(())),
            };
        }
        match self.wait(py, timeout.or(self.read_timeout), Some(cancel), attempt) {
            Ok(()) => Ok(true),
            Err(Stop::Timeout) if timeout.is_some() => Ok(false),
            Err(Stop::Cancelled) => Ok(false),
            Err(stop) => Err(self.raise(stop)),
        }
    }

    fn raise(&self, stop: Stop) -> PyErr {
        match stop {
            Stop::Py(e) => e,
            Stop::Closed => error(ErrorCode::Disconnected, "the subscriber is closed"),
            Stop::Timeout | Stop::Cancelled => error(
                ErrorCode::Timeout,
                format!(
                    "nothing arrived within read_timeout ({} s)",
                    self.read_timeout.unwrap_or(0.0)
                ),
            ),
            Stop::Failed(ReadError { error: e, end }) => match end {
                Some(r) if !r.is_clean() => to_py(cuframes_core::Error::new(
                    e.code(),
                    format!("the stream ended abnormally ({r}): {}", e.message()),
                )),
                _ => to_py(e),
            },
        }
    }
}

/// The end of the stream that iteration ends quietly at: a shutdown, and a DISCONNECTED the
/// core gives no reason for (as iteration always did).
fn clean_end(e: &ReadError) -> bool {
    match e.end {
        Some(r) => r.is_clean(),
        None => e.error.code() == ErrorCode::Disconnected,
    }
}

/// The options both subscriber classes take with the FFmpeg inputs' names and meanings.
pub(crate) struct Timing {
    /// `wait_publisher` (0: fail at once).
    pub wait_publisher: Duration,
    pub handshake_timeout: Duration,
    pub reconnect: Option<Duration>,
    pub spin: Duration,
}

impl Timing {
    /// The options as given; `connect_timeout`, the deprecated name of `handshake_timeout`, still
    /// sets it, with a DeprecationWarning.
    pub fn new(
        py: Python<'_>,
        wait_publisher: f64,
        handshake_timeout: f64,
        connect_timeout: Option<f64>,
        reconnect: Option<f64>,
        spin: f64,
    ) -> PyResult<Timing> {
        let handshake_timeout = match connect_timeout {
            Some(_) if handshake_timeout != DEFAULT_HANDSHAKE_TIMEOUT => {
                return Err(PyTypeError::new_err(
                    "pass handshake_timeout only (connect_timeout is its deprecated name)",
                ))
            }
            Some(t) => {
                PyErr::warn(
                    py,
                    &py.get_type::<PyDeprecationWarning>(),
                    c"connect_timeout is deprecated: it is the handshake_timeout (to wait for a \
                      publisher that is not there yet, use wait_publisher)",
                    1,
                )?;
                duration("connect_timeout", t)?
            }
            None => duration("handshake_timeout", handshake_timeout)?,
        };
        Ok(Timing {
            wait_publisher: duration("wait_publisher", wait_publisher)?,
            handshake_timeout,
            reconnect: reconnect.map(|s| duration("reconnect", s)).transpose()?,
            spin: duration("spin", spin)?,
        })
    }

    /// Sets the options' handshake timeout, reconnect and spin.
    pub fn apply(&self, o: &mut SubscriberOptions) {
        o.connect_timeout = self.handshake_timeout;
        o.reconnect = self.reconnect;
        o.spin = self.spin;
    }
}

/// `handshake_timeout`'s default (seconds), as the FFmpeg inputs'.
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT: f64 = 5.0;

/// Connect, retrying while the publisher is missing (no socket, a stale one, no ring yet) for
/// up to `wait`, then fail with the last attempt's error; `then` runs on the connected
/// subscriber. Attempts and pauses run without the GIL; signals are looked at between them,
/// and every `WAIT_SLICE` during an attempt.
pub(crate) fn connect_waiting<X: Send + 'static>(
    py: Python<'_>,
    key: &str,
    options: &SubscriberOptions,
    wait: Duration,
    then: impl Fn(&mut CoreSubscriber) -> cuframes_core::Result<X> + Send + Sync + 'static,
) -> PyResult<(CoreSubscriber, X)> {
    let deadline = Instant::now() + wait;
    let then = Arc::new(then);
    loop {
        let e = match connect_once(py, key, options, then.clone())? {
            Ok(connected) => return Ok(connected),
            Err(e) => e,
        };
        // As `-f cuframes` waits: for a publisher that is not there (yet), or whose ring is
        // not set up yet; any other error (a refusal, bad options) is final at once.
        let missing = matches!(
            e.code(),
            ErrorCode::NotFound | ErrorCode::Disconnected | ErrorCode::Io | ErrorCode::Timeout
        );
        if !missing || Instant::now() >= deadline {
            return Err(to_py(e));
        }
        py.check_signals()?;
        let pause = RETRY_PAUSE.min(deadline.saturating_duration_since(Instant::now()));
        py.allow_threads(|| std::thread::sleep(pause));
    }
}

/// One connection attempt. It runs on a thread of its own, waited for in slices, because a
/// handshake with a publisher that never answers lasts the whole handshake timeout and Ctrl-C
/// must not wait that long: after an interrupt the attempt is left to finish there, and a
/// subscriber it still makes is dropped there (which unsubscribes it).
fn connect_once<X: Send + 'static>(
    py: Python<'_>,
    key: &str,
    options: &SubscriberOptions,
    then: Arc<impl Fn(&mut CoreSubscriber) -> cuframes_core::Result<X> + Send + Sync + 'static>,
) -> PyResult<cuframes_core::Result<(CoreSubscriber, X)>> {
    // Room for the one result, so that the attempt's thread never blocks on a caller that
    // is gone.
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let key = key.to_owned();
    let options = options.clone();
    std::thread::Builder::new()
        .name(String::from("cuframes-connect"))
        .spawn(move || {
            let got = CoreSubscriber::connect(&key, &options).and_then(|mut s| {
                let x = then(&mut s)?;
                Ok((s, x))
            });
            // Refused when the caller was interrupted: the result is dropped here then.
            let _ = tx.send(got);
        })
        .map_err(|e| {
            error(
                ErrorCode::Io,
                format!("cannot start a thread to connect: {e}"),
            )
        })?;
    let mut rx = rx;
    loop {
        // The receiver goes into the wait and comes back (it is Send, not Sync).
        let (waited, back) = py.allow_threads(move || (rx.recv_timeout(WAIT_SLICE), rx));
        rx = back;
        match waited {
            Ok(got) => return Ok(got),
            Err(RecvTimeoutError::Timeout) => py.check_signals()?,
            Err(RecvTimeoutError::Disconnected) => return Err(error(
                ErrorCode::Io,
                "the connection attempt failed unexpectedly (its thread ended without a result)",
            )),
        }
    }
}

/// `anext()` / `__anext__` of a subscriber: the coroutine of `cuframes._aio`, which waits on
/// a thread of cuframes' own (`_wait_pending`) and takes the item once it resumes.
pub(crate) fn aio_next<'py>(
    sub: &Bound<'py, PyAny>,
    timeout: Option<f64>,
    iterating: bool,
) -> PyResult<Bound<'py, PyAny>> {
    sub.py()
        .import("cuframes._aio")?
        .call_method1("next_item", (sub, timeout, iterating))
}

/// `repr(s)` as Python writes it (quotes and escapes), for the subscribers' reprs.
pub(crate) fn py_repr(py: Python<'_>, s: &str) -> PyResult<String> {
    Ok(pyo3::types::PyString::new(py, s).repr()?.to_string())
}
