//! A kernel of ours in a device's context: a PTX module loaded (`cuModuleLoadData`, which
//! JIT-compiles it: milliseconds) and one function of it, unloaded with that context current
//! when dropped. The RGB conversions' kernels load through it.

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use cudarc::driver::sys;

use super::device::CudaDevice;
use super::driver::{call, release, release_failed};
use crate::error::Result;

/// One kernel function of a loaded PTX module.
pub struct KernelModule {
    dev: Arc<CudaDevice>,
    module: sys::CUmodule,
    func: sys::CUfunction,
}

// SAFETY: module and function are driver handles usable from any thread with their context
// current (every use pushes the device's context).
unsafe impl Send for KernelModule {}
// SAFETY: `&KernelModule` only reads the handles; launches are thread-safe in the driver.
unsafe impl Sync for KernelModule {}

impl KernelModule {
    /// Loads `ptx` (NUL-terminated) into `dev`'s context and looks up the function `name`.
    pub fn load(dev: &Arc<CudaDevice>, ptx: &'static str, name: &CStr) -> Result<KernelModule> {
        assert!(
            ptx.ends_with('\0'),
            "PTX for cuModuleLoadData is NUL-terminated"
        );
        let _current = dev.push_current()?;
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `ptx` is NUL-terminated static text (checked above); `module` a valid
        // out-pointer; the device's context is current.
        call("cuModuleLoadData", || unsafe {
            sys::cuModuleLoadData(&mut module, ptx.as_ptr() as *const c_void)
        })?;
        let mut func: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: `module` was just loaded; `name` is NUL-terminated.
        let got = call("cuModuleGetFunction", || unsafe {
            sys::cuModuleGetFunction(&mut func, module, name.as_ptr())
        });
        if let Err(e) = got {
            // SAFETY: the module loaded above, owned by nobody else, unloaded once.
            release("cuModuleUnload", || unsafe { sys::cuModuleUnload(module) });
            return Err(e);
        }
        Ok(KernelModule {
            dev: Arc::clone(dev),
            module,
            func,
        })
    }

    /// The device whose context holds the module.
    pub fn device(&self) -> &Arc<CudaDevice> {
        &self.dev
    }

    /// The function, for `cuLaunchKernel` with the device's context current.
    pub fn function(&self) -> sys::CUfunction {
        self.func
    }
}

impl Drop for KernelModule {
    /// Its owner makes sure no launch of it is still queued (a module unloaded under a
    /// running kernel is undefined behaviour in the driver).
    fn drop(&mut self) {
        match self.dev.push_current() {
            Ok(_current) => {
                let module = self.module;
                // SAFETY: the module `load` loaded, unloaded once (in drop), its context
                // current.
                release("cuModuleUnload", || unsafe { sys::cuModuleUnload(module) });
            }
            Err(e) => release_failed(&e),
        }
    }
}
