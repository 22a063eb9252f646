//! Error reporting across the C ABI: a failed call returns its code, and keeps its detailed
//! message for the calling thread until its next failure (`cuframes_last_error` reads it).

use std::cell::RefCell;
use std::ffi::{c_char, CString};

use cuframes_core::Error;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Record `e` as this thread's last error and return its code.
pub(crate) fn fail(e: Error) -> i32 {
    let text = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = text);
    e.code() as i32
}

/// The message of the last error on the calling thread ("" if none), NUL-terminated. Valid
/// until the next failing call on this thread.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}
