//! SIGKILLed publishers and subscribers: the others go on, the publisher recovers.

use cuframes_test_support as common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::{child, wait_until, Children, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::{Format, Policy};
use cuframes_core::ErrorCode;

use super::roles::{publish, spawn_child};

#[test]
fn sigkilled_publisher_disconnects_subscribers_and_is_recovered() {
    let env = TestEnv::new("kp");
    let mut kids = Children(vec![spawn_child("publisher", &env, &[])]);
    let mut line = String::new();
    let mut out = kids.0[0].stdout.take().unwrap();
    let mut b = [0u8; 1];
    while !line.contains("READY") {
        assert_eq!(out.read(&mut b).unwrap(), 1, "publisher child died");
        line.push(b[0] as char);
    }
    let mut subs: Vec<Subscriber> = (0..2)
        .map(|i| Subscriber::connect(&env.key, &env.subscriber_options(&format!("s{i}"))).unwrap())
        .collect();
    for s in &mut subs {
        s.next_frame(Some(Duration::from_secs(5))).unwrap();
    }
    // Kill at a random moment of its publish loop.
    std::thread::sleep(Duration::from_micros(
        cuframes_core::testing::unique_suffix() % 20_000,
    ));
    kids.0[0].kill().unwrap();
    kids.0[0].wait().unwrap();
    let t = Instant::now();
    for s in &mut subs {
        loop {
            match s.next_frame(Some(Duration::from_secs(5))) {
                Ok(_) => continue,
                Err(e) => {
                    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
                    break;
                }
            }
        }
    }
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "crash noticed after {:?}",
        t.elapsed()
    );
    // Its socket and SHM are stale now: the next create cleans them up.
    assert!(env.dir.join(format!("{}.sock", env.key)).exists());
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    let mut s = Subscriber::connect(&env.key, &env.subscriber_options("after")).unwrap();
    publish(&p, 1).unwrap();
    assert_eq!(s.next_frame(Some(Duration::from_secs(2))).unwrap().seq, 1);
}

#[test]
fn sigkilled_subscribers_do_not_stall_strict_wait() {
    let env = TestEnv::new("ks");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 32);
    cfg.policy = Policy::StrictWait;
    cfg.ack_timeout = Duration::from_millis(500);
    p.enable_frames(cfg).unwrap();
    let mut kids = Children(
        (0..4)
            .map(|_| spawn_child("subscriber", &env, &[]))
            .collect(),
    );
    wait_until("subscribers", Duration::from_secs(30), || {
        p.subscriber_count() == 4
    });
    let mut slowest = Duration::ZERO;
    let mut seq = 1;
    let mut killed = 0;
    let start = Instant::now();
    while seq <= 400 {
        if (seq == 100 || seq == 250) && killed < 2 {
            kids.0[killed].kill().unwrap();
            kids.0[killed].wait().unwrap();
            killed += 1;
        }
        let t = Instant::now();
        publish(&p, seq).unwrap();
        slowest = slowest.max(t.elapsed());
        seq += 1;
    }
    // A dead subscriber costs at most one ack timeout (plus scheduling slack).
    assert!(
        slowest < Duration::from_millis(1500),
        "a publish stalled {slowest:?}"
    );
    wait_until("dead subscribers removed", Duration::from_secs(5), || {
        p.subscriber_count() == 2
    });
    wait_until("final ACKs", Duration::from_secs(30), || {
        p.subscribers().iter().all(|s| s.lag == 0)
    });
    eprintln!(
        "400 frames in {:?}, slowest publish {slowest:?}",
        start.elapsed()
    );
    drop(p);
    for c in kids.0.iter_mut().skip(2) {
        let (code, r, out) = child::wait_for_result(c);
        let (code, r) = (
            code.unwrap_or(-1),
            r.unwrap_or_else(|| panic!("no RESULT in {out:?}")),
        );
        assert_eq!(code, 0, "{r:?}");
        assert_eq!(r["delivered"], 400);
    }
}
