//! A recorder that falls behind (a slow disk): `-f cuframes_pkt ... -c copy -f mpegts pipe:1`
//! into a pipe that the test drains at full speed, then at half the stream's packet rate for
//! a while, then at full speed again. While its backlog fits in the ring plus FFmpeg's queue
//! it loses nothing: the recording's pictures are all of the source's. Past that it loses
//! packets: the demuxer marks each gap (a discontinuity warning naming the packet) and resumes
//! at a keyframe, and the recording still decodes without an error, with the source's
//! pictures in order and, once the recorder caught up, all of them to the end.
//! docs/ffmpeg.md ("A recorder that falls behind") states the limit.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cuframes_test_support::ffmpeg::*;

use super::harness::{
    decoded_pictures, h264_bframes_mkv, keyframe_indices, pictures, Source, SECS,
};

/// Packets per second the publisher sends (the 25 fps sample at `-readrate 4`).
const RATE: f64 = 100.0;
/// The ring's packet slots in these tests (small, so that the limit is reached in seconds).
const RING_SLOTS: usize = 32;
/// MPEG-TS packet size, and the PID of the first (video) stream of FFmpeg's TS muxer.
const TS: usize = 188;
const VIDEO_PID: u16 = 0x100;
/// The slow spell of the tests that go past the limit: a backlog of about 75 packets, and
/// the sample (2.5 s at RATE) still has keyframes to resume at after it.
const SLOW_SPELL: Duration = Duration::from_millis(1500);
/// The recorder's pipe holds one page: its share of the backlog is a few packets.
const PIPE_BYTES: libc::c_int = 4096;

/// The recorder process, killed and reaped if the test fails before it ends.
struct Recorder(Option<Child>);

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What the slow reader of the pipe saw.
struct Drained {
    /// Video packets (PES starts on the video PID) read while throttled.
    throttled_packets: usize,
}

/// How long the recorder runs at full speed before it is slowed down: long enough to be past
/// its start (probing) and to have caught up with the publisher, so that its backlog is
/// about zero when the slow spell starts.
const WARM_UP: Duration = Duration::from_millis(500);

/// Read the recorder's MPEG-TS from `pipe` into `out`: at full speed for [`WARM_UP`] from the
/// first video packet, then for `slow_for` at half of [`RATE`] (the k-th video packet of the
/// spell is read no earlier than k / (RATE / 2) seconds into it), then at full speed again.
/// Ends at EOF, or fails past `limit`.
fn drain(mut pipe: impl Read, out: &Path, slow_for: Duration, limit: Duration) -> Drained {
    let mut file = File::create(out).unwrap();
    let deadline = Instant::now() + limit;
    let mut ts = [0u8; TS];
    let (mut first, mut slow_start, mut throttled) = (None::<Instant>, None::<Instant>, 0usize);
    loop {
        assert!(
            Instant::now() < deadline,
            "the recording did not end in {limit:?}"
        );
        match pipe.read_exact(&mut ts) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => panic!("reading the recorder's pipe: {e}"),
        }
        assert_eq!(ts[0], 0x47, "lost MPEG-TS sync");
        let pid = u16::from(ts[1] & 0x1F) << 8 | u16::from(ts[2]);
        let unit_start = ts[1] & 0x40 != 0;
        if pid == VIDEO_PID && unit_start {
            let now = Instant::now();
            let t0 = *first.get_or_insert(now);
            if now >= t0 + WARM_UP {
                let spell = *slow_start.get_or_insert(now);
                if now < spell + slow_for {
                    let due = spell + Duration::from_secs_f64(throttled as f64 / (RATE / 2.0));
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    throttled += 1;
                }
            }
        }
        file.write_all(&ts).unwrap();
    }
    Drained {
        throttled_packets: throttled,
    }
}

/// What a slow recording came to.
struct Outcome {
    /// Every picture of the source, and of the recording (size, md5), in output order.
    source: Vec<(u64, String)>,
    recorded: Vec<(u64, String)>,
    recorder_log: String,
    throttled_packets: usize,
    /// Packets of the source, and in the recording (MPEG-TS, by ffprobe).
    source_packets: usize,
    recorded_packets: usize,
}

/// Publish `src` at [`RATE`] packets/s into a ring of [`RING_SLOTS`] slots while a recorder
/// writes MPEG-TS into a pipe drained at half that rate for `slow_for` (`output_opts`: more
/// options of the recorder's output).
fn slow_recording(s: &Scratch, src: &Source, slow_for: Duration, output_opts: &[&str]) -> Outcome {
    let slots = RING_SLOTS.to_string();
    slow_recording_in(s, src, &["-ring_slots", &slots], slow_for, output_opts)
}

/// [`slow_recording`] into a ring made with the muxer options `ring`.
fn slow_recording_in(
    s: &Scratch,
    src: &Source,
    ring: &[&str],
    slow_for: Duration,
    output_opts: &[&str],
) -> Outcome {
    let key = s.key("slow");
    let recorder_log = s.path("recorder.err");
    let mut child = Command::new(&s.ff.ffmpeg)
        .args(["-nostdin", "-hide_banner", "-v", "warning"])
        .args([
            "-f",
            "cuframes_pkt",
            "-wait_publisher",
            "10",
            "-read_timeout",
            "10",
        ])
        .args(["-i", &key, "-map", "0:v:0", "-c", "copy"])
        .args(output_opts)
        .args(["-f", "mpegts", "-flush_packets", "1", "pipe:1"])
        .env("CUFRAMES_RUNTIME_DIR", &s.dir)
        .env("AV_LOG_FORCE_NOCOLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(File::create(&recorder_log).unwrap())
        .spawn()
        .unwrap();
    let pipe = child.stdout.take().unwrap();
    // SAFETY: F_SETPIPE_SZ on a pipe descriptor this process owns; no memory is passed.
    let got = unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
    assert!(
        got >= PIPE_BYTES,
        "F_SETPIPE_SZ: {}",
        std::io::Error::last_os_error()
    );
    let mut recorder = Recorder(Some(child));
    let mut args = vec![
        "-v",
        "error",
        "-readrate",
        "4",
        "-readrate_initial_burst",
        "0",
    ];
    args.extend([
        "-i",
        src.path.to_str().unwrap(),
        "-map",
        "0:v:0",
        "-c",
        "copy",
    ]);
    args.extend(["-f", "cuframes_pkt", "-wait_subscribers", "1"]);
    args.extend_from_slice(ring);
    args.push(&key);
    let publisher = s.spawn_ffmpeg("publisher", &args);
    let rec = s.path("rec.ts");
    // The pipe is read on a thread of its own, so that a recorder that hangs is killed here
    // (its end of the pipe closes, and the read sees EOF) instead of blocking the test.
    let rec_path = rec.clone();
    let reader = std::thread::spawn(move || drain(pipe, &rec_path, slow_for, SECS(60)));
    s.wait_ok(publisher, SECS(30));
    let deadline = Instant::now() + SECS(30);
    let status = loop {
        let child = recorder.0.as_mut().unwrap();
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the recorder did not end 30 s after its publisher:\n{}",
                std::fs::read_to_string(&recorder_log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    recorder.0 = None;
    let drained = reader.join().expect("the pipe reader failed");
    let recorder_log = std::fs::read_to_string(&recorder_log).unwrap();
    assert!(status.success(), "the recorder failed:\n{recorder_log}");
    // The recording decodes without a single error.
    let decoded = s.path("rec-decoded.framemd5");
    let (ok, err) = s.ffmpeg(
        "rec-decode",
        &[
            "-v",
            "error",
            "-i",
            rec.to_str().unwrap(),
            "-fps_mode",
            "passthrough",
            "-f",
            "framemd5",
            decoded.to_str().unwrap(),
        ],
        SECS(60),
    );
    assert!(
        ok && err.is_empty(),
        "the recording does not decode cleanly:\n{err}"
    );
    let count = |log: &str, path: &str| -> usize {
        let args = ["-v", "error", "-count_packets", "-select_streams", "v:0"];
        let mut args = args.to_vec();
        args.extend([
            "-show_entries",
            "stream=nb_read_packets",
            "-of",
            "csv=p=0",
            path,
        ]);
        // MPEG-TS lists the stream again under its program: the first line is the count.
        let out = s.ffprobe_ok(log, &args, SECS(30));
        let first = out.lines().next().unwrap_or_default().trim().to_owned();
        first
            .parse()
            .unwrap_or_else(|_| panic!("ffprobe -count_packets {path}: {out:?}"))
    };
    Outcome {
        source_packets: count("count-source", src.path.to_str().unwrap()),
        recorded_packets: count("count-rec", rec.to_str().unwrap()),
        source: decoded_pictures(s, src),
        recorded: pictures(&decoded),
        recorder_log,
        throttled_packets: drained.throttled_packets,
    }
}

/// The source's index of every recorded picture (the source's pictures are all different),
/// checked to be in the source's order: nothing out of order, nothing that is not the source's.
fn source_indices(o: &Outcome) -> Vec<usize> {
    let index: std::collections::HashMap<&(u64, String), usize> =
        o.source.iter().enumerate().map(|(i, p)| (p, i)).collect();
    assert_eq!(index.len(), o.source.len(), "the source has equal pictures");
    let got: Vec<usize> = o
        .recorded
        .iter()
        .map(|p| {
            *index
                .get(p)
                .expect("a recorded picture is none of the source's")
        })
        .collect();
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "recorded pictures out of the source's order: {got:?}"
    );
    got
}

/// The packets the demuxer marked: the seqs of "discontinuity before packet N".
fn marked_gaps(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.split("discontinuity before packet ").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap().parse().unwrap())
        .collect()
}

/// The packets each marked gap says were lost ("...: M packets lost ..."), in order.
fn lost_per_gap(log: &str) -> Vec<usize> {
    log.lines()
        .filter(|l| l.contains("discontinuity before packet"))
        .filter_map(|l| l.split("': ").nth(1))
        .map(|rest| {
            let (n, what) = rest.split_once(' ').unwrap();
            assert!(what.starts_with("packets lost"), "{l}", l = rest);
            n.parse().unwrap()
        })
        .collect()
}

/// Nothing lost, nothing marked: every picture of the source, in order.
fn assert_lossless(o: &Outcome, what: &str) {
    assert!(
        marked_gaps(&o.recorder_log).is_empty(),
        "{what}: a gap was marked:\n{}",
        o.recorder_log
    );
    assert!(
        !o.recorder_log.contains("packets lost"),
        "{what}: losses reported:\n{}",
        o.recorder_log
    );
    assert_eq!(
        o.recorded_packets, o.source_packets,
        "{what}: packets missing"
    );
    let got = source_indices(o);
    assert_eq!(
        got.len(),
        o.source.len(),
        "{what}: {} of {} pictures recorded",
        got.len(),
        o.source.len()
    );
}

/// Gaps marked, each resumed at a keyframe, the recording decodes in the source's order and,
/// once the recorder caught up, holds every picture to the end. Returns the marked packets,
/// the last keyframe resumed at and the number of pictures recorded.
fn assert_gaps_marked(o: &Outcome, keys: &[usize]) -> (Vec<u64>, usize, usize) {
    let gaps = marked_gaps(&o.recorder_log);
    assert!(!gaps.is_empty(), "no gap marked:\n{}", o.recorder_log);
    // Each gap says how many packets it lost, and they are exactly the ones missing from the
    // recording; the end sums them up.
    let lost = lost_per_gap(&o.recorder_log);
    assert_eq!(
        lost.len(),
        gaps.len(),
        "a gap without its count:\n{}",
        o.recorder_log
    );
    let total: usize = lost.iter().sum();
    assert_eq!(
        o.recorded_packets + total,
        o.source_packets,
        "{} packets recorded + {total} said lost != {} published:\n{}",
        o.recorded_packets,
        o.source_packets,
        o.recorder_log
    );
    assert!(
        o.recorder_log
            .contains(&format!("{total} packets lost in {} gaps", gaps.len())),
        "no summary of the losses at the end:\n{}",
        o.recorder_log
    );
    // Packet seqs count from 1: the packet after each gap is a keyframe of the source.
    let resumed: Vec<usize> = gaps.iter().map(|&seq| seq as usize - 1).collect();
    assert!(
        resumed.iter().all(|k| keys.contains(k)),
        "resumed at packets {resumed:?}, keyframes are {keys:?}"
    );
    let got = source_indices(o);
    let n = o.source.len();
    assert!(got.len() < n, "nothing was lost ({} pictures)", got.len());
    // Every picture from the last keyframe resumed at to the end: the recorder caught up.
    let last = *resumed.last().unwrap();
    assert_eq!(
        got[got.len() - (n - last)..],
        (last..n).collect::<Vec<_>>(),
        "pictures missing after the recorder caught up at keyframe {last}"
    );
    (gaps, last, got.len())
}

/// Half speed for 0.4 s: a backlog of about 20 packets, within the 32-slot ring alone.
#[test]
fn a_backlog_within_the_ring_loses_nothing() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "slowok");
    let o = slow_recording(&s, &h264_bframes_mkv(), Duration::from_millis(400), &[]);
    assert!(
        o.throttled_packets >= 15,
        "{} packets throttled",
        o.throttled_packets
    );
    assert_lossless(&o, "half speed for 0.4 s");
    println!(
        "half speed for 0.4 s ({} packets read throttled): all {} pictures recorded",
        o.throttled_packets,
        o.recorded.len()
    );
}

/// Half speed for 1.5 s: a backlog of about 75 packets, more than the ring's 32 slots plus
/// FFmpeg's default queue (8 packets) and the pipe. The demuxer marks each gap and resumes at
/// a keyframe; the recording decodes without an error, holds the source's pictures in order,
/// and once the recorder caught up, every picture to the end.
#[test]
fn a_backlog_past_the_ring_and_the_queue_marks_the_gap_and_still_decodes() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "slowgap");
    let src = h264_bframes_mkv();
    let keys = keyframe_indices(&s, &src);
    let o = slow_recording(&s, &src, SLOW_SPELL, &[]);
    let (gaps, last, recorded) = assert_gaps_marked(&o, &keys);
    let n = o.source.len();
    println!(
        "half speed for 1.5 s ({} packets read throttled): {} of {n} pictures recorded, \
         gaps marked before packets {gaps:?} (keyframes), all pictures from {last} on; \
         the recording decodes without an error",
        o.throttled_packets, recorded
    );
}

/// The data area bounds the backlog too: 1024 slots but 12 KiB of data (the sample's packets
/// are 360 bytes on average, 6.4 KiB at most), half speed for 1.5 s. The gap is marked and the
/// recording decodes as with too few slots.
#[test]
fn a_backlog_past_the_data_area_marks_the_gap_and_still_decodes() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "slowbytes");
    let src = h264_bframes_mkv();
    let keys = keyframe_indices(&s, &src);
    let ring = ["-ring_slots", "1024", "-data_size", "12288"];
    let o = slow_recording_in(&s, &src, &ring, SLOW_SPELL, &[]);
    let (gaps, last, recorded) = assert_gaps_marked(&o, &keys);
    println!(
        "12 KiB data area, half speed for 1.5 s: {recorded} of {} pictures recorded, gaps \
         before packets {gaps:?}, all pictures from {last} on",
        o.source.len()
    );
}

/// The same 1.5 s at half speed with FFmpeg's queue between the demuxer and the muxer raised
/// to 256 packets (`-thread_queue_size`, an output option): the backlog of about 75 packets
/// fits in the ring plus that queue, and nothing is lost.
#[test]
fn a_larger_ffmpeg_queue_holds_the_backlog() {
    let Some(ff) = find() else { return };
    let s = Scratch::new(&ff, "slowq");
    let o = slow_recording(
        &s,
        &h264_bframes_mkv(),
        SLOW_SPELL,
        &["-thread_queue_size", "256"],
    );
    assert!(
        o.throttled_packets >= 60,
        "{} packets throttled",
        o.throttled_packets
    );
    assert_lossless(&o, "half speed for 1.5 s, -thread_queue_size 256");
    println!(
        "half speed for 1.5 s with -thread_queue_size 256 ({} packets read throttled): all {} \
         pictures recorded",
        o.throttled_packets,
        o.recorded.len()
    );
}

/// The measurement behind the limit stated in docs/ffmpeg.md: half speed for 0.5 to 1.5 s
/// (a backlog of 25 to 75 packets) into a 32-slot ring, with FFmpeg's default queue and with
/// `-thread_queue_size 32`; prints the shortest slow spell that loses packets. Not part of CI:
/// `cargo test --release --test ffmpeg_pkt measure_the_limit -- --ignored --nocapture`.
#[test]
#[ignore]
fn measure_the_limit() {
    let Some(ff) = find() else { return };
    let src = h264_bframes_mkv();
    for queue in [None, Some("32")] {
        let opts: Vec<&str> = queue.map_or(vec![], |q| vec!["-thread_queue_size", q]);
        for tenths in 5..=15u64 {
            let s = Scratch::new(&ff, "slowmeasure");
            let slow = Duration::from_millis(tenths * 100);
            let o = slow_recording(&s, &src, slow, &opts);
            let lost = o.source.len() - o.recorded.len();
            println!(
                "ring {RING_SLOTS} slots, queue {}: half speed for {:.1} s, backlog ~{} packets: \
                 {} pictures lost, gaps {:?}",
                queue.unwrap_or("8 (default)"),
                slow.as_secs_f64(),
                (slow.as_secs_f64() * RATE / 2.0).round(),
                lost,
                marked_gaps(&o.recorder_log)
            );
            if lost > 0 {
                break;
            }
        }
    }
}
