//! Publishers that die or are not there: recorders end cleanly, say why, or reconnect.

use std::time::{Duration, Instant};

use cuframes_test_support::ffmpeg::*;

use super::harness::{
    h264_bframes_mkv, publisher_args, reference, wait_published, wait_published_by, SECS,
};

/// A publisher killed with SIGKILL mid-stream: the recorder notices, ends cleanly, and its
/// Matroska file plays without an error and holds exactly the packets published.
#[test]
fn publisher_killed_mid_stream() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "kill");
    let src = h264_bframes_mkv();
    let want = reference(&s, &src);
    let key = s.key("kill");
    let rec = s.path("rec.mkv");
    let recorder = s.spawn_ffmpeg(
        "recorder",
        &[
            "-v",
            "error",
            "-f",
            "cuframes_pkt",
            "-wait_publisher",
            "10",
            "-copyts",
            "-i",
            &key,
            "-c",
            "copy",
            rec.to_str().unwrap(),
        ],
    );
    let publisher = s.spawn_ffmpeg(
        "publisher",
        &publisher_args(&src, &key, &["-readrate", "2"], &["-wait_subscribers", "1"]),
    );
    wait_published(&key, 100, SECS(20));
    s.kill9(publisher);
    let t = Instant::now();
    s.wait_ok(recorder, SECS(10));
    let noticed = t.elapsed();
    assert!(s.stderr("recorder").is_empty(), "{}", s.stderr("recorder"));
    // Plays without an error...
    let (ok, err) = s.ffmpeg(
        "play",
        &[
            "-v",
            "error",
            "-xerror",
            "-i",
            rec.to_str().unwrap(),
            "-f",
            "null",
            "-",
        ],
        SECS(30),
    );
    assert!(
        ok && err.is_empty(),
        "the recording does not play cleanly:\n{err}"
    );
    // ...and holds a prefix of the source, packet for packet.
    let back = s.path("back.framemd5");
    s.ffmpeg_ok(
        "readback",
        &[
            "-v",
            "error",
            "-copyts",
            "-i",
            rec.to_str().unwrap(),
            "-c",
            "copy",
            "-bsf:v",
            "h264_mp4toannexb",
            "-f",
            "framemd5",
            back.to_str().unwrap(),
        ],
    );
    let got = read_framemd5(&back);
    assert!(
        got.len() >= 100 && got.len() < want.len(),
        "{} packets",
        got.len()
    );
    assert_same_packets("recording of a killed publisher", &got, &want[..got.len()]);
    println!(
        "killed publisher: recorder ended {noticed:?} after SIGKILL; {} packets, file plays cleanly",
        got.len()
    );
}

#[test]
fn no_publisher_is_a_clear_error() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "nopub");
    let key = s.key("nobody");
    let t = Instant::now();
    let (ok, err) = s.ffmpeg(
        "nopub",
        &[
            "-v",
            "error",
            "-f",
            "cuframes_pkt",
            "-i",
            &key,
            "-f",
            "null",
            "-",
        ],
        SECS(20),
    );
    assert!(!ok, "reading a key nobody publishes succeeded");
    // One wording (the library's), said once: no Rust Debug form, no reason repeated.
    assert!(
        err.contains(&format!(
            "CUFRAMES_ERR_NOT_FOUND: no publisher for key \"{key}\""
        )) && err.contains("does not exist. Start a packet publisher"),
        "unclear error: {err}"
    );
    assert!(
        !err.contains("Key(")
            && !err.contains("(not found")
            && err.matches("no publisher").count() == 1,
        "Debug form or doubled reason: {err}"
    );
    assert!(t.elapsed() < SECS(5), "took {:?}", t.elapsed());
    // With -wait_publisher it waits, then gives the same error.
    let t = Instant::now();
    let (ok, err) = s.ffmpeg(
        "nopub-wait",
        &[
            "-v",
            "error",
            "-f",
            "cuframes_pkt",
            "-wait_publisher",
            "0.5",
            "-i",
            &key,
            "-f",
            "null",
            "-",
        ],
        SECS(20),
    );
    assert!(!ok && err.contains("no publisher for key"), "{err}");
    assert!(t.elapsed() >= Duration::from_millis(500));
}

/// Reconnect: recorders writing MPEG-TS and Matroska with `-reconnect 1` while
/// their publisher is SIGKILLed and restarted three times. Each recording plays end to end:
/// `ffprobe -count_frames` without an error decodes as many frames as it holds packets (each
/// restart resumes on a keyframe), its timestamps keep increasing across the restarts, and it
/// holds packets of all four publishers. Without `reconnect` a recorder ends at the first
/// kill (`publisher_killed_mid_stream`).
#[test]
fn recorders_reconnect_across_three_publisher_restarts() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "restart");
    let src = h264_bframes_mkv();
    let key = s.key("restart");
    let recordings: Vec<_> = ["ts", "mkv"]
        .iter()
        .map(|ext| {
            let out = s.path(&format!("rec.{ext}"));
            let log = format!("rec-{ext}");
            let p = s.spawn_ffmpeg(
                &log,
                &[
                    "-v",
                    "error",
                    "-f",
                    "cuframes_pkt",
                    "-reconnect",
                    "1",
                    "-wait_publisher",
                    "3",
                    "-i",
                    &key,
                    "-c",
                    "copy",
                    out.to_str().unwrap(),
                ],
            );
            (p, out, log)
        })
        .collect();
    let mut published = 0u64;
    for round in 0..4 {
        let min = if round == 0 { "2" } else { "0" };
        let publisher = s.spawn_ffmpeg(
            &format!("publisher{round}"),
            &publisher_args(&src, &key, &["-readrate", "4"], &["-min_subscribers", min]),
        );
        if round < 3 {
            wait_published_by(&key, s.pid(publisher), 60, SECS(20));
            published += 60;
            s.kill9(publisher);
            std::thread::sleep(Duration::from_millis(200));
        } else {
            s.wait_ok(publisher, SECS(60));
        }
    }
    for (p, out, log) in recordings {
        // The last publisher ended normally; the recorder waits wait_publisher for another.
        s.wait_ok(p, SECS(30));
        assert!(
            s.stderr(&log).lines().all(|l| l.contains("discontinuity")),
            "{}",
            s.stderr(&log)
        );
        let probe = |what: &str, entries: &str| {
            s.ffprobe_ok(
                &format!("{log}-{what}"),
                &[
                    "-v",
                    "error",
                    what,
                    "-select_streams",
                    "v:0",
                    "-show_entries",
                    entries,
                    "-of",
                    "csv=p=0",
                    out.to_str().unwrap(),
                ],
                SECS(60),
            )
        };
        let frames = probe("-count_frames", "stream=nb_read_frames");
        assert!(
            s.stderr(&format!("{log}--count_frames")).is_empty(),
            "{log}: decoding printed errors:\n{}",
            s.stderr(&format!("{log}--count_frames"))
        );
        let packets = probe("-count_packets", "stream=nb_read_packets");
        // MPEG-TS lists the stream under its program too: the first value is the stream's.
        let first = |t: &str| -> u64 {
            t.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .and_then(|l| l.parse().ok())
                .unwrap_or_else(|| panic!("{log}: ffprobe said {t:?}"))
        };
        let (frames, packets) = (first(&frames), first(&packets));
        assert_eq!(
            frames, packets,
            "{log}: every recorded packet decodes to a frame"
        );
        assert!(
            packets > published,
            "{log}: {packets} packets, 3 rounds of 60 + the last"
        );
        let dts = probe("-show_packets", "packet=dts");
        let dts: Vec<i64> = dts
            .lines()
            // The first field; MPEG-TS packets carry side data after it.
            .filter_map(|l| l.split(',').next()?.trim().parse().ok())
            .collect();
        // Matroska keeps pts only; its demuxer cannot derive the dts of the first B-frame
        // stream packets (N/A). MPEG-TS carries every dts.
        let missing = packets - dts.len() as u64;
        assert!(
            missing == 0 || (log == "rec-mkv" && missing <= 2),
            "{log}: {missing} packets without a dts"
        );
        assert!(
            dts.windows(2).all(|w| w[0] < w[1]),
            "{log}: timestamps go backwards across a restart: {dts:?}"
        );
    }
}
