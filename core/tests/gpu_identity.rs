//! GPU identity on a GPU machine: a CUDA ring announces its GPU's UUID, a
//! subscriber finds that GPU among its own devices whatever `CUDA_VISIBLE_DEVICES` makes of
//! the numbering, and one that cannot see it is refused naming the UUID. Prints SKIPPED
//! without a GPU (the CPU-testable refusal is in `hostile_publisher.rs`).

use cuframes_test_support as common;

use std::time::Duration;

use common::{child, frame_shm_name, shm_path, TestEnv};
use cuframes_core::cuda;
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher};
use cuframes_core::subscriber::{Subscriber, SubscriberOptions};
use cuframes_core::wire::frame::FrameMeta;
use cuframes_core::wire::meta_ext::MetaExt;
use cuframes_core::wire::Format;
use zerocopy::FromBytes;

/// Child: subscribe to `CUFRAMES_TEST_KEY` (device from `CUFRAMES_TEST_DEVICE`) and report.
#[test]
fn uuid_child() {
    if child::role().is_none() {
        return;
    }
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let device: i32 = std::env::var("CUFRAMES_TEST_DEVICE")
        .unwrap()
        .parse()
        .unwrap();
    let opts = SubscriberOptions {
        cuda_device: device,
        connect_timeout: Duration::from_secs(10),
        ..Default::default()
    };
    match Subscriber::connect(&key, &opts) {
        Ok(mut s) => {
            let f = s.next_frame(Some(Duration::from_secs(10)));
            println!("RESULT ok device={:?} frame={}", s.cuda_device(), f.is_ok());
        }
        Err(e) => println!("RESULT err {:?} {}", e.code(), e.message()),
    }
}

fn subscriber_child(env: &TestEnv, visible: Option<&str>, device: i32) -> String {
    let mut c = child::command_for("uuid_child", "subscriber");
    child::in_env(&mut c, env).env("CUFRAMES_TEST_DEVICE", device.to_string());
    match visible {
        Some(v) => c.env("CUDA_VISIBLE_DEVICES", v),
        None => c.env_remove("CUDA_VISIBLE_DEVICES"),
    };
    let out = c.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.find("RESULT ").map(|i| l[i + 7..].to_owned()))
        .unwrap_or_else(|| panic!("child printed no RESULT: {text}"))
}

#[test]
fn subscribers_find_the_publishers_gpu_by_uuid() {
    let n = match cuda::driver_available().and_then(|_| cuda::device_count()) {
        Ok(n) if n > 0 => n,
        other => {
            eprintln!("SKIPPED (no CUDA device): {other:?}");
            return;
        }
    };
    // The publisher runs with all GPUs visible; on a machine with several, on the last one.
    let ordinal = n - 1;
    let uuid = cuda::device_uuid(ordinal).unwrap();
    let env = TestEnv::new("uuid");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    let mut cfg = FrameRingConfig::new(Format::Nv12, 256, 144);
    cfg.memory = MemoryChoice::Cuda { device: ordinal };
    p.enable_frames(cfg).unwrap();
    // The header carries the UUID too (for operators).
    let raw = std::fs::read(shm_path(&frame_shm_name(&env.key))).unwrap();
    let meta = FrameMeta::read_from_bytes(&raw[0x40..0x80]).unwrap();
    assert_eq!(MetaExt::read(&meta).gpu_uuid, Some(uuid.0));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let publisher = std::thread::spawn(move || {
        while !s2.load(std::sync::atomic::Ordering::SeqCst) {
            let slot = p.acquire().unwrap();
            p.publish(slot, None).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
    });

    // Everything visible, device unset: the publisher's ordinal.
    let r = subscriber_child(&env, None, -1);
    assert_eq!(r, format!("ok device=Some({ordinal}) frame=true"), "{r}");
    // Only that GPU visible: it is device 0 here, found by its UUID.
    let r = subscriber_child(&env, Some(&uuid.to_string()), -1);
    assert_eq!(r, "ok device=Some(0) frame=true", "{r}");
    let r = subscriber_child(&env, Some(&ordinal.to_string()), -1);
    assert_eq!(r, "ok device=Some(0) frame=true", "{r}");
    // No GPU visible: refused, naming the UUID.
    let r = subscriber_child(&env, Some(""), -1);
    assert!(
        r.starts_with("err NotFound") && r.contains(&uuid.to_string()),
        "{r}"
    );
    if n > 1 {
        // Another GPU asked for explicitly: refused naming both.
        let other = cuda::device_uuid(0).unwrap();
        let r = subscriber_child(&env, None, 0);
        assert!(
            r.starts_with("err NotFound")
                && r.contains(&uuid.to_string())
                && r.contains(&other.to_string()),
            "{r}"
        );
        // Only another GPU visible.
        let r = subscriber_child(&env, Some("0"), -1);
        assert!(
            r.starts_with("err NotFound") && r.contains("cannot see"),
            "{r}"
        );
    } else {
        eprintln!("one GPU: the explicit-other-device cases need two (see hostile_publisher)");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    publisher.join().unwrap();
}
