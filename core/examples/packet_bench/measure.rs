//! The parent's side of a reader process: starting it, and reading back its result line and
//! its CPU time.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout};
use std::time::Instant;

use crate::bench_common::child::start;
use crate::bench_common::cpu::rusage_cpu;
use crate::cli::Role;

/// The reader's breakdown of its p99 tail, in the order `report::tail_table` prints them.
const TAIL_FIELDS: [&str; 8] = [
    "p99_key_us",
    "p99_nonkey_us",
    "waited_pct",
    "p99_waited_us",
    "p99_ready_us",
    "tail_key_pct",
    "tail_waited_pct",
    "tail_backlog",
];

/// A started reader process.
pub struct Reader {
    child: Child,
    out: BufReader<ChildStdout>,
    /// Its ready line (the UDP reader names its port there).
    pub ready: String,
}

/// Starts a reader in `role` with `arg` and waits until it is ready.
pub fn spawn_reader(role: Role, arg: &str) -> Reader {
    let started = start(role.command(arg));
    let ready = started.ready;
    assert!(ready.starts_with("BENCH-READY"), "{ready:?}");
    Reader {
        child: started.child,
        out: started.out,
        ready,
    }
}

/// What one reader measured.
#[derive(Debug, Default, Clone)]
pub struct Measured {
    pub packets: u64,
    pub bytes: u64,
    pub secs: f64,
    pub overruns: u64,
    pub lost: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub cpu_s: f64,
    pub wall_s: f64,
    /// Where the tail comes from (the reader's breakdown fields, as printed).
    pub tail: Vec<(String, f64)>,
}

impl Measured {
    /// Packets per second read.
    pub fn pps(&self) -> f64 {
        self.packets as f64 / self.secs.max(1e-9)
    }
    /// MB/s read.
    pub fn mbps(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.secs.max(1e-9)
    }
    /// Reader CPU, % of one core over its life.
    pub fn cpu_pct(&self) -> f64 {
        100.0 * self.cpu_s / self.wall_s.max(1e-9)
    }
    /// Reader CPU per packet, µs.
    pub fn cpu_us_per_packet(&self) -> f64 {
        1e6 * self.cpu_s / (self.packets.max(1) as f64)
    }
}

/// Collects a reader's result line and its CPU time (wait4 rusage).
pub fn finish(mut r: Reader, started: Instant) -> Measured {
    let mut line = String::new();
    let mut all = String::new();
    while r.out.read_line(&mut line).unwrap() > 0 {
        if line.starts_with("BENCH-RESULT") {
            all = line.clone();
        }
        line.clear();
    }
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = r.child.id() as libc::pid_t;
    // SAFETY: waits for the child we spawned, by pid.
    unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall_s = started.elapsed().as_secs_f64();
    let get = |k: &str| -> f64 {
        all.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {all:?}"))
            .parse()
            .unwrap()
    };
    Measured {
        packets: get("packets") as u64,
        bytes: get("bytes") as u64,
        secs: get("secs"),
        overruns: get("overruns") as u64,
        lost: get("lost") as u64,
        p50_us: get("p50_us"),
        p99_us: get("p99_us"),
        cpu_s: rusage_cpu(&ru).as_secs_f64(),
        wall_s,
        tail: TAIL_FIELDS
            .iter()
            .map(|k| (k.to_string(), get(k)))
            .collect(),
    }
}

/// One run of a transport: what each reader measured, and the writer's CPU and time.
pub struct RunResult {
    pub readers: Vec<Measured>,
    pub writer_cpu_s: f64,
    pub writer_secs: f64,
}
