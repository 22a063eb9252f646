//! Many subscriber processes under both policies, every frame verified.

use cuframes_test_support as common;

use std::time::Duration;

use common::{child, wait_until, Children, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::Subscriber;
use cuframes_core::wire::{Format, Policy};
use cuframes_core::ErrorCode;

use super::roles::{publish, spawn_child};

fn run_fanout(n: usize, policy: Policy, frames: u64, zero_copy_every: usize) {
    let env = TestEnv::new("fan");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 48);
    cfg.policy = policy;
    cfg.ring_size = 4;
    cfg.ack_timeout = Duration::from_secs(10);
    p.enable_frames(cfg).unwrap();
    let mut kids = Children(Vec::new());
    for i in 0..n {
        let mode = if zero_copy_every > 0 && i % zero_copy_every == 0 {
            "zero_copy"
        } else {
            "copy"
        };
        let delay = (i % 3) as u64 * 200; // readers of different speeds
        kids.0.push(spawn_child(
            "subscriber",
            &env,
            &[
                ("CUFRAMES_TEST_MODE", mode.into()),
                ("CUFRAMES_TEST_DELAY_US", delay.to_string()),
            ],
        ));
    }
    wait_until("subscribers to connect", Duration::from_secs(60), || {
        p.subscriber_count() == n
    });
    if n == 31 {
        let e = Subscriber::connect(&env.key, &env.subscriber_options("32nd"))
            .err()
            .unwrap();
        assert_eq!(e.code(), ErrorCode::TooMany, "{e}");
    }
    for seq in 1..=frames {
        assert_eq!(publish(&p, seq).unwrap(), seq);
        if policy == Policy::DropOldest {
            std::thread::sleep(Duration::from_micros(300));
        }
    }
    if policy == Policy::StrictWait {
        // Every subscriber must have ACKed everything before we shut down.
        wait_until("final ACKs", Duration::from_secs(30), || {
            p.subscribers().iter().all(|s| s.lag == 0)
        });
    } else {
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(p);
    let mut total = 0;
    for c in kids.0.iter_mut() {
        let (code, r, out) = child::wait_for_result(c);
        let (code, r) = (
            code.unwrap_or(-1),
            r.unwrap_or_else(|| panic!("no RESULT in {out:?}")),
        );
        assert_eq!(code, 0, "subscriber failed: {r:?}");
        assert_eq!(r["corrupt"], 0);
        assert_eq!(r["misordered"], 0);
        if policy == Policy::StrictWait {
            assert_eq!(r["delivered"], frames, "STRICT_WAIT loses nothing: {r:?}");
        }
        assert!(r["delivered"] > 0);
        total += r["delivered"];
    }
    eprintln!("{n} subscribers, {policy:?}: {total} frames verified");
}

#[test]
fn one_subscriber_both_policies() {
    run_fanout(1, Policy::DropOldest, 300, 0);
    run_fanout(1, Policy::StrictWait, 300, 1);
}

#[test]
fn eight_subscribers_both_policies() {
    run_fanout(8, Policy::DropOldest, 300, 2);
    run_fanout(8, Policy::StrictWait, 300, 2);
}

#[test]
fn thirty_one_subscribers_and_the_32nd_is_refused() {
    run_fanout(31, Policy::DropOldest, 120, 0);
    run_fanout(31, Policy::StrictWait, 120, 4);
}
