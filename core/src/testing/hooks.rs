//! Points where a test can make something happen inside a call, for races that timing alone
//! would reach only now and then (feature `testing` only: production code has no hooks).

use std::sync::Mutex;

type Hook = Box<dyn FnOnce() + Send>;

/// At most one pending hook, for one key (tests of one binary run side by side: another
/// test's connect must not take it).
static AFTER_HANDSHAKE: Mutex<Option<(String, Hook)>> = Mutex::new(None);

/// Run `f` once, in the next `Subscriber::connect` of this process to `key`, right after its
/// handshake (SUBSCRIBE_RESP and VMM_FDS received) and before it maps the ring's slots.
pub fn set_after_handshake(key: &str, f: impl FnOnce() + Send + 'static) {
    *AFTER_HANDSHAKE.lock().unwrap_or_else(|p| p.into_inner()) =
        Some((key.to_owned(), Box::new(f)));
}

pub(crate) fn after_handshake(key: &str) {
    run_pending(&AFTER_HANDSHAKE, key);
}

/// Run the hook pending in `slot` if it is for `key` (outside the lock: a hook may set
/// another one).
fn run_pending(slot: &Mutex<Option<(String, Hook)>>, key: &str) {
    let hook = {
        let mut pending = slot.lock().unwrap_or_else(|p| p.into_inner());
        match pending.take() {
            Some((k, f)) if k == key => Some(f),
            other => {
                *pending = other;
                None
            }
        }
    };
    if let Some(f) = hook {
        f();
    }
}

/// At most one pending hook, for one key, as [`AFTER_HANDSHAKE`].
static BEFORE_SHUTDOWN_WAKE: Mutex<Option<(String, Hook)>> = Mutex::new(None);

/// Run `f` once, in the shutdown of this process's publisher of `key` (its drop), after the
/// shutdown flag is set and right before the publisher wakes its server thread: where a slow
/// flush of CUDA publications lets the server thread end first.
pub fn set_before_shutdown_wake(key: &str, f: impl FnOnce() + Send + 'static) {
    *BEFORE_SHUTDOWN_WAKE
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = Some((key.to_owned(), Box::new(f)));
}

pub(crate) fn before_shutdown_wake(key: &str) {
    run_pending(&BEFORE_SHUTDOWN_WAKE, key);
}

/// At most one pending hook, for one key, as [`AFTER_HANDSHAKE`].
static BEFORE_SUBSCRIBE: Mutex<Option<(String, Hook)>> = Mutex::new(None);

/// Run `f` once, in the next `Subscriber::connect` of this process to `key`, after HELLO_RESP
/// and before SUBSCRIBE: where a ring replacement makes the publisher refuse the SUBSCRIBE of
/// the generation HELLO_RESP described.
pub fn set_before_subscribe(key: &str, f: impl FnOnce() + Send + 'static) {
    *BEFORE_SUBSCRIBE.lock().unwrap_or_else(|p| p.into_inner()) =
        Some((key.to_owned(), Box::new(f)));
}

pub(crate) fn before_subscribe(key: &str) {
    run_pending(&BEFORE_SUBSCRIBE, key);
}

/// At most one pending hook, for one key, as [`AFTER_HANDSHAKE`].
static BEFORE_FRAME_SHM_OPEN: Mutex<Option<(String, Hook)>> = Mutex::new(None);

/// Run `f` once, in the next `Subscriber::connect` of this process to `key`, after HELLO_RESP
/// and right before the frame SHM it names is opened: where a replacement removes that
/// ring's generation name and another user creates it again.
pub fn set_before_frame_shm_open(key: &str, f: impl FnOnce() + Send + 'static) {
    *BEFORE_FRAME_SHM_OPEN
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = Some((key.to_owned(), Box::new(f)));
}

pub(crate) fn before_frame_shm_open(key: &str) {
    run_pending(&BEFORE_FRAME_SHM_OPEN, key);
}
