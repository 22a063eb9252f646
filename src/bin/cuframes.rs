//! `cuframes`: the operator tool. See, watch and clean what publishers are running.
//!
//! It only reads: SHM objects are mapped read-only, sockets are never connected to (except by
//! `clean`, which checks a dead-looking socket the way a new publisher would before removing
//! it). See `docs/operations.md`.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use cuframes_core::inspect::{
    self, CleanReport, FrameSnapshot, PacketSnapshot, PublisherInfo, ShmObject, SocketState,
    SubscriberSnapshot,
};
use cuframes_core::paths::{self, Key};
use cuframes_core::Error;

const USAGE: &str = "\
cuframes: see, watch and clean cuframes publishers

Usage:
  cuframes [--runtime-dir DIR] ls [--json] [--interval SECONDS]
  cuframes [--runtime-dir DIR] stat KEY [--watch [SECONDS]] [--json] [--interval SECONDS]
  cuframes [--runtime-dir DIR] clean [--dry-run] [--json] [KEY...]
  cuframes --help

Commands:
  ls      every publisher of the runtime directory and every /dev/shm/cuframes-* object:
          key, pid and liveness, frame format/size/ring/policy/memory, packet codec and ring,
          subscribers, current seq and rates (sampled over --interval, default 0.5 s)
  stat    one publisher in detail: every subscriber (bit, name, pid, state, lag, age of the
          last ACK, drops) and the packet ring (seq, MB/s, age of the last keyframe).
          --watch redraws every SECONDS (default 1) until Ctrl-C; with --json it prints one
          JSON object per line instead
  clean   remove the sockets and SHM objects of dead publishers (only those of KEYs when
          given), never a live one's; --dry-run only says what would be removed

Options:
  --runtime-dir DIR   socket directory (default: $CUFRAMES_RUNTIME_DIR, else /run/cuframes)
  --json              machine-readable output
  -h, --help          this text
  --                  the end of the options: what follows is a KEY even if it starts with
                      '-' (cuframes stat -- -cam1)

Exit status: 0 success, 1 an error (or objects that could not be read or removed), 2 usage.
";

#[derive(Debug)]
enum Command {
    Help,
    Ls {
        json: bool,
        interval: Duration,
    },
    Stat {
        key: Key,
        watch: Option<Duration>,
        json: bool,
        interval: Duration,
    },
    Clean {
        dry_run: bool,
        json: bool,
        keys: Vec<Key>,
    },
}

struct Args {
    runtime_dir: PathBuf,
    command: Command,
}

fn seconds(v: &str, what: &str) -> std::result::Result<Duration, String> {
    match v.parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=86_400.0).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{what} wants a number of seconds, not {v:?}")),
    }
}

fn parse_args(raw: Vec<String>) -> std::result::Result<Args, String> {
    let mut runtime_dir: Option<PathBuf> = None;
    let mut rest = Vec::new();
    let mut it = raw.into_iter();
    while let Some(a) = it.next() {
        if a == "--" {
            // Everything after `--` is a key, even one that starts with '-'.
            rest.push(a);
            rest.extend(it.by_ref());
        } else if a == "--runtime-dir" {
            let v = it.next().ok_or("--runtime-dir needs a directory")?;
            runtime_dir = Some(PathBuf::from(v));
        } else if let Some(v) = a.strip_prefix("--runtime-dir=") {
            runtime_dir = Some(PathBuf::from(v));
        } else {
            rest.push(a);
        }
    }
    let runtime_dir = paths::runtime_dir(runtime_dir.as_deref());
    if rest
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-h" || a == "--help" || a == "help")
        || rest.is_empty()
    {
        return Ok(Args {
            runtime_dir,
            command: Command::Help,
        });
    }
    let sub = rest.remove(0);
    let mut json = false;
    let mut interval = Duration::from_millis(500);
    let mut positional = Vec::new();
    let mut dry_run = false;
    let mut watch = None;
    let mut i = 0;
    while i < rest.len() {
        let a = rest[i].as_str();
        match a {
            "--" => {
                positional.extend(rest[i + 1..].iter().cloned());
                break;
            }
            "--json" => json = true,
            "--dry-run" if sub == "clean" => dry_run = true,
            "--interval" if sub != "clean" => {
                i += 1;
                let v = rest.get(i).ok_or("--interval needs a number of seconds")?;
                interval = seconds(v, "--interval")?;
            }
            "--watch" if sub == "stat" => {
                let mut every = Duration::from_secs(1);
                if let Some(v) = rest.get(i + 1) {
                    if !v.starts_with('-') && v.parse::<f64>().is_ok() {
                        every = seconds(v, "--watch")?;
                        i += 1;
                    }
                }
                if every < Duration::from_millis(50) {
                    return Err("--watch needs at least 0.05 seconds".into());
                }
                watch = Some(every);
            }
            _ if a.starts_with("--watch=") && sub == "stat" => {
                watch = Some(seconds(&a["--watch=".len()..], "--watch")?);
            }
            _ if a.starts_with('-') => return Err(format!("{sub}: unknown option {a}")),
            _ => positional.push(a.to_owned()),
        }
        i += 1;
    }
    let to_key = |k: &str| Key::new(k).map_err(|e| e.message().to_owned());
    let command = match sub.as_str() {
        "ls" | "list" => {
            if let Some(p) = positional.first() {
                return Err(format!("ls takes no argument ({p:?})"));
            }
            Command::Ls { json, interval }
        }
        "stat" => {
            if positional.len() != 1 {
                return Err("stat needs exactly one KEY".into());
            }
            Command::Stat {
                key: to_key(&positional[0])?,
                watch,
                json,
                interval,
            }
        }
        "clean" => Command::Clean {
            dry_run,
            json,
            keys: positional
                .iter()
                .map(|k| to_key(k))
                .collect::<std::result::Result<_, _>>()?,
        },
        other => return Err(format!("unknown command {other:?} (ls, stat, clean)")),
    };
    Ok(Args {
        runtime_dir,
        command,
    })
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1).collect()) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("cuframes: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match args.command {
        Command::Help => {
            print!("{USAGE}");
            Ok(true)
        }
        Command::Ls { json, interval } => ls(&args.runtime_dir, json, interval),
        Command::Stat {
            key,
            watch: None,
            json,
            interval,
        } => stat(&args.runtime_dir, &key, json, interval),
        Command::Stat {
            key,
            watch: Some(every),
            json,
            interval,
        } => watch(&args.runtime_dir, &key, json, every, interval),
        Command::Clean {
            dry_run,
            json,
            keys,
        } => clean(&args.runtime_dir, &keys, dry_run, json),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("cuframes: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A core error as the operator should read it (its message; the code only when it adds).
fn core_err(e: Error) -> anyhow::Error {
    anyhow::anyhow!("{}", e.message())
}

// ---------------------------------------------------------------------------------------
// ls

fn ls(dir: &Path, json: bool, interval: Duration) -> Result<bool> {
    let infos = inspect::sample(dir, None, interval).map_err(core_err)?;
    let clean = infos.iter().all(|i| i.errors().is_empty());
    if json {
        let j = J::Obj(vec![
            ("runtime_dir", J::Str(dir.display().to_string())),
            ("publishers", J::Arr(infos.iter().map(info_json).collect())),
        ]);
        println!("{}", j.render());
        return Ok(clean);
    }
    if infos.is_empty() {
        println!(
            "no publishers in {} and no cuframes objects in {}",
            dir.display(),
            inspect::SHM_DIR
        );
        return Ok(true);
    }
    let mut rows = vec![[
        "KEY", "STATE", "PID", "SOCKET", "FRAMES", "SUBS", "SEQ", "FPS", "PACKETS", "PKT SEQ",
        "PKT/S", "MB/S",
    ]
    .map(String::from)];
    for i in &infos {
        let (frames, seq) = match &i.frames {
            None => ("-".into(), "-".into()),
            Some(o) => match &o.content {
                Ok(f) => (frames_summary(f), f.global_seq.to_string()),
                Err(e) => (short_error(e), "?".into()),
            },
        };
        let (packets, pseq) = match &i.packets {
            None => ("-".into(), "-".into()),
            Some(o) => match &o.content {
                Ok(p) => (packets_summary(p), p.global_seq.to_string()),
                Err(e) => (short_error(e), "?".into()),
            },
        };
        rows.push([
            i.key.clone(),
            i.liveness.name().into(),
            i.pid().map_or("?".into(), |p| p.to_string()),
            socket_short(&i.socket),
            frames,
            i.subscriber_count().map_or("?".into(), |n| n.to_string()),
            seq,
            rate(i.rates.frames_per_sec, 1.0),
            packets,
            pseq,
            rate(i.rates.packets_per_sec, 1.0),
            rate(i.rates.packet_bytes_per_sec, 1e6),
        ]);
    }
    print!("{}", table(&rows));
    for i in &infos {
        for e in i.errors() {
            eprintln!("{}: {}", i.key, e.message());
        }
    }
    Ok(clean)
}

fn short_error(e: &Error) -> String {
    match e.code() {
        cuframes_core::ErrorCode::Permission => "unreadable (permission)".into(),
        cuframes_core::ErrorCode::Protocol => "corrupt".into(),
        cuframes_core::ErrorCode::NotFound => "vanished".into(),
        _ => "error".into(),
    }
}

fn socket_short(s: &SocketState) -> String {
    match s {
        SocketState::Listening { .. } => "listening".into(),
        SocketState::NotListening => "stale".into(),
        SocketState::Missing => "none".into(),
        SocketState::NotASocket => "not-a-socket".into(),
        SocketState::Unknown(_) => "?".into(),
    }
}

fn frames_summary(f: &FrameSnapshot) -> String {
    format!(
        "{} {}x{} ring {} {} {}",
        f.format.name(),
        f.width,
        f.height,
        f.ring_size,
        f.policy.name(),
        f.memory_kind.map_or("?", |k| k.name())
    )
}

fn packets_summary(p: &PacketSnapshot) -> String {
    format!(
        "{} {} slots {}",
        p.codec_name(),
        p.ring_slots,
        bytes(p.data_size as u64)
    )
}

fn rate(v: Option<f64>, unit: f64) -> String {
    v.map_or("-".into(), |v| format!("{:.2}", v / unit))
}

fn bytes(n: u64) -> String {
    if n >= 1 << 20 && n % (1 << 10) == 0 {
        format!("{:.1}MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1}KiB", n as f64 / 1024.0)
    } else {
        format!("{n}B")
    }
}

fn age(d: Option<Duration>) -> String {
    match d {
        None => "never".into(),
        Some(d) if d.as_secs() >= 3600 => {
            format!("{}h{:02}m", d.as_secs() / 3600, d.as_secs() / 60 % 60)
        }
        Some(d) if d.as_secs() >= 60 => format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60),
        Some(d) => format!("{:.2}s", d.as_secs_f64()),
    }
}

fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut width = [0usize; N];
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (k, c) in r.iter().enumerate() {
            if k + 1 == N {
                line.push_str(c);
            } else {
                let _ = write!(line, "{c:<w$}  ", w = width[k]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------------------
// stat

fn stat(dir: &Path, key: &Key, json: bool, interval: Duration) -> Result<bool> {
    let infos =
        inspect::sample(dir, Some(std::slice::from_ref(key)), interval).map_err(core_err)?;
    let Some(info) = infos.into_iter().next() else {
        // Let inspect() say what is missing.
        return Err(core_err(inspect::inspect(dir, key).err().unwrap_or_else(
            || {
                Error::new(
                    cuframes_core::ErrorCode::NotFound,
                    format!("no publisher {key}"),
                )
            },
        )));
    };
    if json {
        println!("{}", info_json(&info).render());
    } else {
        print!("{}", stat_text(&info));
    }
    let errors = info.errors();
    for e in &errors {
        eprintln!("cuframes: {}", e.message());
    }
    Ok(errors.is_empty())
}

fn watch(dir: &Path, key: &Key, json: bool, every: Duration, interval: Duration) -> Result<bool> {
    let keys = std::slice::from_ref(key);
    let mut prev: Option<PublisherInfo> = inspect::sample(dir, Some(keys), interval.min(every))
        .map_err(core_err)?
        .pop();
    let mut stdout = std::io::stdout();
    let mut first = true;
    loop {
        let cur = if first {
            first = false;
            prev.clone()
        } else {
            let mut cur = inspect::list(dir, Some(keys)).map_err(core_err)?.pop();
            if let (Some(c), Some(p)) = (cur.as_mut(), prev.as_ref()) {
                c.rates = inspect::Rates::between(p, c);
            }
            prev.clone_from(&cur);
            cur
        };
        let text = match (&cur, json) {
            (Some(info), true) => info_json(info).render() + "\n",
            (None, true) => {
                J::Obj(vec![
                    ("key", J::Str(key.to_string())),
                    ("error", J::Str(format!("no publisher {key}"))),
                ])
                .render()
                    + "\n"
            }
            (Some(info), false) => stat_text(info),
            (None, false) => format!("no publisher {key} (waiting)\n"),
        };
        if json {
            stdout.write_all(text.as_bytes())?;
        } else {
            // Clear the screen and go home, then draw: the redraw is in place.
            write!(
                stdout,
                "\x1b[H\x1b[2J{text}\n(every {:.1}s, Ctrl-C to stop)\n",
                every.as_secs_f64()
            )?;
        }
        stdout.flush()?;
        std::thread::sleep(every);
    }
}

fn stat_text(i: &PublisherInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {} ({})",
        i.key,
        i.liveness.name(),
        i.liveness.reason()
    );
    let sock = match &i.socket {
        SocketState::Listening { connections } => {
            format!("listening, {connections} connection(s)")
        }
        SocketState::NotListening => {
            "not listening (stale, or in another network namespace)".into()
        }
        SocketState::Missing => "missing".into(),
        SocketState::NotASocket => "not a socket (ignored)".into(),
        SocketState::Unknown(m) => format!("unknown: {m}"),
    };
    let _ = writeln!(s, "  socket   {}  {sock}", i.socket_path.display());
    match &i.frames {
        None => {
            let _ = writeln!(s, "  frames   none");
        }
        Some(ShmObject {
            content: Err(e),
            name,
            ..
        }) => {
            let _ = writeln!(s, "  frames   /dev/shm/{name}: {}", e.message());
        }
        Some(ShmObject { content: Ok(f), .. }) => frames_text(&mut s, f, i.rates.frames_per_sec),
    }
    match &i.packets {
        None => {
            let _ = writeln!(s, "  packets  none");
        }
        Some(ShmObject {
            content: Err(e),
            name,
            ..
        }) => {
            let _ = writeln!(s, "  packets  /dev/shm/{name}: {}", e.message());
        }
        Some(ShmObject { content: Ok(p), .. }) => packets_text(&mut s, p, &i.rates),
    }
    s
}

fn pid_text(pid: u64) -> String {
    if cuframes_core::liveness::is_alive(pid) {
        format!("{pid}")
    } else {
        format!("{pid} (gone)")
    }
}

fn frames_text(s: &mut String, f: &FrameSnapshot, fps: Option<f64>) {
    let _ = writeln!(
        s,
        "  frames   /dev/shm/{}  {}  pitch {}/{}  {} bytes/frame",
        f.shm_name,
        frames_summary(f),
        f.pitch_y,
        f.pitch_uv,
        f.frame_size_bytes
    );
    let _ = writeln!(
        s,
        "           seq {}  {} fps  producer pid {}  library {}.{}.{}  shutdown {}  sleeping readers {}",
        f.global_seq,
        rate(fps, 1.0),
        pid_text(f.producer_pid),
        f.lib_version.0,
        f.lib_version.1,
        f.lib_version.2,
        if f.shutdown { "yes" } else { "no" },
        f.waiters
    );
    for w in &f.warnings {
        let _ = writeln!(s, "           warning: {w}");
    }
    if f.subscribers.is_empty() {
        let _ = writeln!(s, "  subscribers: none");
        return;
    }
    let mut rows = vec![[
        "BIT",
        "NAME",
        "PID",
        "STATE",
        "READS",
        "LAG",
        "LAST ACK",
        "DELIVERED",
        "DROPS",
        "OVERRUN",
        "TORN",
    ]
    .map(String::from)];
    for sub in &f.subscribers {
        rows.push(subscriber_row(sub));
    }
    for line in table(&rows).lines() {
        let _ = writeln!(s, "    {line}");
    }
}

fn subscriber_row(sub: &SubscriberSnapshot) -> [String; 11] {
    [
        sub.bit.to_string(),
        if sub.name.is_empty() {
            "-".into()
        } else {
            sub.name.clone()
        },
        pid_text(sub.pid),
        sub.state_name().into(),
        if sub.reads_frames {
            "frames"
        } else {
            "packets"
        }
        .into(),
        if sub.reads_frames {
            sub.lag.to_string()
        } else {
            "-".into()
        },
        if sub.ack_age.is_some() {
            format!("{} ago", age(sub.ack_age))
        } else {
            "never".into()
        },
        sub.delivered.to_string(),
        sub.drops().to_string(),
        sub.dropped_overrun.to_string(),
        sub.dropped_torn.to_string(),
    ]
}

fn packets_text(s: &mut String, p: &PacketSnapshot, r: &inspect::Rates) {
    let _ = writeln!(
        s,
        "  packets  /dev/shm/{}  {} (codec id {})  {} slots  {} data  extradata {} bytes",
        p.shm_name,
        p.codec_name(),
        p.codec_id,
        p.ring_slots,
        bytes(p.data_size as u64),
        p.extradata_size
    );
    let keyframe = match p.keyframe_age_packets() {
        None => "no keyframe yet".to_string(),
        Some(n) => format!(
            "last keyframe seq {} ({n} packets ago{}{})",
            p.last_keyframe_seq,
            p.keyframe_age()
                .map_or(String::new(), |d| format!(", {} of stream", age(Some(d)))),
            if p.keyframe_in_ring {
                ""
            } else {
                ", no longer in the ring"
            }
        ),
    };
    let _ = writeln!(
        s,
        "           seq {}  {} pkt/s  {} MB/s  {} bytes total  producer pid {}  shutdown {}",
        p.global_seq,
        rate(r.packets_per_sec, 1.0),
        rate(r.packet_bytes_per_sec, 1e6),
        p.write_offset,
        pid_text(p.producer_pid),
        if p.shutdown { "yes" } else { "no" }
    );
    let _ = writeln!(s, "           {keyframe}");
    for w in &p.warnings {
        let _ = writeln!(s, "           warning: {w}");
    }
}

// ---------------------------------------------------------------------------------------
// clean

fn clean(dir: &Path, keys: &[Key], dry_run: bool, json: bool) -> Result<bool> {
    let filter = (!keys.is_empty()).then_some(keys);
    let report = inspect::clean(dir, filter, dry_run).map_err(core_err)?;
    if json {
        println!("{}", clean_json(&report).render());
        return Ok(report.failed.is_empty());
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for r in &report.removed {
        println!("{verb} {} {} (key {}: {})", r.what, r.path, r.key, r.reason);
    }
    for (key, why) in &report.kept {
        println!("kept {key}: {why}");
    }
    for (path, why) in &report.failed {
        eprintln!("cuframes: could not remove {path}: {why}");
    }
    if report.removed.is_empty() && report.failed.is_empty() {
        println!(
            "nothing to clean{}",
            if keys.is_empty() {
                String::new()
            } else {
                format!(
                    " for {}",
                    keys.iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
    }
    Ok(report.failed.is_empty())
}

fn clean_json(r: &CleanReport) -> J {
    J::Obj(vec![
        ("dry_run", J::Bool(r.dry_run)),
        (
            "removed",
            J::Arr(
                r.removed
                    .iter()
                    .map(|x| {
                        J::Obj(vec![
                            ("key", J::Str(x.key.clone())),
                            ("what", J::Str(x.what.into())),
                            ("path", J::Str(x.path.clone())),
                            ("reason", J::Str(x.reason.clone())),
                        ])
                    })
                    .collect(),
            ),
        ),
        (
            "kept",
            J::Arr(
                r.kept
                    .iter()
                    .map(|(k, why)| {
                        J::Obj(vec![
                            ("key", J::Str(k.clone())),
                            ("reason", J::Str(why.clone())),
                        ])
                    })
                    .collect(),
            ),
        ),
        (
            "failed",
            J::Arr(
                r.failed
                    .iter()
                    .map(|(p, e)| {
                        J::Obj(vec![
                            ("path", J::Str(p.clone())),
                            ("error", J::Str(e.clone())),
                        ])
                    })
                    .collect(),
            ),
        ),
    ])
}

// ---------------------------------------------------------------------------------------
// JSON, written by hand (no serde in this crate)

#[derive(Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(&'static str, J)>),
}

impl J {
    fn opt_f(v: Option<f64>) -> J {
        v.map_or(J::Null, J::Float)
    }

    fn u(v: u64) -> J {
        J::Int(v as i128)
    }

    fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            J::Int(i) => {
                let _ = write!(out, "{i}");
            }
            J::Float(f) if f.is_finite() => {
                // Display of f64 never uses an exponent; round to keep it short.
                let r = (f * 1000.0).round() / 1000.0;
                let _ = write!(out, "{r}");
            }
            J::Float(_) => out.push_str("null"),
            J::Str(s) => escape(s, out),
            J::Arr(v) => {
                out.push('[');
                for (k, x) in v.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    x.write(out);
                }
                out.push(']');
            }
            J::Obj(v) => {
                out.push('{');
                for (k, (name, x)) in v.iter().enumerate() {
                    if k > 0 {
                        out.push(',');
                    }
                    escape(name, out);
                    out.push(':');
                    x.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// A JSON string literal (RFC 8259 §7): quote, backslash and control characters escaped.
fn escape(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn error_json(e: &Error) -> J {
    J::Obj(vec![
        ("error", J::Str(e.message().to_owned())),
        ("code", J::Str(e.code().name().into())),
    ])
}

fn info_json(i: &PublisherInfo) -> J {
    let socket = {
        let mut v = vec![
            ("path", J::Str(i.socket_path.display().to_string())),
            ("state", J::Str(i.socket.name().into())),
        ];
        if let SocketState::Listening { connections } = i.socket {
            v.push(("connections", J::u(connections as u64)));
        }
        J::Obj(v)
    };
    let frames = match &i.frames {
        None => J::Null,
        Some(o) => match &o.content {
            Err(e) => with_shm(&o.name, error_json(e)),
            Ok(f) => frames_json(f, i.rates.frames_per_sec),
        },
    };
    let packets = match &i.packets {
        None => J::Null,
        Some(o) => match &o.content {
            Err(e) => with_shm(&o.name, error_json(e)),
            Ok(p) => packets_json(p, &i.rates),
        },
    };
    J::Obj(vec![
        ("key", J::Str(i.key.clone())),
        ("state", J::Str(i.liveness.name().into())),
        ("alive", J::Bool(i.liveness.is_alive())),
        ("reason", J::Str(i.liveness.reason().into())),
        ("pid", i.pid().map_or(J::Null, J::u)),
        (
            "subscriber_count",
            i.subscriber_count().map_or(J::Null, |n| J::u(n as u64)),
        ),
        ("socket", socket),
        ("frames", frames),
        ("packets", packets),
    ])
}

fn with_shm(name: &str, j: J) -> J {
    match j {
        J::Obj(mut v) => {
            v.insert(0, ("shm", J::Str(format!("/dev/shm/{name}"))));
            J::Obj(v)
        }
        other => other,
    }
}

fn frames_json(f: &FrameSnapshot, fps: Option<f64>) -> J {
    J::Obj(vec![
        ("shm", J::Str(format!("/dev/shm/{}", f.shm_name))),
        ("producer_pid", J::u(f.producer_pid)),
        (
            "producer_alive",
            J::Bool(cuframes_core::liveness::is_alive(f.producer_pid)),
        ),
        (
            "library_version",
            J::Str(format!(
                "{}.{}.{}",
                f.lib_version.0, f.lib_version.1, f.lib_version.2
            )),
        ),
        ("format", J::Str(f.format.name().into())),
        ("width", J::u(f.width as u64)),
        ("height", J::u(f.height as u64)),
        ("pitch_y", J::u(f.pitch_y as u64)),
        ("pitch_uv", J::u(f.pitch_uv as u64)),
        ("frame_size_bytes", J::u(f.frame_size_bytes)),
        ("ring_size", J::u(f.ring_size as u64)),
        ("policy", J::Str(f.policy.name().into())),
        (
            "memory",
            f.memory_kind.map_or(J::Null, |k| J::Str(k.name().into())),
        ),
        ("seq", J::u(f.global_seq)),
        ("fps", J::opt_f(fps)),
        ("shutdown", J::Bool(f.shutdown)),
        ("sleeping_readers", J::u(f.waiters as u64)),
        ("subscriber_bitmap", J::u(f.subscriber_bitmap)),
        (
            "subscribers",
            J::Arr(f.subscribers.iter().map(subscriber_json).collect()),
        ),
        (
            "warnings",
            J::Arr(f.warnings.iter().map(|w| J::Str(w.clone())).collect()),
        ),
    ])
}

fn subscriber_json(s: &SubscriberSnapshot) -> J {
    J::Obj(vec![
        ("bit", J::u(s.bit as u64)),
        ("name", J::Str(s.name.clone())),
        ("pid", J::u(s.pid)),
        ("pid_alive", J::Bool(s.pid_alive)),
        ("state", J::Str(s.state_name().into())),
        ("reads_frames", J::Bool(s.reads_frames)),
        ("lag", J::u(s.lag)),
        ("last_seen_seq", J::u(s.last_seen_seq)),
        (
            "last_ack_age_s",
            J::opt_f(s.ack_age.map(|d| d.as_secs_f64())),
        ),
        ("delivered", J::u(s.delivered)),
        ("drops", J::u(s.drops())),
        ("dropped_overrun", J::u(s.dropped_overrun)),
        ("dropped_torn", J::u(s.dropped_torn)),
    ])
}

fn packets_json(p: &PacketSnapshot, r: &inspect::Rates) -> J {
    J::Obj(vec![
        ("shm", J::Str(format!("/dev/shm/{}", p.shm_name))),
        ("producer_pid", J::u(p.producer_pid)),
        (
            "producer_alive",
            J::Bool(cuframes_core::liveness::is_alive(p.producer_pid)),
        ),
        ("codec", J::Str(p.codec_name())),
        ("codec_id", J::u(p.codec_id as u64)),
        ("ring_slots", J::u(p.ring_slots as u64)),
        ("data_size", J::u(p.data_size as u64)),
        ("extradata_size", J::u(p.extradata_size as u64)),
        ("seq", J::u(p.global_seq)),
        ("bytes", J::u(p.write_offset)),
        ("packets_per_s", J::opt_f(r.packets_per_sec)),
        (
            "mb_per_s",
            J::opt_f(r.packet_bytes_per_sec.map(|b| b / 1e6)),
        ),
        (
            "last_keyframe_seq",
            if p.last_keyframe_seq == 0 {
                J::Null
            } else {
                J::u(p.last_keyframe_seq)
            },
        ),
        (
            "keyframe_age_packets",
            p.keyframe_age_packets().map_or(J::Null, J::u),
        ),
        (
            "keyframe_age_s",
            J::opt_f(p.keyframe_age().map(|d| d.as_secs_f64())),
        ),
        ("keyframe_in_ring", J::Bool(p.keyframe_in_ring)),
        ("shutdown", J::Bool(p.shutdown)),
        (
            "warnings",
            J::Arr(p.warnings.iter().map(|w| J::Str(w.clone())).collect()),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        let j = J::Obj(vec![("k", J::Str("a\"b\\c\nd\u{1}e\u{7f}é".into()))]);
        assert_eq!(j.render(), r#"{"k":"a\"b\\c\nd\u0001e\u007fé"}"#);
        assert_eq!(J::Float(f64::NAN).render(), "null");
        assert_eq!(J::Float(1.23456).render(), "1.235");
        assert_eq!(J::Float(30.0).render(), "30");
    }

    #[test]
    fn arguments() {
        let a = |v: &[&str]| parse_args(v.iter().map(|s| s.to_string()).collect());
        assert!(matches!(a(&[]).unwrap().command, Command::Help));
        let s = a(&["stat", "cam1", "--watch", "2", "--runtime-dir", "/x"]).unwrap();
        assert_eq!(s.runtime_dir, PathBuf::from("/x"));
        match s.command {
            Command::Stat { watch, .. } => assert_eq!(watch, Some(Duration::from_secs(2))),
            other => panic!("{other:?}"),
        }
        match a(&["stat", "cam1", "--watch", "--json"]).unwrap().command {
            Command::Stat { watch, json, .. } => {
                assert_eq!(watch, Some(Duration::from_secs(1)));
                assert!(json);
            }
            other => panic!("{other:?}"),
        }
        assert!(a(&["stat"]).is_err());
        assert!(a(&["stat", "bad key"]).is_err());
        assert!(a(&["ls", "--dry-run"]).is_err());
        assert!(a(&["frobnicate"]).is_err());
        // A key may start with '-': `--` ends the options.
        assert!(a(&["stat", "-x"]).is_err());
        match a(&["stat", "--json", "--", "-x"]).unwrap().command {
            Command::Stat { key, json, .. } => {
                assert_eq!(key.as_str(), "-x");
                assert!(json);
            }
            other => panic!("{other:?}"),
        }
        match a(&["clean", "--", "--json", "-h"]).unwrap().command {
            Command::Clean { keys, json, .. } => {
                assert_eq!(keys.len(), 2);
                assert!(!json);
            }
            other => panic!("{other:?}"),
        }
        match a(&["clean", "--dry-run", "a", "b"]).unwrap().command {
            Command::Clean { dry_run, keys, .. } => {
                assert!(dry_run);
                assert_eq!(keys.len(), 2);
            }
            other => panic!("{other:?}"),
        }
    }
}
