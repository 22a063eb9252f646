//! Error reporting across the C ABI: a code as the return value, and the detailed message of
//! the last failure on this thread (`cuframes_last_error`).

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

/// The message of the last error on the calling thread ("" if none). Valid until the next
/// failing call on this thread.
#[no_mangle]
pub extern "C" fn cuframes_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}
