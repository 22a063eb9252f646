//! Helpers for reading C arguments safely.

use std::ffi::{c_char, CStr};
use std::path::PathBuf;

use cuframes_core::{Error, ErrorCode, Result};

/// A required C string argument.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    CStr::from_ptr(p)
        .to_str()
        .map_err(|_| Error::invalid(format!("{what} is not UTF-8")))
}

/// An optional C string argument (NULL = None).
pub(crate) unsafe fn opt_str<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>> {
    if p.is_null() {
        Ok(None)
    } else {
        str_arg(p, what).map(Some)
    }
}

pub(crate) unsafe fn opt_path(p: *const c_char, what: &str) -> Result<Option<PathBuf>> {
    Ok(opt_str(p, what)?
        .filter(|s| !s.is_empty())
        .map(PathBuf::from))
}

/// A required out-pointer.
pub(crate) unsafe fn out<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    p.as_mut()
        .ok_or_else(|| Error::invalid(format!("{what} is NULL")))
}

/// A required in-pointer.
pub(crate) unsafe fn input<'a, T>(p: *const T, what: &str) -> Result<&'a T> {
    p.as_ref()
        .ok_or_else(|| Error::invalid(format!("{what} is NULL")))
}

/// A byte buffer argument: (pointer, length); NULL is allowed only with length 0.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::invalid(format!(
            "{what} is NULL with a size of {len}"
        )));
    }
    Ok(std::slice::from_raw_parts(p, len))
}

/// Give a variable-size result to C: `*size` receives its length; it is copied into `buf`
/// when `cap` is enough. `buf` NULL with `cap` 0 only asks for the size; a smaller buffer
/// is NO_MEMORY (with the size still set).
pub(crate) unsafe fn copy_out(v: &[u8], buf: *mut u8, cap: usize, size: *mut usize) -> Result<()> {
    *out(size, "size")? = v.len();
    if buf.is_null() && cap == 0 {
        return Ok(());
    }
    if buf.is_null() || cap < v.len() {
        return Err(Error::new(
            ErrorCode::NoMemory,
            format!("the result is {} bytes; the buffer holds {cap}", v.len()),
        ));
    }
    std::ptr::copy_nonoverlapping(v.as_ptr(), buf, v.len());
    Ok(())
}
