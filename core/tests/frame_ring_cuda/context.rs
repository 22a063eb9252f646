//! Context hygiene: no call of the library replaces the caller's current context.

use cuframes_test_support as common;

use std::ffi::c_void;
use std::time::Duration;

use common::{
    cuda_copy_options, cuda_publisher, cuda_ring, cuda_zero_copy_accepting_overwrite, gpu_or_skip,
    TestEnv, CU_STREAM_LEGACY,
};
use cuframes_core::cuda::{self, CudaDevice, DeviceBuffer, Event, Stream};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::testing;
use cuframes_core::testing::deferred;
use cuframes_core::wire::Policy;

/// A context the test creates itself (cuCtxCreate), destroyed on drop: stands for a caller's
/// own context (FFmpeg without the primary-context flag).
struct CallerContext(cudarc::driver::sys::CUcontext);

impl CallerContext {
    /// Creates a context on device 0; cuCtxCreate makes it current on this thread.
    fn create() -> CallerContext {
        use cudarc::driver::sys;
        let mut dev: sys::CUdevice = 0;
        // SAFETY: valid out-pointer; the driver is loaded (gpu_or_skip() checked it).
        let r = unsafe { sys::cuDeviceGet(&mut dev, 0) };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // cuCtxCreate_v4 (CUDA >= 12.5 drivers, the only variant in CUDA 13's header) with no
        // parameters; cuCtxCreate_v2 where the driver lacks it (cudarc panics on a missing
        // symbol).
        let v4 = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: valid out-pointer; null parameters are allowed.
            unsafe { sys::cuCtxCreate_v4(&mut ctx, std::ptr::null_mut(), 0, dev) }
        }));
        let r = match v4 {
            Ok(r) => r,
            // SAFETY: valid out-pointer.
            Err(_) => unsafe { sys::cuCtxCreate_v2(&mut ctx, 0, dev) },
        };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "cuCtxCreate");
        CallerContext(ctx)
    }
}

impl Drop for CallerContext {
    fn drop(&mut self) {
        // SAFETY: created by `create`, destroyed once.
        let r = unsafe { cudarc::driver::sys::cuCtxDestroy_v2(self.0) };
        if !std::thread::panicking() {
            assert_eq!(
                r,
                cudarc::driver::sys::CUresult::CUDA_SUCCESS,
                "cuCtxDestroy"
            );
        }
    }
}

/// No call (copies, null-stream publish paths, teardown) leaves the caller's current context
/// replaced: every call pushes the ring's context and pops it again.
#[test]
fn no_call_replaces_the_callers_current_context() {
    let Some(_gpu) = gpu_or_skip() else {
        return;
    };
    let caller = CallerContext::create();
    let check = |what: &str| {
        let current = cuda::current_context().unwrap();
        assert_eq!(
            current, caller.0 as *mut c_void,
            "{what} replaced the caller's current context"
        );
    };
    check("cuCtxCreate");
    let env = TestEnv::new("ctx");
    let p = cuda_publisher(&env, cuda_ring(4, Policy::StrictWait));
    check("enable_frames (CUDA ring)");
    let mut zc = Subscriber::connect(
        &env.key,
        &cuda_zero_copy_accepting_overwrite(&env, "ctx-zc"),
    )
    .unwrap();
    check("connect (ZERO_COPY)");
    let mut cp = Subscriber::connect(&env.key, &cuda_copy_options(&env, "ctx-copy")).unwrap();
    check("connect (COPY)");
    assert!(zc.is_zero_copy() && !cp.is_zero_copy());
    let layout = p.frame_layout().unwrap().clone();
    let wait = Some(Duration::from_secs(10));

    // HtoD copies (the library's stream).
    let dense: Vec<Vec<u8>> = layout
        .planes()
        .iter()
        .map(|pl| vec![0x33; pl.row_bytes * pl.rows])
        .collect();
    let planes: Vec<&[u8]> = dense.iter().map(Vec::as_slice).collect();
    let strides: Vec<usize> = layout.planes().iter().map(|pl| pl.row_bytes).collect();
    p.publish_host_planes(&planes, &strides, None).unwrap();
    check("publish_host_planes (HtoD copies)");
    let f = cp.next_frame(wait).unwrap();
    check("COPY read (DtoD copy)");
    // SAFETY: CU_STREAM_LEGACY with the caller's context (of device 0) current.
    unsafe { f.release_after_stream(CU_STREAM_LEGACY) };
    check("release_after_stream(CU_STREAM_LEGACY) of a COPY frame");
    let z = zc.next_frame(wait).unwrap();
    check("zero-copy read");
    drop(z);
    check("zero-copy drop (synchronises the ring's context)");

    // DtoD copies on the library's stream, from device memory of the ring's device.
    let dev = CudaDevice::open(0).unwrap();
    check("CudaDevice::open");
    let src = DeviceBuffer::new(&dev, layout.frame_size).unwrap();
    let own = Stream::new(&dev).unwrap();
    let ev = Event::new(&dev).unwrap();
    check("DeviceBuffer/Stream/Event::new");
    testing::fill_pattern(src.device_ptr(), 256, 256, 8, 1, 0, &own).unwrap();
    ev.record(&own).unwrap();
    own.synchronize().unwrap();
    check("fill_pattern, Event::record, Stream::synchronize");
    let ptrs: Vec<u64> = layout
        .planes()
        .iter()
        .map(|pl| src.device_ptr() + pl.offset as u64)
        .collect();
    let pitches: Vec<usize> = layout.planes().iter().map(|pl| pl.pitch).collect();
    // SAFETY: the planes are `src`, a live device buffer of a whole frame; the null stream.
    unsafe { p.publish_device_planes(&ptrs, &pitches, None, None) }.unwrap();
    check("publish_device_planes (DtoD, the library's stream)");
    drop(cp.next_frame(wait).unwrap());
    check("COPY read and drop");
    let z = zc.next_frame(wait).unwrap();
    // SAFETY: CU_STREAM_LEGACY with the caller's context (of device 0) current.
    unsafe { z.release_after_stream(CU_STREAM_LEGACY) };
    check("release_after_stream(CU_STREAM_LEGACY) of a zero-copy frame");

    // Null-stream publish (synchronises the ring's legacy stream).
    let slot = p.acquire().unwrap();
    check("acquire");
    p.publish_after_stream(slot, None, None).unwrap();
    check("publish_after_stream(NULL)");
    drop(cp.next_frame(wait).unwrap());
    let z = zc.next_frame(wait).unwrap();
    // SAFETY: `own` is a live stream of the frame's device.
    unsafe { z.release_after_stream(own.raw()) };
    check("release_after_stream(library-made stream)");

    // Teardown: subscribers, publisher, the release thread's work, our own objects.
    drop(zc);
    drop(cp);
    check("subscriber teardown");
    drop(p);
    check("publisher teardown");
    own.synchronize().unwrap();
    // SAFETY: CU_STREAM_LEGACY with the caller's context current: its legacy stream, where
    // two host functions were enqueued.
    unsafe { Stream::from_raw(CU_STREAM_LEGACY) }
        .synchronize()
        .unwrap();
    check("Stream::from_raw(CU_STREAM_LEGACY).synchronize");
    deferred::flush();
    drop((ev, own, src));
    drop(dev);
    check("teardown of streams, events, buffers and the device");
    drop(caller);
}
