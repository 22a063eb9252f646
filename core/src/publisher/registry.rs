//! One publisher per key in a process (R6): the record of the keys this process publishes,
//! which a forked child inherits as a copy that is not its own.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, ErrorCode, Result};
use crate::paths::Key;
use crate::util::Origin;

/// Keys that have a publisher in this process (R6), each with the process that created it: a
/// child forked from a publishing process inherits the record, and the parent's entries are
/// not this process's (a create of the same key then meets the parent's live socket).
static KEYS_IN_PROCESS: Mutex<Option<HashMap<String, Origin>>> = Mutex::new(None);
/// Signalled when a key leaves `KEYS_IN_PROCESS` (a publisher's end).
static KEY_RELEASED: std::sync::Condvar = std::sync::Condvar::new();

/// Record `key` as published by this process, or refuse (ALREADY_EXISTS) when this process
/// publishes it already.
pub(super) fn claim(key: &Key) -> Result<()> {
    let mut keys = KEYS_IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    let map = keys.get_or_insert_with(HashMap::new);
    if map.get(key.as_str()).is_some_and(|o| o.is_here()) {
        return Err(Error::new(
            ErrorCode::AlreadyExists,
            format!(
                "this process already publishes key {key:?}; share that publisher (one \
                 publisher per key and process)"
            ),
        ));
    }
    map.insert(key.as_str().to_owned(), Origin::here());
    Ok(())
}

/// The record of `key` that a child forked from a publishing process inherited goes: it is
/// the parent's, this process does not publish the key. The lock is only tried: a thread of
/// the parent may have held it at the fork, and then it stays locked in the child forever.
pub(super) fn forget_inherited(key: &Key) {
    let mut keys = match KEYS_IN_PROCESS.try_lock() {
        Ok(keys) => Some(keys),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    };
    if let Some(map) = keys.as_mut().and_then(|k| k.as_mut()) {
        map.remove(key.as_str());
    }
}

/// This process's record of `key` goes (not an entry a fork inherited: that is the parent's).
pub(super) fn forget(key: &Key) {
    let mut keys = KEYS_IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(map) = keys.as_mut() {
        if map.get(key.as_str()).is_some_and(|o| o.is_here()) {
            map.remove(key.as_str());
        }
    }
    KEY_RELEASED.notify_all();
}

/// Wait, at most `timeout`, until this process has no publisher of `key` (one whose last
/// handle is being dropped on another thread is ending: its end removes the socket and
/// rings, which takes a moment). True when the key is free here.
pub fn wait_until_released(key: &str, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    let mut keys = KEYS_IN_PROCESS.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let held = keys
            .as_ref()
            .and_then(|m| m.get(key))
            .is_some_and(|o| o.is_here());
        let now = std::time::Instant::now();
        if !held {
            return true;
        }
        if now >= deadline {
            return false;
        }
        keys = KEY_RELEASED
            .wait_timeout(keys, deadline - now)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}
