//! Support for the FFmpeg frame tests (tests/ffmpeg_frames*.rs): finding the cuframes FFmpeg
//! build, a private runtime directory and unique keys per test, child processes that are
//! killed and SHM objects that are removed even when a test fails.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const SKIP: &str = "SKIPPED (no cuframes ffmpeg build: run scripts/build-ffmpeg.sh)";

/// The ffmpeg binary with the cuframes components, or None (the caller prints SKIP).
pub fn ffmpeg() -> Option<PathBuf> {
    let path = match std::env::var_os("CUFRAMES_FFMPEG") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("build/ffmpeg/bin/ffmpeg"),
    };
    if !path.is_file() {
        return None;
    }
    let out = Command::new(&path)
        .args(["-hide_banner", "-h", "filter=hwupload_cuframes"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !text.contains("hwupload_cuframes") || text.contains("Unknown filter") {
        return None;
    }
    Some(path)
}

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// One test's world: runtime directory, keys, children. Dropping it kills the children and
/// removes the directory and every SHM object of its keys.
pub struct Env {
    pub ffmpeg: PathBuf,
    pub dir: PathBuf,
    keys: Vec<String>,
    children: Vec<Child>,
}

impl Env {
    pub fn new(ffmpeg: PathBuf, name: &str) -> Env {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("cuframes-ffx-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Env {
            ffmpeg,
            dir,
            keys: Vec::new(),
            children: Vec::new(),
        }
    }

    /// A key nobody else uses ("t-" prefix: scripts/test.sh looks for leftovers).
    pub fn key(&mut self, tag: &str) -> String {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let k = format!("t-ffx-{tag}-{}-{n}", std::process::id());
        self.keys.push(k.clone());
        k
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn command(&self, args: &[String]) -> Command {
        let mut c = Command::new(&self.ffmpeg);
        c.env("CUFRAMES_RUNTIME_DIR", &self.dir)
            .args(["-hide_banner", "-nostdin", "-y"])
            .args(args)
            .stdin(Stdio::null());
        c
    }

    /// Start ffmpeg in the background; stderr goes to `<dir>/<log>`. Returns its index.
    pub fn spawn(&mut self, args: &[String], log: &str) -> usize {
        let f = std::fs::File::create(self.path(log)).unwrap();
        let child = self
            .command(args)
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .expect("start ffmpeg");
        self.children.push(child);
        self.children.len() - 1
    }

    /// Wait for child `i` (at most `limit`); returns its success and its log.
    pub fn wait(&mut self, i: usize, log: &str, limit: Duration) -> (bool, String) {
        let start = Instant::now();
        let ok = loop {
            match self.children[i].try_wait().unwrap() {
                Some(st) => break st.success(),
                None if start.elapsed() > limit => {
                    let _ = self.children[i].kill();
                    let _ = self.children[i].wait();
                    break false;
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        (
            ok,
            std::fs::read_to_string(self.path(log)).unwrap_or_default(),
        )
    }

    /// Run ffmpeg to completion.
    pub fn run(&self, args: &[String]) -> Output {
        self.command(args).output().expect("run ffmpeg")
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for c in &mut self.children {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Ok(entries) = std::fs::read_dir("/dev/shm") {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if self.keys.iter().any(|k| {
                    name == format!("cuframes-{k}") || name.starts_with(&format!("cuframes-{k}-"))
                }) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

/// Strings from string literals.
pub fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// The frame lines of a framemd5 file (its header lines start with '#').
pub fn frame_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}
