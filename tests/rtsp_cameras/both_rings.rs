//! The documented one-decode-both-rings command on a camera: one ffmpeg relays the packets
//! into the packet ring and decodes once into a frame ring (host memory here; the GPU
//! variant runs in scripts/gpu-check.sh), read at the same time by a packet reader and a
//! frame reader.

use cuframes_test_support::ffmpeg::{find, read_framemd5, Scratch};

use super::annexb::{assert_window_of_loop, read_access_units};
use super::camera::*;
use super::pipeline::*;

#[test]
fn one_decode_feeds_the_packet_ring_and_a_host_frame_ring() {
    let Some(ff) = find() else { return };
    let Some(()) = gstreamer_or_skip() else {
        return;
    };
    let s = Scratch::new(&ff, "both-rings");
    let clip = h264_clip(&s, FPS, 2 * FPS);
    let cam = Camera::start(&s, &clip, &CameraOptions::default());
    let key = s.key("cam");
    let frames = 3 * FPS as usize;
    let n = frames.to_string();
    let packets = s.path("packets.h264");
    let pkt_reader = s.spawn_ffmpeg(
        "packet-reader",
        &[
            "-v",
            "error",
            "-f",
            "cuframes_pkt",
            "-wait_publisher",
            "20",
            "-i",
            &key,
            "-c",
            "copy",
            "-f",
            "h264",
            packets.to_str().unwrap(),
        ],
    );
    let pictures = s.path("frames.framemd5");
    let frame_reader = s.spawn_ffmpeg(
        "frame-reader",
        &[
            "-v",
            "error",
            "-f",
            "cuframes",
            "-wait_publisher",
            "20",
            "-i",
            &key,
            "-f",
            "framemd5",
            pictures.to_str().unwrap(),
        ],
    );
    // docs/ffmpeg.md's command, host memory: packets and decoded frames under one key. The
    // packet output waits for its reader (which then starts on the first picture); the frame
    // ring is STRICT_WAIT, so the frame reader sees every frame from the one it joins on
    // (under the documented DROP_OLDEST a reader still probing its input when the ring laps
    // it skips frames).
    let url = cam.url();
    let publisher = s.spawn_ffmpeg(
        "publisher",
        &[
            "-v",
            "warning",
            "-rtsp_transport",
            "tcp",
            "-i",
            &url,
            "-copyts",
            "-map",
            "0:v:0",
            "-c",
            "copy",
            "-frames:v",
            &n,
            "-wait_subscribers",
            "1",
            "-f",
            "cuframes_pkt",
            &key,
            "-map",
            "0:v:0",
            "-vf",
            &format!(
                "format=nv12,hwupload_cuframes=key={key}:memory=host:ring_size=16:\
                 policy=strict_wait"
            ),
            "-frames:v",
            &n,
            "-f",
            "null",
            "-",
        ],
    );
    s.wait_ok(publisher, SECS(60));
    s.wait_ok(pkt_reader, SECS(20));
    s.wait_ok(frame_reader, SECS(20));
    cam.stop();
    assert_publisher_log_clean(&s.stderr("publisher"));
    for log in ["packet-reader", "frame-reader"] {
        assert!(s.stderr(log).trim().is_empty(), "{log}:\n{}", s.stderr(log));
    }

    let served = read_access_units(Codec::H264, &clip.path);
    let got = read_access_units(Codec::H264, &packets);
    assert_eq!(got.len(), frames, "packets read");
    assert_eq!(assert_window_of_loop("packet reader", &got, &served), 0);

    // The pictures the frame reader saw are the clip's, decoded, in order.
    let reference = s.path("clip-decoded.framemd5");
    s.ffmpeg_ok(
        "clip-decode",
        &[
            "-v",
            "error",
            "-i",
            clip.path.to_str().unwrap(),
            "-vf",
            "format=nv12",
            "-f",
            "framemd5",
            reference.to_str().unwrap(),
        ],
    );
    let want: Vec<String> = read_framemd5(&reference)
        .into_iter()
        .map(|p| p.md5)
        .collect();
    let seen: Vec<String> = read_framemd5(&pictures)
        .into_iter()
        .map(|p| p.md5)
        .collect();
    assert_eq!(want.len(), 2 * FPS as usize);
    // The frame reader joins when the frame ring appears (with the first decoded frame) and
    // its ffmpeg is ready: often on the first picture, at worst a second or two later. The
    // null output's -frames:v limit closes the graph around the filter: FFmpeg 9.0 has
    // published a frame or two past it by then, 7.1 one before it.
    assert!(
        seen.len() >= FPS as usize && seen.len() <= frames + 2,
        "{} frames read of {frames}",
        seen.len()
    );
    let n = want.len();
    let mut at = want
        .iter()
        .position(|m| *m == seen[0])
        .expect("the first frame read is a picture of the clip");
    let start = at;
    for (i, m) in seen.iter().enumerate().skip(1) {
        let step = (1..n)
            .find(|&d| want[(at + d) % n] == *m)
            .unwrap_or_else(|| panic!("frame {i} read is not a picture of the clip"));
        assert_eq!(step, 1, "frame {i}: {} pictures skipped", step - 1);
        at += step;
    }
    // ...and on to the end of the stream (the last picture or two around the limit).
    assert!(
        at + 2 >= frames,
        "the frame reader stopped at picture {at} of {frames}"
    );
    println!(
        "both rings: {} packets and {} frames (from picture {start}) of one decode, identical",
        got.len(),
        seen.len()
    );
}
