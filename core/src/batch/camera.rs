//! One camera of a batch: its subscriber (connected, and connected again after it is lost,
//! on threads of their own so that no attempt holds a batch up), the newest frame read from
//! it, and that frame's release behind the GPU work that read it.

use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cuda::{Event, Stream};
use crate::error::{Error, ErrorCode, Result};
use crate::subscriber::{Frame, Subscriber, SubscriberOptions};
use crate::wire::MemoryKind;

/// A frame a camera holds: the newest read from it.
pub(super) struct Held {
    /// The frame (a zero-copy frame keeps its slot until released).
    pub frame: Frame,
    /// Which frame of this camera it is (1 for the first read, counting across
    /// reconnections), to tell "newer than the last batch's" whatever the publisher's seq.
    pub serial: u64,
    /// Events recorded behind the GPU conversions that read it, one per stream (the newest
    /// on each stream covers the earlier ones there): the frame is released behind them.
    pub read_by: Vec<(usize, Arc<Event>)>,
}

/// What a camera is doing about its connection.
enum Link {
    /// Connected: frames are read from it.
    Up(Box<Subscriber>),
    /// An attempt runs on its own thread; its result comes through the channel.
    Connecting(Receiver<Result<Subscriber>>),
    /// Not connected; the next attempt starts at this instant.
    Down(Instant),
}

/// One camera: a key and its subscription.
pub(super) struct Camera {
    /// The publisher's key.
    pub key: String,
    link: Link,
    /// The newest frame read (None: none yet, or the camera was lost since).
    pub held: Option<Held>,
    /// Frames read from this camera so far.
    serial: u64,
    /// The serial of the frame this camera gave the last batch (0: none).
    pub batched: u64,
    /// The last connection error or end, for the caller's diagnostics.
    pub last_error: Option<Error>,
    /// Times this camera was connected again after being lost.
    pub reconnections: u64,
    connected_once: bool,
    /// Connection attempts that have come to an end (either way).
    pub attempts: u64,
}

impl Camera {
    /// A camera whose first connection attempt starts now.
    pub fn new(key: &str, options: &SubscriberOptions) -> Result<Camera> {
        let mut c = Camera {
            key: key.to_owned(),
            link: Link::Down(Instant::now()),
            held: None,
            serial: 0,
            batched: 0,
            last_error: None,
            reconnections: 0,
            connected_once: false,
            attempts: 0,
        };
        c.start_attempt(options)?;
        Ok(c)
    }

    /// True while subscribed.
    pub fn is_connected(&self) -> bool {
        matches!(self.link, Link::Up(_))
    }

    /// The subscriber, while connected.
    pub fn subscriber(&self) -> Option<&Subscriber> {
        match &self.link {
            Link::Up(s) => Some(s),
            _ => None,
        }
    }

    fn start_attempt(&mut self, options: &SubscriberOptions) -> Result<()> {
        // Room for the one result, so that an attempt never blocks on a batch that is gone
        // (its subscriber is then dropped on that thread, which unsubscribes it).
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (key, options) = (self.key.clone(), options.clone());
        std::thread::Builder::new()
            .name(String::from("cuframes-batch-connect"))
            .spawn(move || {
                let _ = tx.send(Subscriber::connect(&key, &options));
            })
            .map_err(|e| {
                Error::new(
                    ErrorCode::Io,
                    format!("cannot start a thread to connect to {:?}: {e}", self.key),
                )
            })?;
        self.link = Link::Connecting(rx);
        Ok(())
    }

    /// Take the result of a finished connection attempt, or start one when it is time.
    /// Errors: only a refusal that retrying cannot change (a bad option, a publisher of
    /// another uid than asked for) on the first connection; every other failure is kept in
    /// `last_error` and retried after `retry`.
    pub fn poll_link(&mut self, options: &SubscriberOptions, retry: Duration) -> Result<()> {
        match &self.link {
            Link::Up(_) => Ok(()),
            Link::Connecting(rx) => match rx.try_recv() {
                Ok(got) => {
                    self.attempts += 1;
                    self.attempt_ended(got, retry)
                }
                Err(TryRecvError::Empty) => Ok(()),
                Err(TryRecvError::Disconnected) => {
                    self.attempts += 1;
                    self.last_error = Some(Error::new(
                        ErrorCode::Io,
                        "the connection attempt ended without a result",
                    ));
                    self.link = Link::Down(Instant::now() + retry);
                    Ok(())
                }
            },
            Link::Down(at) => {
                if Instant::now() >= *at {
                    self.start_attempt(options)?;
                }
                Ok(())
            }
        }
    }

    fn attempt_ended(&mut self, got: Result<Subscriber>, retry: Duration) -> Result<()> {
        match got {
            Ok(sub) => {
                if self.connected_once {
                    self.reconnections += 1;
                }
                self.connected_once = true;
                self.link = Link::Up(Box::new(sub));
                Ok(())
            }
            Err(e) => {
                let fatal = !self.connected_once && !is_retryable(&e);
                self.last_error = Some(e.clone());
                self.link = Link::Down(Instant::now() + retry);
                if fatal {
                    return Err(Error::new(
                        e.code(),
                        format!("camera {:?}: {}", self.key, e.message()),
                    ));
                }
                Ok(())
            }
        }
    }

    /// Read what the camera has without waiting, keeping only the newest frame (the older
    /// ones are released: nothing read them). True when a frame newer than the one held came.
    pub fn drain(&mut self, stream: Option<&Stream>, retry: Duration) -> bool {
        self.read(None, stream, retry)
    }

    /// Wait until `until` for a frame newer than the one held, then read what else is there
    /// (keeping the newest). True when one came. The wait is made in slices of
    /// `STOP_SLICE`, between which `stop` is asked: false as soon as it says to stop.
    pub fn wait_newer(
        &mut self,
        until: Instant,
        stream: Option<&Stream>,
        retry: Duration,
        stop: &mut Stop<'_>,
    ) -> bool {
        loop {
            let slice_end = until.min(Instant::now() + STOP_SLICE);
            if self.read(Some(slice_end), stream, retry) {
                return true;
            }
            if Instant::now() >= until || !self.is_connected() || stop.asked() {
                return false;
            }
        }
    }

    fn read(&mut self, until: Option<Instant>, stream: Option<&Stream>, retry: Duration) -> bool {
        let mut got = false;
        let mut wait = until.map(|u| u.saturating_duration_since(Instant::now()));
        for _ in 0..MAX_READS {
            let Link::Up(sub) = &mut self.link else {
                return got;
            };
            // The first read waits (when asked to); the reads after it only take what is there.
            let timeout = wait.take().unwrap_or(Duration::ZERO);
            match sub.next_frame(Some(timeout)) {
                Ok(frame) => {
                    self.serial += 1;
                    let old = self.held.replace(Held {
                        frame,
                        serial: self.serial,
                        read_by: Vec::new(),
                    });
                    if let Some(old) = old {
                        release(old, stream);
                    }
                    got = true;
                }
                Err(e) if e.code() == ErrorCode::Timeout => return got,
                Err(e) => {
                    // The end of the stream (its publisher gone, not followed or not back
                    // within `reconnect`), or a ring in error: the camera is lost, its frame
                    // with it, and it is looked for again.
                    self.lose(e, stream, retry);
                    return got;
                }
            }
        }
        got
    }

    /// Drop the subscription and the frame held, after an end or an error `e`.
    fn lose(&mut self, e: Error, stream: Option<&Stream>, retry: Duration) {
        if let Some(old) = self.held.take() {
            release(old, stream);
        }
        self.last_error = Some(e);
        self.link = Link::Down(Instant::now() + retry);
    }

    /// The held frame, if it is newer than the one this camera gave the last batch.
    pub fn has_new(&self) -> bool {
        self.held.as_ref().is_some_and(|h| h.serial > self.batched)
    }

    /// Release everything (the batch is closing), behind the GPU work that read the frame.
    pub fn close(&mut self, stream: Option<&Stream>) {
        if let Some(old) = self.held.take() {
            release(old, stream);
        }
        self.link = Link::Down(Instant::now() + Duration::from_secs(3600));
    }
}

/// How long a wait for a camera's frame runs between two questions to [`Stop`].
pub(super) const STOP_SLICE: Duration = Duration::from_millis(50);

/// The caller's "stop waiting" (an interrupt, the reader closing from another thread), asked
/// between slices of a batch's waits; once it said yes, it stays said.
pub(super) struct Stop<'a> {
    ask: &'a mut dyn FnMut() -> bool,
    said: bool,
}

impl<'a> Stop<'a> {
    /// `ask` tells whether to stop now.
    pub fn new(ask: &'a mut dyn FnMut() -> bool) -> Stop<'a> {
        Stop { ask, said: false }
    }

    /// Whether to stop: asks the caller, unless it said so already.
    pub fn asked(&mut self) -> bool {
        if !self.said {
            self.said = (self.ask)();
        }
        self.said
    }

    /// Whether the caller said to stop (without asking again).
    pub fn said(&self) -> bool {
        self.said
    }
}

/// The most frames one read of a camera takes: a publisher that publishes as fast as they are
/// read would otherwise keep a batch reading it forever. Twice the largest ring: a reader
/// further behind than a ring jumps to the newest frame anyway.
const MAX_READS: usize = 2 * crate::wire::MAX_RING_SIZE;

/// Failures a later attempt may not repeat: the publisher missing, stale, restarting, busy,
/// or a peer at the key that does not speak the protocol (another user's process squatting
/// the socket, a publisher of another version): what is at a key can change, so such a camera
/// is invalid with its reason, as a missing one, and the batch goes on with the others.
fn is_retryable(e: &Error) -> bool {
    matches!(
        e.code(),
        ErrorCode::NotFound
            | ErrorCode::Disconnected
            | ErrorCode::Io
            | ErrorCode::Timeout
            | ErrorCode::TooMany
            | ErrorCode::NoMemory
            | ErrorCode::Protocol
            | ErrorCode::Format
    )
}

/// Release a frame that is no longer held. A frame no GPU work read is released at once; one
/// that conversions read is released behind them without a host wait: `stream` (the batch's
/// own) waits on their events, and the frame's ACK is queued behind that.
pub(super) fn release(held: Held, stream: Option<&Stream>) {
    let Held { frame, read_by, .. } = held;
    if read_by.is_empty() {
        let copied_on_gpu = frame.memory_kind() == MemoryKind::CudaVmm && !frame.is_zero_copy();
        match stream {
            // A COPY frame's device buffer goes back to its subscriber's pool: released after
            // our own stream (nothing of the caller's reads the frame), not after a wait for
            // the whole context, which a drop would be.
            Some(s) if copied_on_gpu => {
                let dev = s.device().cloned();
                let _current = dev.as_ref().map(|d| d.push_current());
                // SAFETY: `s` is the batch's own live stream of the frame's device, its
                // context current (pushed above); no work of the caller reads the frame.
                unsafe { frame.release_after_stream(s.raw()) };
            }
            // SAFETY: null: no GPU work reads the frame (it was never converted on the GPU).
            _ => unsafe { frame.release_after_stream(std::ptr::null_mut()) },
        }
        return;
    }
    let Some(stream) = stream else {
        // No stream of our own (none could be made): wait for the readers here.
        for (_, e) in &read_by {
            if let Err(err) = e.synchronize() {
                crate::util::diag!("releasing frame {}: {err}", frame.seq);
            }
        }
        // SAFETY: null: the conversions that read the frame have completed (waited above;
        // a failed wait leaves the context in error, where no work runs any more).
        unsafe { frame.release_after_stream(std::ptr::null_mut()) };
        return;
    };
    let queued = read_by.iter().try_for_each(|(_, e)| stream.wait_event(e));
    let dev = stream.device().cloned();
    let _current = dev.as_ref().map(|d| d.push_current());
    match queued {
        // SAFETY: `stream` is the batch's own live stream of the frame's device, whose
        // context is current (pushed above); it now waits for every conversion that read
        // the frame, so the ACK queued behind it follows them.
        Ok(()) => unsafe { frame.release_after_stream(stream.raw()) },
        Err(err) => {
            crate::util::diag!("releasing frame {} behind its readers: {err}", frame.seq);
            // Dropping waits for the device's whole context, the readers included.
            drop(frame);
        }
    }
}
