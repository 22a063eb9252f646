//! A camera's stream into the rings: the unit's publisher command relays it into a packet
//! ring, a recorder writes Matroska, and what was recorded is what the camera served; one
//! decode feeds the packet ring and a frame ring at once.

use cuframes_test_support::ffmpeg::{find, Scratch};

use super::annexb::{assert_window_of_loop, read_access_units};
use super::camera::{
    gstreamer_or_skip, h264_clip, hevc_clip, Camera, CameraOptions, Clip, Codec, FPS,
};
use super::pipeline::*;

/// Camera → `ffmpeg … -c copy -f cuframes_pkt KEY` (the unit's command) → recorder
/// `ffmpeg -f cuframes_pkt -i KEY -c copy out.mkv`. The recording decodes with no error, has
/// one packet per picture published with strictly increasing timestamps one frame apart,
/// KEY exactly on the IDR/IRAP pictures, and every access unit byte for byte the camera's
/// (the clip's, from its first picture, across the loop), NAL unit by NAL unit: RTP
/// depacketisation keeps the NAL units and rewrites only the start codes.
fn camera_to_recording(codec: Codec, gop_secs: u32) {
    let Some(ff) = find() else { return };
    let Some(()) = gstreamer_or_skip() else {
        return;
    };
    let s = Scratch::new(&ff, &format!("cam-{}-g{gop_secs}", codec.name()));
    let gop = gop_secs * FPS;
    // Two GOPs, looped: the recording crosses the loop point.
    let clip = match codec {
        Codec::H264 => h264_clip(&s, gop, 2 * gop),
        Codec::Hevc => hevc_clip(&s, gop, 2 * gop),
    };
    let packets = (2 * gop + gop / 4) as usize;
    let cam = Camera::start(&s, &clip, &CameraOptions::default());
    let key = s.key("cam");
    let rec = s.path("rec.mkv");
    let recorder = s.spawn_ffmpeg(
        "recorder",
        &[
            "-v",
            "error",
            "-f",
            "cuframes_pkt",
            "-wait_publisher",
            "20",
            "-i",
            &key,
        ]
        .into_iter()
        .chain(["-c", "copy", rec.to_str().unwrap()])
        .collect::<Vec<_>>(),
    );
    let mut args = publisher_args(&cam.url(), &key);
    // The publisher waits for the recorder (which then starts on the first picture) and
    // stops after `packets` pictures: output options, before the key.
    let at = args.len() - 1;
    let extra = ["-wait_subscribers", "1", "-frames:v", &packets.to_string()].map(str::to_owned);
    args.splice(at..at, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let publisher = s.spawn_ffmpeg("publisher", &args);
    s.wait_ok(publisher, SECS(60));
    s.wait_ok(recorder, SECS(20));
    cam.stop();
    assert_publisher_log_clean(&s.stderr("publisher"));
    assert!(
        s.stderr("recorder").trim().is_empty(),
        "recorder printed:\n{}",
        s.stderr("recorder")
    );
    check_recording(&s, &clip, &rec, packets);
    println!(
        "{} GOP {gop_secs} s: {packets} packets from the RTSP camera recorded, identical to the clip",
        codec.name()
    );
}

/// The checks of a recording of the camera that started with the clip's first picture.
pub fn check_recording(s: &Scratch, clip: &Clip, rec: &std::path::Path, packets: usize) {
    assert_decodes_cleanly(s, "play", rec);
    let probed = probe_packets(s, "probe", rec);
    assert_eq!(
        probed.len(),
        packets,
        "packets in the recording: {probed:?}"
    );
    assert_increasing("recording pts", &probed, |p| p.pts);
    assert_increasing("recording dts", &probed, |p| p.dts);
    // Matroska's time base is 1 ms: 40 ms a picture at 25 fps.
    let pts: Vec<i64> = probed.iter().filter_map(|p| p.pts).collect();
    let step = 1000 / FPS as i64;
    assert!(
        pts.windows(2).all(|w| w[1] - w[0] == step),
        "not one picture every {step} ms: {pts:?}"
    );
    let aus = recorded_access_units(s, "readback", clip.codec, rec);
    assert_key_flags("recording", clip.codec, &probed, &aus);
    let served = read_access_units(clip.codec, &clip.path);
    assert_eq!(served.len() as u32, 2 * clip.gop, "clip access units");
    let start = assert_window_of_loop("recording vs the clip", &aus, &served);
    assert_eq!(
        start, 0,
        "the recording starts with the camera's first picture"
    );
}

#[test]
fn h264_gop_1s_camera_to_recording() {
    camera_to_recording(Codec::H264, 1);
}

#[test]
fn h264_gop_4s_camera_to_recording() {
    camera_to_recording(Codec::H264, 4);
}

#[test]
fn hevc_gop_1s_camera_to_recording() {
    camera_to_recording(Codec::Hevc, 1);
}

#[test]
fn hevc_gop_4s_camera_to_recording() {
    camera_to_recording(Codec::Hevc, 4);
}
