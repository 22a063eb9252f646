//! The reader side that `Subscriber` and `PacketSubscriber` share: one core subscription
//! behind a lock that readers take in turns, the item read for an `anext()` (kept for the
//! next read when its task was cancelled, never lost), and what `close()`, garbage collection
//! and a forked child do with both. Each class supplies only its read (a frame, a packet);
//! the waiting, the timeouts and the end of the stream are [`Reading`]'s.

use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;

use crate::reading::{Attempt, ReadError, Reading};
use crate::values::lock;

/// One read of the subscription `S` that waits at most the slice it is given, without the
/// GIL: the next item, or why there is none.
pub(crate) trait Read<S, T>:
    Fn(&mut S, Duration) -> Result<T, ReadError> + Send + Sync
{
}
impl<S, T, F: Fn(&mut S, Duration) -> Result<T, ReadError> + Send + Sync> Read<S, T> for F {}

/// A subscription `S` read by any number of Python threads and coroutines, one at a time,
/// yielding items `T`.
pub(crate) struct ReadEndpoint<S, T> {
    /// The subscription; None once closed.
    inner: Mutex<Option<S>>,
    /// An item read for an `anext()` that is taken once its coroutine resumes, or read for
    /// one whose task was cancelled meanwhile: the next read returns it first.
    pending: Mutex<Option<T>>,
    /// The read options and the state of the stream (closed, ended, the owning process).
    pub reading: Reading,
    /// The class name, for the error of a read in a forked child.
    what: &'static str,
}

impl<S: Send, T: Send> ReadEndpoint<S, T> {
    /// An endpoint over a connected subscription; `what` names the Python class.
    pub fn new(sub: S, reading: Reading, what: &'static str) -> Self {
        ReadEndpoint {
            inner: Mutex::new(Some(sub)),
            pending: Mutex::new(None),
            reading,
            what,
        }
    }

    /// One read attempt: the pending item first, else `read`'s within the slice.
    fn attempt<'a>(&'a self, read: &'a impl Read<S, T>) -> impl Attempt<T> + 'a {
        move |slice| {
            // Closed: no new turn at `inner`, which `close()` is waiting for.
            if self.reading.is_closed() {
                return None;
            }
            let mut inner = lock(&self.inner);
            // Closed while this reader queued for `inner`: hand it on to `close()` at once,
            // rather than after another slice.
            if self.reading.is_closed() {
                return None;
            }
            let sub = inner.as_mut()?;
            if let Some(item) = lock(&self.pending).take() {
                return Some(Ok(item));
            }
            Some(read(sub, slice))
        }
    }

    /// One read attempt of `anext()` into the pending slot: Ok when an item is pending, the
    /// one there already (read for a cancelled task, or by a concurrent wait) or one read now.
    /// The slot is filled only while `inner` is held, so nothing else fills it between the
    /// look and the store, and a pending item is never overwritten (which would drop it).
    fn attempt_pending<'a>(&'a self, read: &'a impl Read<S, T>) -> impl Attempt<()> + 'a {
        move |slice| {
            if self.reading.is_closed() {
                return None;
            }
            let mut inner = lock(&self.inner);
            // Closed while this reader queued for `inner`: hand it on to `close()` at once,
            // rather than after another slice.
            if self.reading.is_closed() {
                return None;
            }
            let sub = inner.as_mut()?;
            if lock(&self.pending).is_some() {
                return Some(Ok(()));
            }
            Some(read(sub, slice).map(|item| {
                *lock(&self.pending) = Some(item);
            }))
        }
    }

    /// `next(timeout)` (see [`Reading::next`]).
    pub fn next(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        read: impl Read<S, T>,
    ) -> PyResult<Option<T>> {
        self.reading.check_owner(self.what)?;
        self.reading.next(py, timeout, self.attempt(&read))
    }

    /// `__next__` (see [`Reading::iter_next`]).
    pub fn iter_next(&self, py: Python<'_>, read: impl Read<S, T>) -> PyResult<Option<T>> {
        self.reading.check_owner(self.what)?;
        self.reading.iter_next(py, self.attempt(&read))
    }

    /// `_wait_pending`, for `cuframes._aio`: read the next item into the pending slot (see
    /// [`Reading::wait_pending`]).
    pub fn wait_pending(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        iterating: bool,
        cancel: &Bound<'_, PyAny>,
        read: impl Read<S, T>,
    ) -> PyResult<bool> {
        self.reading.check_owner(self.what)?;
        self.reading
            .wait_pending(py, timeout, iterating, cancel, self.attempt_pending(&read))
    }

    /// `_take_pending`, for `cuframes._aio`: the pending item (None if another reader took
    /// it).
    pub fn take_pending(&self, py: Python<'_>) -> PyResult<Option<T>> {
        self.reading.check_owner(self.what)?;
        Ok(py.allow_threads(|| lock(&self.pending).take()))
    }

    /// Unsubscribe: the pending item is dropped first (a frame is released, ACKed), then the
    /// subscription, both without the GIL.
    pub fn close(&self, py: Python<'_>) {
        self.reading.close();
        // In a forked child the subscription is the parent's, and `inner` may be held by a
        // parent thread that does not exist here: leave both alone (`Drop` forgets them).
        if self.reading.forked() {
            return;
        }
        let (sub, pending) =
            py.allow_threads(|| (lock(&self.inner).take(), lock(&self.pending).take()));
        py.allow_threads(move || {
            drop(pending);
            drop(sub);
        });
    }
}

impl<S, T> Drop for ReadEndpoint<S, T> {
    fn drop(&mut self) {
        self.reading.closed.store(true, Ordering::Release);
        if self.reading.forked() {
            // The parent's subscription, caught at the fork maybe half-way through a read of
            // a parent thread: forgotten, never torn down here (the exit closes what it holds).
            let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
            std::mem::forget(inner.take());
            let pending = self.pending.get_mut().unwrap_or_else(|p| p.into_inner());
            std::mem::forget(pending.take());
        }
    }
}
