//! The one wrapper every C entry point runs its body under: no panic crosses the boundary,
//! and the thread's last error (`cuframes_last_error`) is written only when the call fails.
//!
//! - [`status`]: bodies that succeed or fail (`CUFRAMES_OK` or a negative code);
//! - [`value`]: bodies that return a count or a kind (>= 0) or fail (negative code);
//! - [`guard`]: bodies that cannot fail (queries, destroy/release): a panic there returns
//!   the given fallback and is recorded as the last error.

use std::any::Any;
use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cuframes_core::{Error, ErrorCode, Result};

use super::last_error::fail;

/// Run a body that succeeds or fails: 0, or its error's (negative) code.
pub(crate) fn status(body: impl FnOnce() -> Result<()>) -> c_int {
    value(|| body().map(|()| ErrorCode::Ok as c_int))
}

/// Run a body that returns a non-negative value or fails with a (negative) code.
pub(crate) fn value(body: impl FnOnce() -> Result<c_int>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => fail(e),
        Err(payload) => fail(panic_error(&*payload)),
    }
}

/// Run a body that cannot fail; a panic returns `on_panic` (and is the last error).
pub(crate) fn guard<T>(on_panic: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        fail(panic_error(&*payload));
        on_panic
    })
}

/// The error a caught panic is reported as, with the panic's message where it has one.
fn panic_error(payload: &(dyn Any + Send)) -> Error {
    let what = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
    Error::new(
        ErrorCode::Io,
        match what {
            Some(m) => format!("internal error: a panic was caught at the C boundary: {m}"),
            None => "internal error: a panic was caught at the C boundary".to_owned(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::last_error::last_error_ptr;

    fn last_error() -> String {
        // SAFETY: last_error_ptr returns a NUL-terminated string owned by this thread's
        // slot, valid until the next failing call on this thread (none in between).
        unsafe { std::ffi::CStr::from_ptr(last_error_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn success_leaves_the_last_error_alone_and_failures_and_panics_set_it() {
        assert_eq!(
            status(|| Err(Error::invalid("first"))),
            ErrorCode::InvalidArg as c_int
        );
        assert!(last_error().contains("first"), "{}", last_error());
        assert_eq!(status(|| Ok(())), 0);
        assert_eq!(value(|| Ok(7)), 7);
        assert_eq!(guard(1, || 2), 2);
        assert!(
            last_error().contains("first"),
            "success overwrote: {}",
            last_error()
        );
        let code = status(|| panic!("boom"));
        assert_eq!(code, ErrorCode::Io as c_int);
        assert!(last_error().contains("panic") && last_error().contains("boom"));
        assert_eq!(guard(5, || -> i32 { panic!("again") }), 5);
        assert!(last_error().contains("again"), "{}", last_error());
    }
}
