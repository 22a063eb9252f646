//! The release thread: where a frame ring released from a CUDA host function is torn down.
//!
//! `Frame::release_after_stream` enqueues a host function that ACKs the frame once the
//! caller's stream has run its reads. That host function may hold the last reference to the
//! ring: the subscriber can be destroyed (`cuframes_subscriber_destroy`) while the stream
//! still works, FFmpeg's teardown does exactly that. Dropping the ring there would run
//! `cuMemUnmap`, `cuMemAddressFree`, `cuMemRelease` and `cuDevicePrimaryCtxRelease` inside the
//! host function, where CUDA forbids driver calls (they fail with CUDA_ERROR_NOT_PERMITTED and
//! leak, or deadlock). So the host function only ACKs and hands its reference to this module
//! ([`drop_later`]): a thread of ours, started on first use ([`start`], from the thread that
//! enqueues the host function) and fed by a channel, drops it.
//!
//! Handing over makes no CUDA call and never waits for CUDA: a channel send (one allocation,
//! at most a futex wake).

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::OnceLock;

use crate::error::{Error, ErrorCode, Result};

enum Job {
    /// Drop this value here.
    Drop(Box<dyn Send>),
    /// Everything handed over earlier has been dropped: tell the sender (only tests wait).
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    Flush(mpsc::SyncSender<()>),
}

/// The channel into the release thread; `Err` when the thread could not be started.
static QUEUE: OnceLock<std::result::Result<Sender<Job>, String>> = OnceLock::new();

/// The name of the release thread.
pub const THREAD_NAME: &str = "cuframes-release";

fn serve(jobs: Receiver<Job>) {
    for job in jobs {
        match job {
            Job::Drop(value) => {
                // A panicking Drop must not end the thread: later releases would leak.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(value)));
            }
            Job::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

fn spawn() -> std::result::Result<Sender<Job>, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(THREAD_NAME.into())
        .spawn(move || serve(rx))
        .map(|_| tx)
        .map_err(|e| format!("cannot start the {THREAD_NAME} thread: {e}"))
}

/// Starts the release thread if it is not running yet. Call it on an ordinary thread before
/// anything may be handed over from a host function ([`drop_later`] never starts it). An
/// error (the thread could not be spawned) is remembered: callers then release without a
/// host function.
pub fn start() -> Result<()> {
    match QUEUE.get_or_init(spawn) {
        Ok(_) => Ok(()),
        Err(msg) => Err(Error::new(ErrorCode::Io, msg.clone())),
    }
}

/// Drops `value` on the release thread instead of here. No CUDA call, no wait: safe inside a
/// CUDA host function. If the thread was never started (see [`start`]) the value is leaked
/// rather than dropped here.
pub fn drop_later<T: Send + 'static>(value: T) {
    match QUEUE.get() {
        Some(Ok(tx)) => {
            if let Err(mpsc::SendError(job)) = tx.send(Job::Drop(Box::new(value))) {
                // The thread is gone (it never exits while the process runs): leak.
                std::mem::forget(job);
            }
        }
        _ => std::mem::forget(value),
    }
}

/// Waits until everything handed to [`drop_later`] before this call has been dropped (for a
/// ring: unmapped and released). Returns at once when the thread never started. Do not call
/// it from a `Drop` that runs on the release thread. Tests only (`testing::deferred`).
#[cfg(any(test, feature = "testing"))]
pub fn flush() {
    if let Some(Ok(tx)) = QUEUE.get() {
        let (done_tx, done_rx) = mpsc::sync_channel(1);
        if tx.send(Job::Flush(done_tx)).is_ok() {
            let _ = done_rx.recv();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Drop for Recorder {
        fn drop(&mut self) {
            let name = std::thread::current().name().unwrap_or("?").to_owned();
            self.0.lock().unwrap().push(name);
        }
    }

    #[test]
    fn values_are_dropped_on_the_release_thread_in_order() {
        start().unwrap();
        start().unwrap(); // idempotent
        let seen = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..3 {
            drop_later(Recorder(seen.clone()));
        }
        flush();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3, "flush waits for every earlier value");
        assert!(seen.iter().all(|n| n == THREAD_NAME), "{seen:?}");
    }

    #[test]
    fn a_panicking_drop_does_not_stop_the_thread() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("boom in Drop");
            }
        }
        start().unwrap();
        drop_later(Bomb);
        let seen = Arc::new(Mutex::new(Vec::new()));
        drop_later(Recorder(seen.clone()));
        flush();
        assert_eq!(seen.lock().unwrap().len(), 1);
    }
}
