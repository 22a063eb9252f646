//! Samples published with `-c copy` to recorders started before, every recording compared
//! packet by packet with the reference.

use std::time::Instant;

use cuframes_test_support::ffmpeg::*;

use super::harness::{
    av1_mkv, h264_bframes_mkv, publisher_args, reference, remuxed_mp4, spawn_recorder_with, Source,
    SECS,
};

/// Publish `src` once to `recorders` recorders started before it, and compare every
/// recording with the reference.
fn round_trip(s: &Scratch, src: &Source, recorders: usize) {
    let t0 = Instant::now();
    let want = reference(s, src);
    let key = s.key("rt");
    // Every other recorder polls before it sleeps (`-spin`): it must get the same packets.
    let recs: Vec<_> = (0..recorders)
        .map(|i| {
            let spin: &[&str] = if i % 2 == 1 { &["-spin", "200us"] } else { &[] };
            spawn_recorder_with(s, &format!("rec{i}"), &key, spin)
        })
        .collect();
    let n = recorders.to_string();
    // The publisher waits for every recorder before its first packet. -readrate keeps it
    // from publishing the second keyframe before a recorder's first read: a subscriber that
    // joined before any keyframe starts at the newest keyframe present when it first reads.
    let publisher = s.spawn_ffmpeg(
        "publisher",
        &publisher_args(src, &key, &["-readrate", "8"], &["-wait_subscribers", &n]),
    );
    s.wait_ok(publisher, SECS(30));
    for (i, (p, out)) in recs.iter().enumerate() {
        s.wait_ok(*p, SECS(30));
        let got = read_framemd5(out);
        assert_same_packets(&format!("{} recorder {i}", src.name), &got, &want);
        assert!(
            s.stderr(&format!("rec{i}")).is_empty(),
            "recorder {i} printed errors:\n{}",
            s.stderr(&format!("rec{i}"))
        );
    }
    println!(
        "{}: {} packets, {recorders} recorder(s) identical to the source, {:?}",
        src.name,
        want.len(),
        t0.elapsed()
    );
}

#[test]
fn h264_bframes_matroska_eight_recorders() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "h264x8");
    round_trip(&s, &h264_bframes_mkv(), 8);
}

#[test]
fn h264_raw_sample_mp4() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "h264mp4");
    let src = remuxed_mp4(&s, "test-25fps.h264", "h264_mp4toannexb");
    round_trip(&s, &src, 2);
}

#[test]
fn hevc_mp4() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "hevc");
    let src = remuxed_mp4(&s, "test-25fps.h265", "hevc_mp4toannexb");
    round_trip(&s, &src, 2);
}

#[test]
fn av1_matroska() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "av1");
    let src = av1_mkv(&s);
    round_trip(&s, &src, 2);
}
