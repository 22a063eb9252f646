//! Sleeping on a shared-memory word (R13): a process-shared futex on the low 32 bits of a
//! `global_seq`, so a waiting subscriber uses no CPU and wakes within microseconds.
//!
//! The system calls need only the word's address: the kernel reads the word itself (FUTEX_WAIT
//! compares it, FUTEX_WAKE does not touch it), so a word of a read-only mapping works and no
//! RMW-capable atomic is needed ([`FutexWord`]).

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use crate::shm::Shared32;

/// A 32-bit word a futex can sleep on: anything that can give its address.
pub trait FutexWord {
    /// The word's address. It must stay valid while the call that asked for it runs; a bad
    /// address only makes the system call fail with EFAULT (the kernel checks it).
    fn futex_addr(&self) -> *const u32;
}

impl FutexWord for &AtomicU32 {
    fn futex_addr(&self) -> *const u32 {
        self.as_ptr()
    }
}

/// A field of a mapping, read-only ones included.
impl FutexWord for Shared32<'_> {
    fn futex_addr(&self) -> *const u32 {
        self.as_ptr()
    }
}

/// Sleep while `*word == expected`, at most `timeout`. Returns on a wake-up, a change of the
/// word, a signal or the timeout; callers re-check their condition in a loop.
pub fn wait(word: impl FutexWord, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT reads the u32 at the address inside the kernel (a bad address is
    // EFAULT, not a fault of ours) and writes nothing of ours; `ts_ptr` is null or points to
    // `ts`, alive across the call. Not FUTEX_PRIVATE: the word lives in memory shared with
    // other processes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.futex_addr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
        );
    }
}

/// Wake every waiter sleeping on `word`.
pub fn wake_all(word: impl FutexWord) {
    // SAFETY: FUTEX_WAKE only uses the address as a key: it neither reads nor writes memory of
    // ours.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.futex_addr(),
            libc::FUTEX_WAKE,
            i32::MAX,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn wait_times_out_and_wakes() {
        let w = Arc::new(AtomicU32::new(0));
        let t = Instant::now();
        wait(&*w, 0, Some(Duration::from_millis(20)));
        assert!(t.elapsed() >= Duration::from_millis(15));
        // A changed word returns at once.
        w.store(1, Ordering::SeqCst);
        let t = Instant::now();
        wait(&*w, 0, Some(Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(1));
        let w2 = w.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            w2.store(2, Ordering::SeqCst);
            wake_all(&*w2);
        });
        let t = Instant::now();
        while w.load(Ordering::SeqCst) == 1 {
            wait(&*w, 1, Some(Duration::from_secs(5)));
        }
        assert!(t.elapsed() < Duration::from_secs(2));
        h.join().unwrap();
    }
}
