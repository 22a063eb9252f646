//! Table 2: the publishing thread's cost per frame.

use cuframes_core::wire::Policy;

use crate::config::{Config, Publish, PERIOD_1KHZ};
use crate::run::run_config;

/// Table 2: the publishing thread's cost per frame, paced at 1 kHz (no ACK is waited for),
/// with 1, 8 and 31 subscribers, both policies, both ways of publishing.
pub fn publisher_cost(frames: u64) {
    println!();
    println!("Publisher cost per frame on the publishing thread (acquire + copy + publish), 1920x1080 NV12, paced at 1 kHz:");
    println!("| policy | subscribers read | publication | 1 subscriber | 8 | 31 | 31 / 1 |");
    println!("|---|---|---|---|---|---|---|");
    for (policy, copy) in [
        (Policy::StrictWait, false),
        (Policy::DropOldest, false),
        (Policy::DropOldest, true),
    ] {
        for publish in [Publish::AfterStream, Publish::OnStream] {
            let cost: Vec<f64> = [1usize, 8, 31]
                .iter()
                .map(|&subs| {
                    run_config(Config {
                        policy,
                        publish,
                        copy,
                        ..Config::new(1920, 1080, subs, frames.max(1000), Some(PERIOD_1KHZ))
                    })
                    .pub_us
                })
                .collect();
            println!(
                "| {policy:?} | {} | {} | {:.1} µs | {:.1} µs | {:.1} µs | {:.2}x |",
                if copy {
                    "COPY (a device copy each, in its own context)"
                } else {
                    "zero copy"
                },
                if publish == Publish::AfterStream {
                    "after the stream (thread waits)"
                } else {
                    "on the stream (host function)"
                },
                cost[0],
                cost[1],
                cost[2],
                cost[2] / cost[0]
            );
        }
    }
}
