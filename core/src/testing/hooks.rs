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
    let hook = {
        let mut pending = AFTER_HANDSHAKE.lock().unwrap_or_else(|p| p.into_inner());
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
