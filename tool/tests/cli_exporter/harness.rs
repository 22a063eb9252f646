//! The exporter as a child process, HTTP requests to it, and `cuframes stat --json` to
//! compare with.

use cuframes_test_support as common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{frame_shm_name, publish_filler, shm_path, Children, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::wire::Format;
use serde_json::Value;

use super::exposition::parse_metrics;

pub const BIN: &str = env!("CARGO_BIN_EXE_cuframes");

pub fn exporter_bin() -> String {
    std::env::var("CUFRAMES_EXPORTER_BIN").unwrap_or_else(|_| BIN.to_owned())
}

/// The exporter of `env.dir` (through `CUFRAMES_RUNTIME_DIR`, as an operator would set it) on
/// a free port, killed when the returned guard drops; and its /metrics URL. These tests
/// compare scrapes with the state of the moment, so no render is reused (`--reuse 0`).
pub fn start_exporter(env: &TestEnv, keys: &[&str]) -> (Children, String) {
    let mut args = vec!["--reuse", "0"];
    args.extend(keys);
    let e = Exporter::start(env, &args, |_| {});
    (e.kids, e.url)
}

/// A running exporter (killed when dropped), where it listens, and its pid.
pub struct Exporter {
    pub kids: Children,
    pub url: String,
    pub addr: SocketAddr,
    pub pid: u32,
}

impl Exporter {
    /// `cuframes exporter --listen 127.0.0.1:0 ARGS`; `setup` adds to the command.
    pub fn start(env: &TestEnv, args: &[&str], setup: impl FnOnce(&mut Command)) -> Exporter {
        let mut cmd = Command::new(exporter_bin());
        cmd.args(["exporter", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("CUFRAMES_RUNTIME_DIR", &env.dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        setup(&mut cmd);
        let mut kids = Children(vec![cmd.spawn().unwrap()]);
        let url = read_url(&mut kids);
        let addr = url
            .strip_prefix("http://")
            .and_then(|u| u.strip_suffix("/metrics"))
            .unwrap()
            .parse()
            .unwrap();
        let pid = kids.0[0].id();
        Exporter {
            kids,
            url,
            addr,
            pid,
        }
    }

    /// Fails the test when the exporter has exited (with how it exited).
    pub fn assert_running(&mut self, when: &str) {
        if let Some(status) = self.kids.0[0].try_wait().unwrap() {
            panic!("the exporter exited {when}: {status}");
        }
    }

    /// A scrape with a fresh connection: status 200 and a parsed exposition, within `limit`.
    pub fn scrape_within(&mut self, limit: Duration, when: &str) -> (String, Duration) {
        self.assert_running(when);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .timeout_global(Some(limit + Duration::from_secs(2)))
            .build()
            .into();
        let t = Instant::now();
        let r = agent.get(&self.url).call();
        let (status, body) = match r {
            Ok(mut r) => (r.status().as_u16(), r.body_mut().read_to_string()),
            Err(e) => panic!("scrape {when} failed after {:?}: {e}", t.elapsed()),
        };
        let took = t.elapsed();
        let body = body.unwrap_or_else(|e| panic!("scrape {when}: body: {e}"));
        assert_eq!(status, 200, "scrape {when}: {body}");
        parse_metrics(&body);
        assert!(
            took < limit,
            "scrape {when} took {took:?} (limit {limit:?})"
        );
        (body, took)
    }

    /// (VmRSS, VmHWM) of the exporter in KiB.
    pub fn memory_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {status}"))
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

/// The URL on the exporter's first line of stdout.
pub fn read_url(kids: &mut Children) -> String {
    let mut out = BufReader::new(kids.0[0].stdout.take().unwrap());
    let mut line = String::new();
    assert!(
        out.read_line(&mut line).unwrap() > 0,
        "exporter said nothing"
    );
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/metrics"));
    assert!(!url.contains(":0/"), "port 0 printed: {url}");
    url
}

pub fn new_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// GET: status, content type, body.
pub fn get(agent: &ureq::Agent, url: &str) -> (u16, String, String) {
    let mut r = agent.get(url).call().unwrap();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (
        r.status().as_u16(),
        ct,
        r.body_mut().read_to_string().unwrap(),
    )
}

pub fn stat_json(env: &TestEnv) -> Value {
    let o = Command::new(BIN)
        .env("CUFRAMES_RUNTIME_DIR", &env.dir)
        .args(["stat", &env.key, "--json", "--interval", "0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    serde_json::from_slice(&o.stdout).unwrap()
}

pub fn u(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Sets the flag when dropped: the threads of a scope stop also when an assertion fails.
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Frame rings planted as plain files in /dev/shm, as anyone who may create files there
/// can: `cuframes-<key>-pNNNN`, a copy of a real ring's header with all 31 subscriber slots
/// in use (by this process). Removed when dropped, also when the test fails.
pub struct Planted {
    pub paths: Vec<PathBuf>,
}

impl Planted {
    pub fn new(env: &TestEnv, n: usize) -> Planted {
        use cuframes_core::wire::frame::{subscriber_offset, SharedHeader};
        let mut ring = {
            let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
            p.enable_frames(FrameRingConfig::new(Format::Bgra, 16, 16))
                .unwrap();
            publish_filler(&p);
            std::fs::read(shm_path(&frame_shm_name(&env.key))).unwrap()
        };
        let put = |ring: &mut Vec<u8>, off: usize, v: u64| {
            ring[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        };
        for bit in 1..=31usize {
            let off = subscriber_offset(bit);
            put(&mut ring, off, 2); // Active
            put(&mut ring, off + 8, u64::from(std::process::id()));
            put(&mut ring, off + 16, 1);
            let name = format!("planted-subscriber-{bit}");
            ring[off + 32..off + 32 + name.len()].copy_from_slice(name.as_bytes());
        }
        put(
            &mut ring,
            std::mem::offset_of!(SharedHeader, subscriber_bitmap),
            0xFFFF_FFFE,
        );
        let mut planted = Planted { paths: Vec::new() };
        for i in 0..n {
            let path = PathBuf::from(shm_path(&frame_shm_name(&format!("{}-p{i:04}", env.key))));
            planted.paths.push(path.clone());
            std::fs::write(&path, &ring).unwrap();
        }
        planted
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}
