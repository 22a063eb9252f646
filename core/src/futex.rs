//! Sleeping on a shared-memory word (R13): a process-shared futex on the low 32 bits of a
//! `global_seq`, so a waiting subscriber uses no CPU and wakes within microseconds.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleep while `*word == expected`, at most `timeout`. Returns on a wake-up, a change of the
/// word, a signal or the timeout; callers re-check their condition in a loop.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call. Not FUTEX_PRIVATE:
    // the word lives in memory shared with other processes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
        );
    }
}

/// Wake every waiter sleeping on `word`.
pub fn wake_all(word: &AtomicU32) {
    // SAFETY: as above.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
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
        wait(&w, 0, Some(Duration::from_millis(20)));
        assert!(t.elapsed() >= Duration::from_millis(15));
        // A changed word returns at once.
        w.store(1, Ordering::SeqCst);
        let t = Instant::now();
        wait(&w, 0, Some(Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(1));
        let w2 = w.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            w2.store(2, Ordering::SeqCst);
            wake_all(&w2);
        });
        let t = Instant::now();
        while w.load(Ordering::SeqCst) == 1 {
            wait(&w, 1, Some(Duration::from_secs(5)));
        }
        assert!(t.elapsed() < Duration::from_secs(2));
        h.join().unwrap();
    }
}
