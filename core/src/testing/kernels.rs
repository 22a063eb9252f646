//! Test kernels (kernels.cu, embedded as PTX and JIT-compiled by the driver): fill a pitched
//! plane with a pattern derived from (seq, plane, x, y), count the bytes that differ from it,
//! and keep the GPU busy. [`pattern_byte`] is the same pattern computed on the host.
//!
//! The kernels of a device are loaded on first use into its context and kept there as the
//! device's attached resource (`ContextResource`): the device unloads them when it drops,
//! with its context current, before it releases the context. This module depends on the
//! device, never the reverse.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;

use crate::cuda::context::ContextGuard;
use crate::cuda::copy::{check_region, memset_d8_async};
use crate::cuda::device::{ContextResource, CudaDevice};
use crate::cuda::driver::{call, release};
use crate::cuda::stream::Stream;
use crate::error::{Error, Result};

/// PTX of kernels.cu (see the command at the top of that file), NUL-terminated for
/// `cuModuleLoadData`.
const PTX: &str = concat!(include_str!("kernels.ptx"), "\0");

const BLOCK: u32 = 256;

/// The kernels of one context, loaded once per [`CudaDevice`] and unloaded with it.
struct Kernels {
    module: sys::CUmodule,
    fill: sys::CUfunction,
    verify: sys::CUfunction,
    busy: sys::CUfunction,
    /// 4-byte device counters for `verify_pattern`, reused and freed only at unload: a
    /// `cuMemFree` per call would wait for all work on the device (found on the H200: it
    /// completed a loaded writer's event behind the reader's back, hiding the ordering the
    /// fence tests look at).
    counters: Mutex<Vec<sys::CUdeviceptr>>,
}

// SAFETY: the module and function handles are driver handles usable from any thread once the
// context is current there (every use pushes the device's context first); the counters are
// behind a Mutex.
unsafe impl Send for Kernels {}
// SAFETY: `&Kernels` only reads the handles (launches are thread-safe in the driver) and
// locks the counter pool.
unsafe impl Sync for Kernels {}

impl Kernels {
    /// Loads the module into the current context (the caller made it current).
    fn load() -> Result<Kernels> {
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `PTX` is NUL-terminated static text; `module` a valid out-pointer; the
        // caller made the context current.
        call("cuModuleLoadData", || unsafe {
            sys::cuModuleLoadData(&mut module, PTX.as_ptr() as *const c_void)
        })?;
        let get = |name: &'static str| -> Result<sys::CUfunction> {
            let mut f: sys::CUfunction = std::ptr::null_mut();
            let cname = std::ffi::CString::new(name).expect("no NUL in kernel names");
            // SAFETY: `module` was just loaded; `cname` is NUL-terminated and outlives the call.
            call("cuModuleGetFunction", || unsafe {
                sys::cuModuleGetFunction(&mut f, module, cname.as_ptr())
            })
            .map_err(|e| Error::new(e.code(), format!("{} ({name})", e.message())))?;
            Ok(f)
        };
        let funcs = (|| {
            Ok::<_, Error>((
                get("cuframes_fill_pattern")?,
                get("cuframes_verify_pattern")?,
                get("cuframes_busy")?,
            ))
        })();
        match funcs {
            Ok((fill, verify, busy)) => Ok(Kernels {
                module,
                fill,
                verify,
                busy,
                counters: Mutex::new(Vec::new()),
            }),
            Err(e) => {
                // SAFETY: the module loaded above, unloaded once (no Kernels owns it).
                release("cuModuleUnload", || unsafe { sys::cuModuleUnload(module) });
                Err(e)
            }
        }
    }

    /// Frees the counters and unloads the module (the owning device made its context
    /// current).
    fn unload(self) {
        let counters = self
            .counters
            .into_inner()
            .unwrap_or_else(|e| e.into_inner());
        for ptr in counters {
            // SAFETY: a counter from cuMemAlloc, owned by the pool and freed once, here.
            release("cuMemFree", || unsafe { sys::cuMemFree_v2(ptr) });
        }
        let module = self.module;
        // SAFETY: the module `load` loaded, unloaded once (`self` is consumed).
        release("cuModuleUnload", || unsafe { sys::cuModuleUnload(module) });
    }

    /// A free counter (allocated when none is; `cuMemAlloc` does not synchronise).
    fn take_counter(&self) -> Result<sys::CUdeviceptr> {
        let pooled = self
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        if let Some(ptr) = pooled {
            return Ok(ptr);
        }
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid out-pointer; the caller made the context current.
        call("cuMemAlloc", || unsafe { sys::cuMemAlloc_v2(&mut ptr, 4) })?;
        Ok(ptr)
    }

    fn put_counter(&self, ptr: sys::CUdeviceptr) {
        self.counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ptr);
    }
}

/// What a device keeps attached: its kernels, or why they did not load (not retried).
struct KernelSlot(Result<Kernels>);

impl ContextResource for KernelSlot {
    fn release(self: Box<Self>) {
        if let Ok(kernels) = self.0 {
            kernels.unload();
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The stream's device's kernels (loaded on first use), with the device's context current
/// until the guard drops.
fn kernels_for(stream: &Stream) -> Result<(ContextGuard, &Kernels)> {
    let dev: &Arc<CudaDevice> = stream.device().ok_or_else(|| {
        Error::invalid(
            "test kernels need a stream that knows its device (Stream::new or \
             Stream::from_raw_with_device)",
        )
    })?;
    let current = dev.push_current()?;
    let slot = dev
        .attached(|| KernelSlot(Kernels::load()))
        .ok_or_else(|| {
            Error::new(
                crate::ErrorCode::Cuda,
                "the device holds another attached resource than the test kernels",
            )
        })?;
    match &slot.0 {
        Ok(k) => Ok((current, k)),
        Err(e) => Err(e.clone()),
    }
}

fn launch(
    func: sys::CUfunction,
    grid: (u32, u32),
    block: u32,
    params: &mut [*mut c_void],
    stream: &Stream,
) -> Result<()> {
    let raw = stream.cu();
    // SAFETY: `func` is a kernel of the loaded module whose parameters `params` points to (one
    // pointer per parameter, in order, alive across the call: the driver copies them before
    // returning); the stream is live and its device's context current.
    call("cuLaunchKernel", || unsafe {
        sys::cuLaunchKernel(
            func,
            grid.0,
            grid.1,
            1,
            block,
            1,
            1,
            0,
            raw,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

/// A grid that covers row_bytes x rows with BLOCK-thread blocks (the kernels stride over
/// whatever the grid does not cover).
fn plane_grid(row_bytes: usize, rows: usize) -> (u32, u32) {
    let x = row_bytes.div_ceil(BLOCK as usize).clamp(1, 1024) as u32;
    let y = rows.clamp(1, 65535) as u32;
    (x, y)
}

/// Fills `rows` rows of `row_bytes` bytes (`pitch` apart) at `dev_ptr` with the pattern of
/// (`seq`, `plane`), queued on `stream`.
pub fn fill_pattern(
    dev_ptr: u64,
    pitch: usize,
    row_bytes: usize,
    rows: usize,
    seq: u64,
    plane: u32,
    stream: &Stream,
) -> Result<()> {
    check_region("fill_pattern", pitch, row_bytes, rows, None)?;
    if rows == 0 || row_bytes == 0 {
        return Ok(());
    }
    let (_current, k) = kernels_for(stream)?;
    let (mut base, mut pitch, mut row_bytes_u, mut rows_u, mut seq, mut plane) = (
        dev_ptr,
        pitch as u64,
        row_bytes as u64,
        rows as u64,
        seq,
        plane,
    );
    let mut params = [
        &mut base as *mut u64 as *mut c_void,
        &mut pitch as *mut u64 as *mut c_void,
        &mut row_bytes_u as *mut u64 as *mut c_void,
        &mut rows_u as *mut u64 as *mut c_void,
        &mut seq as *mut u64 as *mut c_void,
        &mut plane as *mut u32 as *mut c_void,
    ];
    launch(
        k.fill,
        plane_grid(row_bytes, rows),
        BLOCK,
        &mut params,
        stream,
    )
}

/// Counts the bytes of the region that differ from the pattern of (`seq`, `plane`). The
/// kernel runs on `stream` after the work already queued there; this waits for it and
/// returns the count (0 = bit-exact).
pub fn verify_pattern(
    dev_ptr: u64,
    pitch: usize,
    row_bytes: usize,
    rows: usize,
    seq: u64,
    plane: u32,
    stream: &Stream,
) -> Result<u64> {
    check_region("verify_pattern", pitch, row_bytes, rows, None)?;
    if rows == 0 || row_bytes == 0 {
        return Ok(0);
    }
    let (_current, k) = kernels_for(stream)?;
    let counter = k.take_counter()?;
    // On error the counter is not returned to the pool (the kernel may still be using it):
    // 4 bytes leak, in a context that is most likely unusable anyway.
    let mismatches = count_mismatches(
        k, counter, dev_ptr, pitch, row_bytes, rows, seq, plane, stream,
    )?;
    k.put_counter(counter);
    Ok(mismatches)
}

#[allow(clippy::too_many_arguments)]
fn count_mismatches(
    k: &Kernels,
    counter: sys::CUdeviceptr,
    dev_ptr: u64,
    pitch: usize,
    row_bytes: usize,
    rows: usize,
    seq: u64,
    plane: u32,
    stream: &Stream,
) -> Result<u64> {
    // SAFETY: `counter` is a 4-byte cuMemAlloc buffer of the kernels' own, freed only at
    // unload; the stream is live (borrowed from the caller).
    unsafe { memset_d8_async(counter, 0, 4, stream) }?;
    let (mut base, mut pitch, mut row_bytes_u, mut rows_u, mut seq, mut plane, mut out) = (
        dev_ptr,
        pitch as u64,
        row_bytes as u64,
        rows as u64,
        seq,
        plane,
        counter,
    );
    let mut params = [
        &mut base as *mut u64 as *mut c_void,
        &mut pitch as *mut u64 as *mut c_void,
        &mut row_bytes_u as *mut u64 as *mut c_void,
        &mut rows_u as *mut u64 as *mut c_void,
        &mut seq as *mut u64 as *mut c_void,
        &mut plane as *mut u32 as *mut c_void,
        &mut out as *mut u64 as *mut c_void,
    ];
    launch(
        k.verify,
        plane_grid(row_bytes, rows),
        BLOCK,
        &mut params,
        stream,
    )?;
    // Read the count back (not frame data: not counted as a host copy).
    let mut mismatches: u32 = 0;
    let raw = stream.cu();
    // SAFETY: `counter` is a 4-byte device buffer; `mismatches` is 4 bytes on this stack frame
    // and stays alive until the synchronize below has waited for the copy.
    call("cuMemcpyDtoHAsync", || unsafe {
        sys::cuMemcpyDtoHAsync_v2(&mut mismatches as *mut u32 as *mut c_void, counter, 4, raw)
    })?;
    stream.synchronize()?;
    Ok(u64::from(mismatches))
}

/// Queues a kernel that keeps one block of the GPU busy for `iterations` dependent
/// multiply-adds: device load for ordering tests. nvcc unrolls the loop by 4 and folds each 4
/// steps into one multiply-add, so an iteration costs well under a nanosecond; callers that
/// need a duration calibrate it by timing a run (the GPU tests do).
pub fn busy(stream: &Stream, iterations: u64) -> Result<()> {
    let (_current, k) = kernels_for(stream)?;
    let mut iterations = iterations;
    let mut params = [&mut iterations as *mut u64 as *mut c_void];
    launch(k.busy, (1, 1), 32, &mut params, stream)
}

/// The pattern byte at column `x`, row `y` of plane `plane` of frame `seq`: the host mirror
/// of `cf_pattern` in kernels.cu (same 32-bit wrapping arithmetic; x and y are truncated to
/// 32 bits as the kernel does).
pub fn pattern_byte(seq: u64, plane: u32, x: u64, y: u64) -> u8 {
    let (x, y) = (x as u32, y as u32);
    let mut h = (seq as u32) ^ ((seq >> 32) as u32).wrapping_mul(0x85EB_CA77);
    h = h
        .wrapping_mul(0x9E37_79B1)
        .wrapping_add(plane.wrapping_mul(0xC2B2_AE3D));
    h = (h ^ x).wrapping_mul(0x27D4_EB2F);
    h = (h ^ y).wrapping_mul(0x1656_67B1);
    h ^= h >> 15;
    h = h.wrapping_mul(0x2C1B_3C6D);
    h ^= h >> 13;
    (h ^ (h >> 8) ^ (h >> 16) ^ (h >> 24)) as u8
}

/// A host buffer of `(rows - 1) * pitch + row_bytes` bytes holding the pattern of (`seq`,
/// `plane`) in the image bytes and `pad` in the bytes between rows.
pub fn pattern_host(
    seq: u64,
    plane: u32,
    pitch: usize,
    row_bytes: usize,
    rows: usize,
    pad: u8,
) -> Vec<u8> {
    let len = if rows == 0 {
        0
    } else {
        (rows - 1) * pitch + row_bytes
    };
    let mut buf = vec![pad; len];
    for y in 0..rows {
        for x in 0..row_bytes {
            buf[y * pitch + x] = pattern_byte(seq, plane, x as u64, y as u64);
        }
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::driver_available;
    use crate::error::ErrorCode;

    #[test]
    fn ptx_has_the_three_kernels() {
        for name in [
            "cuframes_fill_pattern",
            "cuframes_verify_pattern",
            "cuframes_busy",
        ] {
            assert!(
                PTX.contains(&format!(".entry {name}(")),
                "kernels.ptx lacks {name}"
            );
        }
        assert!(PTX.ends_with('\0'));
    }

    #[test]
    fn pattern_is_deterministic_and_varies() {
        // Pinned values: a change here means kernels.cu must change too (and vice versa).
        let pinned = [
            pattern_byte(0, 0, 0, 0),
            pattern_byte(1, 0, 0, 0),
            pattern_byte(1, 1, 0, 0),
            pattern_byte(1, 0, 1, 0),
            pattern_byte(1, 0, 0, 1),
            pattern_byte(u64::MAX, 2, 1919, 1079),
        ];
        assert_eq!(pinned, PINNED);
        let row: Vec<u8> = (0..4096).map(|x| pattern_byte(7, 0, x, 3)).collect();
        let distinct = row.iter().collect::<std::collections::HashSet<_>>().len();
        assert!(distinct > 200, "pattern covers the byte range ({distinct})");
        let other: Vec<u8> = (0..4096).map(|x| pattern_byte(8, 0, x, 3)).collect();
        let same = row.iter().zip(&other).filter(|(a, b)| a == b).count();
        assert!(same < 64, "seq changes the pattern ({same} equal bytes)");
    }

    // Computed independently (Python, 32-bit masked arithmetic of kernels.cu's cf_pattern).
    const PINNED: [u8; 6] = [0, 61, 6, 107, 211, 55];

    #[test]
    fn host_pattern_respects_pitch_and_padding() {
        let buf = pattern_host(3, 1, 8, 5, 3, 0xEE);
        assert_eq!(buf.len(), 2 * 8 + 5);
        assert_eq!(buf[8 + 2], pattern_byte(3, 1, 2, 1));
        assert_eq!(buf[5..8], [0xEE; 3]);
    }

    #[test]
    fn kernels_need_a_device_stream() {
        // SAFETY: null is the legacy default stream; every call below is refused before the
        // driver is called.
        let s = unsafe { Stream::from_raw(std::ptr::null_mut()) };
        let e = fill_pattern(0x1000, 256, 256, 4, 1, 0, &s).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArg);
        assert_eq!(busy(&s, 10).unwrap_err().code(), ErrorCode::InvalidArg);
        let e = verify_pattern(0x1000, 128, 256, 4, 1, 0, &s).unwrap_err();
        assert_eq!(
            e.code(),
            ErrorCode::InvalidArg,
            "pitch < row_bytes refused first"
        );
        let _ = driver_available();
    }
}
