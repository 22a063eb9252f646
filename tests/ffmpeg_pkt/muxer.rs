//! The muxer: ring flags and timestamps through a relay, one publisher shared with
//! `hwupload_cuframes`, and `-wait_subscribers` holding the whole command.

use std::time::{Duration, Instant};

use cuframes_core::codec::nal_units;
use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::{Publisher, PublisherOptions};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::{
    PACKET_FLAG_CORRUPT, PACKET_FLAG_DISCONTINUITY, PACKET_FLAG_KEY, PACKET_FLAG_LAST_IN_AU,
};
use cuframes_test_support::ffmpeg::*;

use super::harness::{h264_bframes_mkv, reference, spawn_recorder, SECS};

/// The access units of a raw Annex B H.264 stream (single-slice pictures), each rebuilt
/// with 4-byte start codes.
pub(super) fn h264_access_units(data: &[u8]) -> Vec<Vec<u8>> {
    let mut aus: Vec<Vec<u8>> = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    let mut has_vcl = false;
    for nal in nal_units(data) {
        let t = nal[0] & 0x1F;
        let vcl = (1..=5).contains(&t);
        let first_mb_zero = vcl && nal.get(1).is_some_and(|b| b & 0x80 != 0);
        if has_vcl && (matches!(t, 6..=9) || first_mb_zero) {
            aus.push(std::mem::take(&mut cur));
            has_vcl = false;
        }
        cur.extend_from_slice(&[0, 0, 0, 1]);
        cur.extend_from_slice(nal);
        has_vcl |= vcl;
    }
    if !cur.is_empty() {
        aus.push(cur);
    }
    aus
}

/// Ring flags and nanosecond timestamps survive demuxer → ffmpeg `-c copy` → muxer: KEY and
/// CORRUPT as AVPacket flags, DISCONTINUITY and LAST_IN_AU as packet side data (R15); 29.97
/// fps timestamps ten hours in come back to the nanosecond. The source ring has no
/// extradata, so the demuxer takes it from the first keyframe.
#[test]
fn flags_and_timestamps_survive_a_relay() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "relay");
    let (k1, k2) = (s.key("src"), s.key("relay"));
    let raw = std::fs::read(sample("test-25fps.h264")).unwrap();
    let aus: Vec<Vec<u8>> = h264_access_units(&raw).into_iter().take(100).collect();
    let opts = PublisherOptions {
        runtime_dir: Some(s.dir.clone()),
        ..Default::default()
    };
    let publisher = Publisher::create(&k1, opts).unwrap();
    publisher
        .enable_packets(PacketRingConfig {
            codec_id: cuframes_core::wire::CODEC_ID_H264,
            extradata: Vec::new(),
            ring_slots: 1024,
            data_size: 8 << 20,
        })
        .unwrap();
    let relay = s.spawn_ffmpeg(
        "relay",
        &[
            "-v",
            "warning",
            "-f",
            "cuframes_pkt",
            "-copyts",
            "-i",
            &k1,
            "-c",
            "copy",
            "-f",
            "cuframes_pkt",
            "-wait_subscribers",
            "1",
            // Room for the whole test stream: a packet ring never waits for its readers
            // (§10), and the relay writes as fast as it reads, so with the default 64 slots a
            // reader more than 64 packets behind (this slow one, or any on a loaded machine,
            // which can be lapped for almost half the stream) resumes at the next keyframe.
            "-ring_slots",
            "1024",
            &k2,
        ],
    );
    let deadline = Instant::now() + SECS(10);
    while publisher.subscriber_count() == 0 {
        assert!(
            Instant::now() < deadline,
            "the relay did not subscribe:\n{}",
            s.stderr("relay")
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The subscriber of the relay's ring, in a thread: it connects once the ring exists.
    let dir = s.dir.clone();
    let k2c = k2.clone();
    let reader = std::thread::spawn(move || {
        let o = SubscriberOptions {
            runtime_dir: Some(dir),
            want_frames: false,
            want_packets: true,
            ..Default::default()
        };
        let deadline = Instant::now() + SECS(20);
        let mut sub = loop {
            match Subscriber::connect(&k2c, &o) {
                Ok(sub) => break sub,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("connect to the relay: {e}"),
            }
        };
        let mut got = Vec::new();
        let mut buf = Vec::new();
        loop {
            match sub.next_packet(Some(SECS(20)), &mut buf) {
                Ok(i) => {
                    got.push((buf.clone(), i.pts_ns, i.dts_ns, i.flags));
                    // A slow reader: the relay gets well ahead of it.
                    std::thread::sleep(Duration::from_millis(3));
                }
                Err(e) if e.code() == cuframes_core::ErrorCode::Disconnected => break,
                Err(e) => panic!("relay subscriber: {e}"),
            }
        }
        let overruns = sub.packet_stats().map_or(0, |st| st.overruns);
        (got, sub.packet_extradata().unwrap(), overruns)
    });
    // 30000/1001 fps from ten hours on; pts two frames after dts, like B-frame streams.
    let ts = |k: i64| ((k as i128 * 1001 * 1_000_000_000 + 15000) / 30000) as i64;
    let base = 36000 * 30000 / 1001;
    let mut sent = Vec::new();
    for (i, au) in aus.iter().enumerate() {
        let key_au = nal_units(au).iter().any(|n| n[0] & 0x1F == 5);
        let mut flags = if key_au { PACKET_FLAG_KEY } else { 0 };
        flags |= match i {
            10 => PACKET_FLAG_CORRUPT,
            20 => PACKET_FLAG_DISCONTINUITY,
            30 => PACKET_FLAG_LAST_IN_AU,
            40 => PACKET_FLAG_CORRUPT | PACKET_FLAG_DISCONTINUITY | PACKET_FLAG_LAST_IN_AU,
            _ => 0,
        };
        let (pts, dts) = (ts(base + i as i64 + 2), ts(base + i as i64));
        publisher.publish_packet(au, pts, dts, flags).unwrap();
        sent.push((au.clone(), pts, dts, flags));
        // Gives the relay time to read its first keyframe and open its own ring.
        if i == 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    drop(publisher);
    s.wait_ok(relay, SECS(30));
    let (got, extradata, overruns) = reader.join().unwrap();
    // On a mismatch, say where the relayed stream started, whether the reader was lapped and
    // what the relay printed.
    let first = got
        .first()
        .and_then(|g| sent.iter().position(|w| w.1 == g.1));
    assert_eq!(
        (got.len(), overruns),
        (sent.len(), 0),
        "relayed packets and overruns; the first relayed packet is sent[{first:?}]; relay \
         stderr:\n{}",
        s.stderr("relay")
    );
    for (i, (g, w)) in got.iter().zip(&sent).enumerate() {
        assert!(g.0 == w.0, "packet {i}: payload differs");
        assert_eq!((g.1, g.2), (w.1, w.2), "packet {i}: pts/dts (ns)");
        assert_eq!(g.3, w.3, "packet {i}: flags");
    }
    let want_extradata =
        cuframes_core::codec::keyframe_extradata(cuframes_core::codec::Codec::H264, &aus[0])
            .unwrap();
    assert_eq!(
        extradata, want_extradata,
        "extradata taken from the first keyframe"
    );
    // The relay says where the publisher flagged DISCONTINUITY, as a gap it did not cause:
    // no packet was lost.
    let err = s.stderr("relay");
    let flagged = sent
        .iter()
        .filter(|w| w.3 & PACKET_FLAG_DISCONTINUITY != 0)
        .count();
    let gaps: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("discontinuity before packet"))
        .collect();
    assert!(flagged > 0);
    assert_eq!(gaps.len(), flagged, "relay stderr:\n{err}");
    assert!(
        gaps.iter().all(|l| l.contains("a gap at the publisher")),
        "relay stderr:\n{err}"
    );
    assert!(!err.contains("packets lost"), "relay stderr:\n{err}");
}

/// R6: the muxer and `hwupload_cuframes` of one ffmpeg command name the same key and share
/// one publisher (two publishers of one key in one process would fail): a packet recorder and
/// a frame reader of that key both get their stream.
#[test]
fn muxer_shares_its_publisher_with_hwupload_cuframes() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "shared");
    let src = h264_bframes_mkv();
    let want = reference(&s, &src);
    let key = s.key("shared");
    let (rec, rec_out) = spawn_recorder(&s, "packets", &key);
    let frames_out = s.path("frames.framemd5");
    let frames = s.spawn_ffmpeg(
        "frames",
        &[
            "-v",
            "error",
            "-f",
            "cuframes",
            "-output",
            "software",
            "-wait_publisher",
            "10",
            "-i",
            &key,
            "-f",
            "framemd5",
            frames_out.to_str().unwrap(),
        ],
    );
    let filter = format!("format=nv12,hwupload_cuframes=key={key}:memory=host:ring_size=16");
    // The muxer waits for the packet recorder only: waiting blocks the whole command, so the
    // filter's frame ring appears only afterwards (the frame reader retries until then).
    let publisher = spawn_both_rings(&s, &["-readrate", "4"], &src.path, &key, &filter);
    s.wait_ok(publisher, SECS(30));
    s.wait_ok(rec, SECS(30));
    s.wait_ok(frames, SECS(30));
    assert_same_packets(
        "packets of the shared publisher",
        &read_framemd5(&rec_out),
        &want,
    );
    let n = read_framemd5(&frames_out).len();
    assert!(n > 0, "the frame reader got no frame");
    for log in ["packets", "frames", "publisher"] {
        assert!(s.stderr(log).is_empty(), "{log}:\n{}", s.stderr(log));
    }
    println!(
        "one publisher, two rings: {} packets recorded, {n} frames read",
        want.len()
    );
}

/// The command that publishes both rings of `key` from `src` (input options `input_opts`):
/// packets through `cuframes_pkt` (1024 slots, waiting for one packet reader), decoded frames
/// through `filter`; logged as "publisher".
fn spawn_both_rings(
    s: &Scratch,
    input_opts: &[&str],
    src: &std::path::Path,
    key: &str,
    filter: &str,
) -> Proc {
    let mut args = vec!["-v", "error"];
    args.extend_from_slice(input_opts);
    args.extend_from_slice(&[
        "-i",
        src.to_str().unwrap(),
        "-map",
        "0:v:0",
        "-c",
        "copy",
        "-f",
        "cuframes_pkt",
        "-ring_slots",
        "1024",
        "-wait_subscribers",
        "1",
        key,
        "-map",
        "0:v:0",
        "-vf",
        filter,
        "-f",
        "null",
        "-",
    ]);
    s.spawn_ffmpeg("publisher", &args)
}

/// In the command that publishes both rings, the filter's `wait_subscribers` waits for a
/// frame reader: the packet recorder of the shared publisher, connected first, is none. The
/// frame reader comes a second later and still gets every frame.
#[test]
fn the_filter_waits_for_a_frame_reader_not_the_packet_recorder() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "framewait");
    let src = h264_bframes_mkv();
    let want = reference(&s, &src);
    let key = s.key("framewait");
    let (rec, rec_out) = spawn_recorder(&s, "packets", &key);
    let filter = format!(
        "format=nv12,hwupload_cuframes=key={key}:memory=host:ring_size=4:policy=strict_wait:\
         wait_subscribers=1:wait_timeout=30:ack_timeout=10"
    );
    let publisher = spawn_both_rings(&s, &[], &src.path, &key, &filter);
    // The recorder is in; the filter must still be waiting for a frame reader.
    std::thread::sleep(Duration::from_millis(1500));
    let frames_out = s.path("frames.framemd5");
    let frames = s.spawn_ffmpeg(
        "frames",
        &[
            "-v",
            "error",
            "-f",
            "cuframes",
            "-wait_publisher",
            "10",
            "-i",
            &key,
            "-f",
            "framemd5",
            frames_out.to_str().unwrap(),
        ],
    );
    s.wait_ok(publisher, SECS(30));
    s.wait_ok(rec, SECS(30));
    s.wait_ok(frames, SECS(30));
    assert_same_packets("packets", &read_framemd5(&rec_out), &want);
    let n = read_framemd5(&frames_out).len();
    assert_eq!(n, want.len(), "the frame reader missed frames");
}

/// `-wait_subscribers` waits in the muxer's header, which ffmpeg writes before it starts any
/// output: the whole command waits, other outputs included (docs/ffmpeg.md states exactly
/// this). Here a framecrc output of the same command gets no packet while the cuframes_pkt
/// output waits, and all of them once a subscriber has come.
#[test]
fn wait_subscribers_holds_the_whole_command() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "waitall");
    let key = s.key("waitall");
    let other = s.path("other.framecrc");
    let publisher = s.spawn_ffmpeg(
        "publisher",
        &[
            "-v",
            "error",
            "-f",
            "lavfi",
            "-i",
            "testsrc=s=64x48:r=25:d=1",
            "-map",
            "0:v",
            "-c:v",
            "libx264",
            "-f",
            "cuframes_pkt",
            "-wait_subscribers",
            "1",
            "-wait_timeout",
            "30",
            &key,
            "-map",
            "0:v",
            "-c:v",
            "rawvideo",
            "-f",
            "framecrc",
            other.to_str().unwrap(),
        ],
    );
    let packets = |path: &std::path::Path| {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count()
    };
    // Long enough for the whole second of testsrc to be encoded and written twice over.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        packets(&other),
        0,
        "the other output ran while the muxer waited"
    );
    let (rec, rec_out) = spawn_recorder(&s, "recorder", &key);
    s.wait_ok(publisher, SECS(30));
    s.wait_ok(rec, SECS(30));
    assert_eq!(
        packets(&other),
        25,
        "the other output, once the subscriber came"
    );
    assert_eq!(
        read_framemd5(&rec_out).len(),
        25,
        "the subscriber's recording"
    );
}
