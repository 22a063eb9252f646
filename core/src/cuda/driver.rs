//! Loading the CUDA driver and calling into it without ever panicking.
//!
//! libcuda is loaded at run time (cudarc's `dynamic-loading`), never needed to build. cudarc
//! panics when it cannot load the library or a symbol, so every call goes through `call`:
//! it first checks, once per process, that the library can be opened with `dlopen` and that
//! `cuInit` succeeds ([`driver_available`]), and it runs the cudarc entry inside
//! `catch_unwind` as a second line of defence. Every `CUresult` other than `CUDA_SUCCESS`
//! becomes [`ErrorCode::Cuda`] with the function's name and the CUDA error name.

use std::ffi::{CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::error::{Error, ErrorCode, Result};
use crate::util::Origin;

/// The soname of the driver library installed by the NVIDIA driver package.
pub const LIBCUDA_SONAME: &str = "libcuda.so.1";

/// Whether the driver is usable, and in which process `cuInit` ran: CUDA cannot be used in a
/// child forked after that (the driver's state does not survive a fork), so there every call
/// is refused without reaching the driver, and teardown calls leak quietly.
static DRIVER: OnceLock<std::result::Result<Origin, String>> = OnceLock::new();

/// Why a forked child gets no CUDA.
const FORKED: &str = "CUDA was initialised in the parent of this process before it forked, \
                      and the CUDA driver cannot be used in a forked child: use CUDA in a \
                      process started with exec (Python: multiprocessing's \"spawn\" start \
                      method)";

/// `dlopen(name, RTLD_NOW | RTLD_LOCAL)`; the handle is kept open (the library stays loaded
/// for the life of the process anyway, cudarc holds its own handle).
fn try_dlopen(name: &str) -> std::result::Result<(), String> {
    let cname = CString::new(name).map_err(|_| format!("bad library name {name:?}"))?;
    // SAFETY: a valid NUL-terminated name; dlerror is read right after on this thread.
    unsafe {
        let handle = libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            let err = libc::dlerror();
            let msg = if err.is_null() {
                "unknown dlopen error".to_string()
            } else {
                CStr::from_ptr(err).to_string_lossy().into_owned()
            };
            return Err(msg);
        }
    }
    Ok(())
}

/// Can cudarc load the driver library? `libcuda.so.1` first; otherwise any of the names
/// cudarc itself tries (`libcuda.so`, `libcuda.so.12`, ... for the "cuda" library; see
/// `cudarc::get_lib_name_candidates`), so that our answer is never "yes" when cudarc would
/// panic, nor "no" when it would find a library.
fn probe_library() -> std::result::Result<(), String> {
    let first = match try_dlopen(LIBCUDA_SONAME) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    for name in cudarc::get_lib_name_candidates("cuda") {
        if name != LIBCUDA_SONAME && try_dlopen(&name).is_ok() {
            return Ok(());
        }
    }
    Err(format!(
        "CUDA driver library {LIBCUDA_SONAME} not found: {first}"
    ))
}

fn init_driver() -> std::result::Result<Origin, String> {
    probe_library()?;
    // The library loads; cuInit tells whether there is a usable driver and device.
    // SAFETY: cuInit takes no pointers; the library was found loadable just above.
    let res = catch_unwind(|| unsafe { sys::cuInit(0) })
        .map_err(|p| format!("cudarc panicked in cuInit: {}", panic_message(&p)))?;
    if res != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuInit failed: {}", error_name(res)));
    }
    Ok(Origin::here())
}

/// `Ok` when the CUDA driver library loads and `cuInit(0)` succeeds; otherwise a
/// [`ErrorCode::Cuda`] error that says why (e.g. "libcuda.so.1 not found: ..."). The answer is
/// computed once per process. In a child forked after the parent initialised the driver:
/// an error (CUDA does not survive a fork). Never panics.
pub fn driver_available() -> Result<()> {
    match DRIVER.get_or_init(init_driver) {
        Ok(origin) if origin.is_here() => Ok(()),
        Ok(_) => Err(Error::new(ErrorCode::Cuda, FORKED)),
        Err(msg) => Err(Error::new(ErrorCode::Cuda, msg.clone())),
    }
}

/// This process is a child forked after its parent initialised the driver: CUDA objects it
/// inherited are leaked, not released.
fn forked_from_cuda_process() -> bool {
    matches!(DRIVER.get(), Some(Ok(origin)) if !origin.is_here())
}

/// Number of CUDA devices the driver sees.
pub fn device_count() -> Result<i32> {
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer.
    call("cuDeviceGetCount", || unsafe {
        sys::cuDeviceGetCount(&mut count)
    })?;
    Ok(count)
}

/// The CUDA driver version as the driver reports it (e.g. 13000 for CUDA 13.0).
pub fn driver_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer.
    call("cuDriverGetVersion", || unsafe {
        sys::cuDriverGetVersion(&mut version)
    })?;
    Ok(version)
}

pub(crate) fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// "CUDA_ERROR_OUT_OF_MEMORY (2)": the driver's name for a result, or its number alone when
/// the driver cannot name it.
pub(crate) fn error_name(res: sys::CUresult) -> String {
    let code = res as u32;
    let named = catch_unwind(|| {
        let mut ptr: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string or leaves it null.
        let r = unsafe { sys::cuGetErrorName(res, &mut ptr) };
        if r == sys::CUresult::CUDA_SUCCESS && !ptr.is_null() {
            // SAFETY: the driver returns a NUL-terminated static string.
            Some(
                unsafe { CStr::from_ptr(ptr) }
                    .to_string_lossy()
                    .into_owned(),
            )
        } else {
            None
        }
    });
    match named {
        Ok(Some(name)) => format!("{name} ({code})"),
        _ => format!("{res:?} ({code})"),
    }
}

/// The error for a failed CUDA call.
pub(crate) fn cuda_error(func: &str, res: sys::CUresult) -> Error {
    Error::new(
        ErrorCode::Cuda,
        format!("{func} failed: {}", error_name(res)),
    )
}

/// Runs one raw driver call: checks the driver first, catches a cudarc panic, and maps any
/// result other than `CUDA_SUCCESS` to an error naming `func`.
pub(crate) fn call<F>(func: &str, f: F) -> Result<()>
where
    F: FnOnce() -> sys::CUresult,
{
    let res = call_raw(func, f)?;
    if res == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(cuda_error(func, res))
    }
}

/// Like [`call`] but hands back the raw result (for calls where a non-success result is an
/// answer, such as `cuEventQuery`'s `CUDA_ERROR_NOT_READY`).
pub(crate) fn call_raw<F>(func: &str, f: F) -> Result<sys::CUresult>
where
    F: FnOnce() -> sys::CUresult,
{
    driver_available()?;
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        Error::new(
            ErrorCode::Cuda,
            format!("cudarc panicked in {func}: {}", panic_message(&p)),
        )
    })
}

static RELEASE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Teardown calls of this module's `Drop` implementations that did not succeed since the
/// process started: `cuMemUnmap`, `cuMemAddressFree`, `cuMemRelease`,
/// `cuDevicePrimaryCtxRelease`, `cuStreamDestroy`, `cuEventDestroy`, `cuMemFree`,
/// `cuModuleUnload`, and the context push/pop around them. Each one is a leak (a mapping, a
/// context reference, ...) and was logged to stderr; the GPU tests assert that this stays 0.
pub fn release_failures() -> u64 {
    RELEASE_FAILURES.load(Ordering::Relaxed)
}

/// Counts one failed teardown call (see [`release_failures`]) and logs it.
pub(crate) fn release_failed(e: &Error) {
    if forked_from_cuda_process() {
        // The objects are the parent's copies, which the driver cannot free here: leaked by
        // design, not a failure.
        return;
    }
    RELEASE_FAILURES.fetch_add(1, Ordering::Relaxed);
    crate::util::diag!("{e}");
}

/// For `Drop` implementations: run a release call; a failure is logged and counted
/// ([`release_failures`]), never a panic.
pub(crate) fn release<F>(func: &str, f: F)
where
    F: FnOnce() -> sys::CUresult,
{
    if let Err(e) = call(func, f) {
        release_failed(&e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libcuda_present() -> bool {
        probe_library().is_ok()
    }

    #[test]
    fn driver_check_never_panics_and_is_stable() {
        let a = driver_available();
        let b = driver_available();
        assert_eq!(a, b, "the answer is cached");
        if let Err(e) = a {
            assert_eq!(e.code(), ErrorCode::Cuda);
            assert!(!e.message().is_empty());
            if !libcuda_present() {
                assert!(
                    e.message().contains("libcuda.so.1 not found"),
                    "message names the library: {e}"
                );
            }
        }
    }

    #[test]
    fn calls_without_a_driver_fail_cleanly() {
        if driver_available().is_ok() {
            return; // covered by the GPU tests
        }
        let e = device_count().unwrap_err();
        assert_eq!(e.code(), ErrorCode::Cuda);
        assert_eq!(driver_version().unwrap_err().code(), ErrorCode::Cuda);
        let mut ran = false;
        let e = call("cuSomething", || {
            ran = true;
            sys::CUresult::CUDA_SUCCESS
        })
        .unwrap_err();
        assert!(!ran, "no cudarc entry runs without a driver");
        assert_eq!(e.code(), ErrorCode::Cuda);
    }

    #[test]
    fn dlopen_failure_is_reported_not_panicked() {
        let e = try_dlopen("libcuframes-definitely-missing.so.7").unwrap_err();
        assert!(e.contains("libcuframes-definitely-missing"), "{e}");
        assert!(try_dlopen("libc.so.6").is_ok());
    }

    #[test]
    fn panic_payloads_become_messages() {
        let p = catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
        assert_eq!(panic_message(&p), "boom 7");
        let p = catch_unwind(|| panic!("static")).unwrap_err();
        assert_eq!(panic_message(&p), "static");
    }
}
