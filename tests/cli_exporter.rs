//! `cuframes exporter` as Prometheus sees it: a real publisher (host rings, frames and
//! packets, two subscribers) in this process, the exporter as a child process, scraped over
//! HTTP, the exposition parsed and compared with `cuframes stat --json` taken at about the
//! same time; 404s; and an exporter that keeps serving while rings vanish, come and go, or
//! are garbage.

use cuframes_test_support as common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{publish_filler, Children, OperatorScene, TestEnv, WEIRD_NAME};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::Format;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_cuframes");

/// The exporter of `env.dir` (through `CUFRAMES_RUNTIME_DIR`, as an operator would set it) on
/// a free port, killed when the returned guard drops; and its /metrics URL.
fn start_exporter(env: &TestEnv, keys: &[&str]) -> (Children, String) {
    let mut kids = Children(vec![Command::new(BIN)
        .args(["exporter", "--listen", "127.0.0.1:0"])
        .args(keys)
        .env("CUFRAMES_RUNTIME_DIR", &env.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()]);
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
    (kids, url)
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
