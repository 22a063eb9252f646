//! Making a written slot visible (R24), from the writer's thread or from a CUDA host function
//! queued behind the GPU work that writes the slot: publication on the GPU's timeline (§5: a
//! frame is invisible until the work that wrote it has finished, and the publishing thread
//! need not wait for that work).
//!
//! The host function runs on a driver thread. It may not call CUDA and must not block the
//! driver: it only does the atomic stores of R24, the readers' futex wake (R13/R28) and the
//! bookkeeping below, all lock-free, and it owns an `Arc` of what it touches, so it stays sound
//! whatever the writer does meanwhile (even if the writer is gone).

use crate::sync::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::shm_region::FrameShm;
use super::wait_stats::WaitCounters;
use crate::error::Result;
use crate::futex;

/// The part of the writer that publishing touches, shared with pending host functions.
pub struct Publication {
    pub shm: Arc<FrameShm>,
    /// The last published seq, for readers of the writer's state that must not wait for the
    /// writer's lock (the server thread: a STRICT_WAIT acquire holds it for up to ack_timeout).
    published: AtomicU64,
    /// Subscribers with an ACK page: they cannot count themselves in the header's R28 waiter
    /// count (it is read-only to them), so while there are any, every publish wakes.
    pub page_readers: AtomicUsize,
    /// Publications queued on a stream whose host function has not run yet.
    pending: AtomicU32,
    /// Bumped by every publication from a stream: the word `wait_published` sleeps on.
    progress: AtomicU32,
    progress_waiters: AtomicU32,
    /// Where the writer's frames waited (shared with the host functions, which time
    /// themselves).
    pub(crate) waits: WaitCounters,
}

impl Publication {
    pub fn new(shm: Arc<FrameShm>) -> Arc<Publication> {
        Arc::new(Publication {
            shm,
            published: AtomicU64::new(0),
            page_readers: AtomicUsize::new(0),
            pending: AtomicU32::new(0),
            progress: AtomicU32::new(0),
            progress_waiters: AtomicU32::new(0),
            waits: WaitCounters::default(),
        })
    }

    pub fn published(&self) -> u64 {
        self.published.load(Ordering::SeqCst)
    }

    /// Publications queued on a stream and not yet run.
    pub fn pending(&self) -> u32 {
        self.pending.load(Ordering::SeqCst)
    }

    /// R24: the slot's seq (release), then global_seq; R13/R28: a system call only when
    /// someone sleeps (or may sleep uncounted). The slot's pts and size were stored before,
    /// while its seq was still invalid.
    pub fn make_visible(&self, slot: usize, seq: u64) {
        self.store_visible(slot, seq);
        self.wake_readers();
    }

    /// The R24 stores of `make_visible`. The writer makes them under its lock: publishers on
    /// several threads would otherwise store an older seq after a newer one (global_seq
    /// going backwards, a reacquired slot labelled with its previous frame's seq).
    pub fn store_visible(&self, slot: usize, seq: u64) {
        self.shm.slot_seq(slot).store(seq, Ordering::Release);
        self.shm.global_seq().store(seq, Ordering::SeqCst);
        self.published.store(seq, Ordering::SeqCst);
    }

    /// R13/R28: wake the readers after a publication, with a system call only when someone
    /// sleeps (or may sleep uncounted).
    pub fn wake_readers(&self) {
        if self.page_readers.load(Ordering::SeqCst) > 0
            || self.shm.waiters().load(Ordering::SeqCst) > 0
        {
            futex::wake_all(self.shm.global_seq_word());
        }
    }

    /// Wait until frame `seq` is published, at most `timeout`; false on timeout. Returns at
    /// once when nothing is pending (then `seq` was published, or never will be by a stream).
    pub fn wait_published(&self, seq: u64, timeout: Duration) -> bool {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut waited = false;
        loop {
            let progress = self.progress.load(Ordering::SeqCst);
            if self.published() >= seq || self.pending() == 0 {
                if waited {
                    self.waits.publication_wait(start);
                }
                return self.published() >= seq;
            }
            let now = Instant::now();
            if now >= deadline {
                self.waits.publication_wait(start);
                return false;
            }
            waited = true;
            self.progress_waiters.fetch_add(1, Ordering::SeqCst);
            // Re-checked after announcing the waiter: a host function that finished before
            // the announcement changed `progress` (the wait returns at once) or the condition.
            if self.published() < seq && self.pending() > 0 {
                futex::wait(&self.progress, progress, Some(deadline - now));
            }
            self.progress_waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Queue the publication of frame `seq` in `slot` behind the work already on `stream`.
    /// On error nothing was queued.
    ///
    /// # Safety
    /// `stream` is a live `CUstream` (or null / `CU_STREAM_LEGACY` with a context current).
    pub unsafe fn enqueue(
        self: &Arc<Self>,
        stream: *mut std::ffi::c_void,
        slot: usize,
        seq: u64,
    ) -> Result<()> {
        self.pending.fetch_add(1, Ordering::SeqCst);
        let job = Box::into_raw(Box::new(StreamPublication {
            target: Arc::clone(self),
            slot,
            seq,
        }));
        // SAFETY: the caller's stream contract; on success the host function takes the box,
        // once.
        let queued =
            unsafe { crate::cuda::launch_host_func(stream, publish_from_stream, job.cast()) };
        if queued.is_err() {
            // SAFETY: never queued, so still ours, taken back once.
            drop(unsafe { Box::from_raw(job) });
            self.finished_one();
        }
        queued
    }

    fn finished_one(&self) {
        self.pending.fetch_sub(1, Ordering::SeqCst);
        self.progress.fetch_add(1, Ordering::SeqCst);
        if self.progress_waiters.load(Ordering::SeqCst) > 0 {
            futex::wake_all(&self.progress);
        }
    }
}

/// What one queued publication needs.
struct StreamPublication {
    target: Arc<Publication>,
    slot: usize,
    seq: u64,
}

/// Runs on a driver thread once the stream's earlier work (the slot's writes) has completed:
/// atomics and futex wakes only (no CUDA call, no lock). Dropping the `Arc` may unmap the frame
/// SHM if the writer is gone (munmap, not a CUDA call).
extern "C" fn publish_from_stream(data: *mut std::ffi::c_void) {
    // SAFETY: `data` is the Box<StreamPublication> leaked by `enqueue`, passed once.
    let job = unsafe { Box::from_raw(data.cast::<StreamPublication>()) };
    // Nothing here panics, but no unwind may cross into the driver.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let start = Instant::now();
        job.target.make_visible(job.slot, job.seq);
        job.target.finished_one();
        job.target.waits.stream_publication(start);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publication() -> (Arc<Publication>, String) {
        let name = format!(
            "cuframes-pubtest-{}-{:?}",
            std::process::id(),
            Instant::now()
        );
        let name = name.replace([' ', '{', '}', ':', ','], "");
        let (_fd, map) =
            crate::shm::create(&name, crate::wire::frame::FRAME_SHM_SIZE, 0o600).unwrap();
        let _ = crate::shm::unlink(&name);
        (
            Publication::new(Arc::new(FrameShm::new(map).unwrap())),
            name,
        )
    }

    #[test]
    fn wait_published_returns_when_a_pending_publication_runs() {
        let (p, _) = publication();
        // Stand in for a queued host function: counted pending, run from another thread.
        p.pending.fetch_add(1, Ordering::SeqCst);
        assert!(
            !p.wait_published(1, Duration::from_millis(20)),
            "nothing ran yet"
        );
        let runner = {
            let p = Arc::clone(&p);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                p.make_visible(1, 1);
                p.finished_one();
            })
        };
        let t = Instant::now();
        assert!(p.wait_published(1, Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(5));
        runner.join().unwrap();
        assert_eq!(p.published(), 1);
        assert_eq!(p.shm.global_seq().load(Ordering::SeqCst), 1);
        assert_eq!(p.pending(), 0);
        // Nothing pending: no wait, whatever the seq.
        assert!(!p.wait_published(2, Duration::from_secs(10)));
    }
}
