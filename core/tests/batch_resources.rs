//! A batch reader that outlives many publishers of its camera (each publishes, is read into
//! batches, shuts down and is reconnected to as the next one comes) holds no more file
//! descriptors or mappings at the end than after the first: every lost subscription, its
//! ring's mapping and the pooled output buffers are given back.

use std::time::{Duration, Instant};

use cuframes_core::batch::{Batch, BatchOptions, BatchOutput, BatchPolicy};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::rgb::batch::{BatchSpec, Resize};
use cuframes_core::rgb::{RgbDtype, RgbLayout};
use cuframes_core::wire::Format;
use cuframes_test_support::{count_fds, count_maps, planes_for, TestEnv};

fn next(b: &mut Batch) -> BatchOutput {
    // SAFETY: a host batch; no stream.
    unsafe { b.next(None) }.unwrap()
}

/// Call `next` until `done` says the batch is what it waits for (bounded).
fn next_until(b: &mut Batch, what: &str, done: impl Fn(&BatchOutput) -> bool) -> BatchOutput {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = next(b);
        if done(&out) {
            return out;
        }
        assert!(Instant::now() < deadline, "no batch {what} within 10 s");
        drop(out);
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One publisher's life: it comes, the batch connects and reads its frames, it shuts down
/// and the batch sees the camera lost.
fn one_publisher(env: &TestEnv, b: &mut Batch, round: usize) {
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    // Sizes change from one publisher to the next, as a restarted camera's may.
    let (w, h) = if round % 2 == 0 { (64, 48) } else { (48, 64) };
    p.enable_frames(FrameRingConfig::new(Format::Nv12, w, h))
        .unwrap();
    let layout = p.frame_layout().unwrap().clone();
    let planes = planes_for(&layout, round as u64 + 1);
    let refs: Vec<&[u8]> = planes.iter().map(Vec::as_slice).collect();
    let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
    next_until(b, "connected", |o| o.cameras[0].connected);
    next_until(b, "with the publisher's frame", |o| {
        p.publish_host_planes(&refs, &strides, None).unwrap();
        o.cameras[0].valid && o.cameras[0].source == Some((w, h, Format::Nv12))
    });
    drop(p);
    next_until(b, "without the camera", |o| !o.cameras[0].connected);
}

#[test]
fn many_publishers_of_a_camera_leave_no_descriptor_or_mapping_behind() {
    let env = TestEnv::new("bres");
    let mut subscriber = env.subscriber_options("batch");
    subscriber.connect_timeout = Duration::from_secs(2);
    let options = BatchOptions {
        subscriber,
        wait_publisher: Duration::ZERO,
        retry_interval: Duration::from_millis(10),
        policy: BatchPolicy::Latest,
    };
    let spec = BatchSpec {
        width: 32,
        height: 32,
        dtype: RgbDtype::U8,
        layout: RgbLayout::Hwc,
        resize: Resize::Letterbox,
        pad: [0.5; 3],
        normalize: None,
    };
    let mut b = Batch::open(&[env.key.as_str()], spec, options).unwrap();
    // Two rounds first: what stays for good (the pool's buffers, a thread's stack cache).
    for round in 0..2 {
        one_publisher(&env, &mut b, round);
    }
    let (fds, maps) = (count_fds(), count_maps());
    for round in 2..22 {
        one_publisher(&env, &mut b, round);
    }
    let (fds_after, maps_after) = (count_fds(), count_maps());
    // 20 publishers: a leak of one descriptor or mapping each shows as 20; a connection
    // attempt's thread may still be ending (its stack) at the moment of the count.
    assert!(fds_after <= fds + 2, "{fds} -> {fds_after} descriptors");
    assert!(maps_after <= maps + 4, "{maps} -> {maps_after} mappings");
    drop(b);
}
