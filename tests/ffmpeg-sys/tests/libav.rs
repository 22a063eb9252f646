//! The cuframes components as an application sees them through libavformat, libavdevice and
//! libavfilter (ffmpeg-sys-next bindings generated from the FFmpeg under test): codec ids
//! from that FFmpeg's own AVCodecID (the wire's 27/173/226 mapped), extradata, packet flags
//! and timestamps from the demuxer; packets through the muxer; frames from the input device
//! (host ring here, CUDA frames with hw_frames_ctx on a GPU machine); the filter in a graph
//! built through the API; and no subscriber left behind by a failed avformat_open_input.

use std::ffi::{CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cuframes_ffmpeg_sys_tests::{
    av_err, cf, ff, have_cuda, last_error, Input, Options, Packet, Publisher, World,
};

const NS: i64 = 1_000_000_000;

/// `flags & bit`, whatever integer type this FFmpeg's bindings give the AV_PKT_FLAG_* bits.
fn has_flag<T: Into<i64>>(flags: i32, bit: T) -> bool {
    i64::from(flags) & bit.into() != 0
}

/// An AV_PKT_FLAG_* bit as AVPacket.flags' type.
fn flag_bit<T: Into<i64>>(bit: T) -> i32 {
    bit.into() as i32
}

fn averror(e: i32) -> i32 {
    -e
}

fn enable_packets(p: &Publisher, codec: u32, extradata: &[u8]) {
    // SAFETY: defaults then our fields; extradata outlives the call (copied into the ring).
    unsafe {
        let mut c: cf::cuframes_packet_ring_config_t = std::mem::zeroed();
        cf::cuframes_packet_ring_config_default(&mut c);
        c.codec_id = codec;
        c.extradata = extradata.as_ptr();
        c.extradata_size = extradata.len() as u32;
        let rc = cf::cuframes_publisher_enable_packets(p.0, &c);
        assert_eq!(rc, 0, "enable_packets: {}", last_error());
    }
}

fn publish_packet(p: &Publisher, data: &[u8], pts: i64, dts: i64, flags: u32) {
    // SAFETY: a live publisher; data is read during the call only.
    let rc = unsafe {
        cf::cuframes_publisher_publish_packet(
            p.0,
            data.as_ptr(),
            data.len(),
            pts,
            dts,
            flags,
            ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "publish_packet: {}", last_error());
}

/// The `cuframes_flags` entry of a packet's AV_PKT_DATA_STRINGS_METADATA, if any.
fn ring_flags_side_data(pkt: &Packet) -> Option<u32> {
    let mut size = 0usize;
    // SAFETY: a packet read by av_read_frame; the side data lives as long as the packet.
    unsafe {
        let sd = ff::av_packet_get_side_data(
            pkt.0,
            ff::AVPacketSideDataType::AV_PKT_DATA_STRINGS_METADATA,
            &mut size,
        );
        if sd.is_null() {
            return None;
        }
        let mut d = ptr::null_mut();
        assert!(ff::av_packet_unpack_dictionary(sd, size, &mut d) >= 0);
        let d = Options(d);
        let k = CString::new("cuframes_flags").unwrap();
        let e = ff::av_dict_get(d.0, k.as_ptr(), ptr::null(), 0);
        if e.is_null() {
            return None;
        }
        let v = CStr::from_ptr((*e).value).to_str().unwrap().to_owned();
        Some(u32::from_str_radix(v.trim_start_matches("0x"), 16).unwrap())
    }
}

/// One codec through the demuxer: the wire id becomes this FFmpeg's AVCodecID, the ring's
/// extradata is codecpar's, flags and timestamps arrive as AVPacket fields / side data.
fn demux_codec(wire: u32, want: ff::AVCodecID, name: &str) {
    let mut w = World::new(name);
    let key = w.key(name);
    let p = Publisher::new(&w, &key);
    let extradata = [0u8, 0, 0, 1, 0x42, 0x17, 0x99, 0x10];
    enable_packets(&p, wire, &extradata);

    let mut input = Input::open(
        "cuframes_pkt",
        &key,
        &[("runtime_dir", w.runtime_dir()), ("timebase", "1/1000")],
    )
    .unwrap_or_else(|e| panic!("avformat_open_input cuframes_pkt: {}", av_err(e)));
    let par = input.codecpar(0);
    assert_eq!(
        par.codec_id, want,
        "wire codec {wire} must be this FFmpeg's {want:?} ({})",
        want as u32
    );
    assert_eq!(par.codec_type, ff::AVMediaType::AVMEDIA_TYPE_VIDEO);
    // SAFETY: codecpar's extradata holds extradata_size bytes.
    let got = unsafe { std::slice::from_raw_parts(par.extradata, par.extradata_size as usize) };
    assert_eq!(got, extradata, "codecpar extradata");
    let tb = input.stream(0).time_base;
    assert_eq!((tb.num, tb.den), (1, 1000));

    use cf::{
        CUFRAMES_PACKET_FLAG_CORRUPT as CORRUPT, CUFRAMES_PACKET_FLAG_DISCONTINUITY as DISCONT,
        CUFRAMES_PACKET_FLAG_KEY as KEY,
    };
    // (payload, pts ms, dts ms, ring flags)
    let sent: [(&[u8], i64, i64, u32); 4] = [
        (b"\x00\x00\x00\x01key-zero", 80, 0, KEY),
        (b"\x00\x00\x00\x01delta-one", 40, 40, 0),
        (b"\x00\x00\x00\x01after-gap", 1040, 1000, DISCONT),
        (b"\x00\x00\x00\x01key-damaged", 1120, 1040, KEY | CORRUPT),
    ];
    for (data, pts, dts, flags) in sent {
        publish_packet(&p, data, pts * NS / 1000, dts * NS / 1000, flags);
    }
    let mut pkt = Packet::new();
    for (i, (data, pts, dts, flags)) in sent.iter().enumerate() {
        let rc = input.read(&mut pkt);
        assert!(rc >= 0, "packet {i}: {}", av_err(rc));
        let got = pkt.get();
        assert_eq!(pkt.data(), *data, "packet {i} payload");
        assert_eq!(
            (got.pts, got.dts),
            (*pts, *dts),
            "packet {i} timestamps (ms)"
        );
        assert_eq!(
            has_flag(got.flags, ff::AV_PKT_FLAG_KEY),
            flags & KEY != 0,
            "packet {i} AV_PKT_FLAG_KEY"
        );
        assert_eq!(
            has_flag(got.flags, ff::AV_PKT_FLAG_CORRUPT),
            flags & CORRUPT != 0,
            "packet {i} AV_PKT_FLAG_CORRUPT"
        );
        // DISCONTINUITY has no AVPacket flag: side data (R15).
        let sd = ring_flags_side_data(&pkt);
        if flags & DISCONT != 0 {
            assert_eq!(sd, Some(*flags), "packet {i} side data");
        } else {
            assert_eq!(sd, None, "packet {i} side data");
        }
        pkt.unref();
    }
    println!(
        "{name}: wire {wire} -> AVCodecID {} ({want:?})",
        want as u32
    );
}

#[test]
fn demuxer_h264() {
    demux_codec(
        cf::CUFRAMES_CODEC_ID_H264,
        ff::AVCodecID::AV_CODEC_ID_H264,
        "h264",
    );
}

#[test]
fn demuxer_hevc() {
    demux_codec(
        cf::CUFRAMES_CODEC_ID_HEVC,
        ff::AVCodecID::AV_CODEC_ID_HEVC,
        "hevc",
    );
}

#[test]
fn demuxer_av1() {
    demux_codec(
        cf::CUFRAMES_CODEC_ID_AV1,
        ff::AVCodecID::AV_CODEC_ID_AV1,
        "av1",
    );
}

/// A subscriber of `key` through the C ABI, retrying until the publisher is there.
fn subscribe(runtime_dir: &CStr, key: &str, flags: u32) -> *mut cf::cuframes_subscriber_t {
    let k = CString::new(key).unwrap();
    let name = CString::new("libav-test").unwrap();
    for _ in 0..500 {
        // SAFETY: defaults then our fields; the strings outlive the call.
        unsafe {
            let mut o: cf::cuframes_subscriber_options_t = std::mem::zeroed();
            cf::cuframes_subscriber_options_default(&mut o);
            o.runtime_dir = runtime_dir.as_ptr();
            o.name = name.as_ptr();
            o.flags = flags;
            o.mode = cf::CUFRAMES_MODE_COPY;
            let mut s = ptr::null_mut();
            if cf::cuframes_subscriber_connect(k.as_ptr(), &o, &mut s) == 0 {
                return s;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("cannot subscribe to {key}: {}", last_error());
}

/// Real H.264 packets (the committed sample, through FFmpeg's h264 demuxer) written with
/// av_write_frame into cuframes_pkt arrive in the ring byte for byte, flags and all.
#[test]
fn muxer_publishes_what_the_api_writes() {
    let mut w = World::new("mux");
    let key = w.key("mux");
    // CUFRAMES_SAMPLE_H264: where scripts/gpu-check.sh carried the sample.
    let sample = std::env::var("CUFRAMES_SAMPLE_H264").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fate-samples/test-25fps.h264"
        )
        .to_owned()
    });
    let mut src = Input::open("h264", &sample, &[]).expect("open the sample");
    // SAFETY: libav* calls on contexts this test owns; every pointer is checked.
    unsafe {
        assert!(ff::avformat_find_stream_info(src.0, ptr::null_mut()) >= 0);
        let fmt = CString::new("cuframes_pkt").unwrap();
        let url = CString::new(key.clone()).unwrap();
        let mut oc = ptr::null_mut();
        let rc =
            ff::avformat_alloc_output_context2(&mut oc, ptr::null(), fmt.as_ptr(), url.as_ptr());
        assert!(
            rc >= 0 && !oc.is_null(),
            "alloc cuframes_pkt: {}",
            av_err(rc)
        );
        let st = ff::avformat_new_stream(oc, ptr::null());
        assert!(ff::avcodec_parameters_copy((*st).codecpar, src.stream(0).codecpar) >= 0);
        (*st).time_base = src.stream(0).time_base;
        let mut o = Options::new(&[("runtime_dir", w.runtime_dir())]);
        let rc = ff::avformat_write_header(oc, &mut o.0);
        assert!(rc >= 0, "write_header: {}", av_err(rc));
        assert!(o.leftover().is_empty(), "{:?}", o.leftover());

        let sub = subscribe(&w.dir_c, &key, cf::CUFRAMES_SUBSCRIBE_WANTS_PACKETS);
        let mut codec = 0u32;
        assert_eq!(cf::cuframes_subscriber_packet_codec(sub, &mut codec), 0);
        assert_eq!(
            codec,
            cf::CUFRAMES_CODEC_ID_H264,
            "the wire id, whatever FFmpeg's enum says"
        );

        let mut pkt = Packet::new();
        let mut written = Vec::new();
        while written.len() < 30 && src.read(&mut pkt) >= 0 {
            // DISCARD and DISPOSABLE have no ring bit: such packets are published as
            // ordinary ones (docs/ffmpeg.md), not dropped, and no reserved bit is set.
            match written.len() {
                2 => (*pkt.0).flags |= flag_bit(ff::AV_PKT_FLAG_DISCARD),
                3 => (*pkt.0).flags |= flag_bit(ff::AV_PKT_FLAG_DISPOSABLE),
                _ => {}
            }
            let p = pkt.get();
            written.push((pkt.data().to_vec(), has_flag(p.flags, ff::AV_PKT_FLAG_KEY)));
            let rc = ff::av_write_frame(oc, pkt.0);
            assert!(rc >= 0, "av_write_frame: {}", av_err(rc));
            pkt.unref();
        }
        assert!(
            written.len() >= 10 && written[0].1,
            "the sample starts with a keyframe"
        );
        for (i, (data, key)) in written.iter().enumerate() {
            let mut d = ptr::null();
            let mut info: cf::cuframes_packet_info_t = std::mem::zeroed();
            let rc = cf::cuframes_subscriber_next_packet(sub, 5000, &mut d, &mut info);
            assert_eq!(rc, 0, "packet {i}: {}", last_error());
            let got = std::slice::from_raw_parts(d, info.size as usize);
            assert_eq!(got, &data[..], "packet {i} bytes");
            let want = if *key {
                cf::CUFRAMES_PACKET_FLAG_KEY
            } else {
                0
            };
            assert_eq!(info.flags, want, "packet {i} flags");
        }
        let mut ed = [0u8; 4096];
        let mut n = 0usize;
        assert_eq!(
            cf::cuframes_subscriber_packet_extradata(sub, ed.as_mut_ptr(), ed.len(), &mut n),
            0
        );
        assert!(
            n > 0 && ed[..4] == [0, 0, 0, 1],
            "Annex B extradata in the ring: {:?}",
            &ed[..n]
        );
        assert!(ff::av_write_trailer(oc) >= 0);
        cf::cuframes_subscriber_destroy(sub);
        ff::avformat_free_context(oc);
    }
}

/// Frames of one NV12 64x48 ring: pixel bytes are a function of the frame's number, which
/// its pts carries (ms).
const W: usize = 64;
const H: usize = 48;

fn pattern(n: i64, plane: usize, row: usize, col: usize) -> u8 {
    (n as usize * 7 + plane * 50 + row * 3 + col) as u8
}

fn start_frame_publisher(
    w: &World,
    key: &str,
    memory: u32,
) -> (Arc<Publisher>, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let p = Arc::new(Publisher::new(w, key));
    // SAFETY: defaults then our fields.
    unsafe {
        let mut c: cf::cuframes_frame_ring_config_t = std::mem::zeroed();
        cf::cuframes_frame_ring_config_default(&mut c);
        c.format = cf::CUFRAMES_FORMAT_NV12;
        c.width = W as u32;
        c.height = H as u32;
        c.ring_size = 8;
        c.memory_kind = memory;
        let rc = cf::cuframes_publisher_enable_frames(p.0, &c);
        assert_eq!(rc, 0, "enable_frames: {}", last_error());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (p2, stop2) = (p.clone(), stop.clone());
    let t = std::thread::spawn(move || {
        let mut n = 0i64;
        while !stop2.load(Ordering::Relaxed) {
            let y: Vec<u8> = (0..H)
                .flat_map(|r| (0..W).map(move |c| pattern(n, 0, r, c)))
                .collect();
            let uv: Vec<u8> = (0..H / 2)
                .flat_map(|r| (0..W).map(move |c| pattern(n, 1, r, c)))
                .collect();
            let planes = [y.as_ptr(), uv.as_ptr()];
            let strides = [W, W];
            // SAFETY: two planes of the layout's rows x row bytes, read during the call.
            let rc = unsafe {
                cf::cuframes_publisher_publish_host(
                    p2.0,
                    planes.as_ptr(),
                    strides.as_ptr(),
                    2,
                    n * 1_000_000,
                )
            };
            assert_eq!(rc, 0, "publish_host: {}", last_error());
            n += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    (p, stop, t)
}

/// Check a software NV12 frame against the pattern of frame `n`.
fn check_nv12(f: &ff::AVFrame, n: i64) {
    assert_eq!((f.width as usize, f.height as usize), (W, H));
    for (plane, rows) in [(0usize, H), (1, H / 2)] {
        for r in 0..rows {
            // SAFETY: a software NV12 frame: plane rows of at least W bytes, linesize apart.
            let row = unsafe {
                std::slice::from_raw_parts(
                    f.data[plane].offset(r as isize * f.linesize[plane] as isize),
                    W,
                )
            };
            for (c, &b) in row.iter().enumerate() {
                assert_eq!(
                    b,
                    pattern(n, plane, r, c),
                    "frame {n} plane {plane} ({r},{c})"
                );
            }
        }
    }
}

fn read_frames(memory: u32, tag: &str) {
    let mut w = World::new(tag);
    let key = w.key(tag);
    let (p, stop, t) = start_frame_publisher(&w, &key, memory);
    let mut input = Input::open(
        "cuframes",
        &key,
        &[("runtime_dir", w.runtime_dir()), ("read_timeout", "5")],
    )
    .unwrap_or_else(|e| panic!("avformat_open_input cuframes: {}", av_err(e)));
    let par = input.codecpar(0);
    assert_eq!(par.codec_id, ff::AVCodecID::AV_CODEC_ID_WRAPPED_AVFRAME);
    let cuda = memory == cf::CUFRAMES_MEMORY_CUDA_VMM;
    let want_fmt = if cuda {
        ff::AVPixelFormat::AV_PIX_FMT_CUDA
    } else {
        ff::AVPixelFormat::AV_PIX_FMT_NV12
    };
    assert_eq!(par.format, want_fmt as i32);
    let tb = input.stream(0).time_base;
    assert_eq!(
        (tb.num, tb.den),
        (1, 1_000_000_000),
        "pts_ns as they are (R25)"
    );
    let mut pkt = Packet::new();
    for i in 0..5 {
        let rc = input.read(&mut pkt);
        assert!(rc >= 0, "frame {i}: {}", av_err(rc));
        // SAFETY: a wrapped_avframe packet's data is an AVFrame the packet owns.
        let f = unsafe { &*(pkt.get().data as *const ff::AVFrame) };
        let n = pkt.get().pts / 1_000_000;
        assert_eq!(f.format, want_fmt as i32);
        if cuda {
            assert!(
                !f.hw_frames_ctx.is_null(),
                "CUDA frames carry hw_frames_ctx"
            );
            // SAFETY: hw_frames_ctx of a CUDA frame is an AVHWFramesContext.
            let fc = unsafe { &*((*f.hw_frames_ctx).data as *const ff::AVHWFramesContext) };
            assert_eq!(fc.sw_format, ff::AVPixelFormat::AV_PIX_FMT_NV12);
            // SAFETY: download into a fresh software frame.
            unsafe {
                let mut sw = ff::av_frame_alloc();
                let rc = ff::av_hwframe_transfer_data(sw, f, 0);
                assert!(rc >= 0, "hwdownload: {}", av_err(rc));
                check_nv12(&*sw, n);
                ff::av_frame_free(&mut sw);
            }
        } else {
            check_nv12(f, n);
        }
        pkt.unref();
    }
    drop(input);
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    assert!(
        p.wait_subscribers(0, Duration::from_secs(5)),
        "the closed input still counts"
    );
}

#[test]
fn input_device_host_frames() {
    read_frames(cf::CUFRAMES_MEMORY_HOST_MEMFD, "indev-host");
}

#[test]
fn input_device_cuda_frames() {
    if !have_cuda() {
        println!("SKIPPED (no CUDA device): input_device_cuda_frames runs in scripts/gpu-check.sh");
        return;
    }
    read_frames(cf::CUFRAMES_MEMORY_CUDA_VMM, "indev-cuda");
}

/// A failure of read_header after the device connected (no CUDA device 99 for output=cuda)
/// must not leave the subscriber connected: the process goes on, the publisher would count
/// a reader that is gone (FF_INFMT_FLAG_INIT_CLEANUP).
#[test]
fn failed_open_leaves_no_subscriber() {
    let mut w = World::new("cleanup");
    let key = w.key("cleanup");
    let (p, stop, t) = start_frame_publisher(&w, &key, cf::CUFRAMES_MEMORY_HOST_MEMFD);
    let r = Input::open(
        "cuframes",
        &key,
        &[
            ("runtime_dir", w.runtime_dir()),
            ("output", "cuda"),
            ("device", "99"),
        ],
    );
    let rc = r.err().expect("output=cuda on CUDA device 99 must fail");
    assert_ne!(
        rc,
        averror(libc::ENOENT),
        "it failed before connecting: {}",
        av_err(rc)
    );
    let left = !p.wait_subscribers(0, Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    assert!(
        !left,
        "a failed avformat_open_input left {} subscriber(s)",
        p.subscriber_count()
    );
}

/// buffer -> hwupload_cuframes -> buffersink, built with avfilter_graph_parse_ptr: the frames
/// pushed into the graph come out of it unchanged and reach a subscriber of the key.
#[test]
fn filter_in_a_graph() {
    let mut w = World::new("filter");
    let key = w.key("filter");
    let frames = 4i64;
    let sub_dir = w.dir_c.clone();
    let sub_key = key.clone();
    let reader = std::thread::spawn(move || {
        let sub = subscribe(&sub_dir, &sub_key, cf::CUFRAMES_SUBSCRIBE_WANTS_FRAMES);
        let mut seen = Vec::new();
        for _ in 0..frames {
            // SAFETY: frames from a live subscriber, released after reading.
            unsafe {
                let mut f = ptr::null_mut();
                let rc = cf::cuframes_subscriber_next_frame(sub, 5000, &mut f);
                assert_eq!(rc, 0, "next_frame: {}", last_error());
                let mut info: cf::cuframes_frame_info_t = std::mem::zeroed();
                assert_eq!(cf::cuframes_frame_info(f, &mut info), 0);
                let y = std::slice::from_raw_parts(info.data[0] as *const u8, W);
                let n = info.pts_ns / (NS / 25);
                assert_eq!(
                    y,
                    (0..W).map(|c| pattern(n, 0, 0, c)).collect::<Vec<_>>(),
                    "frame {n}"
                );
                seen.push(n);
                cf::cuframes_frame_release(f, ptr::null_mut());
            }
        }
        // SAFETY: destroyed once.
        unsafe { cf::cuframes_subscriber_destroy(sub) };
        seen
    });
    // SAFETY: libav* graph calls on objects this test owns; every result is checked.
    unsafe {
        let graph = ff::avfilter_graph_alloc();
        let desc = CString::new(format!(
            "buffer=video_size={W}x{H}:pix_fmt=nv12:time_base=1/25,\
             hwupload_cuframes=key={key}:memory=host:runtime_dir={}:wait_subscribers=1:wait_timeout=10,\
             buffersink",
            w.runtime_dir()
        ))
        .unwrap();
        let mut inputs = ptr::null_mut();
        let mut outputs = ptr::null_mut();
        let rc = ff::avfilter_graph_parse2(graph, desc.as_ptr(), &mut inputs, &mut outputs);
        assert!(rc >= 0, "parse the graph: {}", av_err(rc));
        assert!(inputs.is_null() && outputs.is_null(), "the graph is closed");
        let rc = ff::avfilter_graph_config(graph, ptr::null_mut());
        assert!(rc >= 0, "configure the graph: {}", av_err(rc));
        let src = *(*graph).filters.add(0);
        let sink = *(*graph).filters.add((*graph).nb_filters as usize - 1);
        assert_eq!(
            CStr::from_ptr((*(*src).filter).name).to_str().unwrap(),
            "buffer"
        );
        assert_eq!(
            CStr::from_ptr((*(*sink).filter).name).to_str().unwrap(),
            "buffersink"
        );
        let mut out = ff::av_frame_alloc();
        for n in 0..frames {
            let mut f = ff::av_frame_alloc();
            (*f).format = ff::AVPixelFormat::AV_PIX_FMT_NV12 as i32;
            (*f).width = W as i32;
            (*f).height = H as i32;
            (*f).pts = n;
            assert!(ff::av_frame_get_buffer(f, 0) >= 0);
            for (plane, rows) in [(0usize, H), (1, H / 2)] {
                for r in 0..rows {
                    let row = std::slice::from_raw_parts_mut(
                        (*f).data[plane].offset(r as isize * (*f).linesize[plane] as isize),
                        W,
                    );
                    for (c, b) in row.iter_mut().enumerate() {
                        *b = pattern(n, plane, r, c);
                    }
                }
            }
            let rc = ff::av_buffersrc_add_frame(src, f);
            assert!(rc >= 0, "push frame {n}: {}", av_err(rc));
            ff::av_frame_free(&mut f);
            let rc = ff::av_buffersink_get_frame(sink, out);
            assert!(rc >= 0, "pull frame {n}: {}", av_err(rc));
            assert_eq!((*out).pts, n, "the filter passes frames on");
            check_nv12(&*out, n);
            ff::av_frame_unref(out);
        }
        ff::av_frame_free(&mut out);
        let seen = reader.join().unwrap();
        assert_eq!(seen, (0..frames).collect::<Vec<_>>());
        let mut g = graph;
        ff::avfilter_graph_free(&mut g);
    }
}
