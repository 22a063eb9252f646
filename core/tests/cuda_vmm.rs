//! GPU tests of the CUDA layer: VMM memory exported as POSIX fds and imported in another
//! process (protocol v4 §3.7), bit-exact; granularity checks; pitched copies; the host-copy
//! counter; event ordering under device load.
//!
//! Every test first asks `driver_available()`; without a CUDA driver it prints
//! "SKIPPED (no CUDA driver): <reason>" and returns. The cross-process test re-executes this
//! test binary as the child (`child_process_entry`, `test_support::child`; its role is the
//! number of its end of a socketpair) and hands it the fds over that socketpair with
//! SCM_RIGHTS.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use cuframes_test_support::child;

use cuframes_core::cuda::{
    self, copy_2d_async, copy_dtoh_2d, copy_htod_2d_async, host_copy_count, memset_d8_async,
    CudaDevice, DeviceBuffer, Event, Stream, VmmAllocation, VmmImport,
};
use cuframes_core::format::FrameGeometry;
use cuframes_core::testing::{busy, fill_pattern, pattern_host, verify_pattern};
use cuframes_core::wire::Format;
use cuframes_core::ErrorCode;
use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};

const RING: usize = 2;
const SEQ_BASE: u64 = 0x1_0000_0041; // high bits set: the pattern uses all 64 bits of seq
const CHILD_SEQ_OFFSET: u64 = 1000;

/// One GPU test at a time: the host-copy counter is process-wide and timing tests want the
/// device to themselves.
static GPU: Mutex<()> = Mutex::new(());

fn gpu_lock() -> MutexGuard<'static, ()> {
    GPU.lock().unwrap_or_else(|e| e.into_inner())
}

/// Device 0, or None after printing why the test is skipped.
fn gpu() -> Option<Arc<CudaDevice>> {
    if let Err(e) = cuda::driver_available() {
        println!("SKIPPED (no CUDA driver): {e}");
        return None;
    }
    Some(CudaDevice::open(0).expect("open CUDA device 0"))
}

fn nv12_1080p() -> FrameGeometry {
    FrameGeometry::new(Format::Nv12, 1920, 1080).expect("NV12 1920x1080 layout")
}

fn fill_frame(base: u64, layout: &FrameGeometry, seq: u64, stream: &Stream) {
    for (i, p) in layout.planes().iter().enumerate() {
        fill_pattern(
            base + p.offset as u64,
            p.pitch,
            p.row_bytes,
            p.rows,
            seq,
            i as u32,
            stream,
        )
        .expect("fill_pattern");
    }
}

fn verify_frame(base: u64, layout: &FrameGeometry, seq: u64, stream: &Stream) -> u64 {
    layout
        .planes()
        .iter()
        .enumerate()
        .map(|(i, p)| {
            verify_pattern(
                base + p.offset as u64,
                p.pitch,
                p.row_bytes,
                p.rows,
                seq,
                i as u32,
                stream,
            )
            .expect("verify_pattern")
        })
        .sum()
}

fn image_bytes(layout: &FrameGeometry) -> u64 {
    layout
        .planes()
        .iter()
        .map(|p| (p.row_bytes * p.rows) as u64)
        .sum()
}

#[test]
fn driver_device_and_granularity() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let gran = dev.vmm_granularity().unwrap();
    println!(
        "driver {} devices {} device 0 '{}' VMM granularity {} bytes",
        cuda::driver_version().unwrap(),
        cuda::device_count().unwrap(),
        dev.name(),
        gran
    );
    assert!(cuda::device_count().unwrap() >= 1);
    assert!(gran.is_power_of_two());
    let a = VmmAllocation::create(&dev, 1).unwrap();
    assert_eq!(a.size(), gran);
    assert_eq!(a.granularity(), gran);
    assert_ne!(a.device_ptr(), 0);
    assert_eq!(
        a.device_ptr() % gran as u64,
        0,
        "mapped at a granular address"
    );
    let b = VmmAllocation::create(&dev, gran + 1).unwrap();
    assert_eq!(b.size(), 2 * gran);
    let (f1, f2) = (a.export_fd().unwrap(), a.export_fd().unwrap());
    assert_ne!(f1.as_raw_fd(), f2.as_raw_fd(), "a new fd per export");
    assert_eq!(
        VmmAllocation::create(&dev, 0).unwrap_err().code(),
        ErrorCode::InvalidArg
    );
}

/// Child side of `vmm_fd_shared_with_child_process_bit_exact`: a no-op unless started by it.
#[test]
fn child_process_entry() {
    let Some(fd) = child::role() else {
        return;
    };
    let fd: RawFd = fd.parse().expect("fd number");
    // SAFETY: the parent left this descriptor open for us; nothing else owns it.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    cuda::driver_available().expect("driver in the child");
    let dev = CudaDevice::open(0).expect("child: open device 0");

    // VMM_FDS-like message: fd_count u32, frame_size u64, granularity u64, seq_base u64.
    let mut payload = [0u8; 28];
    let mut cmsg = nix::cmsg_space!([RawFd; 16]);
    let fds: Vec<OwnedFd> = {
        let mut iov = [IoSliceMut::new(&mut payload)];
        let msg = recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::empty(),
        )
        .expect("child: recvmsg");
        assert_eq!(msg.bytes, 28, "whole payload in one message");
        let mut fds = Vec::new();
        for c in msg.cmsgs().expect("cmsgs") {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: SCM_RIGHTS gave this process new descriptors.
                fds.extend(raw.into_iter().map(|r| unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
        fds
    };
    let count = u32::from_le_bytes(payload[0..4].try_into().unwrap()) as usize;
    let size = u64::from_le_bytes(payload[4..12].try_into().unwrap()) as usize;
    let peer_gran = u64::from_le_bytes(payload[12..20].try_into().unwrap()) as usize;
    let seq_base = u64::from_le_bytes(payload[20..28].try_into().unwrap());
    assert_eq!(fds.len(), count, "fd_count matches the fds received");
    let gran = dev.vmm_granularity().unwrap();
    assert_eq!(gran, peer_gran, "same device, same granularity");

    let t = Instant::now();
    let imports: Vec<VmmImport> = fds
        .into_iter()
        .map(|fd| VmmImport::import(&dev, fd, size).expect("child: import"))
        .collect();
    let import_us = t.elapsed().as_micros();

    let layout = nv12_1080p();
    let stream = Stream::new(&dev).unwrap();
    let mut mismatches = 0u64;
    for (i, imp) in imports.iter().enumerate() {
        assert_eq!(imp.size(), size);
        mismatches += verify_frame(imp.device_ptr(), &layout, seq_base + i as u64, &stream);
    }
    // Write back through the shared memory: the parent checks it in its own mapping.
    for (i, imp) in imports.iter().enumerate() {
        fill_frame(
            imp.device_ptr(),
            &layout,
            seq_base + CHILD_SEQ_OFFSET + i as u64,
            &stream,
        );
    }
    stream.synchronize().unwrap(); // the §5 coherence barrier before telling the peer
    let copies = host_copy_count();
    let reply = format!("OK mismatches={mismatches} host_copies={copies} import_us={import_us}\n");
    let mut s = UnixStream::from(sock);
    s.write_all(reply.as_bytes()).unwrap();
    drop(imports); // unmap + address free + release, before the process exits
    println!("child: {}", reply.trim());
}

#[test]
fn vmm_fd_shared_with_child_process_bit_exact() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let layout = nv12_1080p();
    let stream = Stream::new(&dev).unwrap();
    let slots: Vec<VmmAllocation> = (0..RING)
        .map(|_| VmmAllocation::create(&dev, layout.frame_size).unwrap())
        .collect();
    let size = slots[0].size();
    let gran = slots[0].granularity();
    for (i, s) in slots.iter().enumerate() {
        // SAFETY: the test's own live allocations, in bounds, on its own stream.
        unsafe { memset_d8_async(s.device_ptr(), 0xA5, s.size(), &stream) }.unwrap();
        fill_frame(s.device_ptr(), &layout, SEQ_BASE + i as u64, &stream);
    }
    stream.synchronize().unwrap(); // §6 step 2 before the frames are "published"
    for (i, s) in slots.iter().enumerate() {
        assert_eq!(
            verify_frame(s.device_ptr(), &layout, SEQ_BASE + i as u64, &stream),
            0
        );
    }
    // The verifier is not vacuous: the wrong seq mismatches almost everywhere.
    let wrong = verify_frame(slots[0].device_ptr(), &layout, SEQ_BASE + 7, &stream);
    assert!(
        wrong > image_bytes(&layout) * 9 / 10,
        "wrong seq: {wrong} mismatches"
    );

    let (parent_end, child_end) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    let child_raw = child_end.as_raw_fd();
    let mut cmd = child::command_for("child_process_entry", &child_raw.to_string());
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    // SAFETY: fcntl is async-signal-safe; it only clears FD_CLOEXEC on the child's end.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(child_raw, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn the child test process");
    drop(child_end);

    let fds: Vec<OwnedFd> = slots.iter().map(|s| s.export_fd().unwrap()).collect();
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let mut payload = Vec::with_capacity(28);
    payload.extend_from_slice(&(RING as u32).to_le_bytes());
    payload.extend_from_slice(&(size as u64).to_le_bytes());
    payload.extend_from_slice(&(gran as u64).to_le_bytes());
    payload.extend_from_slice(&SEQ_BASE.to_le_bytes());
    let sent = sendmsg::<()>(
        parent_end.as_raw_fd(),
        &[IoSlice::new(&payload)],
        &[ControlMessage::ScmRights(&raw)],
        MsgFlags::empty(),
        None,
    )
    .expect("sendmsg SCM_RIGHTS");
    assert_eq!(sent, payload.len());
    drop(fds); // the kernel duplicated them into the child

    let mut reply = String::new();
    UnixStream::from(parent_end)
        .read_to_string(&mut reply)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    println!(
        "--- child stdout ---\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    println!(
        "--- child stderr ---\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed: {:?}", out.status);
    println!(
        "parent: granularity {gran}, frame {} bytes mapped as {size}, reply: {}",
        layout.frame_size,
        reply.trim()
    );
    assert!(
        reply.starts_with("OK mismatches=0 host_copies=0 "),
        "child reply: {reply}"
    );

    // The child's writes are visible here bit for bit, and our mappings outlived its exit.
    for (i, s) in slots.iter().enumerate() {
        let m = verify_frame(
            s.device_ptr(),
            &layout,
            SEQ_BASE + CHILD_SEQ_OFFSET + i as u64,
            &stream,
        );
        assert_eq!(m, 0, "slot {i}: child's pattern after the child exited");
    }
}

#[test]
fn import_refuses_sizes_off_the_granularity() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let gran = dev.vmm_granularity().unwrap();
    let a = VmmAllocation::create(&dev, gran).unwrap();
    for bad in [gran + 4096, gran / 2, gran - 1, 0] {
        let e = VmmImport::import(&dev, a.export_fd().unwrap(), bad).unwrap_err();
        assert_eq!(e.code(), ErrorCode::Protocol, "size {bad}: {e}");
        println!("size {bad}: {e}");
    }
    // A granular size larger than the allocation gets past the check and the driver refuses
    // the mapping.
    match VmmImport::import(&dev, a.export_fd().unwrap(), 2 * gran) {
        Err(e) => {
            assert_eq!(e.code(), ErrorCode::Cuda);
            println!("size {} (> allocation): {e}", 2 * gran);
        }
        Ok(_) => panic!("mapping twice the allocation's size succeeded"),
    }
}

#[test]
fn import_in_the_same_process_aliases_the_memory() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let gran = dev.vmm_granularity().unwrap();
    let stream = Stream::new(&dev).unwrap();
    let a = VmmAllocation::create(&dev, gran).unwrap();
    fill_pattern(a.device_ptr(), 4096, 4096, gran / 4096, 77, 0, &stream).unwrap();
    stream.synchronize().unwrap();
    let imp = VmmImport::import(&dev, a.export_fd().unwrap(), gran).unwrap();
    println!(
        "allocation at {:#x}, import at {:#x}",
        a.device_ptr(),
        imp.device_ptr()
    );
    assert_ne!(imp.device_ptr(), a.device_ptr(), "a second mapping");
    assert_eq!(
        verify_pattern(imp.device_ptr(), 4096, 4096, gran / 4096, 77, 0, &stream).unwrap(),
        0
    );
    drop(imp);
    // The allocation's own mapping is unaffected by releasing the import.
    assert_eq!(
        verify_pattern(a.device_ptr(), 4096, 4096, gran / 4096, 77, 0, &stream).unwrap(),
        0
    );
}

#[test]
fn copy_2d_round_trip_is_bit_exact() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let stream = Stream::new(&dev).unwrap();
    let (row_bytes, rows, seq, plane) = (1000usize, 300usize, 42u64, 1u32);
    let host_pitch = 1024;
    let src = pattern_host(seq, plane, host_pitch, row_bytes, rows, 0x11);

    // host -> device buffer (pitch 1536) -> VMM slot (pitch 2048) -> device buffer (1280)
    let a = DeviceBuffer::new(&dev, 1536 * rows).unwrap();
    let vmm = VmmAllocation::create(&dev, 2048 * rows).unwrap();
    let b = DeviceBuffer::new(&dev, 1280 * rows).unwrap();
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe {
        copy_htod_2d_async(
            a.device_ptr(),
            1536,
            &src,
            host_pitch,
            row_bytes,
            rows,
            &stream,
        )
    }
    .unwrap();
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe {
        copy_2d_async(
            vmm.device_ptr(),
            2048,
            a.device_ptr(),
            1536,
            row_bytes,
            rows,
            &stream,
        )
    }
    .unwrap();
    // The device kernel and the host mirror agree (and the copies kept every byte).
    assert_eq!(
        verify_pattern(vmm.device_ptr(), 2048, row_bytes, rows, seq, plane, &stream).unwrap(),
        0
    );
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe {
        copy_2d_async(
            b.device_ptr(),
            1280,
            vmm.device_ptr(),
            2048,
            row_bytes,
            rows,
            &stream,
        )
    }
    .unwrap();
    let out_pitch = 1100;
    let mut out = vec![0xEEu8; out_pitch * rows];
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe {
        copy_dtoh_2d(
            &mut out,
            out_pitch,
            b.device_ptr(),
            1280,
            row_bytes,
            rows,
            &stream,
        )
    }
    .unwrap();
    for y in 0..rows {
        assert_eq!(
            out[y * out_pitch..y * out_pitch + row_bytes],
            src[y * host_pitch..y * host_pitch + row_bytes],
            "row {y}"
        );
        assert!(
            out[y * out_pitch + row_bytes..(y + 1) * out_pitch]
                .iter()
                .all(|&v| v == 0xEE),
            "padding of row {y} untouched"
        );
    }

    // A device-filled plane downloads as the host mirror computes it.
    fill_pattern(vmm.device_ptr(), 2048, 1920, rows, u64::MAX - 3, 2, &stream).unwrap();
    let mut got = vec![0u8; 1920 * rows];
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe { copy_dtoh_2d(&mut got, 1920, vmm.device_ptr(), 2048, 1920, rows, &stream) }.unwrap();
    assert_eq!(got, pattern_host(u64::MAX - 3, 2, 1920, 1920, rows, 0));

    // memset, then a download of the region.
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe { memset_d8_async(b.device_ptr(), 0x5A, 1280 * rows, &stream) }.unwrap();
    let mut m = vec![0u8; 1280 * rows];
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe { copy_dtoh_2d(&mut m, 1280, b.device_ptr(), 1280, 1280, rows, &stream) }.unwrap();
    assert!(m.iter().all(|&v| v == 0x5A));

    // Out-of-bounds host slices are refused.
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    let e = unsafe { copy_dtoh_2d(&mut m[..100], 1280, b.device_ptr(), 1280, 1280, 2, &stream) }
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArg);
}

#[test]
fn host_copy_counter_counts_only_host_copies() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let stream = Stream::new(&dev).unwrap();
    let vmm = VmmAllocation::create(&dev, 1).unwrap();
    let buf = DeviceBuffer::new(&dev, 4096 * 64).unwrap();
    let c0 = host_copy_count();
    // The CUDA path: fill, device copy, verify, memset -- no host copy.
    fill_pattern(vmm.device_ptr(), 4096, 4000, 64, 5, 0, &stream).unwrap();
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe {
        copy_2d_async(
            buf.device_ptr(),
            4096,
            vmm.device_ptr(),
            4096,
            4000,
            64,
            &stream,
        )
    }
    .unwrap();
    assert_eq!(
        verify_pattern(buf.device_ptr(), 4096, 4000, 64, 5, 0, &stream).unwrap(),
        0
    );
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe { memset_d8_async(buf.device_ptr(), 0, 4096, &stream) }.unwrap();
    stream.synchronize().unwrap();
    assert_eq!(host_copy_count(), c0, "no host copy on the CUDA path");
    let host = vec![1u8; 4096 * 64];
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe { copy_htod_2d_async(buf.device_ptr(), 4096, &host, 4096, 4096, 64, &stream) }.unwrap();
    assert_eq!(host_copy_count(), c0 + 1);
    let mut back = vec![0u8; 4096 * 64];
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe { copy_dtoh_2d(&mut back, 4096, buf.device_ptr(), 4096, 4096, 64, &stream) }.unwrap();
    assert_eq!(host_copy_count(), c0 + 2);
    assert_eq!(back, host);
    println!("host copies: {} -> {}", c0, host_copy_count());
}

#[test]
fn event_orders_the_reader_after_the_writer_under_load() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    let writer = Stream::new(&dev).unwrap();
    let reader = Stream::new(&dev).unwrap();
    let vmm = VmmAllocation::create(&dev, 1).unwrap();
    let (pitch, row_bytes, rows) = (4096usize, 4096usize, 256usize);
    // Warm up (module JIT, first launches, verify's pooled counter: allocating it during the
    // race must not be what orders it), then calibrate a load of about 100 ms.
    busy(&writer, 1000).unwrap();
    writer.synchronize().unwrap();
    verify_pattern(vmm.device_ptr(), pitch, row_bytes, rows, 0, 0, &reader).unwrap();
    let probe = 20_000_000u64;
    let t = Instant::now();
    busy(&writer, probe).unwrap();
    writer.synchronize().unwrap();
    let probe_s = t.elapsed().as_secs_f64();
    let load = ((probe as f64 * 0.1 / probe_s) as u64).clamp(probe, 1 << 34);
    let t = Instant::now();
    busy(&writer, load).unwrap();
    writer.synchronize().unwrap();
    println!(
        "busy({probe}) took {:.2} ms; load busy({load}) took {:.1} ms",
        probe_s * 1e3,
        t.elapsed().as_secs_f64() * 1e3
    );

    let ev = Event::new(&dev).unwrap();
    assert!(
        ev.query().unwrap(),
        "a never-recorded event counts as complete"
    );

    // Without the acquire wait the reader races ahead of the loaded writer.
    // SAFETY: the test's own live allocations, in bounds, on its own stream.
    unsafe { memset_d8_async(vmm.device_ptr(), 0, vmm.size(), &writer) }.unwrap();
    writer.synchronize().unwrap();
    busy(&writer, load).unwrap();
    fill_pattern(vmm.device_ptr(), pitch, row_bytes, rows, 9, 0, &writer).unwrap();
    ev.record(&writer).unwrap();
    let raced = verify_pattern(vmm.device_ptr(), pitch, row_bytes, rows, 9, 0, &reader).unwrap();
    let pending = !ev.query().unwrap();
    writer.synchronize().unwrap();
    println!("no wait: {raced} mismatches, event pending after the read: {pending}");
    assert!(raced > 0, "a skipped acquire wait is seen under load");
    assert!(pending);

    // With it, the reader sees the whole frame.
    busy(&writer, load).unwrap();
    fill_pattern(vmm.device_ptr(), pitch, row_bytes, rows, 10, 0, &writer).unwrap();
    ev.record(&writer).unwrap();
    assert!(!ev.query().unwrap(), "pending while the writer is loaded");
    reader.wait_event(&ev).unwrap();
    let ordered = verify_pattern(vmm.device_ptr(), pitch, row_bytes, rows, 10, 0, &reader).unwrap();
    assert_eq!(ordered, 0, "acquire before read");
    assert!(ev.query().unwrap());
    ev.synchronize().unwrap();
    println!("with wait_event: {ordered} mismatches");
}

#[test]
fn borrowed_context_and_stream() {
    let _g = gpu_lock();
    let Some(dev) = gpu() else { return };
    // A caller-owned context (here: the primary one, kept alive by `dev`).
    // SAFETY: the primary context, kept alive by `dev` for longer than `borrowed` lives.
    let borrowed = unsafe { CudaDevice::from_context(dev.context(), 0) }.unwrap();
    assert_eq!(borrowed.name(), dev.name());
    let own = Stream::new(&borrowed).unwrap();
    // SAFETY: `own` is a live stream of `borrowed`'s context and outlives `s`.
    let s = unsafe { Stream::from_raw_with_device(&borrowed, own.raw()) };
    let buf = DeviceBuffer::new(&borrowed, 1 << 20).unwrap();
    fill_pattern(buf.device_ptr(), 1024, 1024, 1024, 3, 0, &s).unwrap();
    assert_eq!(
        verify_pattern(buf.device_ptr(), 1024, 1024, 1024, 3, 0, &s).unwrap(),
        0
    );
    drop(s); // borrowed: not destroyed
    own.synchronize().unwrap();
    drop(buf);
    drop(borrowed); // does not release the primary context `dev` holds
    dev.make_current().unwrap();
    let e = CudaDevice::open(cuda::device_count().unwrap()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Cuda, "{e}");
}
