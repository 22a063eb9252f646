//! The roles a child process plays, and how a test starts one.

use cuframes_test_support as common;

use std::io::Write;
use std::process::Child;
use std::time::Duration;

use common::{child, TestEnv};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::{Format, SubscriberMode};
use cuframes_core::ErrorCode;

/// Publish the test pattern of the next frame (`seq_hint`): its seq.
pub fn publish(p: &Publisher, seq_hint: u64) -> cuframes_core::Result<u64> {
    common::publish_pattern(p, seq_hint, None).map(|(seq, _)| seq)
}

/// A child in `role` ([`child::role_command`]) with `extra` in its environment.
pub fn spawn_child(role: &str, env: &TestEnv, extra: &[(&str, String)]) -> Child {
    let mut cmd = child::role_command(role, env);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Runs as an unprivileged user: the publisher's uid restriction must refuse it.
pub fn refused_subscriber(key: &str) {
    let e = Subscriber::connect(key, &SubscriberOptions::default())
        .err()
        .expect("must be refused");
    println!("RESULT code={}", -(e.code() as i32));
    eprintln!("refused as expected: {e}");
}

/// Read until the publisher goes away; verify every frame's pattern and order.
pub fn child_subscriber(key: &str) {
    let mode = match std::env::var("CUFRAMES_TEST_MODE").as_deref() {
        Ok("zero_copy") => SubscriberMode::ZeroCopy,
        _ => SubscriberMode::Copy,
    };
    let delay_us: u64 = std::env::var("CUFRAMES_TEST_DELAY_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let opts = SubscriberOptions {
        name: format!("child-{}", std::process::id()),
        mode,
        ..Default::default()
    };
    let mut s = Subscriber::connect(key, &opts).unwrap();
    println!("READY bit={}", s.bit());
    std::io::stdout().flush().unwrap();
    let layout = s.frame_layout().unwrap().clone();
    let (mut delivered, mut corrupt, mut misordered, mut last) = (0u64, 0u64, 0u64, 0u64);
    loop {
        match s.next_frame(Some(Duration::from_secs(20))) {
            Ok(f) => {
                if f.seq <= last {
                    misordered += 1;
                }
                last = f.seq;
                if !common::verify_frame(&f, &common::planes_for(&layout, f.seq)) {
                    corrupt += 1;
                }
                delivered += 1;
                if delay_us > 0 {
                    std::thread::sleep(Duration::from_micros(delay_us));
                }
            }
            Err(e) if e.code() == ErrorCode::Disconnected => break,
            Err(e) => panic!("subscriber: {e}"),
        }
    }
    let st = s.frame_stats();
    println!(
        "RESULT delivered={delivered} corrupt={corrupt} misordered={misordered} torn={} overrun={}",
        st.dropped_torn, st.dropped_overrun
    );
    std::process::exit(if corrupt == 0 && misordered == 0 {
        0
    } else {
        1
    });
}

/// Publish forever (until killed).
pub fn child_publisher(key: &str) {
    let p = Publisher::create(key, Default::default()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 64, 32))
        .unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut seq = 1;
    loop {
        publish(&p, seq).unwrap();
        seq += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
}
