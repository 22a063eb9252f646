//! Hostile subscriber (trust-boundary issue): while 4 honest subscriber processes verify every
//! frame (host memory; COPY and ZERO_COPY), one hardened-mode subscriber, running as another
//! user in the SHM objects' group, writes random bytes into everything it can map writable and
//! truncates whatever it can open, for `CUFRAMES_HOSTILE_SECS` (30 s by default) per policy.
//! `CUFRAMES_HOSTILE_MEMORY=cuda` puts the slots on CUDA VMM device 0 (scripts/gpu-check.sh);
//! the hostile peer then attacks the same host objects and the VMM descriptors it is handed,
//! but does not write device memory through a CUDA import: CUDA VMM has no read-only export,
//! so that attack succeeds by design (docs/protocol.md, "Not covered").
//! The publisher and the honest readers must go on with 0 wrong frames accepted, 0 crashes and
//! no publish stalled longer than the ack timeout.
//!
//! Children are this test binary re-executed in a role (`test_support::child`): `honest`
//! (honest.rs) or `hostile` (hostile.rs); each prints one `RESULT k=v ...` line. run.rs
//! starts them, publishes and checks what they report.

mod config;
mod honest;
mod hostile;
mod run;

use cuframes_core::wire::Policy;
use cuframes_test_support::child;

#[test]
fn child_entry() {
    let Some(role) = child::role() else {
        return;
    };
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    match role.as_str() {
        "honest" => honest::honest(&key),
        "hostile" => hostile::hostile(&key),
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn hostile_subscriber_strict_wait() {
    run::run_and_check_cleanup(Policy::StrictWait);
}

#[test]
fn hostile_subscriber_drop_oldest() {
    run::run_and_check_cleanup(Policy::DropOldest);
}
