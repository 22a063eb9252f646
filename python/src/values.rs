//! Small conversions every class shares: Python seconds to a `Duration`, the "no
//! timestamp" value to None, and the module's rule for poisoned locks.

use pyo3::prelude::*;

/// Seconds given by Python as a `Duration`; `ValueError` naming `what` for a negative,
/// infinite or NaN value.
pub(crate) fn duration(what: &str, seconds: f64) -> PyResult<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(seconds).map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "{what} must be a finite number of seconds >= 0, not {seconds}"
        ))
    })
}

/// A mutex of this module, poisoned or not: its state stays consistent (no code panics
/// half-way through an update of it).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `i64::MIN` (`NO_PTS`) is None in Python.
pub(crate) fn opt_ts(ts: i64) -> Option<i64> {
    (ts != cuframes_core::wire::NO_PTS).then_some(ts)
}
