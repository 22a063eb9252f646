//! A recorder that joins mid-stream: it starts on a keyframe and decodes without an error.

use cuframes_test_support::ffmpeg::*;

use super::harness::{
    av1_mkv, decoded_pictures, h264_bframes_mkv, keyframe_indices, pictures, publisher_args,
    reference, remuxed_mp4, spawn_recorder, wait_published, Source, SECS,
};

/// A subscriber that joins mid-stream starts on a keyframe, its packets are the source's
/// from there on, it decodes without a single error, and ffprobe sees the stream.
fn late_subscriber(s: &Scratch, src: &Source, codec: &str, join_after: u64) {
    let want = reference(s, src);
    let keys = keyframe_indices(s, src);
    let key = s.key("late");
    let publisher = s.spawn_ffmpeg(
        "publisher",
        &publisher_args(src, &key, &["-readrate", "4"], &[]),
    );
    wait_published(&key, join_after, SECS(20));
    let (copy, copy_out) = spawn_recorder(s, "late-copy", &key);
    let decoded = s.path("late-decoded.framemd5");
    let decode = s.spawn_ffmpeg(
        "late-decode",
        &[
            "-v",
            "error",
            "-f",
            "cuframes_pkt",
            "-i",
            &key,
            "-fps_mode",
            "passthrough",
            "-f",
            "framemd5",
            decoded.to_str().unwrap(),
        ],
    );
    let probe = s.ffprobe_ok(
        "late-probe",
        &[
            "-v",
            "error",
            "-f",
            "cuframes_pkt",
            "-show_entries",
            "stream=codec_name,width,height",
            "-of",
            "default=nw=1",
            &key,
        ],
        SECS(20),
    );
    assert!(
        probe.contains(&format!("codec_name={codec}"))
            && probe.contains("width=320")
            && probe.contains("height=240"),
        "ffprobe -f cuframes_pkt: {probe}"
    );
    s.wait_ok(publisher, SECS(30));
    s.wait_ok(copy, SECS(30));
    s.wait_ok(decode, SECS(30));
    let got = read_framemd5(&copy_out);
    assert!(!got.is_empty(), "the late recorder got no packet");
    let start = want
        .iter()
        .position(|p| *p == got[0])
        .expect("the late recorder's first packet is not one of the source's");
    assert!(
        keys.contains(&start),
        "the late recorder started at packet {start}, not a keyframe ({keys:?})"
    );
    if keys.len() > 1 {
        assert!(
            start > 0,
            "{key}: joined after {join_after} packets but started at 0"
        );
    }
    assert_same_packets("late recorder", &got, &want[start..]);
    for log in ["late-copy", "late-decode", "late-probe"] {
        assert!(
            s.stderr(log).is_empty(),
            "{log} printed errors:\n{}",
            s.stderr(log)
        );
    }
    // The pictures are the source's, from the keyframe on.
    let all = decoded_pictures(s, src);
    let late = pictures(&decoded);
    let frames = late.len();
    assert!(frames > 0 && frames <= all.len(), "{frames} decoded frames");
    assert_eq!(
        late,
        all[all.len() - frames..].to_vec(),
        "the late subscriber's pictures are not the source's last {frames}"
    );
    println!(
        "{}: a subscriber joining after {join_after} packets started on keyframe {start} and \
         decoded {frames} frames without an error",
        src.name
    );
}

#[test]
fn late_subscriber_h264_bframes() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "late264");
    late_subscriber(&s, &h264_bframes_mkv(), "h264", 80);
}

#[test]
fn late_subscriber_hevc_and_av1() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "latehevc");
    let src = remuxed_mp4(&s, "test-25fps.h265", "hevc_mp4toannexb");
    late_subscriber(&s, &src, "hevc", 80);
    let s = Scratch::new(&ff, "lateav1");
    late_subscriber(&s, &av1_mkv(&s), "av1", 80);
}
