//! The RTSP camera (GStreamer's RTSP server, tests/rtsp/camera.py) and the clips it serves,
//! and the plain shell supervision loop that restarts a publisher like systemd does.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cuframes_test_support::ffmpeg::{repo, sample, Scratch};

/// Debian's python3: python3-gi is a Debian package, not in any venv.
pub const SYSTEM_PYTHON: &str = "/usr/bin/python3";

pub fn camera_script() -> PathBuf {
    repo().join("tests/rtsp/camera.py")
}

/// `None` when GStreamer's RTSP server (or a plugin the camera needs) is missing, after
/// printing SKIPPED with the reason (scripts/install-deps.sh installs them).
pub fn gstreamer_or_skip() -> Option<()> {
    let out = Command::new(SYSTEM_PYTHON)
        .arg(camera_script())
        .arg("check")
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => Some(()),
        Ok(o) if o.status.code() == Some(2) => {
            println!(
                "SKIPPED (no GStreamer RTSP server: {})",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            None
        }
        Ok(o) => panic!(
            "camera.py check failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            println!("SKIPPED (no GStreamer RTSP server: cannot run {SYSTEM_PYTHON}: {e})");
            None
        }
    }
}

/// The codecs a camera serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    H264,
    Hevc,
}

impl Codec {
    pub fn name(self) -> &'static str {
        match self {
            Codec::H264 => "h264",
            Codec::Hevc => "hevc",
        }
    }

    /// The bitstream filter turning a Matroska/MP4 stream back into Annex B.
    pub fn to_annexb(self) -> &'static str {
        match self {
            Codec::H264 => "h264_mp4toannexb",
            Codec::Hevc => "hevc_mp4toannexb",
        }
    }
}

/// Frames per second of every clip.
pub const FPS: u32 = 25;

/// A clip the camera loops: raw Annex B, one slice per picture, no B-frames (like most IP
/// cameras), parameter sets before every keyframe, a keyframe every `gop` pictures.
pub struct Clip {
    pub codec: Codec,
    pub path: PathBuf,
    pub gop: u32,
}

/// A clip of `frames` pictures of the H.264 sample, encoded by this ffmpeg's libx264 with a
/// keyframe every `gop` pictures.
pub fn h264_clip(s: &Scratch, gop: u32, frames: u32) -> Clip {
    let path = s.path(&format!("clip-h264-g{gop}.h264"));
    let (g, n) = (gop.to_string(), frames.to_string());
    s.ffmpeg_ok(
        "clip-h264",
        &[
            "-v",
            "fatal",
            "-i",
            sample("test-25fps.h264").to_str().unwrap(),
            "-frames:v",
            &n,
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-bf",
            "0",
            "-g",
            &g,
            "-keyint_min",
            &g,
            "-sc_threshold",
            "0",
            "-x264-params",
            "threads=1:repeat-headers=1",
            "-f",
            "h264",
            path.to_str().unwrap(),
        ],
    );
    Clip {
        codec: Codec::H264,
        path,
        gop,
    }
}

/// A clip of `frames` pictures of the HEVC sample, encoded by GStreamer's x265 (the FFmpeg
/// build has no HEVC encoder) with a keyframe every `gop` pictures.
pub fn hevc_clip(s: &Scratch, gop: u32, frames: u32) -> Clip {
    let yuv = s.path("clip-hevc.yuv");
    let n = frames.to_string();
    s.ffmpeg_ok(
        "clip-hevc-yuv",
        &[
            "-v",
            "fatal",
            "-i",
            sample("test-25fps.h265").to_str().unwrap(),
            "-frames:v",
            &n,
            "-pix_fmt",
            "yuv420p",
            "-f",
            "rawvideo",
            yuv.to_str().unwrap(),
        ],
    );
    let path = s.path(&format!("clip-hevc-g{gop}.h265"));
    let mut c = Command::new(SYSTEM_PYTHON);
    c.arg(camera_script())
        .args(["encode", "--codec", "hevc", "--gop", &gop.to_string()])
        .args(["--yuv", yuv.to_str().unwrap(), "--size", "320x240"])
        .args(["--fps", &FPS.to_string(), path.to_str().unwrap()]);
    let out = run_bounded(c, Duration::from_secs(60));
    assert!(out.0.success(), "x265 encode failed: {}", out.1);
    let _ = std::fs::remove_file(&yuv);
    Clip {
        codec: Codec::Hevc,
        path,
        gop,
    }
}

/// Run a command with a deadline (killed past it); (status, stderr).
pub fn run_bounded(mut c: Command, timeout: Duration) -> (ExitStatus, String) {
    let err = tempfile_in_tmp("run-bounded");
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = c.spawn().expect("spawn");
    let deadline = Instant::now() + timeout;
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(&err);
            panic!("{c:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let text = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = std::fs::remove_file(&err);
    (st, text)
}

fn tempfile_in_tmp(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    std::env::temp_dir().join(format!("cuframes-rtsp-{}-{n}-{tag}", std::process::id()))
}

/// Options of a camera beyond its clip.
#[derive(Default, Clone)]
pub struct CameraOptions {
    /// 0: a free port the kernel picks.
    pub port: u16,
    /// A RECORD-mode mount `/out` of this codec, written to this file.
    pub record: Option<(Codec, PathBuf)>,
}

/// A running camera: GStreamer's RTSP server serving a clip at `rtsp://127.0.0.1:PORT/cam`.
/// Dropping it kills it (SIGKILL) if it still runs.
pub struct Camera {
    child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
}

impl Camera {
    /// Start a camera and wait (at most 20 s) until it listens.
    pub fn start(s: &Scratch, clip: &Clip, o: &CameraOptions) -> Camera {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let log = s.path(&format!("camera{n}.err"));
        let mut c = Command::new(SYSTEM_PYTHON);
        c.arg(camera_script())
            .args(["serve", "--clip", clip.path.to_str().unwrap()])
            .args(["--codec", clip.codec.name(), "--fps", &FPS.to_string()])
            .args(["--port", &o.port.to_string()]);
        if let Some((codec, file)) = &o.record {
            c.args(["--record-mount", "/out", "--record-codec", codec.name()])
                .args(["--record-file", file.to_str().unwrap()]);
        }
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        let mut child = c.spawn().expect("start camera.py");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut cam = Camera {
            child: Some(child),
            port: 0,
            log,
        };
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| {
                panic!(
                    "the camera printed no port within 20 s: {}",
                    std::fs::read_to_string(&cam.log).unwrap_or_default()
                )
            });
        cam.port = line
            .strip_prefix("PORT ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected camera line {line:?}"));
        cam
    }

    pub fn url(&self) -> String {
        format!("rtsp://127.0.0.1:{}/cam", self.port)
    }

    pub fn record_url(&self) -> String {
        format!("rtsp://127.0.0.1:{}/out", self.port)
    }

    /// Stop it with SIGTERM and require a clean exit (status 0) within 10 s.
    pub fn stop(mut self) {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on the pid of a child this Camera owns and has not reaped yet.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let st = wait_child(&mut child, Duration::from_secs(10));
        assert!(
            st.success(),
            "camera exited with {st} on SIGTERM: {}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// Send `sig` (SIGSTOP: a camera that hangs with its connections open; SIGCONT).
    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) on the pid of a child this Camera owns and has not reaped yet.
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }

    /// Kill it with SIGKILL (a camera losing power: no RTSP TEARDOWN, connections reset).
    pub fn kill9(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Camera {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Wait for a child; past `timeout` it is killed and the test fails.
pub fn wait_child(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("pid {} did not end within {timeout:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A shell script in its own process group (the scratch's runtime directory, `env` added,
/// its output in `<log>.err`): dropping it kills the group, the shell and what it runs.
pub struct Shell {
    child: Child,
}

impl Shell {
    pub fn start(s: &Scratch, log: &str, script: &str, env: &[(&str, &str)]) -> Shell {
        let err = std::fs::File::create(s.path(&format!("{log}.err"))).unwrap();
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script])
            .env("CUFRAMES_RUNTIME_DIR", &s.dir)
            .env("AV_LOG_FORCE_NOCOLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .process_group(0);
        for (k, v) in env {
            c.env(k, v);
        }
        Shell {
            child: c.spawn().expect("start /bin/sh"),
        }
    }

    /// The plain supervision loop of the tests, `while true; do CMD; sleep 1; done`: what
    /// systemd's Restart=always with RestartSec=1 does.
    pub fn supervise(s: &Scratch, log: &str, command: &str) -> Shell {
        Shell::start(
            s,
            log,
            &format!("while true; do {command}; sleep 1; done"),
            &[],
        )
    }

    /// Send `sig` to the shell alone (not its group).
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on the pid of our own child, which is not reaped before drop.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Wait for the shell to end (killed past `timeout`, failing the test).
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        wait_child(&mut self.child, timeout)
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        // SAFETY: killpg(2) on the process group our child leads (process_group(0)).
        unsafe { libc::killpg(self.child.id() as i32, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// `words` as a shell command line, each word single-quoted.
pub fn sh_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}
