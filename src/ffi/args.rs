//! Reading C arguments: strings, in- and out-pointers, byte buffers, variable-size results.
//!
//! Each helper is `unsafe` with the contract that cuframes.h gives C callers for that kind of
//! argument (see "Pointer contract" in the crate documentation); it checks what can be
//! checked (NULL, UTF-8) and turns the rest into references with the right lifetime.

use std::ffi::{c_char, CStr};
use std::path::PathBuf;

use cuframes_core::{Error, ErrorCode, Result};

/// A required C string argument.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays allocated and unmodified for
/// `'a`.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: `p` is not NULL, so by this function's contract it is a NUL-terminated string
    // that lives, unmodified, for 'a.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Error::invalid(format!("{what} is not UTF-8")))
}

/// An optional C string argument (NULL = None).
///
/// # Safety
/// As for [`str_arg`].
pub(crate) unsafe fn opt_str<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>> {
    if p.is_null() {
        Ok(None)
    } else {
        // SAFETY: our contract is str_arg's.
        unsafe { str_arg(p, what) }.map(Some)
    }
}

/// An optional path argument (NULL or "" = None).
///
/// # Safety
/// As for [`str_arg`] (the path is copied, so only for the duration of the call).
pub(crate) unsafe fn opt_path(p: *const c_char, what: &str) -> Result<Option<PathBuf>> {
    // SAFETY: our contract is opt_str's; the borrowed string is copied before we return.
    Ok(unsafe { opt_str(p, what) }?
        .filter(|s| !s.is_empty())
        .map(PathBuf::from))
}

/// A required out-pointer.
///
/// # Safety
/// `p` is NULL or points to a properly aligned `T` that is valid for writes (and, when `T`
/// has drop glue or is read, for reads) and that nothing else accesses for `'a`.
pub(crate) unsafe fn out<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: `as_mut` handles NULL; otherwise the contract makes `p` a valid, exclusive
    // `T` for 'a.
    unsafe { p.as_mut() }.ok_or_else(|| Error::invalid(format!("{what} is NULL")))
}

/// A required in-pointer.
///
/// # Safety
/// `p` is NULL or points to a properly aligned, initialised `T` that nothing mutates for `'a`
/// (for a library handle: created by this library and not yet destroyed).
pub(crate) unsafe fn input<'a, T>(p: *const T, what: &str) -> Result<&'a T> {
    // SAFETY: `as_ref` handles NULL; otherwise the contract makes `p` a valid, shared `T`
    // for 'a.
    unsafe { p.as_ref() }.ok_or_else(|| Error::invalid(format!("{what} is NULL")))
}

/// A byte buffer argument: (pointer, length); NULL is allowed only with length 0.
///
/// # Safety
/// When `len > 0` and `p` is not NULL, `p` is readable for `len` bytes that nothing writes
/// for `'a`.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::invalid(format!(
            "{what} is NULL with a size of {len}"
        )));
    }
    // SAFETY: not NULL and len > 0, so by the contract `p` is readable for `len` bytes of one
    // allocation (hence len <= isize::MAX), unwritten for 'a; u8 has no alignment or validity
    // requirement.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Give a variable-size result to C: `*size` receives its length; it is copied into `buf`
/// when `cap` is enough. `buf` NULL with `cap` 0 only asks for the size; a smaller buffer
/// is NO_MEMORY (with the size still set).
///
/// # Safety
/// `size` is NULL or a writable `usize`; `buf` is NULL or writable for `cap` bytes, and
/// neither overlaps `v`.
pub(crate) unsafe fn copy_out(v: &[u8], buf: *mut u8, cap: usize, size: *mut usize) -> Result<()> {
    // SAFETY: `size` is NULL or a writable usize (our contract), used only here.
    *unsafe { out(size, "size") }? = v.len();
    if buf.is_null() && cap == 0 {
        return Ok(());
    }
    if buf.is_null() || cap < v.len() {
        return Err(Error::new(
            ErrorCode::NoMemory,
            format!("the result is {} bytes; the buffer holds {cap}", v.len()),
        ));
    }
    // SAFETY: `buf` is not NULL and writable for `cap` >= v.len() bytes (our contract), and
    // does not overlap `v`.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf, v.len()) };
    Ok(())
}
