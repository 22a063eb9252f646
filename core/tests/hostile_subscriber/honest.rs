//! The honest subscriber: a child that verifies every frame it reads.

use cuframes_test_support as common;

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use common::{CudaCheck, Rng};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::{Policy, SubscriberMode};
use cuframes_core::ErrorCode;

use super::config::memory_is_cuda;

fn policy_of_env() -> Policy {
    match std::env::var("CUFRAMES_TEST_POLICY").as_deref() {
        Ok("strict") => Policy::StrictWait,
        _ => Policy::DropOldest,
    }
}

/// Read until the publisher goes away; verify every frame byte for byte, its order, (STRICT_WAIT)
/// that none is missing, and that a held zero-copy frame is unchanged just before release.
pub fn honest(key: &str) {
    let mode = match std::env::var("CUFRAMES_TEST_MODE").as_deref() {
        Ok("zero_copy") => SubscriberMode::ZeroCopy,
        _ => SubscriberMode::Copy,
    };
    let policy = policy_of_env();
    let opts = SubscriberOptions {
        name: format!("honest-{}", std::process::id()),
        mode,
        ..Default::default()
    };
    let mut s = Subscriber::connect(key, &opts).unwrap();
    println!("READY bit={}", s.bit());
    std::io::stdout().flush().unwrap();
    let layout = s.frame_layout().unwrap().clone();
    let cuda = memory_is_cuda().then(CudaCheck::open);
    let mut rng =
        Rng::new(cuframes_core::testing::unique_suffix() ^ ((std::process::id() as u64) << 32));
    let mut c: HashMap<&str, u64> = HashMap::new();
    for k in [
        "delivered",
        "zero_copy",
        "corrupt",
        "misordered",
        "gaps",
        "held_checked",
        "held_changed",
        "dropped",
        "max_gap_us",
    ] {
        c.insert(k, 0);
    }
    let mut last: Option<u64> = None;
    let mut last_at: Option<Instant> = None;
    let mut whole = vec![0u8; layout.frame_size];
    loop {
        match s.next_frame(Some(Duration::from_secs(20))) {
            Ok(f) => {
                let now = Instant::now();
                if let Some(t) = last_at {
                    let gap = now.duration_since(t).as_micros() as u64;
                    let m = c.get_mut("max_gap_us").unwrap();
                    *m = (*m).max(gap);
                }
                last_at = Some(now);
                *c.get_mut("delivered").unwrap() += 1;
                let zc = f.is_zero_copy();
                *c.get_mut("zero_copy").unwrap() += zc as u64;
                if let Some(l) = last {
                    if f.seq <= l {
                        *c.get_mut("misordered").unwrap() += 1;
                        eprintln!("honest: seq {} after {l}", f.seq);
                    } else if f.seq > l + 1 && policy == Policy::StrictWait {
                        *c.get_mut("gaps").unwrap() += f.seq - l - 1;
                        eprintln!("honest: STRICT_WAIT gap {l} -> {}", f.seq);
                    }
                }
                last = Some(last.map_or(f.seq, |l| l.max(f.seq)));
                let expected = common::planes_for(&layout, f.seq);
                let ok = common::verify_any(&f, &expected, cuda.as_ref());
                if !ok {
                    *c.get_mut("corrupt").unwrap() += 1;
                    eprintln!("honest: corrupt frame {} zero_copy={zc}", f.seq);
                }
                if zc {
                    // Hold it a moment (the hostile peer keeps working meanwhile), then check
                    // that it is still the frame it was: the whole frame (host: padding
                    // included), and every plane.
                    let snapshot = |whole: &mut Vec<u8>| match &cuda {
                        Some(c) => *whole = c.dense_planes(&f).concat(),
                        None => f.copy_to(whole).unwrap(),
                    };
                    snapshot(&mut whole);
                    let hold = rng.below(300);
                    if hold > 0 {
                        std::thread::sleep(Duration::from_micros(hold));
                    }
                    let mut again = vec![0u8; whole.len()];
                    snapshot(&mut again);
                    let ok2 = common::verify_any(&f, &expected, cuda.as_ref()) && again == whole;
                    *c.get_mut("held_checked").unwrap() += 1;
                    if ok && !ok2 {
                        *c.get_mut("held_changed").unwrap() += 1;
                        eprintln!("honest: held frame {} changed", f.seq);
                    }
                } else if cuda.is_none() {
                    // A copy is ours: its bytes are all there is to check.
                    let bytes = f.bytes().expect("a COPY host frame has bytes");
                    assert_eq!(bytes.len(), layout.frame_size);
                }
                f.release();
            }
            Err(e) if e.code() == ErrorCode::Disconnected => break,
            Err(e) => {
                // The publisher gave up on us (or something else went wrong): an honest, fast
                // reader must never see this.
                *c.get_mut("dropped").unwrap() += 1;
                eprintln!("honest: next_frame: {e}");
                break;
            }
        }
    }
    let st = s.frame_stats();
    let mut line = format!(
        "RESULT torn={} overrun={}",
        st.dropped_torn, st.dropped_overrun
    );
    for (k, v) in &c {
        line += &format!(" {k}={v}");
    }
    println!("{line}");
    std::io::stdout().flush().unwrap();
}
