//! A camera key squatted by a process that answers garbage (another local user's listener at
//! the key's socket path) costs that camera only: the batch opens, the other cameras are read,
//! and the squatted one is invalid with the reason, looked for again as a missing camera is.

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cuframes_core::batch::{Batch, BatchOptions, BatchPolicy};
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::rgb::batch::{BatchSpec, Resize};
use cuframes_core::rgb::{RgbDtype, RgbLayout};
use cuframes_core::wire::Format;
use cuframes_test_support::{planes_for, TestEnv};

#[test]
fn a_socket_answering_garbage_costs_only_its_camera() {
    let (good, squatted) = (TestEnv::new("bgood"), TestEnv::new("bjunk"));
    let p = Publisher::create(&good.key, good.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 32, 32))
        .unwrap();
    let path = good.dir.join(format!("{}.sock", squatted.key));
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let (stop, answered) = (AtomicBool::new(false), AtomicU64::new(0));
    std::thread::scope(|s| {
        s.spawn(|| {
            // Every connection gets bytes that are no protocol message, then is closed.
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut c, _)) => {
                        let _ = c.write_all(&[0xA5; 256]);
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        let mut subscriber = good.subscriber_options("batch");
        subscriber.connect_timeout = Duration::from_secs(2);
        let options = BatchOptions {
            subscriber,
            wait_publisher: Duration::from_millis(300),
            retry_interval: Duration::from_millis(20),
            policy: BatchPolicy::Latest,
        };
        let spec = BatchSpec {
            width: 16,
            height: 16,
            dtype: RgbDtype::U8,
            layout: RgbLayout::Hwc,
            resize: Resize::Stretch,
            pad: [0.0; 3],
            normalize: None,
        };
        let keys = [good.key.as_str(), squatted.key.as_str()];
        let opened = Batch::open(&keys, spec, options);
        let mut b = match opened {
            Ok(b) => b,
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                panic!("one squatted camera failed the whole batch: {e}");
            }
        };
        let layout = p.frame_layout().unwrap().clone();
        let planes = planes_for(&layout, 3);
        let refs: Vec<&[u8]> = planes.iter().map(Vec::as_slice).collect();
        let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        let out = loop {
            let seq = p.publish_host_planes(&refs, &strides, None).unwrap();
            // SAFETY: a host batch; no stream.
            let out = unsafe { b.next(None) }.unwrap();
            if out.cameras[0].valid && out.cameras[0].seq == seq {
                break out;
            }
            assert!(Instant::now() < deadline, "the good camera gave no batch");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(!out.cameras[1].valid && !out.cameras[1].connected);
        drop(out);
        // Looked for again, as a missing camera is, with the reason kept.
        let before = answered.load(Ordering::Relaxed);
        let t = Instant::now();
        while answered.load(Ordering::Relaxed) == before && t.elapsed() < Duration::from_secs(5) {
            // SAFETY: as above.
            drop(unsafe { b.next(None) }.unwrap());
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        assert!(answered.load(Ordering::Relaxed) > before, "no new attempt");
        let why = b
            .last_error(1)
            .expect("the squatted camera says why")
            .to_string();
        assert!(!why.is_empty());
    });
    let _ = std::fs::remove_file(&path);
}
