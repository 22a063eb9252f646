//! The FFmpeg end-to-end tests' world (`tests/ffmpeg_*.rs`): find the cuframes FFmpeg build,
//! run ffmpeg/ffprobe children in a private runtime directory with unique keys, and clean up
//! (children killed, sockets and /dev/shm objects removed) even when a test fails. Also
//! parses framemd5 files, packet by packet or as frame lines.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const SKIP_MESSAGE: &str = "SKIPPED (no cuframes ffmpeg build: run scripts/build-ffmpeg.sh)";

/// The repository root (this crate lives in `test-support/` below it).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support/ has a parent")
        .to_path_buf()
}

/// A committed sample or reference file.
pub fn sample(name: &str) -> PathBuf {
    repo().join("fate-samples").join(name)
}

#[derive(Clone, Debug)]
pub struct Ffmpeg {
    pub ffmpeg: PathBuf,
    pub ffprobe: PathBuf,
}

/// The cuframes FFmpeg build: `$CUFRAMES_FFMPEG` (the ffmpeg binary; ffprobe next to it) or
/// `build/ffmpeg/bin/ffmpeg`. `None` (after printing SKIPPED) if neither exists. A build that
/// lacks the cuframes components is an error, not a skip: it means libcuframes was not found
/// when FFmpeg was built.
pub fn find() -> Option<Ffmpeg> {
    let ffmpeg = match std::env::var_os("CUFRAMES_FFMPEG") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => repo().join("build/ffmpeg/bin/ffmpeg"),
    };
    if !ffmpeg.is_file() {
        println!("{SKIP_MESSAGE}");
        return None;
    }
    let ffprobe = ffmpeg.with_file_name("ffprobe");
    let out = Command::new(&ffmpeg)
        .args(["-hide_banner", "-h", "muxer=cuframes_pkt"])
        .output()
        .expect("run ffmpeg -h");
    let text = String::from_utf8_lossy(&out.stdout);
    let filter = Command::new(&ffmpeg)
        .args(["-hide_banner", "-h", "filter=hwupload_cuframes"])
        .output()
        .expect("run ffmpeg -h");
    let filter = String::from_utf8_lossy(&filter.stdout);
    assert!(
        text.contains("cuframes_pkt muxer AVOptions")
            && filter.contains("cuframes_upload AVOptions"),
        "{} has no cuframes_pkt muxer (built without libcuframes?): rebuild with \
         PKG_CONFIG_PATH=<prefix>/lib/pkgconfig scripts/build-ffmpeg.sh\n{text}",
        ffmpeg.display()
    );
    Some(Ffmpeg { ffmpeg, ffprobe })
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// One test's private world: a scratch directory that is also its CUFRAMES_RUNTIME_DIR,
/// unique keys, and the children it started. Dropping it kills the children that still run,
/// removes the keys' SHM objects and the directory.
pub struct Scratch {
    pub ff: Ffmpeg,
    pub dir: PathBuf,
    tag: String,
    keys: Mutex<Vec<String>>,
    children: Mutex<Vec<(String, Child)>>,
}

/// A started child, by index into its Scratch.
#[derive(Clone, Copy, Debug)]
pub struct Proc(usize);

impl Scratch {
    pub fn new(ff: &Ffmpeg, name: &str) -> Scratch {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let tag = format!("t-ff{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("cuframes-{tag}-{name}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch {
            ff: ff.clone(),
            dir,
            tag,
            keys: Mutex::new(Vec::new()),
            children: Mutex::new(Vec::new()),
        }
    }

    /// A unique key (`t-ff<pid>-<n>-<name>`), cleaned up on drop.
    pub fn key(&self, name: &str) -> String {
        let k = format!("{}-{name}", self.tag);
        assert!(k.len() <= 63, "key {k} too long");
        self.keys.lock().unwrap().push(k.clone());
        k
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn command(&self, exe: &Path, args: &[&str], log: &str) -> Command {
        let mut c = Command::new(exe);
        c.args(args)
            .env("CUFRAMES_RUNTIME_DIR", &self.dir)
            .env("AV_LOG_FORCE_NOCOLOR", "1")
            .stdin(Stdio::null())
            .stdout(fs::File::create(self.path(&format!("{log}.out"))).unwrap())
            .stderr(fs::File::create(self.path(&format!("{log}.err"))).unwrap());
        c
    }

    /// Start ffmpeg (`-nostdin -hide_banner` prepended); its stdout/stderr go to
    /// `<log>.out`/`<log>.err` in the scratch directory.
    pub fn spawn_ffmpeg(&self, log: &str, args: &[&str]) -> Proc {
        let mut all = vec!["-nostdin", "-hide_banner"];
        all.extend_from_slice(args);
        self.spawn(&self.ff.ffmpeg.clone(), log, &all)
    }

    pub fn spawn(&self, exe: &Path, log: &str, args: &[&str]) -> Proc {
        let child = self
            .command(exe, args, log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", exe.display()));
        let mut ch = self.children.lock().unwrap();
        ch.push((log.to_owned(), child));
        Proc(ch.len() - 1)
    }

    pub fn pid(&self, p: Proc) -> u32 {
        self.children.lock().unwrap()[p.0].1.id()
    }

    pub fn stderr(&self, log: &str) -> String {
        fs::read_to_string(self.path(&format!("{log}.err"))).unwrap_or_default()
    }

    pub fn stdout(&self, log: &str) -> String {
        fs::read_to_string(self.path(&format!("{log}.out"))).unwrap_or_default()
    }

    /// Wait for a child; past `timeout` it is killed and the test fails with its stderr.
    pub fn wait(&self, p: Proc, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let mut ch = self.children.lock().unwrap();
                let (log, child) = &mut ch[p.0];
                if let Some(st) = child.try_wait().unwrap() {
                    return st;
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log = log.clone();
                    drop(ch);
                    panic!(
                        "{log} did not finish within {timeout:?}; stderr:\n{}",
                        self.stderr(&log)
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait for a child and require exit status 0.
    pub fn wait_ok(&self, p: Proc, timeout: Duration) {
        let st = self.wait(p, timeout);
        let log = self.children.lock().unwrap()[p.0].0.clone();
        assert!(
            st.success(),
            "{log} failed ({st}); stderr:\n{}",
            self.stderr(&log)
        );
    }

    /// Kill a child with SIGKILL (no cleanup on its side: a crash).
    pub fn kill9(&self, p: Proc) {
        let mut ch = self.children.lock().unwrap();
        let _ = ch[p.0].1.kill();
        let _ = ch[p.0].1.wait();
    }

    /// Run ffmpeg to completion; returns (success, stderr).
    pub fn ffmpeg(&self, log: &str, args: &[&str], timeout: Duration) -> (bool, String) {
        let p = self.spawn_ffmpeg(log, args);
        let st = self.wait(p, timeout);
        (st.success(), self.stderr(log))
    }

    /// Run ffmpeg and require success.
    pub fn ffmpeg_ok(&self, log: &str, args: &[&str]) {
        let (ok, err) = self.ffmpeg(log, args, Duration::from_secs(60));
        assert!(ok, "ffmpeg {log} failed: {args:?}\n{err}");
    }

    /// Run ffprobe and require success; returns stdout.
    pub fn ffprobe_ok(&self, log: &str, args: &[&str], timeout: Duration) -> String {
        let exe = self.ff.ffprobe.clone();
        let p = self.spawn(&exe, log, args);
        let st = self.wait(p, timeout);
        assert!(
            st.success(),
            "ffprobe {log} failed: {args:?}\n{}",
            self.stderr(log)
        );
        self.stdout(log)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let mut ch = self.children.lock().unwrap_or_else(|p| p.into_inner());
        for (_, c) in ch.iter_mut() {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
        for k in self.keys.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            if let Ok(key) = cuframes_core::Key::new(k) {
                let _ = fs::remove_file(crate::shm_path(&key.frame_shm_name()));
                let _ = fs::remove_file(crate::shm_path(&key.packet_shm_name()));
            }
        }
        if std::env::var_os("CUFRAMES_KEEP_TEST_DIR").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// One packet line of a framemd5 file, timestamps in nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketLine {
    pub stream: u32,
    pub dts_ns: Option<i128>,
    pub pts_ns: Option<i128>,
    pub size: u64,
    pub md5: String,
    /// `F=0x..` (flags other than KEY) and `S=..` (side data), as printed.
    pub extra: String,
}

/// Parse a framemd5 (v2) file. Durations are left out: the packet ring carries none, so a
/// recording cannot reproduce them.
pub fn parse_framemd5(text: &str) -> Vec<PacketLine> {
    let mut tb: std::collections::HashMap<u32, (i128, i128)> = Default::default();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("#tb ") {
            let (idx, r) = rest.split_once(':').unwrap();
            let (n, d) = r.trim().split_once('/').unwrap();
            tb.insert(
                idx.parse().unwrap(),
                (n.parse().unwrap(), d.parse().unwrap()),
            );
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        assert!(f.len() >= 6, "bad framemd5 line {line:?}");
        let stream: u32 = f[0].parse().unwrap();
        let (n, d) = tb[&stream];
        let ns = |v: &str| -> Option<i128> {
            let v: i128 = v.parse().unwrap();
            // framemd5 prints AV_NOPTS_VALUE as is.
            (v != i64::MIN as i128).then(|| {
                let num = v * n * 1_000_000_000;
                // Round to the nearest nanosecond, halves away from zero.
                (2 * num + d * num.signum()) / (2 * d)
            })
        };
        out.push(PacketLine {
            stream,
            dts_ns: ns(f[1]),
            pts_ns: ns(f[2]),
            size: f[4].parse().unwrap(),
            md5: f[5].to_owned(),
            extra: f[6..].join(", "),
        });
    }
    out
}

pub fn read_framemd5(path: &Path) -> Vec<PacketLine> {
    parse_framemd5(&fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

/// Assert two packet lists are equal, showing the first difference.
pub fn assert_same_packets(what: &str, got: &[PacketLine], want: &[PacketLine]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g, w, "{what}: packet {i} differs");
    }
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} packets, expected {}",
        got.len(),
        want.len()
    );
}

/// The frame lines of a framemd5 file (its header lines start with '#').
pub fn frame_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}
