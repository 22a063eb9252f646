//! Churn soak of the frame ring: one publisher at a high rate and
//! up to 31 subscriber processes (a few more at times, so that some meet TOO_MANY) that join,
//! leave, rejoin, stall past the ack timeout and are SIGKILLed or SIGSTOPped at random, under
//! each policy. Every delivered frame is checked byte for byte against the pattern of its seq
//! and for order; a held frame is checked again just before it is released. Under STRICT_WAIT
//! some subscribers also go on ACKing with their bit after the publisher gave up on them
//! (`zombie_session`): the quarantine of a given-up bit must keep those ACKs from counting for
//! the bit's next owner, and the zombies are what makes a missing quarantine show (as held
//! frames overwritten); the soak without them does not notice it.
//!
//! Process layout: each `#[test]` runs its soak in a process of its own (the test binary
//! re-executed in the role `churn_soak`, `test_support::child`), because the publisher's descriptor and
//! mapping counts are per process and the other test of this binary runs in parallel. That
//! process publishes and supervises; the subscribers are further re-executions
//! (role `churn_sub`) that print one line per event of interest (`JOIN`,
//! `SESSION`, `BAD`, `RESULT`), so that even a SIGKILLed child's finished sessions count.
//!
//! Knobs: `CUFRAMES_CHURN_SECS` (default 40 per policy), `CUFRAMES_CHURN_SEED` (replay the
//! random choices of a run; the seed is printed), `CUFRAMES_CHURN_MEMORY=cuda` (the slots on
//! CUDA VMM device 0; subscribers verify through a device-to-host copy; skipped without a
//! driver), `CUFRAMES_CHURN_MAX` (most subscriber processes at once, default 33),
//! `CUFRAMES_CHURN_ZOMBIES=0` (no zombie ACKers, see `zombie_session`).
//!
//! How "held frame overwritten" is told from the legitimate case. Under STRICT_WAIT a slot is
//! rewritten before its frame was ACKed only when the publisher gave up on a subscriber, and
//! it gives up only after waiting `ack_timeout` for an ACK of a frame that was published (pts,
//! CLOCK_MONOTONIC) before the wait began. So a zero-copy frame found overwritten less than
//! `ack_timeout` after its pts, by a subscriber that had not yet been late with an ACK, seen a
//! gap or stalled, is a violation whatever happened to the subscriber afterwards; anything
//! else is counted as `late_overwritten` (expected after a stall). Gaps under STRICT_WAIT
//! count against the ring only for a session that never stalled on purpose and was never
//! dropped (ERROR from the publisher, waited for a moment after a gap).
//!
//! Files: config.rs (timings, knobs), soak.rs (the soak process: publisher and supervisor),
//! subscriber.rs (a subscriber process).

mod config;
mod soak;
mod subscriber;

use cuframes_test_support as common;

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::child;
use cuframes_core::wire::Policy;

use config::{memory_is_cuda, policy_from_env, policy_name, soak_secs, POLICY_ENV};

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    match role.as_str() {
        "churn_soak" => soak::soak(policy_from_env()),
        "churn_sub" => subscriber::churn_subscriber(),
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn churn_soak_strict_wait() {
    run_soak_process(Policy::StrictWait);
}

#[test]
fn churn_soak_drop_oldest() {
    run_soak_process(Policy::DropOldest);
}

/// Run one policy's soak in a process of its own and fail with its report if it fails.
fn run_soak_process(policy: Policy) {
    if memory_is_cuda() {
        if let Some(why) = common::no_cuda() {
            eprintln!("SKIPPED: no CUDA driver ({why})");
            return;
        }
    }
    let secs = soak_secs();
    let mut child = child::command("churn_soak")
        .env(POLICY_ENV, policy_name(policy))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    // The soak runs `secs`, then waits up to ~45 s for its children to finish.
    let limit = Duration::from_secs(secs + 90);
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let out = reader.join().unwrap();
            panic!("{policy:?} soak ran past {limit:?}:\n{out}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = reader.join().unwrap();
    for line in out
        .lines()
        .filter(|l| l.starts_with("churn") || l.starts_with("SUMMARY") || l.starts_with("BAD"))
    {
        eprintln!("{line}");
    }
    assert!(
        status.success() && out.contains("SUMMARY "),
        "{policy:?} soak failed ({status}); its output:\n{out}"
    );
}
