//! Every entry point that can run without a GPU, called successfully through the C ABI, one
//! after the other as a C program would: none may touch the thread's last error (a wrapper
//! that wrote it before the body ran would leave a stale message after a success).
//!
//! Not here, because they need a CUDA driver: `cuframes_cuda_primary_context`,
//! `cuframes_cuda_context_release`, `cuframes_publisher_publish_after_stream` and
//! `cuframes_publisher_publish_device`; they run under the same `ffi` wrappers and are
//! exercised by the FFmpeg frame path of `scripts/gpu-check.sh`.

use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

use cuframes_core::wire::{
    Format, MemoryKind, Policy, SubscriberMode, SUBSCRIBE_WANTS_FRAMES, SUBSCRIBE_WANTS_PACKETS,
};

use super::Scratch;
use crate::api::codec::*;
use crate::api::cuda::*;
use crate::api::frame::*;
use crate::api::frame_ring::*;
use crate::api::library::*;
use crate::api::packet::*;
use crate::api::publisher::*;
use crate::api::subscriber::*;
use crate::api::types::*;

const SAMPLE_H264: &[u8] = include_bytes!("../../fate-samples/test-25fps.h264");

fn last_error() -> String {
    // SAFETY: cuframes_last_error returns a NUL-terminated string of this thread's slot,
    // valid until the next failing call on this thread (none before we copy it).
    unsafe { CStr::from_ptr(cuframes_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn successful_calls_leave_the_last_error_untouched() {
    let tag = cuframes_core::testing::unique_suffix() & 0xFF_FFFF;
    let scratch = Scratch {
        dir: std::env::temp_dir().join(format!("cuframes-abi-{}-{tag}", std::process::id())),
        key: format!("abiok-{}-{tag}", std::process::id()),
    };
    std::fs::create_dir_all(&scratch.dir).unwrap();
    let dir = CString::new(scratch.dir.to_str().unwrap()).unwrap();
    let key = CString::new(scratch.key.as_str()).unwrap();

    // A failure first, so that there is something to overwrite.
    // SAFETY: NULL data with size 0 and a NULL out-pointer are allowed (the call fails).
    let rc = unsafe { cuframes_codec_video_info(9999, null(), 0, null_mut()) };
    assert!(rc < 0);
    let sentinel = last_error();
    assert!(!sentinel.is_empty());
    let mut called = std::collections::BTreeSet::new();
    let mut ok = |name: &str, rc: i64| {
        assert!(rc >= 0, "{name} failed ({rc}): {}", last_error());
        assert_eq!(
            last_error(),
            sentinel,
            "{name} succeeded and changed the last error"
        );
        called.insert(name.split(' ').next().unwrap().to_owned());
    };

    ok(
        "cuframes_protocol_version",
        cuframes_protocol_version() as i64,
    );
    ok("cuframes_strerror", cuframes_strerror(0).is_null() as i64);
    ok(
        "cuframes_host_copy_count",
        cuframes_host_copy_count() as i64,
    );
    ok(
        "cuframes_cuda_device_count",
        cuframes_cuda_device_count() as i64,
    );

    // Codec helpers on the real sample: its first access unit carries SPS and PPS.
    let (mut extradata, mut size) = (vec![0u8; 4096], 0usize);
    // SAFETY: `SAMPLE_H264` is readable for its length; `extradata` writable for its length.
    let rc = unsafe {
        cuframes_codec_keyframe_extradata(
            27,
            SAMPLE_H264.as_ptr(),
            SAMPLE_H264.len(),
            extradata.as_mut_ptr(),
            extradata.len(),
            &mut size,
        )
    };
    ok("cuframes_codec_keyframe_extradata", rc as i64);
    assert!(
        size > 0,
        "no parameter sets in the sample's first access unit"
    );
    extradata.truncate(size);
    let mut ring = vec![0u8; 4096];
    // SAFETY: as above.
    let rc = unsafe {
        cuframes_codec_ring_extradata(
            27,
            extradata.as_ptr(),
            extradata.len(),
            ring.as_mut_ptr(),
            ring.len(),
            &mut size,
        )
    };
    ok("cuframes_codec_ring_extradata", rc as i64);
    let mut info = CCodecVideoInfo::default();
    // SAFETY: `extradata` readable for its length; `info` a writable local.
    let rc =
        unsafe { cuframes_codec_video_info(27, extradata.as_ptr(), extradata.len(), &mut info) };
    ok("cuframes_codec_video_info", rc as i64);
    assert_eq!((info.width, info.height), (320, 240));

    // SAFETY: (every call in this block) each pointer is a live local of the type the
    // function takes, or a handle it returned and that is not destroyed yet; strings are
    // CStrings that outlive the calls.
    unsafe {
        let mut popts = std::mem::zeroed::<CPublisherOptions>();
        cuframes_publisher_options_default(&mut popts);
        ok("cuframes_publisher_options_default", 0);
        popts.runtime_dir = dir.as_ptr();
        let mut p = null_mut();
        ok(
            "cuframes_publisher_create",
            cuframes_publisher_create(key.as_ptr(), &popts, &mut p) as i64,
        );
        let mut shared = null_mut();
        ok(
            "cuframes_publisher_open_shared",
            cuframes_publisher_open_shared(key.as_ptr(), &popts, &mut shared) as i64,
        );
        cuframes_publisher_destroy(shared);
        ok("cuframes_publisher_destroy (shared handle)", 0);

        let mut fcfg = std::mem::zeroed::<CFrameRingConfig>();
        cuframes_frame_ring_config_default(&mut fcfg);
        ok("cuframes_frame_ring_config_default", 0);
        fcfg.format = Format::Nv12 as u32;
        fcfg.width = 64;
        fcfg.height = 32;
        fcfg.policy = Policy::StrictWait as u32;
        fcfg.memory_kind = MemoryKind::HostMemfd as u32;
        fcfg.colour = CColour {
            present: 1,
            sar_num: 16,
            sar_den: 11,
            range: 1,
            primaries: 6,
            transfer: 6,
            matrix: 6,
            chroma_location: 1,
            reserved: [0; 3],
        };
        ok(
            "cuframes_publisher_enable_frames",
            cuframes_publisher_enable_frames(p, &fcfg) as i64,
        );
        let mut layout = std::mem::zeroed::<CFrameLayout>();
        ok(
            "cuframes_publisher_frame_layout",
            cuframes_publisher_frame_layout(p, &mut layout) as i64,
        );
        let mut kcfg = std::mem::zeroed::<CPacketRingConfig>();
        cuframes_packet_ring_config_default(&mut kcfg);
        ok("cuframes_packet_ring_config_default", 0);
        kcfg.codec_id = 27;
        kcfg.extradata = ring.as_ptr();
        kcfg.extradata_size = size as u32;
        ok(
            "cuframes_publisher_enable_packets",
            cuframes_publisher_enable_packets(p, &kcfg) as i64,
        );
        ok(
            "cuframes_publisher_set_packet_extradata",
            cuframes_publisher_set_packet_extradata(p, ring.as_ptr(), size) as i64,
        );
        ok(
            "cuframes_publisher_set_gop_store",
            cuframes_publisher_set_gop_store(p, 1 << 20, 1024) as i64,
        );

        let name = CString::new("abi-ok").unwrap();
        let mut sopts = std::mem::zeroed::<CSubscriberOptions>();
        cuframes_subscriber_options_default(&mut sopts);
        ok("cuframes_subscriber_options_default", 0);
        sopts.runtime_dir = dir.as_ptr();
        sopts.name = name.as_ptr();
        sopts.mode = SubscriberMode::Copy as u32;
        sopts.flags = SUBSCRIBE_WANTS_FRAMES | SUBSCRIBE_WANTS_PACKETS;
        // Packets above 256 bytes are skipped (and counted in the stats, checked below).
        sopts.max_packet_size = 256;
        // Without a GPU there is nothing to make ready: OK, and no handle.
        let mut warm = null_mut();
        ok(
            "cuframes_subscriber_warm_up",
            cuframes_subscriber_warm_up(&sopts, &mut warm) as i64,
        );
        cuframes_cuda_context_release(warm);
        let mut s = null_mut();
        ok(
            "cuframes_subscriber_connect",
            cuframes_subscriber_connect(key.as_ptr(), &sopts, &mut s) as i64,
        );
        let mut slayout = std::mem::zeroed::<CFrameLayout>();
        ok(
            "cuframes_subscriber_frame_layout",
            cuframes_subscriber_frame_layout(s, &mut slayout) as i64,
        );
        let mut codec = 0u32;
        ok(
            "cuframes_subscriber_packet_codec",
            cuframes_subscriber_packet_codec(s, &mut codec) as i64,
        );
        assert_eq!(codec, 27);
        let (mut got, mut got_size) = (vec![0u8; 4096], 0usize);
        ok(
            "cuframes_subscriber_packet_extradata",
            cuframes_subscriber_packet_extradata(s, got.as_mut_ptr(), got.len(), &mut got_size)
                as i64,
        );
        assert_eq!(&got[..got_size], &ring[..size]);
        ok(
            "cuframes_subscriber_is_zero_copy",
            cuframes_subscriber_is_zero_copy(s) as i64,
        );
        ok(
            "cuframes_subscriber_memory_kind",
            cuframes_subscriber_memory_kind(s) as i64,
        );
        let mut colour = CColour::default();
        ok(
            "cuframes_subscriber_colour",
            cuframes_subscriber_colour(s, &mut colour) as i64,
        );
        assert_eq!(colour, fcfg.colour, "what the publisher announced");
        ok(
            "cuframes_publisher_subscriber_count",
            cuframes_publisher_subscriber_count(p) as i64,
        );
        // Connected, and its host slots mapped before connect returned.
        let ready = cuframes_publisher_ready_subscriber_count(p);
        ok("cuframes_publisher_ready_subscriber_count", ready as i64);
        assert_eq!(ready, 1);
        // The one subscriber reads both rings: counted by each.
        let ready_frames = cuframes_publisher_ready_frame_subscriber_count(p);
        ok(
            "cuframes_publisher_ready_frame_subscriber_count",
            ready_frames as i64,
        );
        assert_eq!(ready_frames, 1);
        let packets = cuframes_publisher_packet_subscriber_count(p);
        ok("cuframes_publisher_packet_subscriber_count", packets as i64);
        assert_eq!(packets, 1);
        let mut infos: [CSubscriberInfo; 2] = std::mem::zeroed();
        let n = cuframes_publisher_subscribers(p, infos.as_mut_ptr(), 2);
        ok("cuframes_publisher_subscribers", n as i64);
        assert_eq!(n, 1);

        // A frame through acquire/publish, one abandoned, one through publish_host.
        let mut slot = std::mem::zeroed::<CSlot>();
        ok(
            "cuframes_publisher_acquire",
            cuframes_publisher_acquire(p, &mut slot) as i64,
        );
        ok(
            "cuframes_publisher_publish",
            cuframes_publisher_publish(p, &slot, 1) as i64,
        );
        let mut waits = std::mem::zeroed::<CPublisherWaitStats>();
        ok(
            "cuframes_publisher_wait_stats",
            cuframes_publisher_wait_stats(p, &mut waits) as i64,
        );
        // A host ring with its slot free: nothing waited, nothing went through a stream.
        assert_eq!(
            (
                waits.ack_waits,
                waits.publication_waits,
                waits.stream_publications
            ),
            (0, 0, 0)
        );
        let mut frame = null_mut();
        ok(
            "cuframes_subscriber_next_frame",
            cuframes_subscriber_next_frame(s, 5000, &mut frame) as i64,
        );
        let mut finfo = std::mem::zeroed::<CFrameInfo>();
        ok(
            "cuframes_frame_info",
            cuframes_frame_info(frame, &mut finfo) as i64,
        );
        assert_eq!(finfo.seq, 1);
        let mut flayout = std::mem::zeroed::<CFrameLayout>();
        ok(
            "cuframes_frame_layout",
            cuframes_frame_layout(frame, &mut flayout) as i64,
        );
        assert_eq!((flayout.width, flayout.height), (64, 32));
        let mut fcolour = CColour::default();
        ok(
            "cuframes_frame_colour",
            cuframes_frame_colour(frame, &mut fcolour) as i64,
        );
        assert_eq!(fcolour, fcfg.colour);
        cuframes_frame_release(frame, null_mut());
        ok("cuframes_frame_release", 0);
        ok(
            "cuframes_publisher_acquire (to abandon)",
            cuframes_publisher_acquire(p, &mut slot) as i64,
        );
        cuframes_publisher_abandon(p, &slot);
        ok("cuframes_publisher_abandon", 0);
        let y = vec![0x10u8; 64 * 32];
        let uv = vec![0x80u8; 64 * 16];
        let planes: [*const u8; 2] = [y.as_ptr(), uv.as_ptr()];
        let strides: [usize; 2] = [64, 64];
        ok(
            "cuframes_publisher_publish_host",
            cuframes_publisher_publish_host(p, planes.as_ptr(), strides.as_ptr(), 2, 2) as i64,
        );
        ok(
            "cuframes_subscriber_next_frame (2)",
            cuframes_subscriber_next_frame(s, 5000, &mut frame) as i64,
        );
        cuframes_frame_release(frame, null_mut());
        let mut fstats = std::mem::zeroed::<CFrameStats>();
        ok(
            "cuframes_subscriber_stats",
            cuframes_subscriber_stats(s, &mut fstats) as i64,
        );
        assert_eq!(fstats.delivered, 2);
        ok(
            "cuframes_publisher_frame_seq",
            cuframes_publisher_frame_seq(p) as i64,
        );

        // A packet.
        let mut pseq = 0u64;
        ok(
            "cuframes_publisher_publish_packet",
            cuframes_publisher_publish_packet(p, SAMPLE_H264.as_ptr(), 256, 0, 0, 1, &mut pseq)
                as i64,
        );
        let (mut data, mut pinfo): (*const u8, CPacketInfo) = (null(), std::mem::zeroed());
        ok(
            "cuframes_subscriber_next_packet",
            cuframes_subscriber_next_packet(s, 5000, &mut data, &mut pinfo) as i64,
        );
        assert_eq!(pinfo.size, 256);
        // The same through the one-copy entry point, into a buffer of ours.
        ok(
            "cuframes_publisher_publish_packet",
            cuframes_publisher_publish_packet(p, SAMPLE_H264.as_ptr(), 128, 0, 0, 0, &mut pseq)
                as i64,
        );
        extern "C" fn into_vec(opaque: *mut std::ffi::c_void, size: usize) -> *mut u8 {
            // SAFETY: `opaque` is the Vec<u8> below, alive and unborrowed during the call.
            let v = unsafe { &mut *opaque.cast::<Vec<u8>>() };
            v.resize(size, 0);
            v.as_mut_ptr()
        }
        let mut into: Vec<u8> = Vec::new();
        ok(
            "cuframes_subscriber_next_packet_into",
            cuframes_subscriber_next_packet_into(
                s,
                5000,
                Some(into_vec),
                (&mut into as *mut Vec<u8>).cast(),
                &mut pinfo,
            ) as i64,
        );
        assert_eq!(pinfo.size, 128);
        assert_eq!(into, SAMPLE_H264[..128]);
        // A keyframe over max_packet_size: skipped, counted, and the next keyframe is read
        // flagged DISCONTINUITY.
        for size in [300usize, 64] {
            ok(
                "cuframes_publisher_publish_packet",
                cuframes_publisher_publish_packet(p, SAMPLE_H264.as_ptr(), size, 0, 0, 1, &mut pseq)
                    as i64,
            );
        }
        ok(
            "cuframes_subscriber_next_packet (after an oversized one)",
            cuframes_subscriber_next_packet(s, 5000, &mut data, &mut pinfo) as i64,
        );
        assert_eq!((pinfo.seq, pinfo.size), (pseq, 64));
        assert_ne!(
            pinfo.flags & cuframes_core::wire::PACKET_FLAG_DISCONTINUITY,
            0
        );
        let mut kstats = std::mem::zeroed::<CPacketStats>();
        ok(
            "cuframes_subscriber_packet_stats",
            cuframes_subscriber_packet_stats(s, &mut kstats) as i64,
        );
        assert_eq!((kstats.packets, kstats.oversized), (3, 1));

        // A new ring generation (the subscriber follows it on its next read).
        fcfg.width = 32;
        fcfg.policy = Policy::DropOldest as u32;
        ok(
            "cuframes_publisher_replace_frames",
            cuframes_publisher_replace_frames(p, &fcfg) as i64,
        );
        let mut player = std::mem::zeroed::<CFrameLayout>();
        cuframes_publisher_frame_layout(p, &mut player);
        assert_eq!(player.width, 32);
        cuframes_subscriber_destroy(s);
        ok("cuframes_subscriber_destroy", 0);
        cuframes_publisher_destroy(p);
        ok("cuframes_publisher_destroy", 0);
    }
    let _: *const c_char = cuframes_last_error();
    // Every exported function of the crate, from its sources: a new entry point must be
    // added above (or to NEEDS_CUDA) before this test passes again.
    let exported = exported_functions();
    assert!(exported.len() >= 40, "found only {exported:?}");
    let missing: Vec<_> = exported
        .iter()
        .filter(|f| {
            !called.contains(*f)
                && !NEEDS_CUDA.contains(&f.as_str())
                && !NEEDS_ANOTHER_PROCESS.contains(&f.as_str())
        })
        .filter(|f| *f != "cuframes_last_error")
        .collect();
    assert!(
        missing.is_empty(),
        "entry points not called here: {missing:?}"
    );
}

/// Succeed only for a publisher in another process, which has exited (here the publisher is
/// this process): covered by core/tests/publisher_exit.rs and tests/ffmpeg_frames.rs.
const NEEDS_ANOTHER_PROCESS: [&str; 1] = ["cuframes_subscriber_wait_publisher_exit"];

const NEEDS_CUDA: [&str; 8] = [
    // Succeed only for a CUDA ring or frame (NOT_FOUND for host memory).
    "cuframes_subscriber_cuda_device",
    "cuframes_frame_cuda_device",
    "cuframes_cuda_primary_context",
    "cuframes_cuda_context_release",
    "cuframes_publisher_publish_after_stream",
    "cuframes_publisher_publish_on_stream",
    "cuframes_publisher_publish_device",
    "cuframes_publisher_publish_device_async",
];

/// The `extern "C"` functions defined in the sources of `src/api/` (every file there, so a new
/// one is covered too).
fn exported_functions() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
    let sources: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let mut names = Vec::new();
    const DECL: &str = "extern \"C\" fn ";
    for src in &sources {
        for (at, _) in src.match_indices(DECL) {
            let name: String = src[at + DECL.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.push(name);
        }
    }
    names
}
