//! The rings out to the network: one camera's packet ring restreamed at once over RTSP
//! (into GStreamer's RTSP server in RECORD mode) and as MPEG-TS over UDP to two readers.

use std::time::Duration;

use cuframes_test_support::ffmpeg::{find, Scratch};

use super::annexb::{assert_window_of_loop, is_key, read_access_units, AccessUnit};
use super::camera::*;
use super::pipeline::*;

/// A UDP port free now on the loopback address (bound, read back, released).
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Access units without access unit delimiters (H.264 type 9, HEVC type 35): the MPEG-TS
/// muxer adds one to every access unit that has none, as MPEG-TS requires, and so does
/// GStreamer's h264parse when it writes Annex B access units.
fn without_aud(codec: Codec, aus: Vec<AccessUnit>) -> Vec<AccessUnit> {
    aus.into_iter()
        .map(|au| AccessUnit {
            nals: au
                .nals
                .into_iter()
                .filter(|n| match codec {
                    Codec::H264 => n[0] & 0x1f != 9,
                    Codec::Hevc => (n[0] >> 1) & 0x3f != 35,
                })
                .collect(),
        })
        .collect()
}

/// One ring, three restreams at once: `-c copy -f rtsp` into the camera server's RECORD
/// mount (GStreamer depayloads it: RTP re-packetisation keeps every NAL unit, so what it
/// receives is compared NAL for NAL), and `-c copy -f mpegts udp://…` to two ffmpeg
/// readers (their streams compared the same way, the delimiters MPEG-TS adds left out).
/// Each restream starts on a keyframe and is consecutive pictures of the camera.
fn restreams(codec: Codec) {
    let Some(ff) = find() else { return };
    let Some(()) = gstreamer_or_skip() else {
        return;
    };
    let s = Scratch::new(&ff, &format!("restream-{}", codec.name()));
    let clip = match codec {
        Codec::H264 => h264_clip(&s, FPS, 2 * FPS),
        Codec::Hevc => hevc_clip(&s, FPS, 2 * FPS),
    };
    let received = s.path("received-over-rtsp.annexb");
    let cam = Camera::start(
        &s,
        &clip,
        &CameraOptions {
            record: Some((codec, received.clone())),
            ..Default::default()
        },
    );
    let key = s.key("cam");
    let args = publisher_args(&cam.url(), &key);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let publisher = s.spawn_ffmpeg("publisher", &args);
    wait_published(&key, 5, SECS(30));

    let frames = 50;
    let frames_s = frames.to_string();
    let mut readers = Vec::new();
    let mut pushers = Vec::new();
    for i in 0..2 {
        let port = free_udp_port();
        let out = s.path(&format!("udp{i}.annexb"));
        let url = format!("udp://127.0.0.1:{port}?timeout=10000000");
        let r = s.spawn_ffmpeg(
            &format!("udp-reader{i}"),
            &[
                "-v",
                "error",
                "-f",
                "mpegts",
                "-i",
                &url,
                "-map",
                "0:v:0",
                "-c",
                "copy",
                "-frames:v",
                &frames_s,
                "-f",
                codec.name(),
                out.to_str().unwrap(),
            ],
        );
        readers.push((r, out, i));
        // The reader listens before the restream sends (its first packets are the PAT/PMT).
        std::thread::sleep(Duration::from_millis(300));
        let dest = format!("udp://127.0.0.1:{port}?pkt_size=1316");
        pushers.push(s.spawn_ffmpeg(
            &format!("udp-restream{i}"),
            &[
                "-v",
                "error",
                "-f",
                "cuframes_pkt",
                "-i",
                &key,
                "-c",
                "copy",
                "-f",
                "mpegts",
                &dest,
            ],
        ));
    }
    let rtsp = s.spawn_ffmpeg(
        "rtsp-restream",
        &[
            "-v",
            "error",
            "-f",
            "cuframes_pkt",
            "-i",
            &key,
            "-c",
            "copy",
            "-frames:v",
            &frames_s,
            "-f",
            "rtsp",
            "-rtsp_transport",
            "tcp",
            &cam.record_url(),
        ],
    );
    s.wait_ok(rtsp, SECS(30));
    let served = read_access_units(codec, &clip.path);
    for (r, out, i) in readers {
        s.wait_ok(r, SECS(30));
        let got = without_aud(codec, read_access_units(codec, &out));
        assert_eq!(got.len(), frames, "UDP reader {i}: pictures");
        assert!(
            is_key(codec, &got[0]),
            "UDP reader {i} starts on a keyframe"
        );
        assert_window_of_loop(&format!("MPEG-TS/UDP restream {i}"), &got, &served);
        assert_decodes_cleanly(&s, &format!("udp{i}-play"), &out);
    }
    for p in pushers {
        s.kill9(p);
    }
    // The RECORD mount writes what it depayloads as it arrives; the RTSP restream sent
    // `frames` pictures and ended with a TEARDOWN.
    std::thread::sleep(Duration::from_millis(300));
    s.kill9(publisher);
    cam.stop();
    let got = without_aud(codec, read_access_units(codec, &received));
    assert_eq!(got.len(), frames, "pictures received by the RECORD mount");
    assert!(
        is_key(codec, &got[0]),
        "the RTSP restream starts on a keyframe"
    );
    assert_window_of_loop("RTSP restream received by GStreamer", &got, &served);
    assert_decodes_cleanly(&s, "rtsp-play", &received);
    let rlog = s.stderr("rtsp-restream");
    assert!(
        rlog.lines()
            .all(|l| l.contains(RTSP_FIRST_PACKET_WARNING) || l.trim().is_empty()),
        "RTSP restream printed:\n{rlog}"
    );
    println!(
        "{}: one ring restreamed over RTSP (RECORD) and twice as MPEG-TS/UDP at once: \
         {frames} pictures each, identical NAL units",
        codec.name()
    );
}

#[test]
fn h264_ring_restreamed_over_rtsp_and_mpegts_udp_at_once() {
    restreams(Codec::H264);
}

#[test]
fn hevc_ring_restreamed_over_rtsp_and_mpegts_udp_at_once() {
    restreams(Codec::Hevc);
}
