//! The command line: what the user asked for, or why it cannot be parsed (exit status 2).

use std::path::PathBuf;
use std::time::Duration;

use cuframes_core::paths::{self, Key};

use crate::exporter_options::Options;
use crate::snapshot::SnapshotOptions;

pub const USAGE: &str = "\
cuframes: see, watch and clean cuframes publishers, take a frame of one

Usage:
  cuframes [--runtime-dir DIR] ls [--json] [--interval SECONDS]
  cuframes [--runtime-dir DIR] stat KEY [--watch [SECONDS]] [--json] [--interval SECONDS]
  cuframes [--runtime-dir DIR] clean [--dry-run] [--json] [KEY...]
  cuframes [--runtime-dir DIR] exporter --listen ADDRESS:PORT [EXPORTER OPTIONS] [KEY...]
  cuframes [--runtime-dir DIR] snapshot KEY FILE [--timeout SECONDS] [--wait-publisher SECONDS]
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
  exporter  serve what stat --json says about every publisher (only KEYs when given) as
          Prometheus metrics at http://ADDRESS:PORT/metrics until stopped; port 0 picks a
          free one. The first line on stdout says where it listens; an error that stops
          it exits with status 1
  snapshot  subscribe to KEY, take its next frame (host or CUDA ring) and write it to
          FILE as an 8-bit RGB PNG, its YUV read as the stream's colour description says
          (BT.709 limited range when it says nothing). FILE is replaced atomically (a
          temporary file renamed over it; a symlink at FILE is replaced, never followed)

Options:
  --runtime-dir DIR   socket directory (default: $CUFRAMES_RUNTIME_DIR, else /run/cuframes)
  --json              machine-readable output
  --listen ADDR:PORT  (exporter) where to serve /metrics, e.g. 127.0.0.1:9464
  --timeout SECONDS   (snapshot) how long to wait for a frame, and for the handshake
                      (default 5)
  --wait-publisher SECONDS
                      (snapshot) how long to wait for a missing publisher (or its frame
                      ring) to appear (default 0: a missing publisher is an error at once)
  -h, --help          this text
  --                  the end of the options: what follows is a KEY even if it starts with
                      '-' (cuframes stat -- -cam1)

Exporter options (the limits that keep one client, or many planted rings, from
stopping or slowing the scrapes of others):
  --max-connections N       connections open at once; one more takes the place of the
                            connection idle the longest, or is answered 503 and closed
                            at once when all are inside a request (default 32)
  --timeout SECONDS         the longest wait on a client: for a request's headers (also
                            between two requests of a connection) and for a response it
                            does not read (default 5)
  --max-connection-age SECONDS
                            a connection takes no new request after this and is closed
                            (default 30)
  --max-rings N             publishers (keys) read and shown per scrape, those with a
                            socket in the runtime directory first, then by key; the rest
                            are counted in cuframes_exporter_rings_omitted (default 256)
  --max-subscribers N       subscribers shown per scrape, over all publishers; the rest
                            are counted in cuframes_exporter_subscribers_omitted
                            (default 1024)
  --reuse SECONDS           a scrape that arrives within SECONDS of the start of the last
                            render gets that render (0: only scrapes that waited for it);
                            many scrapers then cost one render (default 1)

Exit status: 0 success, 1 an error (or objects that could not be read or removed), 2 usage.
";

#[derive(Debug)]
pub enum Command {
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
    Exporter(Options),
    Snapshot {
        key: Key,
        file: PathBuf,
        options: SnapshotOptions,
    },
}

pub struct Args {
    pub runtime_dir: PathBuf,
    pub command: Command,
}

pub fn seconds(v: &str, what: &str) -> std::result::Result<Duration, String> {
    match v.parse::<f64>() {
        Ok(s) if s.is_finite() && (0.0..=86_400.0).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{what} wants a number of seconds, not {v:?}")),
    }
}

/// A count for `what`, at least 1.
fn count(v: &str, what: &str) -> std::result::Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{what} wants a whole number of at least 1, not {v:?}"
        )),
    }
}

/// `snapshot`'s options (each takes seconds).
fn snapshot_option(
    opts: &mut SnapshotOptions,
    name: &str,
    v: &str,
) -> std::result::Result<(), String> {
    let s = seconds(v, name)?;
    if name == "--timeout" {
        if s < Duration::from_millis(1) {
            return Err("--timeout needs more than 0 seconds".into());
        }
        opts.timeout = s;
    } else {
        opts.wait_publisher = s;
    }
    Ok(())
}

/// The exporter's options that take a value: `Ok(false)` when `a` is none of them.
fn exporter_option(
    opts: &mut Options,
    a: &str,
    value: Option<&String>,
) -> std::result::Result<bool, String> {
    let (name, v) = match a.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (a, value.map(String::as_str)),
    };
    let known = [
        "--max-connections",
        "--timeout",
        "--max-connection-age",
        "--max-rings",
        "--max-subscribers",
        "--reuse",
    ];
    if !known.contains(&name) {
        return Ok(false);
    }
    let v = v.ok_or_else(|| format!("{name} needs a value"))?;
    match name {
        "--max-connections" => opts.max_connections = count(v, name)?,
        "--max-rings" => opts.max_rings = count(v, name)?,
        "--max-subscribers" => opts.max_subscribers = count(v, name)?,
        "--reuse" => opts.reuse = seconds(v, name)?,
        _ => {
            let s = seconds(v, name)?;
            if s < Duration::from_millis(100) {
                return Err(format!("{name} needs at least 0.1 seconds"));
            }
            if name == "--timeout" {
                opts.timeout = s;
            } else {
                opts.max_connection_age = s;
            }
        }
    }
    Ok(true)
}

/// The command asked for (`ls`, `exporter`, ...), read as [`parse_args`] reads it: the first
/// argument that is not `--runtime-dir` or its value.
pub fn subcommand(raw: &[String]) -> Option<&str> {
    let mut it = raw.iter();
    while let Some(a) = it.next() {
        if a == "--runtime-dir" {
            it.next();
        } else if !a.starts_with("--runtime-dir=") {
            return Some(a);
        }
    }
    None
}

pub fn parse_args(raw: Vec<String>) -> std::result::Result<Args, String> {
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
    let mut listen = None;
    let mut exporter = Options::new(String::new());
    let mut snapshot = SnapshotOptions::default();
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
            "--interval" if sub != "clean" && sub != "exporter" => {
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
            "--listen" if sub == "exporter" => {
                i += 1;
                let v = rest.get(i).ok_or("--listen needs ADDRESS:PORT")?;
                listen = Some(v.clone());
            }
            _ if a.starts_with("--listen=") && sub == "exporter" => {
                listen = Some(a["--listen=".len()..].to_owned());
            }
            "--timeout" | "--wait-publisher" if sub == "snapshot" => {
                i += 1;
                let v = rest
                    .get(i)
                    .ok_or(format!("{a} needs a number of seconds"))?;
                snapshot_option(&mut snapshot, a, v)?;
            }
            _ if sub == "snapshot"
                && (a.starts_with("--timeout=") || a.starts_with("--wait-publisher=")) =>
            {
                let (name, v) = a.split_once('=').unwrap_or((a, ""));
                snapshot_option(&mut snapshot, name, v)?;
            }
            _ if sub == "exporter" && exporter_option(&mut exporter, a, rest.get(i + 1))? => {
                if !a.contains('=') {
                    i += 1;
                }
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
        "exporter" => {
            if json {
                return Err("exporter: unknown option --json".into());
            }
            exporter.listen =
                listen.ok_or("exporter needs --listen ADDRESS:PORT (127.0.0.1:9464)")?;
            exporter.keys = positional
                .iter()
                .map(|k| to_key(k))
                .collect::<std::result::Result<_, _>>()?;
            Command::Exporter(exporter)
        }
        "snapshot" => {
            if json {
                return Err("snapshot: unknown option --json".into());
            }
            let [key, file] = positional.as_slice() else {
                return Err("snapshot needs KEY and FILE".into());
            };
            Command::Snapshot {
                key: to_key(key)?,
                file: PathBuf::from(file),
                options: snapshot,
            }
        }
        other => {
            return Err(format!(
                "unknown command {other:?} (ls, stat, clean, exporter, snapshot)"
            ))
        }
    };
    Ok(Args {
        runtime_dir,
        command,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let a = |v: &[&str]| parse_args(v.iter().map(|s| s.to_string()).collect());
        assert!(matches!(a(&[]).unwrap().command, Command::Help));
        let sub = |v: &[&str]| {
            subcommand(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>()).map(str::to_owned)
        };
        assert_eq!(
            sub(&["--runtime-dir", "/x", "exporter"]).as_deref(),
            Some("exporter")
        );
        assert_eq!(
            sub(&["--runtime-dir=/x", "ls", "--json"]).as_deref(),
            Some("ls")
        );
        assert_eq!(sub(&["--runtime-dir", "/x"]), None);
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
        match a(&["exporter", "--listen", "127.0.0.1:0", "a", "b"])
            .unwrap()
            .command
        {
            Command::Exporter(o) => {
                assert_eq!(o.listen, "127.0.0.1:0");
                assert_eq!(o.keys.len(), 2);
                assert_eq!(o.max_connections, Options::DEFAULT_MAX_CONNECTIONS);
                assert_eq!(o.max_rings, Options::DEFAULT_MAX_RINGS);
            }
            other => panic!("{other:?}"),
        }
        match a(&["exporter", "--listen=[::1]:9464"]).unwrap().command {
            Command::Exporter(o) => {
                assert_eq!(o.listen, "[::1]:9464");
                assert!(o.keys.is_empty());
            }
            other => panic!("{other:?}"),
        }
        match a(&[
            "exporter",
            "--listen=x:1",
            "--max-connections",
            "4",
            "--timeout=2.5",
            "--max-connection-age",
            "9",
            "--max-rings=7",
            "--max-subscribers",
            "8",
            "--reuse",
            "0",
            "k",
        ])
        .unwrap()
        .command
        {
            Command::Exporter(o) => {
                assert_eq!(o.max_connections, 4);
                assert_eq!(o.timeout, Duration::from_millis(2500));
                assert_eq!(o.max_connection_age, Duration::from_secs(9));
                assert_eq!((o.max_rings, o.max_subscribers), (7, 8));
                assert_eq!(o.reuse, Duration::ZERO);
                assert_eq!(o.keys.len(), 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(a(&["exporter", "--listen", "x:1", "--max-rings", "0"]).is_err());
        assert!(a(&["exporter", "--listen", "x:1", "--timeout", "0"]).is_err());
        assert!(a(&["exporter", "--listen", "x:1", "--max-connections"]).is_err());
        assert!(a(&["stat", "k", "--max-rings", "3"]).is_err());
        assert!(a(&["exporter"]).is_err());
        assert!(a(&["exporter", "--listen"]).is_err());
        assert!(a(&["exporter", "--listen", "x:1", "--interval", "1"]).is_err());
        assert!(a(&["exporter", "--listen", "x:1", "--json"]).is_err());
        assert!(a(&["ls", "--listen", "x:1"]).is_err());
        match a(&[
            "snapshot",
            "cam1",
            "out.png",
            "--timeout",
            "2",
            "--wait-publisher=3",
        ])
        .unwrap()
        .command
        {
            Command::Snapshot { key, file, options } => {
                assert_eq!(key.as_str(), "cam1");
                assert_eq!(file, PathBuf::from("out.png"));
                assert_eq!(options.timeout, Duration::from_secs(2));
                assert_eq!(options.wait_publisher, Duration::from_secs(3));
            }
            other => panic!("{other:?}"),
        }
        match a(&["snapshot", "--", "-k", "-out.png"]).unwrap().command {
            Command::Snapshot { key, file, options } => {
                assert_eq!((key.as_str(), file), ("-k", PathBuf::from("-out.png")));
                assert_eq!(options, SnapshotOptions::default());
            }
            other => panic!("{other:?}"),
        }
        assert!(a(&["snapshot", "cam1"]).is_err());
        assert!(a(&["snapshot", "cam1", "a.png", "b.png"]).is_err());
        assert!(a(&["snapshot", "cam1", "a.png", "--timeout", "0"]).is_err());
        assert!(a(&["snapshot", "cam1", "a.png", "--timeout"]).is_err());
        assert!(a(&["snapshot", "cam1", "a.png", "--json"]).is_err());
        assert!(a(&["snapshot", "bad key", "a.png"]).is_err());
        assert!(a(&["stat", "cam1", "--wait-publisher", "1"]).is_err());
        match a(&["clean", "--dry-run", "a", "b"]).unwrap().command {
            Command::Clean { dry_run, keys, .. } => {
                assert!(dry_run);
                assert_eq!(keys.len(), 2);
            }
            other => panic!("{other:?}"),
        }
    }
}
