//! Scrapes of live, vanishing and garbage rings: the metrics agree with `cuframes stat
//! --json`, other paths are 404s, and the exporter keeps serving.

use cuframes_test_support as common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{
    frame_shm_name, packet_shm_name, publish_filler, shm_path, OperatorScene, TestEnv, WEIRD_NAME,
};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::Format;
use serde_json::Value;

use super::exposition::{find, must, parse_metrics, value};
use super::harness::{get, new_agent, start_exporter, stat_json, u, StopOnDrop};

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
    let junk_frame = shm_path(&frame_shm_name(&junk.key));
    let junk_packets = shm_path(&packet_shm_name(&junk.key));
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
