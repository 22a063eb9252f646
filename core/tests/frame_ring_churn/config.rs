//! Timings of the churn soak and the knobs it reads from the environment.

use std::time::Duration;

use cuframes_core::wire::Policy;

pub const CHILD_ENV: &str = "CUFRAMES_CHURN_CHILD";
pub const POLICY_ENV: &str = "CUFRAMES_CHURN_POLICY";

pub const RING_SIZE: usize = 4;
/// The publisher's consumer_ack_timeout.
pub const ACK_TIMEOUT: Duration = Duration::from_millis(200);
/// How much longer than `ACK_TIMEOUT` one publish (acquire + write + publish) may take, not
/// counting the time the publishing thread sat runnable on a run queue waiting for a CPU
/// (its `schedstat` run delay; without schedstat, wall-clock time is checked). The wait
/// itself overshoots by at most one futex slice (5 ms) plus the kick (a table lock, a pipe
/// write); what else remains is a preempted lock holder (the server thread) or a page fault.
/// Measured on this 2-core machine, both soaks at once (~60 processes) and other engineers'
/// builds and tests running: net of the run delay the slowest publish of a soak was 200.0 to
/// 214.9 ms (10 soaks); wall clock 201–218 ms at load 3–6, but 428 ms at load 10 (and 2.2 s
/// while the machine swapped), which is why the run delay is taken out. 100 ms is a wide
/// safety factor that still fails a publish that waits twice (2 × 200 ms), or waits on a
/// subscriber the publisher already gave up on.
pub const PUBLISH_MARGIN: Duration = Duration::from_millis(100);
/// Voluntary and SIGSTOP stalls: well past the ack timeout, so that the publisher's ERROR is
/// on the socket by the time the stalled subscriber looks again.
pub const STALL_MS: (u64, u64) = (350, 700);

// Randomness is common::Rng (xorshift64*), seeded from the clock unless CUFRAMES_CHURN_SEED.

pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

pub fn soak_secs() -> u64 {
    env_u64("CUFRAMES_CHURN_SECS").unwrap_or(40).max(1)
}

pub fn memory_is_cuda() -> bool {
    std::env::var("CUFRAMES_CHURN_MEMORY").is_ok_and(|v| v.eq_ignore_ascii_case("cuda"))
}

pub fn policy_name(p: Policy) -> &'static str {
    match p {
        Policy::StrictWait => "strict_wait",
        _ => "drop_oldest",
    }
}

pub fn policy_from_env() -> Policy {
    match std::env::var(POLICY_ENV).as_deref() {
        Ok("strict_wait") => Policy::StrictWait,
        Ok("drop_oldest") => Policy::DropOldest,
        other => panic!("{POLICY_ENV}={other:?}"),
    }
}
