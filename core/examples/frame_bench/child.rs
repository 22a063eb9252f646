//! The subscriber processes of a run: a subscriber that reads every frame and reports each
//! frame's latency and its CPU, and an idle one that reports only its CPU.

use std::io::Write;
use std::time::{Duration, Instant};

use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::testing::monotonic_ns;
use cuframes_core::wire::SubscriberMode;
use cuframes_core::ErrorCode;

use crate::bench_common::cpu::self_cpu;
use crate::cli::ChildArgs;
use crate::config::Acks;
use crate::latency::join;
use crate::probe;

/// A subscriber of one run (or the probe): prints "ready", reads until the publisher leaves,
/// then prints "lat CPU LATENCIES...".
pub fn run(c: &ChildArgs) {
    let ChildArgs {
        key,
        acks,
        spin,
        copy,
        probe,
    } = c;
    if *probe {
        return probe::child(key, *spin);
    }
    let opts = SubscriberOptions {
        name: "bench".into(),
        mode: if *copy {
            SubscriberMode::Copy
        } else {
            SubscriberMode::ZeroCopy
        },
        // DROP_OLDEST runs read zero-copy too unless they ask for copies: the same subscriber
        // work under both policies.
        accept_zero_copy_overwrite: true,
        plain_v4_acks: *acks == Acks::Header,
        spin: *spin,
        ..Default::default()
    };
    let mut s = Subscriber::connect(key, &opts).expect("connect");
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut lat = Vec::new();
    let (cpu0, wall0) = (self_cpu(), Instant::now());
    loop {
        match s.next_frame(Some(Duration::from_secs(30))) {
            Ok(f) => {
                lat.push(monotonic_ns() - f.pts_ns);
                // No GPU work read the frame: ACK at once (a consumer that reads it on the GPU
                // releases after its stream, also without a host wait). A plain release would
                // wait for the whole context (cuCtxSynchronize) before the ACK.
                // SAFETY: null stream: nothing reads the frame any more.
                unsafe { f.release_after_stream(std::ptr::null_mut()) };
            }
            Err(e) if e.code() == ErrorCode::Disconnected => break,
            Err(e) => panic!("{e}"),
        }
    }
    let cpu = (self_cpu() - cpu0).as_secs_f64() / wall0.elapsed().as_secs_f64();
    println!("lat {cpu} {}", join(&lat));
}

/// Child of `wake_ups::idle_cpu`: CPU from after the handshake until the publisher leaves.
pub fn idle(key: &str) {
    let opts = SubscriberOptions {
        name: "idle".into(),
        mode: SubscriberMode::ZeroCopy,
        ..Default::default()
    };
    let mut s = Subscriber::connect(key, &opts).expect("connect");
    println!("ready");
    std::io::stdout().flush().unwrap();
    let (cpu0, wall0) = (self_cpu(), Instant::now());
    while s.next_frame(Some(Duration::from_secs(60))).is_ok() {}
    let cpu = (self_cpu() - cpu0).as_secs_f64() / wall0.elapsed().as_secs_f64();
    println!("cpu {cpu}");
}
