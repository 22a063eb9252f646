//! A camera that goes away and comes back: its publisher, run by the plain supervision loop
//! with the camera unit's command, ends and is restarted under the same key; the recorder
//! unit's command and a Python subscriber with `reconnect` carry on across the gap.

use std::time::{Duration, Instant};

use cuframes_test_support::ffmpeg::{find, repo, Scratch};

use super::annexb::{assert_window_of_loop, is_key, read_access_units, AccessUnit};
use super::camera::*;
use super::pipeline::*;

/// The Python subscriber: every packet as a JSON line [seq, pts_ns, dts_ns, keyframe,
/// discontinuity, size] until the stop file appears (60 s at most).
const PY_SUBSCRIBER: &str = r#"
import json, os, sys, time
import cuframes
key, runtime_dir, out, stop = sys.argv[1:5]
sub = cuframes.PacketSubscriber(key, name="rtsp-outage", runtime_dir=runtime_dir,
                                wait_publisher=20, reconnect=20)
deadline = time.monotonic() + 60
with open(out, "w") as f:
    try:
        while not os.path.exists(stop) and time.monotonic() < deadline:
            p = sub.next(0.1)
            if p is not None:
                f.write(json.dumps([p.seq, p.pts_ns, p.dts_ns, p.keyframe, p.discontinuity,
                                    len(p.data)]) + "\n")
                f.flush()
    finally:
        sub.close()
"#;

/// The Python with the cuframes package: `$CUFRAMES_PYTHON`, else build/venv's; `None`
/// (after saying why) when neither imports cuframes.
fn python_with_cuframes() -> Option<std::path::PathBuf> {
    let py = std::env::var_os("CUFRAMES_PYTHON")
        .map(Into::into)
        .unwrap_or_else(|| repo().join("build/venv/bin/python"));
    match std::process::Command::new(&py)
        .args(["-c", "import cuframes"])
        .output()
    {
        Ok(o) if o.status.success() => Some(py),
        _ => {
            println!(
                "SKIPPED the Python subscriber (no {} importing cuframes: scripts/build-python.sh)",
                py.display()
            );
            None
        }
    }
}

/// Where the recorded access units switch from one run of the camera to the next: the
/// recording is a window of the looped clip, then (after each restart) another one starting
/// on a keyframe. Returns the windows' lengths.
fn windows_of_loop(aus: &[AccessUnit], clip: &[AccessUnit], codec: Codec) -> Vec<usize> {
    let n = clip.len();
    let mut at = 0;
    let mut windows = Vec::new();
    while at < aus.len() {
        assert!(
            is_key(codec, &aus[at]),
            "window at {at} starts on a non-keyframe"
        );
        // The longest window of the loop from `at`.
        let (start, len) = (0..n)
            .filter(|&o| aus[at] == clip[o])
            .map(|o| {
                let len = aus[at..]
                    .iter()
                    .enumerate()
                    .take_while(|(i, au)| **au == clip[(o + i) % n])
                    .count();
                (o, len)
            })
            .max_by_key(|&(_, len)| len)
            .unwrap_or_else(|| panic!("access unit {at} {:?} is none of the clip's", aus[at]));
        assert_window_of_loop("window", &aus[at..at + len], clip);
        let _ = start;
        at += len;
        windows.push(len);
    }
    windows
}

#[test]
fn camera_outage_publisher_restarted_recorder_and_python_carry_on() {
    let Some(ff) = find() else { return };
    let Some(()) = gstreamer_or_skip() else {
        return;
    };
    let s = Scratch::new(&ff, "outage");
    let clip = h264_clip(&s, FPS, 2 * FPS);
    let cam = Camera::start(&s, &clip, &CameraOptions::default());
    let port = cam.port;
    let key = s.key("cam");
    let record_dir = s.path("recordings");
    std::fs::create_dir_all(&record_dir).unwrap();

    // The recorder unit's command, as systemd runs it for the instance `key`.
    let argv = unit_exec(&recorder_unit(), &key, &[]);
    assert_eq!(argv[..2], ["/bin/sh", "-c"]);
    let script = argv[2].replace(UNIT_FFMPEG, ff.ffmpeg.to_str().unwrap());
    let recorder = Shell::start(
        &s,
        "recorder",
        &script,
        &[
            ("CUFRAMES_KEY", &key),
            ("RECORD_DIR", record_dir.to_str().unwrap()),
        ],
    );
    let stop = s.path("python.stop");
    let py_out = s.path("python.jsonl");
    let python = python_with_cuframes().map(|py| {
        let script = s.path("subscriber.py");
        std::fs::write(&script, PY_SUBSCRIBER).unwrap();
        s.spawn(
            &py,
            "python",
            &[
                script.to_str().unwrap(),
                &key,
                s.dir.to_str().unwrap(),
                py_out.to_str().unwrap(),
                stop.to_str().unwrap(),
            ],
        )
    });

    // The camera unit's command in the plain supervision loop.
    let mut cmd = vec![ff.ffmpeg.to_str().unwrap().to_owned()];
    cmd.extend(publisher_args(&cam.url(), &key));
    let publisher = Shell::supervise(&s, "publisher", &sh_words(&cmd));
    wait_published(&key, 40, SECS(30));
    let first = ring_publisher(&key);

    // Power cut: no TEARDOWN, the TCP connection is reset.
    cam.kill9();
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let cam = Camera::start(
        &s,
        &clip,
        &CameraOptions {
            port,
            ..Default::default()
        },
    );
    let second = wait_new_publisher(&key, first, 40, SECS(30));
    let back = t.elapsed();

    // End: the loop stops restarting, its ffmpeg ends cleanly (SIGTERM), and the recorder is
    // stopped as systemd stops it (one SIGTERM) while it waits for another publisher: it
    // must end within the unit's stop timeout, else systemd would SIGKILL it mid-file.
    publisher.signal(libc::SIGKILL);
    // SAFETY: kill(2) on the ring's publisher, the ffmpeg the supervision loop started.
    unsafe { libc::kill(second as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(500));
    let stop_timeout = unit_setting_secs(&recorder_unit(), "TimeoutStopSec");
    let t = Instant::now();
    recorder.signal(libc::SIGTERM);
    let mut recorder = recorder;
    recorder.wait(SECS(stop_timeout + 10));
    let stopped = t.elapsed();
    assert!(
        stopped < SECS(stop_timeout),
        "the recorder took {stopped:?} to stop, past the unit's TimeoutStopSec={stop_timeout}"
    );
    std::fs::write(&stop, b"").unwrap();
    if let Some(p) = python {
        s.wait_ok(p, SECS(20));
    }
    drop(publisher);
    cam.stop();

    // The supervision loop tried while the camera was away, and the first ffmpeg did end.
    let plog = s.stderr("publisher");
    assert!(
        plog.contains("Connection refused"),
        "no attempt while the camera was away:\n{plog}"
    );
    // The recorder said where the gap is, and nothing else went wrong.
    let rlog = s.stderr("recorder");
    let unexpected: Vec<&str> = rlog
        .lines()
        .filter(|l| !l.contains("discontinuity") && !l.contains("received signal 15"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        rlog.contains("discontinuity") && unexpected.is_empty(),
        "recorder log:\n{rlog}"
    );
    let files: Vec<_> = std::fs::read_dir(&record_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "one recording: {files:?}");
    let rec = &files[0];
    let name = rec.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with(&format!("{key}-")) && name.ends_with(".mkv"),
        "{name}"
    );
    assert_decodes_cleanly(&s, "play", rec);
    let probed = probe_packets(&s, "probe", rec);
    assert_increasing("recording across the outage (pts)", &probed, |p| p.pts);
    assert_increasing("recording across the outage (dts)", &probed, |p| p.dts);
    let aus = recorded_access_units(&s, "readback", Codec::H264, rec);
    assert_key_flags("recording", Codec::H264, &probed, &aus);
    let clip_aus = read_access_units(Codec::H264, &clip.path);
    let windows = windows_of_loop(&aus, &clip_aus, Codec::H264);
    // The readers join the first run at its newest keyframe (they may start after the
    // publisher), and follow the second from its newest keyframe when they reconnect: each
    // run had 40 packets or more, keyframes 25 apart, so each window holds 15 or more.
    assert!(
        windows.len() == 2 && windows.iter().all(|&w| w >= 15),
        "runs of the camera in the recording: {windows:?}"
    );

    if std::path::Path::new(&py_out).exists() {
        let lines: Vec<Vec<serde_free::Value>> = std::fs::read_to_string(&py_out)
            .unwrap()
            .lines()
            .map(serde_free::parse_list)
            .collect();
        let pts: Vec<i64> = lines.iter().map(|l| l[1].int()).collect();
        assert!(
            pts.windows(2).all(|w| w[0] < w[1]),
            "Python: timestamps go back: {pts:?}"
        );
        let discont: Vec<usize> = (0..lines.len()).filter(|&i| lines[i][4].bool()).collect();
        assert!(
            lines[0][3].bool()
                && discont.len() == 1
                && discont[0] >= 10
                && lines[discont[0]][3].bool(),
            "Python: the restart is marked once, on a keyframe: {discont:?}"
        );
        assert!(
            lines.len() - discont[0] >= 15,
            "Python: {} packets after the restart",
            lines.len() - discont[0]
        );
        println!(
            "outage: Python read {} packets, DISCONTINUITY at {discont:?}",
            lines.len()
        );
    }
    println!(
        "outage: camera back and a new publisher with 40 packets {back:?} after the power cut; \
         recording of {} packets in runs of {windows:?}, decodes cleanly, timestamps \
         increasing; recorder stopped {stopped:?} after SIGTERM",
        aus.len()
    );
}

/// A camera that hangs with its connection open (SIGSTOP: no data, no close): the camera
/// unit's `-timeout` ends the publisher's RTSP reads (after two of them), so the unit
/// restarts it instead of waiting for ever, and a recorder of the ring ends cleanly with
/// what it had.
#[test]
fn hung_camera_ends_the_publisher_within_its_read_timeout() {
    let Some(ff) = find() else { return };
    let Some(()) = gstreamer_or_skip() else {
        return;
    };
    let s = Scratch::new(&ff, "hung");
    let clip = h264_clip(&s, FPS, 2 * FPS);
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
    let args = publisher_args(&cam.url(), &key);
    let timeout_us: u64 = args
        .iter()
        .skip_while(|a| *a != "-timeout")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("the camera unit sets -timeout");
    // The publisher waits for the recorder (which then starts on the first picture).
    let mut args = args;
    let at = args.len() - 1;
    args.splice(at..at, ["-wait_subscribers", "1"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let publisher = s.spawn_ffmpeg("publisher", &args);
    wait_published(&key, 20, SECS(30));
    cam.signal(libc::SIGSTOP);
    let t = Instant::now();
    let st = s.wait(publisher, SECS(timeout_us / 1_000_000 + 10));
    let ended = t.elapsed();
    cam.signal(libc::SIGCONT);
    cam.stop();
    // FFmpeg's RTSP demuxer reads twice before it gives up ("Failed reading RTSP data:
    // Connection timed out", "Last message repeated 1 times"): twice the read timeout.
    let give_up = 2 * Duration::from_micros(timeout_us);
    assert!(
        ended >= give_up.saturating_sub(Duration::from_millis(500)) && ended < give_up + SECS(3),
        "the publisher ended {ended:?} after the camera hung (expected about {give_up:?}): {st}"
    );
    // A stop (SIGTERM) during such a hang ends after at most that: the unit's stop timeout
    // must outlast it.
    assert!(
        SECS(unit_setting_secs(&camera_unit(), "TimeoutStopSec")) > give_up + SECS(2),
        "the camera unit's TimeoutStopSec does not outlast {give_up:?}"
    );
    s.wait_ok(recorder, SECS(20));
    assert_decodes_cleanly(&s, "play", &rec);
    assert!(probe_packets(&s, "probe", &rec).len() >= 20);
    println!(
        "hung camera: the publisher gave up {ended:?} after it stopped ({st}); the recording closed cleanly"
    );
}

/// JSON lists of numbers and booleans, as the Python subscriber writes them (no JSON
/// crate needed for one line format).
mod serde_free {
    pub enum Value {
        Int(i64),
        Bool(bool),
        Null,
    }

    impl Value {
        pub fn int(&self) -> i64 {
            match self {
                Value::Int(v) => *v,
                _ => panic!("not an integer"),
            }
        }
        pub fn bool(&self) -> bool {
            match self {
                Value::Bool(v) => *v,
                _ => panic!("not a boolean"),
            }
        }
    }

    pub fn parse_list(line: &str) -> Vec<Value> {
        let inner = line
            .trim()
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'))
            .unwrap_or_else(|| panic!("not a list: {line:?}"));
        inner
            .split(',')
            .map(|v| match v.trim() {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                "null" => Value::Null,
                n => Value::Int(n.parse().unwrap_or_else(|_| panic!("bad value {n:?}"))),
            })
            .collect()
    }
}
