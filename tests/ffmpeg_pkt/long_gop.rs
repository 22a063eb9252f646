//! A recorder that joins a stream whose GOP is longer than the packet ring: it starts on the
//! newest keyframe at once (the GOP store), not one GOP later.

use std::time::{Duration, Instant};

use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::{Publisher, PublisherOptions};
use cuframes_core::wire::{CODEC_ID_H264, PACKET_FLAG_KEY};
use cuframes_test_support::ffmpeg::*;

use super::harness::SECS;
use super::muxer::h264_access_units;

/// test-25fps.h264 has a keyframe every 64 pictures; the ring holds 16. The recorder joins 40
/// pictures into the first GOP, when only the GOP store still holds its keyframe: its
/// recording must be the stream from picture 0, byte for byte, and decode without an error.
/// Without the store it would start at picture 64, the next keyframe.
#[test]
fn a_late_recorder_of_a_gop_longer_than_the_ring_starts_on_its_keyframe() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "longgop");
    let key = s.key("long");
    let raw = std::fs::read(sample("test-25fps.h264")).unwrap();
    let aus: Vec<Vec<u8>> = h264_access_units(&raw).into_iter().take(100).collect();
    let is_key = |au: &[u8]| {
        cuframes_core::codec::nal_units(au)
            .iter()
            .any(|n| n[0] & 0x1F == 5)
    };
    let keys: Vec<usize> = (0..aus.len()).filter(|&i| is_key(&aus[i])).collect();
    assert_eq!(keys, vec![0, 64], "the sample's GOP");
    let publisher = Publisher::create(
        &key,
        PublisherOptions {
            runtime_dir: Some(s.dir.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    publisher
        .enable_packets(PacketRingConfig {
            codec_id: CODEC_ID_H264,
            extradata: Vec::new(),
            ring_slots: 16,
            data_size: 8 << 20,
        })
        .unwrap();
    let publish = |i: usize| {
        let t = i as i64 * 40_000_000;
        let flags = if is_key(&aus[i]) { PACKET_FLAG_KEY } else { 0 };
        publisher.publish_packet(&aus[i], t, t, flags).unwrap();
    };
    (0..40).for_each(publish);
    let rec = s.path("late.h264");
    let recorder = s.spawn_ffmpeg(
        "late",
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
            "h264",
            rec.to_str().unwrap(),
        ],
    );
    let deadline = Instant::now() + SECS(20);
    while publisher.subscriber_count() == 0 {
        assert!(
            Instant::now() < deadline,
            "the recorder did not subscribe:\n{}",
            s.stderr("late")
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The rest in real time, the next keyframe (64) among it; then the end of the stream.
    for i in 40..aus.len() {
        publish(i);
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(publisher);
    s.wait_ok(recorder, SECS(30));
    assert!(s.stderr("late").is_empty(), "{}", s.stderr("late"));
    let got = std::fs::read(&rec).unwrap();
    let want: Vec<u8> = aus.concat();
    let next_gop: Vec<u8> = aus[64..].concat();
    assert!(
        got != next_gop,
        "the recorder started on the next keyframe: the FFmpeg build predates the GOP store \
         (rebuild it: scripts/build-ffmpeg.sh)"
    );
    assert!(
        got == want,
        "the recording ({} bytes) is not the stream from its keyframe ({} bytes)",
        got.len(),
        want.len()
    );
    // It decodes to every picture; the decoder says no more than about the source itself
    // (the sample's buffering-period SEI precedes its first SPS).
    let decode = |name: &str, file: &std::path::Path| {
        let out = s.path(&format!("{name}.framemd5"));
        let args = [
            "-v",
            "error",
            "-i",
            file.to_str().unwrap(),
            "-f",
            "framemd5",
        ];
        let mut args = args.to_vec();
        args.push(out.to_str().unwrap());
        let (ok, err) = s.ffmpeg(name, &args, SECS(30));
        assert!(ok, "{name} does not decode:\n{err}");
        // Without the context addresses (`[h264 @ 0x55…]`), which differ between runs.
        let err: Vec<String> = err
            .lines()
            .map(|l| match (l.find(" @ 0x"), l.find(']')) {
                (Some(a), Some(b)) if a < b => format!("{}{}", &l[..a], &l[b..]),
                _ => l.to_owned(),
            })
            .collect();
        (frame_lines(&std::fs::read_to_string(&out).unwrap()), err)
    };
    let source = s.path("source.h264");
    std::fs::write(&source, &want).unwrap();
    let (pictures, err) = decode("decode-late", &rec);
    assert_eq!(pictures.len(), aus.len(), "decoded pictures");
    let (source_pictures, source_err) = decode("decode-source", &source);
    assert!(
        pictures == source_pictures,
        "the decoded pictures differ from the source's"
    );
    assert_eq!(err, source_err, "the decoder's messages");
    println!(
        "a recorder joining 40 pictures into a 64-picture GOP (ring of 16) recorded all {} \
         from the keyframe",
        aus.len()
    );
}
