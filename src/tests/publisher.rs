//! The publisher handle under C callers that race or lie: opening a shared publisher while
//! another thread destroys its last handle, a stride whose rows overflow, and GOP store sizes
//! out of range or too late.

use std::ffi::c_int;
use std::sync::Arc;

use cuframes_core::publisher::{FrameRingConfig, Publisher, PublisherOptions};
use cuframes_core::wire::Format;
use cuframes_core::ErrorCode;

use crate::api::frame_ring::*;
use crate::api::publisher::*;

/// `cuframes_publisher_open_shared` while another thread destroys the key's last handle
/// (the filter and the muxer of one ffmpeg command closing and reopening): the open
/// waits for that publisher's end and makes a new one, instead of failing with
/// ALREADY_EXISTS ("share that publisher": exactly what it asked for).
#[test]
fn open_shared_beside_a_destroy_on_another_thread_succeeds() {
    let n = cuframes_core::testing::unique_suffix() & 0xFF_FFFF;
    let dir = std::env::temp_dir().join(format!("cuframes-shared-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = std::ffi::CString::new(format!("shared-{}-{n}", std::process::id())).unwrap();
    let dir_c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    let failures = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..300 {
                    // SAFETY: a zeroed options struct filled by options_default; the
                    // strings outlive the calls; the handle is destroyed once.
                    unsafe {
                        let mut opts = std::mem::zeroed::<CPublisherOptions>();
                        cuframes_publisher_options_default(&mut opts);
                        opts.runtime_dir = dir_c.as_ptr();
                        let mut p = std::ptr::null_mut();
                        if cuframes_publisher_open_shared(key.as_ptr(), &opts, &mut p) != 0 {
                            failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            continue;
                        }
                        // A ring makes the end take a while (as a filter's does).
                        let mut cfg = std::mem::zeroed::<CFrameRingConfig>();
                        cuframes_frame_ring_config_default(&mut cfg);
                        (cfg.width, cfg.height) = (64, 32);
                        let _ = cuframes_publisher_enable_frames(p, &cfg);
                        let (y, uv) = (vec![0u8; 64 * 32], vec![0u8; 64 * 16]);
                        let planes = [y.as_ptr(), uv.as_ptr()];
                        let _ = cuframes_publisher_publish_host(
                            p,
                            planes.as_ptr(),
                            [64usize, 64].as_ptr(),
                            2,
                            i64::MIN,
                        );
                        cuframes_publisher_destroy(p);
                    }
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
    let name = key.to_str().unwrap();
    let _ = cuframes_core::shm::unlink(&format!("cuframes-{name}"));
    assert_eq!(
        failures.into_inner(),
        0,
        "opens failed while another thread destroyed the last handle"
    );
}

/// A C caller's stride is not trusted: one whose rows do not fit in memory is refused
/// with INVALID_ARG naming the plane, never wrapped into a small span that a buffer of
/// the wrong size passes.
#[test]
fn a_stride_whose_rows_overflow_is_refused() {
    let n = cuframes_core::testing::unique_suffix() & 0xFF_FFFF;
    let dir = std::env::temp_dir().join(format!("cuframes-stride-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = format!("stride-{}-{n}", std::process::id());
    let options = PublisherOptions {
        runtime_dir: Some(dir.clone()),
        ..Default::default()
    };
    let publisher = Publisher::create(&key, options).unwrap();
    publisher
        .enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let mut p = CPublisher(Arc::new(publisher));
    let (y, uv) = (vec![0u8; 64 * 32], vec![0u8; 64 * 16]);
    let planes = [y.as_ptr(), uv.as_ptr()];
    // 31 rows of this stride wrap around to 15 bytes.
    let strides = [usize::MAX / 31 + 1, 64];
    assert_eq!(strides[0].wrapping_mul(31), 15);
    // SAFETY: `p` is a live handle; `planes` and `strides` hold 2 elements each.
    let rc =
        unsafe { cuframes_publisher_publish_host(&mut p, planes.as_ptr(), strides.as_ptr(), 2, 0) };
    // SAFETY: NUL-terminated, this thread's, copied before the next call.
    let message = unsafe { std::ffi::CStr::from_ptr(crate::api::library::cuframes_last_error()) }
        .to_string_lossy()
        .into_owned();
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(rc, ErrorCode::InvalidArg as c_int, "{message}");
    assert!(
        message.contains("plane 0") && message.contains("stride"),
        "{message}"
    );
}

/// `cuframes_publisher_set_gop_store`: a size out of range, a call after the first packet
/// and a NULL handle are refused with INVALID_ARG; 0 bytes (no store) and a valid size are
/// accepted before the first packet.
#[test]
fn the_gop_store_is_sized_before_the_first_packet_only() {
    use crate::api::packet::*;
    use cuframes_core::packet_ring::PacketRingConfig;
    let n = cuframes_core::testing::unique_suffix() & 0xFF_FFFF;
    let dir = std::env::temp_dir().join(format!("cuframes-gopstore-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = format!("gopstore-{}-{n}", std::process::id());
    let options = PublisherOptions {
        runtime_dir: Some(dir.clone()),
        ..Default::default()
    };
    let publisher = Publisher::create(&key, options).unwrap();
    publisher
        .enable_packets(PacketRingConfig {
            codec_id: cuframes_core::wire::CODEC_ID_H264,
            ..Default::default()
        })
        .unwrap();
    let mut p = CPublisher(Arc::new(publisher));
    // SAFETY: every call gets a live handle or NULL.
    let rcs = unsafe {
        [
            cuframes_publisher_set_gop_store(&mut p, 1 << 20, 0),
            cuframes_publisher_set_gop_store(&mut p, 1 << 20, 65_537),
            cuframes_publisher_set_gop_store(std::ptr::null_mut(), 1 << 20, 16),
            cuframes_publisher_set_gop_store(&mut p, 0, 0),
            cuframes_publisher_set_gop_store(&mut p, 1 << 20, 16),
        ]
    };
    let invalid = ErrorCode::InvalidArg as c_int;
    assert_eq!(rcs, [invalid, invalid, invalid, 0, 0]);
    p.0.publish_packet(&[0, 0, 0, 1, 0x65], 0, 0, 1).unwrap();
    // SAFETY: as above.
    let late = unsafe { cuframes_publisher_set_gop_store(&mut p, 0, 0) };
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(late, invalid);
}
