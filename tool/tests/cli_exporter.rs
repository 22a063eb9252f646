//! `cuframes exporter` as Prometheus sees it: a real publisher (host rings, frames and
//! packets, two subscribers) in this process, the exporter as a child process, scraped over
//! HTTP, the exposition parsed and compared with `cuframes stat --json` taken at about the
//! same time; 404s; an exporter that keeps serving while rings vanish, come and go, or
//! are garbage; and one that hostile clients (huge Content-Length, slowloris, pipelining
//! non-readers, idle connections past the fd limit, huge headers) and 2000 planted rings
//! cannot stop, slow down or make grow (issue 29, items 1-5).
//!
//! `CUFRAMES_EXPORTER_BIN` runs the tests against another build of the tool (an older one,
//! to see them fail there).

use cuframes_test_support as common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{publish_filler, Children, OperatorScene, TestEnv, WEIRD_NAME};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::Format;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_cuframes");

fn exporter_bin() -> String {
    std::env::var("CUFRAMES_EXPORTER_BIN").unwrap_or_else(|_| BIN.to_owned())
}

/// The exporter of `env.dir` (through `CUFRAMES_RUNTIME_DIR`, as an operator would set it) on
/// a free port, killed when the returned guard drops; and its /metrics URL. These tests
/// compare scrapes with the state of the moment, so no render is reused (`--reuse 0`).
fn start_exporter(env: &TestEnv, keys: &[&str]) -> (Children, String) {
    let mut args = vec!["--reuse", "0"];
    args.extend(keys);
    let e = Exporter::start(env, &args, |_| {});
    (e.kids, e.url)
}

/// A running exporter (killed when dropped), where it listens, and its pid.
struct Exporter {
    kids: Children,
    url: String,
    addr: SocketAddr,
    pid: u32,
}

impl Exporter {
    /// `cuframes exporter --listen 127.0.0.1:0 ARGS`; `setup` adds to the command.
    fn start(env: &TestEnv, args: &[&str], setup: impl FnOnce(&mut Command)) -> Exporter {
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
    fn assert_running(&mut self, when: &str) {
        if let Some(status) = self.kids.0[0].try_wait().unwrap() {
            panic!("the exporter exited {when}: {status}");
        }
    }

    /// A scrape with a fresh connection: status 200 and a parsed exposition, within `limit`.
    fn scrape_within(&mut self, limit: Duration, when: &str) -> (String, Duration) {
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
    fn memory_kib(&self) -> (u64, u64) {
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
fn read_url(kids: &mut Children) -> String {
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

fn new_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// GET: status, content type, body.
fn get(agent: &ureq::Agent, url: &str) -> (u16, String, String) {
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

// --- the exposition, parsed ---------------------------------------------------------------

#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parse the OpenMetrics text: every sample, checking that each belongs to a family with
/// a TYPE line and that the body ends with `# EOF`.
fn parse_metrics(body: &str) -> Vec<Sample> {
    assert!(body.ends_with("# EOF\n"), "no EOF marker:\n{body}");
    let mut families = BTreeSet::new();
    let mut samples = Vec::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            families.insert(rest.split(' ').next().unwrap().to_owned());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let b = line.as_bytes();
        let mut i = 0;
        while i < b.len() && b[i] != b'{' && b[i] != b' ' {
            i += 1;
        }
        let name = line[..i].to_owned();
        let mut labels = BTreeMap::new();
        if b[i] == b'{' {
            i += 1;
            while b[i] != b'}' {
                let eq = i + line[i..].find('=').unwrap();
                let lname = line[i..eq].to_owned();
                assert_eq!(b[eq + 1], b'"', "{line}");
                i = eq + 2;
                let mut v = Vec::new();
                loop {
                    match b[i] {
                        b'"' => break,
                        b'\\' => {
                            v.push(match b[i + 1] {
                                b'n' => b'\n',
                                c @ (b'\\' | b'"') => c,
                                c => panic!("bad escape \\{} in {line}", c as char),
                            });
                            i += 2;
                        }
                        c => {
                            v.push(c);
                            i += 1;
                        }
                    }
                }
                labels.insert(lname, String::from_utf8(v).unwrap());
                i += 1;
                if b[i] == b',' {
                    i += 1;
                }
            }
            i += 1;
        }
        assert_eq!(b[i], b' ', "{line}");
        let value: f64 = line[i + 1..].trim().parse().unwrap();
        let family = ["_total", ""]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| families.contains(*f)));
        assert!(family.is_some(), "{name} has no TYPE line");
        assert!(name.starts_with("cuframes_"), "{name}");
        samples.push(Sample {
            name,
            labels,
            value,
        });
    }
    samples
}

/// The samples of `name` whose labels include every pair of `want`.
fn find<'a>(s: &'a [Sample], name: &str, want: &[(&str, &str)]) -> Vec<&'a Sample> {
    s.iter()
        .filter(|x| {
            x.name == name
                && want
                    .iter()
                    .all(|(k, v)| x.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect()
}

/// The one value of `name` with `want`, or None when there is none.
fn value(s: &[Sample], name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let v = find(s, name, want);
    assert!(v.len() <= 1, "{name} {want:?} more than once: {v:?}");
    v.first().map(|x| x.value)
}

fn must(s: &[Sample], name: &str, want: &[(&str, &str)]) -> f64 {
    value(s, name, want).unwrap_or_else(|| panic!("no {name} {want:?}"))
}

fn stat_json(env: &TestEnv) -> Value {
    let o = Command::new(BIN)
        .env("CUFRAMES_RUNTIME_DIR", &env.dir)
        .args(["stat", &env.key, "--json", "--interval", "0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    serde_json::from_slice(&o.stdout).unwrap()
}

fn u(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Sets the flag when dropped: the threads of a scope stop also when an assertion fails.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

// --- tests --------------------------------------------------------------------------------

#[test]
fn metrics_agree_with_stat_json() {
    let env = TestEnv::new("exp-live");
    let key = env.key.as_str();
    let OperatorScene {
        publisher: p,
        alpha: mut a,
        weird: b,
        packets: mut w,
    } = OperatorScene::start(&env);
    let weird = WEIRD_NAME;

    let (_kids, url) = start_exporter(&env, &[]);
    let agent = new_agent();
    let (status, ct, body) = get(&agent, &url);
    assert_eq!(status, 200, "{body}");
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    let m = parse_metrics(&body);
    let j = stat_json(&env);
    let k = [("key", key)];

    // While nothing is published: the same numbers.
    assert_eq!(must(&m, "cuframes_up", &k), 1.0);
    assert_eq!(must(&m, "cuframes_publisher_alive", &k), 1.0);
    assert_eq!(j.get("alive"), Some(&Value::Bool(true)));
    assert_eq!(
        must(&m, "cuframes_subscribers", &k),
        u(&j["subscriber_count"])
    );
    assert_eq!(must(&m, "cuframes_frame_seq", &k), u(&j["frames"]["seq"]));
    assert_eq!(must(&m, "cuframes_frame_seq", &k), 6.0);
    assert_eq!(must(&m, "cuframes_packet_seq", &k), u(&j["packets"]["seq"]));
    assert_eq!(must(&m, "cuframes_packet_seq", &k), 5.0);
    assert_eq!(
        must(&m, "cuframes_packet_written_bytes_total", &k),
        u(&j["packets"]["bytes"])
    );
    assert_eq!(
        must(&m, "cuframes_packet_keyframe_age_seconds", &k),
        u(&j["packets"]["keyframe_age_s"])
    );
    // The first scrape that sees a key has no rates (there is no previous scrape).
    assert_eq!(value(&m, "cuframes_frames_per_second", &k), None);
    assert_eq!(value(&m, "cuframes_packet_bytes_per_second", &k), None);

    let subs = j["frames"]["subscribers"].as_array().unwrap();
    assert_eq!(subs.len(), 2);
    let names: BTreeSet<&str> = find(&m, "cuframes_subscriber_alive", &k)
        .iter()
        .map(|s| s.labels["subscriber"].as_str())
        .collect();
    let want: BTreeSet<&str> = subs.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, want);
    assert_eq!(names, BTreeSet::from(["alpha", weird]));
    for s in subs {
        let bit = u(&s["bit"]).to_string();
        let l = [
            ("key", key),
            ("subscriber", s["name"].as_str().unwrap()),
            ("bit", bit.as_str()),
        ];
        assert_eq!(must(&m, "cuframes_subscriber_alive", &l), 1.0);
        assert_eq!(must(&m, "cuframes_subscriber_lag_frames", &l), u(&s["lag"]));
        assert_eq!(
            must(&m, "cuframes_subscriber_last_seen_seq", &l),
            u(&s["last_seen_seq"])
        );
        assert_eq!(
            must(&m, "cuframes_subscriber_delivered_total", &l),
            u(&s["delivered"])
        );
        let drops = find(&m, "cuframes_subscriber_drops_total", &l);
        let reasons: BTreeSet<&str> = drops.iter().map(|d| d.labels["reason"].as_str()).collect();
        assert_eq!(reasons, BTreeSet::from(["overrun", "torn"]));
        assert_eq!(drops.iter().map(|d| d.value).sum::<f64>(), u(&s["drops"]));
        for (reason, field) in [("overrun", "dropped_overrun"), ("torn", "dropped_torn")] {
            let mut lr = l.to_vec();
            lr.push(("reason", reason));
            assert_eq!(
                must(&m, "cuframes_subscriber_drops_total", &lr),
                u(&s[field])
            );
        }
        // Both were taken within a second or so of each other.
        let age = must(&m, "cuframes_subscriber_last_ack_age_seconds", &l);
        assert!((age - u(&s["last_ack_age_s"])).abs() < 5.0, "{age} vs {s}");
    }
    let weird_bit = subs.iter().find(|s| s["name"] == weird).unwrap()["bit"].to_string();
    let wl = [
        ("key", key),
        ("subscriber", weird),
        ("bit", weird_bit.as_str()),
    ];
    assert_eq!(must(&m, "cuframes_subscriber_lag_frames", &wl), 4.0);
    assert_eq!(must(&m, "cuframes_subscriber_delivered_total", &wl), 2.0);

    // While frames and packets flow (and alpha reads): seqs between two stats, and rates.
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 6;
            while !stop.load(Ordering::Relaxed) {
                publish_filler(&p);
                n += 1;
                w.publish(&[2; 10_000], n * 1_000_000, n * 1_000_000, 0)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = a.next_frame(Some(Duration::from_millis(100)));
            }
        });
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(Duration::from_millis(100));
        let before = stat_json(&env);
        let (status, _, body) = get(&agent, &url);
        let after = stat_json(&env);
        std::thread::sleep(Duration::from_millis(700));
        let (status2, _, body2) = get(&agent, &url);
        stop.store(true, Ordering::Relaxed);
        assert_eq!((status, status2), (200, 200));

        let m = parse_metrics(&body);
        for (metric, ring) in [
            ("cuframes_frame_seq", "frames"),
            ("cuframes_packet_seq", "packets"),
        ] {
            let (lo, hi) = (u(&before[ring]["seq"]), u(&after[ring]["seq"]));
            let v = must(&m, metric, &k);
            assert!((lo..=hi).contains(&v), "{metric} {v} not in {lo}..={hi}");
        }
        let m2 = parse_metrics(&body2);
        let fps = must(&m2, "cuframes_frames_per_second", &k);
        let pps = must(&m2, "cuframes_packets_per_second", &k);
        let bps = must(&m2, "cuframes_packet_bytes_per_second", &k);
        assert!(fps > 5.0, "fps {fps}");
        assert!(pps > 5.0, "pps {pps}");
        assert!(
            (bps / pps - 10_000.0).abs() < 100.0,
            "{bps} B/s for {pps} pkt/s"
        );
        // alpha read frames between the two scrapes; the second subscriber did not.
        let alpha: Vec<_> = find(&m2, "cuframes_subscriber_frames_per_second", &k)
            .into_iter()
            .filter(|x| x.labels["subscriber"] == "alpha")
            .collect();
        assert_eq!(alpha.len(), 1);
        assert!(alpha[0].value > 1.0, "alpha {:?}", alpha[0]);
        assert_eq!(must(&m2, "cuframes_subscriber_frames_per_second", &wl), 0.0);
    });

    // The publisher goes: the key is gone (or dead), and the exporter still serves.
    drop(a);
    drop(b);
    drop(w);
    drop(p);
    let (status, _, body) = get(&agent, &url);
    assert_eq!(status, 200);
    let m = parse_metrics(&body);
    assert_ne!(
        value(&m, "cuframes_publisher_alive", &k),
        Some(1.0),
        "{body}"
    );
    assert!(value(&m, "cuframes_frame_seq", &k).is_none(), "{body}");
}

#[test]
fn not_found_elsewhere_and_serving_through_vanishing_and_hostile_rings() {
    let env = TestEnv::new("exp-churn");
    let junk = TestEnv::new("exp-junk"); // its objects are cleaned up by its Drop
    let (_kids, url) = start_exporter(&env, &[]);
    let base = url.strip_suffix("/metrics").unwrap();
    let agent = new_agent();
    for path in ["/", "/metricsx", "/metrics/", "/favicon.ico"] {
        let (status, _, _) = get(&agent, &format!("{base}{path}"));
        assert_eq!(status, 404, "{path}");
    }
    let (status, _, body) = get(&agent, &format!("{url}?name[]=x"));
    assert_eq!(status, 200);
    parse_metrics(&body);

    // A ring that is garbage: up 0 and a read error, never a failed scrape.
    let junk_frame = format!("/dev/shm/cuframes-{}", junk.key);
    let junk_packets = format!("/dev/shm/cuframes-{}-packets", junk.key);
    std::fs::write(&junk_frame, vec![0xA5u8; 5000]).unwrap();
    std::fs::write(&junk_packets, b"CUFRPKT\0 not really").unwrap();
    let (status, _, body) = get(&agent, &url);
    assert_eq!(status, 200);
    let m = parse_metrics(&body);
    let jk = [("key", junk.key.as_str())];
    assert_eq!(must(&m, "cuframes_up", &jk), 0.0, "{body}");
    assert_eq!(must(&m, "cuframes_publisher_alive", &jk), 0.0);
    let errors = must(&m, "cuframes_read_errors_total", &[]);
    assert!(errors >= 2.0, "{errors}");
    assert!(find(&m, "cuframes_read_errors_total", &[])[0]
        .labels
        .is_empty());
    // An exporter of given keys only: the garbage of another key is not its business.
    let (_only, only_url) = start_exporter(&env, &[&env.key]);
    let (status, _, body) = get(&agent, &only_url);
    assert_eq!(status, 200);
    let m = parse_metrics(&body);
    assert!(find(&m, "cuframes_up", &[]).is_empty(), "{body}");
    assert_eq!(must(&m, "cuframes_read_errors_total", &[]), 0.0);

    // Rings come and go while a second client scrapes as fast as it can.
    let stop = AtomicBool::new(false);
    let scrapes = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let agent = new_agent();
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let (status, _, body) = get(&agent, &url);
                assert_eq!(status, 200, "{body}");
                parse_metrics(&body);
                scrapes.fetch_add(1, Ordering::Relaxed);
            }
        });
        let _stop = StopOnDrop(&stop);
        let key = env.key.as_str();
        let k = [("key", key)];
        for round in 0..10 {
            let p = Publisher::create(key, env.publisher_options()).unwrap();
            p.enable_frames(FrameRingConfig::new(Format::Bgra, 16, 16))
                .unwrap();
            let mut sub = Subscriber::connect(key, &env.subscriber_options("churn")).unwrap();
            let seq = publish_filler(&p);
            sub.next_frame(Some(Duration::from_secs(5))).unwrap();
            let (status, _, body) = get(&agent, &url);
            assert_eq!(status, 200);
            let m = parse_metrics(&body);
            assert_eq!(
                must(&m, "cuframes_publisher_alive", &k),
                1.0,
                "round {round}"
            );
            assert_eq!(must(&m, "cuframes_frame_seq", &k), seq as f64);
            drop(sub);
            drop(p);
            if round == 4 {
                // Gone half-way through: the garbage disappears too.
                std::fs::remove_file(&junk_frame).unwrap();
                std::fs::remove_file(&junk_packets).unwrap();
            }
            let (status, _, body) = get(&agent, &url);
            assert_eq!(status, 200);
            let m = parse_metrics(&body);
            assert_ne!(value(&m, "cuframes_publisher_alive", &k), Some(1.0));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(scrapes.load(Ordering::Relaxed) > 0);
    let (status, _, body) = get(&agent, &url);
    assert_eq!(status, 200);
    let m = parse_metrics(&body);
    assert_eq!(
        value(&m, "cuframes_up", &[("key", junk.key.as_str())]),
        None
    );
}

// --- hostile clients and planted rings (issue 29) -----------------------------------------

/// A raw TCP connection to the exporter, with timeouts so that no test waits forever.
fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Read what the server sends on `s` (discarding it) until it closes the connection (EOF or
/// a reset): how long that took and the first bytes it sent; `Err` when it is still open
/// after `limit`, or sent more than 256 MiB.
fn closed_within(s: &mut TcpStream, limit: Duration) -> Result<(Duration, Vec<u8>), String> {
    let t = Instant::now();
    let mut buf = vec![0u8; 1 << 16];
    let mut first = Vec::new();
    let mut total = 0usize;
    loop {
        let Some(left) = limit.checked_sub(t.elapsed()) else {
            return Err(format!("still open after {limit:?} ({total} bytes read)"));
        };
        s.set_read_timeout(Some(left.max(Duration::from_millis(10))))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return Ok((t.elapsed(), first)),
            Ok(n) => {
                if first.len() < 4096 {
                    first.extend_from_slice(&buf[..n.min(4096 - first.len())]);
                }
                total += n;
                if total > 256 << 20 {
                    return Err(format!("still sending after {total} bytes"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Ok((t.elapsed(), first))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

const SCRAPE_REQUEST: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: exporter\r\n\r\n";

/// `cmd` runs with `RLIMIT_NOFILE` at `n` (soft and hard).
fn limit_nofile(cmd: &mut Command, n: u64) {
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit(2),
    // which is async-signal-safe; it allocates nothing and touches no lock.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// This test process may hold `n` descriptors (the soft limit raised towards the hard one).
fn allow_own_fds(n: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        if r.rlim_cur < n as libc::rlim_t {
            r.rlim_cur = r.rlim_max.min(n as libc::rlim_t);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        }
    }
    assert!(
        r.rlim_cur >= n as libc::rlim_t,
        "RLIMIT_NOFILE {} < {n}",
        r.rlim_cur
    );
}

/// Frame rings planted as plain files in /dev/shm, as anyone who may create files there
/// can: `cuframes-<key>-pNNNN`, a copy of a real ring's header with all 31 subscriber slots
/// in use (by this process). Removed when dropped, also when the test fails.
struct Planted {
    paths: Vec<PathBuf>,
}

impl Planted {
    fn new(env: &TestEnv, n: usize) -> Planted {
        use cuframes_core::wire::frame::{subscriber_offset, SharedHeader};
        let mut ring = {
            let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
            p.enable_frames(FrameRingConfig::new(Format::Bgra, 16, 16))
                .unwrap();
            publish_filler(&p);
            std::fs::read(format!("/dev/shm/cuframes-{}", env.key)).unwrap()
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
            let path = PathBuf::from(format!("/dev/shm/cuframes-{}-p{i:04}", env.key));
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

/// Issue 29 item 1: a Content-Length no scrape has (99999999999 made tiny_http allocate
/// it and abort; u64::MAX made it panic) is answered with an error, never read, and the
/// exporter serves the next scrape.
#[test]
fn huge_content_length_is_answered_and_the_next_scrape_served() {
    let env = TestEnv::new("exp-clen");
    let mut e = Exporter::start(&env, &[], |_| {});
    e.scrape_within(Duration::from_secs(10), "at the start");
    for (method, length) in [
        ("GET", "99999999999"),
        ("GET", "18446744073709551615"),
        ("POST", "99999999999"),
        ("POST", "18446744073709551615"),
    ] {
        let mut s = raw(e.addr);
        let req = format!(
            "{method} /metrics HTTP/1.1\r\nHost: exporter\r\nContent-Length: {length}\r\n\r\n"
        );
        s.write_all(req.as_bytes()).unwrap();
        // Some bytes of the body it announced; the rest never comes.
        let _ = s.write_all(&[b'x'; 1000]);
        let (took, head) = closed_within(&mut s, Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("{method} Content-Length {length}: {e}"));
        let head = String::from_utf8_lossy(&head);
        let status = head.split(' ').nth(1).unwrap_or("");
        assert!(
            head.is_empty() || status.starts_with('4'),
            "{method} Content-Length {length}: answered {head:?}"
        );
        let when = format!("after {method} with Content-Length {length} (closed in {took:?})");
        std::thread::sleep(Duration::from_millis(200));
        e.assert_running(&when);
        e.scrape_within(Duration::from_secs(10), &when);
        let (rss, hwm) = e.memory_kib();
        assert!(hwm < 64 << 10, "{when}: VmRSS {rss} KiB, VmHWM {hwm} KiB");
    }
}

/// Issue 29 item 2: a slowloris (a request head that never ends), a client that pipelines
/// 20,000 GETs and reads nothing, and one that asks for a large response ten times and reads
/// nothing, all at once: an honest scrape meanwhile is served as fast as ever, and each of
/// them is closed by the exporter a few seconds after it stalls (default --timeout 5).
#[test]
fn slow_and_non_reading_clients_do_not_delay_an_honest_scrape() {
    let env = TestEnv::new("exp-slow");
    // Large responses (about 0.9 MB capped; 2.3 MB uncapped) that fill the socket buffers.
    let _planted = Planted::new(&env, 100);
    let mut e = Exporter::start(&env, &[], |_| {});
    let (body, _) = e.scrape_within(Duration::from_secs(10), "before the attack");
    assert!(body.len() > 300_000, "{} bytes", body.len());

    let mut slowloris = raw(e.addr);
    slowloris
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: exporter\r\nX-Slow: ")
        .unwrap();
    let mut big = raw(e.addr);
    big.write_all(&SCRAPE_REQUEST.repeat(10)).unwrap();
    let mut pipelined = raw(e.addr);
    let mut writer = pipelined.try_clone().unwrap();
    let pipeliner = std::thread::spawn(move || {
        // Blocks once the exporter stops reading; ends when it closes (or after 10 s).
        let _ = writer.write_all(&SCRAPE_REQUEST.repeat(20_000));
    });
    std::thread::sleep(Duration::from_millis(500));
    // Honest scrapes for longer than the stall timeout, while all three hold on.
    let mut worst = Duration::ZERO;
    for i in 0..5 {
        let (_, took) = e.scrape_within(Duration::from_secs(8), &format!("honest {i}"));
        worst = worst.max(took);
        std::thread::sleep(Duration::from_millis(1500));
    }
    eprintln!("slowest honest scrape during the attack: {worst:?}");
    for (name, s) in [
        ("slowloris", &mut slowloris),
        ("non-reader of 10 large responses", &mut big),
        ("non-reader of 20,000 pipelined GETs", &mut pipelined),
    ] {
        let (took, _) =
            closed_within(s, Duration::from_secs(15)).unwrap_or_else(|err| panic!("{name}: {err}"));
        eprintln!("{name}: closed {took:?} after the honest scrapes");
    }
    pipeliner.join().unwrap();
    e.assert_running("after the attack");
    e.scrape_within(Duration::from_secs(8), "after the attack");
}

/// Issue 29 item 3: 600 idle connections under `RLIMIT_NOFILE` 1024 (a thread and two
/// descriptors per connection ran tiny_http out of descriptors and the exporter exited 0):
/// connections past --max-connections are closed at once, and the exporter keeps serving.
#[test]
fn idle_connections_past_the_fd_limit_do_not_stop_it() {
    let env = TestEnv::new("exp-fds");
    allow_own_fds(1200);
    let mut e = Exporter::start(&env, &[], |cmd| limit_nofile(cmd, 1024));
    e.scrape_within(Duration::from_secs(10), "at the start");
    let conns: Vec<TcpStream> = (0..600).map(|_| raw(e.addr)).collect();
    std::thread::sleep(Duration::from_secs(1));
    e.assert_running("while 600 idle connections were open");
    drop(conns);
    std::thread::sleep(Duration::from_millis(500));
    e.assert_running("after 600 idle connections closed");
    e.scrape_within(Duration::from_secs(10), "after 600 idle connections closed");
    std::thread::sleep(Duration::from_millis(500));
    e.assert_running("at the end");
}

/// Issue 29 item 3, the accept errors themselves: with more connections allowed than
/// descriptors (--max-connections 1000 under `RLIMIT_NOFILE` 64), accept fails with EMFILE;
/// the exporter says so, waits, accepts again once the idle ones time out, and serves.
#[test]
fn out_of_file_descriptors_is_waited_out() {
    let env = TestEnv::new("exp-emfile");
    let log_path = env.dir.join("exporter.stderr");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut e = Exporter::start(
        &env,
        &["--max-connections", "1000", "--timeout", "1"],
        |cmd| {
            limit_nofile(cmd, 64);
            cmd.stderr(log);
        },
    );
    e.scrape_within(Duration::from_secs(10), "at the start");
    // An exporter that exits on EMFILE refuses the later ones: the check below says so.
    let conns: Vec<TcpStream> = (0..150)
        .map_while(|_| TcpStream::connect_timeout(&e.addr, Duration::from_secs(10)).ok())
        .collect();
    // The exporter takes them 50-odd at a time, each closed after its 1 s header timeout.
    std::thread::sleep(Duration::from_secs(2));
    e.assert_running("while out of descriptors");
    drop(conns);
    let deadline = Instant::now() + Duration::from_secs(30);
    let said = loop {
        let said = std::fs::read_to_string(&log_path).unwrap();
        if said.contains("accepting connections again") || Instant::now() > deadline {
            break said;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        said.contains("cannot accept a connection") && said.contains("os error 24"),
        "no EMFILE said: {said}"
    );
    assert!(said.contains("accepting connections again"), "{said}");
    e.assert_running("after running out of descriptors");
    e.scrape_within(Duration::from_secs(10), "after running out of descriptors");
}

/// Send `head` and then `fill` repeated up to `total` bytes, until the exporter closes the
/// connection (or stops reading for 10 s): the bytes sent and the first bytes answered.
fn send_until_closed(addr: SocketAddr, head: &[u8], fill: &[u8], total: usize) -> (usize, String) {
    let mut s = raw(addr);
    s.write_all(head).unwrap();
    let chunk = fill.repeat((64 << 10) / fill.len());
    let mut sent = head.len();
    while sent < total {
        match s.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    let answer = closed_within(&mut s, Duration::from_secs(15))
        .map(|(_, first)| String::from_utf8_lossy(&first).into_owned())
        .unwrap_or_else(|e| format!("({e})"));
    (sent, answer)
}

/// Issue 29 item 4: a 64 MiB header line and 2 million header lines (tiny_http kept them
/// all): the exporter stops reading at its header limit, stays small and keeps serving.
#[test]
fn huge_header_lines_and_counts_do_not_grow_memory() {
    let env = TestEnv::new("exp-hdr");
    let mut e = Exporter::start(&env, &[], |_| {});
    e.scrape_within(Duration::from_secs(10), "at the start");
    let (rss0, hwm0) = e.memory_kib();
    let (sent, answer) = send_until_closed(
        e.addr,
        b"GET /metrics HTTP/1.1\r\nHost: exporter\r\nX-Big: ",
        b"a",
        64 << 20,
    );
    let line = answer.lines().next().unwrap_or("");
    eprintln!("64 MiB header line: {sent} bytes sent, answered {line:?}");
    e.assert_running("after a 64 MiB header line");
    e.scrape_within(Duration::from_secs(10), "after a 64 MiB header line");
    let (sent, answer) = send_until_closed(
        e.addr,
        b"GET /metrics HTTP/1.1\r\nHost: exporter\r\n",
        b"X-a: b\r\n",
        2_000_000 * 8,
    );
    let line = answer.lines().next().unwrap_or("");
    eprintln!("2 million header lines: {sent} bytes sent, answered {line:?}");
    e.assert_running("after 2 million header lines");
    e.scrape_within(Duration::from_secs(10), "after 2 million header lines");
    let (rss, hwm) = e.memory_kib();
    eprintln!("VmRSS {rss0} -> {rss} KiB, VmHWM {hwm0} -> {hwm} KiB");
    assert!(
        hwm < 40 << 10,
        "VmHWM {hwm} KiB (VmRSS {rss} KiB; {hwm0} KiB before)"
    );
}

/// Issue 29 item 5: 2000 planted rings with 31 subscribers each (a 40-45 MB body, 2.5 s a
/// scrape): one scrape shows at most --max-rings keys (256) and --max-subscribers
/// subscribers (1024), a real publisher first even though every planted key sorts before
/// it, counts the rest, and is quick.
#[test]
fn planted_rings_are_capped_counted_and_quick() {
    let env = TestEnv::new("exp-plant");
    let real = TestEnv::new("zz-real"); // sorts after every planted key
    let planted = Planted::new(&env, 2000);
    let p = Publisher::create(&real.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Bgra, 16, 16))
        .unwrap();
    let seq = publish_filler(&p);
    let mut e = Exporter::start(&env, &[], |_| {});
    let (body, took) = e.scrape_within(Duration::from_secs(6), "with 2000 planted rings");
    eprintln!(
        "{} planted rings: {} bytes in {took:?}",
        planted.paths.len(),
        body.len()
    );
    assert!(body.len() < 2 << 20, "{} bytes", body.len());
    let m = parse_metrics(&body);
    let shown = find(&m, "cuframes_up", &[]).len();
    assert_eq!(shown, 256, "keys shown");
    let rk = [("key", real.key.as_str())];
    assert_eq!(
        must(&m, "cuframes_publisher_alive", &rk),
        1.0,
        "the real one"
    );
    assert_eq!(must(&m, "cuframes_frame_seq", &rk), seq as f64);
    let omitted = must(&m, "cuframes_exporter_rings_omitted", &[]);
    assert!(
        shown as f64 + omitted >= 2001.0,
        "{shown} shown, {omitted} omitted"
    );
    let subs = find(&m, "cuframes_subscriber_alive", &[]).len();
    assert_eq!(subs, 1024, "subscribers shown");
    let subs_omitted = must(&m, "cuframes_exporter_subscribers_omitted", &[]);
    // Each planted ring shown has 31 subscribers. The rest of the 256 keys shown is the real
    // publisher and whatever else has objects in /dev/shm, which is machine-wide: other
    // tests' and users' rings take places in the list too.
    let planted_prefix = format!("{}-p", env.key);
    let planted_shown = find(&m, "cuframes_up", &[])
        .iter()
        .filter(|s| {
            s.labels
                .get("key")
                .is_some_and(|k| k.starts_with(&planted_prefix))
        })
        .count();
    assert!(planted_shown >= 200, "{planted_shown} planted rings shown");
    assert!(
        subs as f64 + subs_omitted >= planted_shown as f64 * 31.0,
        "{subs} subscribers shown, {subs_omitted} omitted, {planted_shown} planted rings shown"
    );
    // Many scrapers at once cost about one render each --reuse (1 s), never one each.
    let renders = |m: &[Sample]| must(m, "cuframes_exporter_renders_total", &[]);
    let before = renders(&m);
    let t = Instant::now();
    std::thread::scope(|s| {
        for i in 0..8 {
            let url = &e.url;
            s.spawn(move || {
                let agent = new_agent();
                for _ in 0..5 {
                    let (status, _, body) = get(&agent, url);
                    assert_eq!(status, 200, "scraper {i}");
                    assert!(body.len() < 2 << 20);
                }
            });
        }
    });
    let took = t.elapsed();
    let (body, _) = e.scrape_within(Duration::from_secs(6), "after 8 scrapers");
    let n = renders(&parse_metrics(&body)) - before;
    eprintln!("40 scrapes by 8 scrapers in {took:?}: {n} renders");
    assert!(n <= took.as_secs_f64() + 3.0, "{n} renders in {took:?}");
    drop(p);
}

/// Issue 29 item 9: a ring planted by another uid, with a valid header and `producer_pid` 1
/// (alive, but root's), is never shown as an alive publisher: `cuframes_publisher_alive 0`
/// and `cuframes_publisher_owner_mismatch 1`; a real publisher of another key in the same
/// scrape stays alive with no mismatch.
#[test]
fn a_fake_owner_ring_is_not_an_alive_publisher() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to create an object owned by another uid");
        return;
    }
    let env = TestEnv::new("exp-owner");
    let honest = TestEnv::new("exp-owner-real");
    let frame = format!("cuframes-{}", env.key);
    // Removes the planted ring, also on failure.
    struct Unlink(String);
    impl Drop for Unlink {
        fn drop(&mut self) {
            let _ = cuframes_core::shm::unlink(&self.0);
        }
    }
    let _planted = Unlink(frame.clone());
    {
        let (_fd, map) = cuframes_core::shm::create(&frame, 7424, 0o644).unwrap();
        let shm = cuframes_core::testing::FrameShm::new(map).unwrap();
        shm.initialise(
            &cuframes_core::format::FrameLayout::new(Format::Nv12, 64, 32)
                .unwrap()
                .to_meta(),
            2,
            cuframes_core::wire::Policy::DropOldest,
            cuframes_core::wire::MemoryKind::HostMemfd,
            1,
        );
    }
    std::os::unix::fs::chown(format!("/dev/shm/{frame}"), Some(65534), None).unwrap();
    // The honest publisher's socket must be in the exporter's runtime directory.
    let mut options = honest.publisher_options();
    options.runtime_dir = Some(env.dir.clone());
    let p = Publisher::create(&honest.key, options).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    publish_filler(&p);

    let (_kids, url) = start_exporter(&env, &[&env.key, &honest.key]);
    let (status, _, body) = get(&new_agent(), &url);
    assert_eq!(status, 200, "{body}");
    let s = parse_metrics(&body);
    let fake = [("key", env.key.as_str())];
    let real = [("key", honest.key.as_str())];
    assert_eq!(must(&s, "cuframes_publisher_alive", &fake), 0.0, "{body}");
    assert_eq!(
        must(&s, "cuframes_publisher_owner_mismatch", &fake),
        1.0,
        "{body}"
    );
    assert_eq!(must(&s, "cuframes_publisher_alive", &real), 1.0, "{body}");
    assert_eq!(
        must(&s, "cuframes_publisher_owner_mismatch", &real),
        0.0,
        "{body}"
    );
}
