//! The batched multi-camera reader (`cuframes_core::batch`) on host rings: each assembly
//! policy, cameras that are missing, killed, restarted or hostile, mixed sizes and formats,
//! the letterbox placements, the output against `convert_batch_host` of the frames each
//! camera reported, and the reuse of pooled output buffers.

use cuframes_test_support as common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{child, planes_for, Children, TestEnv};
use cuframes_core::batch::{Batch, BatchOptions, BatchOutput, BatchPolicy};
use cuframes_core::format::FrameGeometry;
use cuframes_core::publisher::{FrameRingConfig, Publisher};
use cuframes_core::rgb::batch::{
    batch_bytes, convert_batch_host, placement, BatchSpec, HostBatchInput, Normalize, Resize,
};
use cuframes_core::rgb::{ColourMatrix, ColourRange, RgbDtype, RgbLayout};
use cuframes_core::wire::{Format, Policy, SubscriberMode};

/// Cameras in one runtime directory (the first environment's), each with its own key
/// (and its SHM objects removed with its environment).
struct Rig {
    envs: Vec<TestEnv>,
}

impl Rig {
    fn new(tag: &str, n: usize) -> Rig {
        Rig {
            envs: (0..n).map(|i| TestEnv::new(&format!("{tag}{i}"))).collect(),
        }
    }

    fn key(&self, i: usize) -> &str {
        &self.envs[i].key
    }

    fn keys(&self) -> Vec<&str> {
        self.envs.iter().map(|e| e.key.as_str()).collect()
    }

    fn publisher(&self, i: usize, format: Format, w: u32, h: u32, policy: Policy) -> Cam {
        let p = Publisher::create(self.key(i), self.envs[0].publisher_options()).unwrap();
        let mut ring = FrameRingConfig::new(format, w, h);
        ring.policy = policy;
        p.enable_frames(ring).unwrap();
        Cam {
            p,
            frames: HashMap::new(),
        }
    }

    fn options(&self, policy: BatchPolicy) -> BatchOptions {
        let mut subscriber = self.envs[0].subscriber_options("batch");
        // Zero copy where the publisher allows it (STRICT_WAIT), copies otherwise: both
        // kinds of frames go through the batch.
        subscriber.mode = SubscriberMode::ZeroCopy;
        subscriber.connect_timeout = Duration::from_secs(2);
        BatchOptions {
            subscriber,
            wait_publisher: Duration::from_secs(2),
            retry_interval: Duration::from_millis(50),
            policy,
        }
    }
}

/// A publisher and the dense planes of every frame it published, by seq.
struct Cam {
    p: Publisher,
    frames: HashMap<u64, Vec<Vec<u8>>>,
}

impl Cam {
    fn publish(&mut self, pts_ns: i64) -> u64 {
        let layout = self.p.frame_layout().unwrap().clone();
        let n = self.frames.len() as u64 + 1;
        let planes = planes_for(&layout, n * 7 + pts_ns as u64);
        let refs: Vec<&[u8]> = planes.iter().map(Vec::as_slice).collect();
        let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
        let seq = self
            .p
            .publish_host_planes(&refs, &strides, Some(pts_ns))
            .unwrap();
        self.frames.insert(seq, planes);
        seq
    }

    /// Frame `seq` laid out as in the ring (planes at their offsets and pitches).
    fn ring_bytes(&self, seq: u64) -> (Vec<u8>, FrameGeometry) {
        let layout = self.p.frame_layout().unwrap().clone();
        let mut buf = vec![0u8; layout.frame_size];
        for (plane, dense) in layout.planes().iter().zip(&self.frames[&seq]) {
            for r in 0..plane.rows {
                let from = &dense[r * plane.row_bytes..(r + 1) * plane.row_bytes];
                let at = plane.offset + r * plane.pitch;
                buf[at..at + plane.row_bytes].copy_from_slice(from);
            }
        }
        (buf, layout)
    }
}

fn spec() -> BatchSpec {
    BatchSpec {
        width: 32,
        height: 32,
        dtype: RgbDtype::F32,
        layout: RgbLayout::Chw,
        resize: Resize::Letterbox,
        pad: [0.5, 0.25, 0.75],
        normalize: Some(Normalize {
            mean: [0.1, 0.2, 0.3],
            std: [0.5, 0.6, 0.7],
        }),
    }
}

fn next(b: &mut Batch) -> BatchOutput {
    // SAFETY: host batches; no stream.
    unsafe { b.next(None) }.unwrap()
}

/// The batch `out` must be: `convert_batch_host` of the frames each valid camera reported
/// (by seq), the pad colour for the others.
fn check_output(out: &BatchOutput, cams: &[Option<&Cam>], spec: &BatchSpec) {
    let frames: Vec<Option<(Vec<u8>, FrameGeometry)>> = out
        .cameras
        .iter()
        .zip(cams)
        .map(|(info, cam)| {
            info.valid.then(|| {
                cam.expect("a valid camera has a publisher")
                    .ring_bytes(info.seq)
            })
        })
        .collect();
    let inputs: Vec<Option<HostBatchInput>> = frames
        .iter()
        .map(|f| {
            f.as_ref().map(|(buf, g)| {
                HostBatchInput::from_frame(
                    buf,
                    g.clone(),
                    ColourMatrix::Bt709,
                    ColourRange::Limited,
                )
                .unwrap()
            })
        })
        .collect();
    let mut want = vec![0u8; batch_bytes(cams.len(), spec)];
    convert_batch_host(&inputs, spec, &mut want).unwrap();
    let got = out.buffer.host_bytes().expect("a host batch");
    assert!(
        got == want.as_slice(),
        "the batch differs from the conversion of the frames it reports"
    );
}

#[test]
fn latest_takes_each_cameras_newest_frame_of_mixed_formats_and_sizes() {
    let rig = Rig::new("bl", 3);
    let mut cams = [
        rig.publisher(0, Format::Nv12, 64, 48, Policy::StrictWait),
        rig.publisher(1, Format::Yuv420p, 32, 64, Policy::DropOldest),
        rig.publisher(2, Format::P010, 48, 48, Policy::DropOldest),
    ];
    let spec = spec();
    let mut b = Batch::open(&rig.keys(), spec, rig.options(BatchPolicy::Latest)).unwrap();
    // Nothing published yet: every camera is invalid, and the batch comes at once.
    let t = Instant::now();
    let out = next(&mut b);
    assert!(t.elapsed() < Duration::from_millis(500));
    assert!(out.cameras.iter().all(|c| !c.valid && c.connected));
    check_output(&out, &[None, None, None], &spec);
    drop(out);

    for c in cams.iter_mut() {
        c.publish(1_000);
    }
    let newest = [
        cams[0].publish(2_000),
        cams[1].frames.len() as u64,
        cams[2].publish(3_000),
    ];
    let out = next(&mut b);
    let seqs: Vec<u64> = out.cameras.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, newest, "each camera's newest frame");
    assert!(out.cameras.iter().all(|c| c.valid));
    assert_eq!(out.cameras[2].pts_ns, 3_000);
    check_output(
        &out,
        &[Some(&cams[0]), Some(&cams[1]), Some(&cams[2])],
        &spec,
    );
    // Letterbox arithmetic: 64x48 fills the width of 32x32 (32x24, 4 rows above); 32x64
    // fills the height (16x32, 8 columns left); 48x48 fills it all.
    let p0 = out.cameras[0].placement.unwrap();
    assert_eq!(
        (
            p0.content_width,
            p0.content_height,
            p0.offset_x,
            p0.offset_y
        ),
        (32, 24, 0.0, 4.0)
    );
    assert_eq!((p0.scale_x, p0.scale_y), (0.5, 0.5));
    let p1 = out.cameras[1].placement.unwrap();
    assert_eq!(
        (
            p1.content_width,
            p1.content_height,
            p1.offset_x,
            p1.offset_y
        ),
        (16, 32, 8.0, 0.0)
    );
    assert_eq!(out.cameras[2].placement.unwrap(), placement(48, 48, &spec));
    assert_eq!(out.cameras[1].source, Some((32, 64, Format::Yuv420p)));
    drop(out);

    // Only camera 1 moves on: the others give their newest frame again.
    let s1 = cams[1].publish(4_000);
    let out = next(&mut b);
    let seqs: Vec<u64> = out.cameras.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, [newest[0], s1, newest[2]]);
    check_output(
        &out,
        &[Some(&cams[0]), Some(&cams[1]), Some(&cams[2])],
        &spec,
    );
    assert_eq!(b.kernel_launches(), 0, "host batches launch nothing");
}

#[test]
fn all_waits_for_every_camera_and_marks_the_late_ones_after_the_timeout() {
    let rig = Rig::new("ba", 2);
    let mut c0 = rig.publisher(0, Format::Nv12, 32, 32, Policy::StrictWait);
    let mut c1 = rig.publisher(1, Format::Nv12, 32, 32, Policy::DropOldest);
    let spec = spec();
    let timeout = Duration::from_millis(500);
    let mut b = Batch::open(&rig.keys(), spec, rig.options(BatchPolicy::All { timeout })).unwrap();

    c0.publish(10);
    let t = Instant::now();
    let out = next(&mut b);
    let took = t.elapsed();
    assert!(
        took >= timeout && took < timeout + Duration::from_millis(400),
        "{took:?}"
    );
    assert!(out.cameras[0].valid && !out.cameras[1].valid);
    check_output(&out, &[Some(&c0), None], &spec);
    drop(out);

    // Camera 1's frame comes during the wait: the batch is made as soon as it is there.
    c0.publish(20);
    let s1 = std::thread::scope(|s| {
        let late = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(60));
            c1.publish(20)
        });
        let t = Instant::now();
        let out = next(&mut b);
        let took = t.elapsed();
        let s1 = late.join().unwrap();
        assert!(
            took >= Duration::from_millis(50) && took < timeout,
            "{took:?}"
        );
        assert!(out.cameras.iter().all(|c| c.valid));
        assert_eq!(out.cameras[1].seq, s1);
        s1
    });
    let _ = s1;
    // Nothing new since: after the timeout, both are invalid (none newer than the last batch).
    let out = next(&mut b);
    assert!(out.cameras.iter().all(|c| !c.valid));
}

#[test]
fn aligned_takes_frames_within_the_window_of_the_newest() {
    let rig = Rig::new("bg", 2);
    let mut c0 = rig.publisher(0, Format::Nv12, 32, 32, Policy::DropOldest);
    let mut c1 = rig.publisher(1, Format::Nv12, 32, 32, Policy::DropOldest);
    let spec = spec();
    let policy = BatchPolicy::Aligned {
        window: Duration::from_millis(10),
        timeout: Duration::from_millis(200),
    };
    let mut b = Batch::open(&rig.keys(), spec, rig.options(policy)).unwrap();
    const MS: i64 = 1_000_000;
    c0.publish(0);
    c0.publish(40 * MS);
    let s0 = c0.publish(80 * MS);
    c1.publish(0);
    // Camera 1 lags 80 ms behind: after the timeout only camera 0 is valid.
    let t = Instant::now();
    let out = next(&mut b);
    assert!(t.elapsed() >= Duration::from_millis(200));
    assert_eq!((out.cameras[0].valid, out.cameras[0].seq), (true, s0));
    assert!(!out.cameras[1].valid);
    drop(out);
    // Both within 10 ms of each other: one batch, no wait for the timeout.
    let s0 = c0.publish(120 * MS);
    let s1 = c1.publish(125 * MS);
    let t = Instant::now();
    let out = next(&mut b);
    assert!(t.elapsed() < Duration::from_millis(150));
    assert_eq!(
        out.cameras
            .iter()
            .map(|c| (c.valid, c.seq, c.pts_ns))
            .collect::<Vec<_>>(),
        [(true, s0, 120 * MS), (true, s1, 125 * MS)]
    );
    check_output(&out, &[Some(&c0), Some(&c1)], &spec);
    drop(out);
    // The lagging camera catches up during the wait.
    c0.publish(200 * MS);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(40));
            c1.publish(150 * MS);
            std::thread::sleep(Duration::from_millis(20));
            c1.publish(198 * MS);
        });
        let out = next(&mut b);
        assert!(out.cameras.iter().all(|c| c.valid));
        assert_eq!(out.cameras[1].pts_ns, 198 * MS);
    });
}

#[test]
fn pooled_buffers_come_back_when_the_last_reference_goes() {
    let rig = Rig::new("bp", 1);
    let mut c0 = rig.publisher(0, Format::Nv12, 32, 32, Policy::DropOldest);
    let mut b = Batch::open(&rig.keys(), spec(), rig.options(BatchPolicy::Latest)).unwrap();
    // A subscriber sees the frames published after it connected.
    c0.publish(1);
    let first = next(&mut b);
    assert!(first.cameras[0].valid);
    let a = first.buffer.address();
    // Held: the next batch gets another buffer.
    let second = next(&mut b);
    assert_ne!(second.buffer.address(), a);
    let b2 = second.buffer.address();
    drop(first);
    assert_eq!(b.pooled_buffers(), 1);
    // Back in the pool: reused, with no allocation.
    let third = next(&mut b);
    assert_eq!(third.buffer.address(), a);
    assert_eq!(b.pooled_buffers(), 0);
    drop(second);
    let fourth = next(&mut b);
    assert_eq!(fourth.buffer.address(), b2);
    check_output(&fourth, &[Some(&c0)], &spec());
}

#[test]
fn a_missing_camera_is_invalid_until_its_publisher_appears_and_keeps_its_index() {
    let rig = Rig::new("bm", 2);
    let mut c0 = rig.publisher(0, Format::Nv12, 32, 32, Policy::DropOldest);
    let mut options = rig.options(BatchPolicy::Latest);
    options.wait_publisher = Duration::ZERO;
    let t = Instant::now();
    let mut b = Batch::open(&rig.keys(), spec(), options).unwrap();
    c0.publish(1);
    let out = next(&mut b);
    assert!(t.elapsed() < Duration::from_secs(1));
    assert!(out.cameras[0].valid && !out.cameras[1].valid && !out.cameras[1].connected);
    assert!(b.last_error(1).is_some());
    drop(out);
    let mut c1 = rig.publisher(1, Format::Yuv420p, 16, 16, Policy::DropOldest);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // Frames published once it has connected reach it.
        let s1 = c1.publish(5);
        let out = next(&mut b);
        if out.cameras[1].valid {
            assert_eq!(out.cameras[1].seq, s1);
            assert_eq!(out.cameras[1].key, rig.key(1));
            check_output(&out, &[Some(&c0), Some(&c1)], &spec());
            break;
        }
        assert!(Instant::now() < deadline, "camera 1 never joined");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bad_keys_and_specs_are_refused_at_open() {
    let rig = Rig::new("bk", 1);
    let o = || rig.options(BatchPolicy::Latest);
    assert!(Batch::open(&[], spec(), o()).is_err());
    assert!(Batch::open(&["../etc"], spec(), o()).is_err());
    let mut s = spec();
    s.width = 0;
    assert!(Batch::open(&rig.keys(), s, o()).is_err());
}

#[test]
fn a_socket_that_never_answers_holds_no_batch_up() {
    let rig = Rig::new("bh", 2);
    let mut c0 = rig.publisher(0, Format::Nv12, 32, 32, Policy::DropOldest);
    // A planted listener under camera 1's key: it accepts and never says a word.
    let path = rig.envs[0].dir.join(format!("{}.sock", rig.key(1)));
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let mut options = rig.options(BatchPolicy::All {
        timeout: Duration::from_millis(100),
    });
    options.wait_publisher = Duration::ZERO;
    let t = Instant::now();
    let mut b = Batch::open(&rig.keys(), spec(), options).unwrap();
    // The first attempt is waited for, and the handshake bounds it.
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let t = Instant::now();
    for _ in 0..3 {
        let seq = c0.publish(1);
        let out = next(&mut b);
        assert_eq!((out.cameras[0].valid, out.cameras[0].seq), (true, seq));
        assert!(!out.cameras[1].valid);
    }
    // Three batches, each at most its timeout: the handshakes retried with the hanging
    // listener run aside.
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

#[test]
fn batch_child() {
    let Some(role) = child::role() else { return };
    assert_eq!(role, "publisher");
    let key = std::env::var("CUFRAMES_TEST_KEY").unwrap();
    let dir = std::env::var("CUFRAMES_RUNTIME_DIR").unwrap();
    let options = cuframes_core::publisher::PublisherOptions {
        runtime_dir: Some(dir.into()),
        ..Default::default()
    };
    let p = Publisher::create(&key, options).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 32, 32))
        .unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    for n in 1u64.. {
        common::publish_pattern(&p, n, Some(n as i64)).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn start_child(rig: &Rig, i: usize) -> Child {
    let mut cmd = child::command_for("batch_child", "publisher");
    cmd.env("CUFRAMES_TEST_KEY", rig.key(i))
        .env("CUFRAMES_RUNTIME_DIR", &rig.envs[0].dir);
    let mut c = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "publisher died early"
        );
        if line.contains("READY") {
            break;
        }
    }
    c
}

#[test]
fn a_killed_camera_is_invalid_within_the_timeout_and_keeps_its_index_when_it_returns() {
    let rig = Rig::new("bd", 2);
    let mut c0 = rig.publisher(0, Format::Nv12, 32, 32, Policy::DropOldest);
    let mut children = Children(vec![start_child(&rig, 1)]);
    let timeout = Duration::from_millis(300);
    let mut b = Batch::open(
        &rig.keys(),
        spec(),
        rig.options(BatchPolicy::All { timeout }),
    )
    .unwrap();
    c0.publish(1);
    let out = next(&mut b);
    assert!(out.cameras.iter().all(|c| c.valid));
    drop(out);

    children.0[0].kill().unwrap();
    children.0[0].wait().unwrap();
    // Every batch after the kill comes within the timeout (plus the time it takes to see
    // the publisher gone), the dead camera invalid, the live one valid.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        c0.publish(2);
        let t = Instant::now();
        let out = next(&mut b);
        assert!(
            t.elapsed() < timeout + Duration::from_millis(300),
            "{:?}",
            t.elapsed()
        );
        assert!(out.cameras[0].valid);
        if !out.cameras[1].connected {
            assert!(!out.cameras[1].valid);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the killed camera still looks connected"
        );
    }
    assert!(b.last_error(1).is_some());
    // Back under the same key: the camera joins again at its index.
    children.0[0] = start_child(&rig, 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        c0.publish(3);
        let out = next(&mut b);
        if out.cameras[1].valid {
            assert_eq!(out.cameras[1].key, rig.key(1));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted camera never joined"
        );
    }
    assert_eq!(b.reconnections(1), 1);
    assert_eq!(b.reconnections(0), 0);
}

#[test]
fn zero_copy_frames_are_not_rewritten_before_the_batch_that_reads_them() {
    // A STRICT_WAIT ring of two slots, published into as fast as the batches release them:
    // a slot released before its conversion would be rewritten under it, and the batch would
    // differ from the conversion of the frame it reports.
    let rig = Rig::new("bz", 1);
    let mut cam = rig.publisher(0, Format::Yuv420p, 40, 24, Policy::StrictWait);
    let spec = spec();
    let mut b = Batch::open(&rig.keys(), spec, rig.options(BatchPolicy::Latest)).unwrap();
    let done = std::sync::atomic::AtomicBool::new(false);
    let mut made = Vec::new();
    let cam = std::thread::scope(|s| {
        let publishing = s.spawn(|| {
            for n in 0..300 {
                cam.publish(n);
                // Room for batches between the frames (a batch of every frame is not needed).
                std::thread::sleep(Duration::from_micros(300));
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            cam
        });
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            let out = next(&mut b);
            if out.cameras[0].valid {
                made.push((
                    out.cameras[0].seq,
                    out.buffer.host_bytes().unwrap().to_vec(),
                ));
            }
        }
        publishing.join().unwrap()
    });
    assert!(made.len() > 10, "only {} batches", made.len());
    for (seq, got) in made {
        let (buf, g) = cam.ring_bytes(seq);
        let input =
            HostBatchInput::from_frame(&buf, g, ColourMatrix::Bt709, ColourRange::Limited).unwrap();
        let mut want = vec![0u8; batch_bytes(1, &spec)];
        convert_batch_host(&[Some(input)], &spec, &mut want).unwrap();
        assert!(
            got == want,
            "batch of frame {seq} differs from its conversion"
        );
    }
}

#[test]
fn a_flooding_camera_holds_no_batch_up() {
    // A publisher that never stops (small frames, as fast as it can): reading up to "nothing
    // new" would never end, so a batch takes a bounded number of its frames.
    let rig = Rig::new("bf", 2);
    let quiet = rig.publisher(0, Format::Nv12, 32, 32, Policy::DropOldest);
    let flood = Publisher::create(rig.key(1), rig.envs[0].publisher_options()).unwrap();
    let mut ring = FrameRingConfig::new(Format::Nv12, 16, 16);
    ring.policy = Policy::StrictWait;
    ring.ring_size = 16;
    flood.enable_frames(ring).unwrap();
    let mut b = Batch::open(&rig.keys(), spec(), rig.options(BatchPolicy::Latest)).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let layout = flood.frame_layout().unwrap().clone();
            let planes = planes_for(&layout, 1);
            let refs: Vec<&[u8]> = planes.iter().map(Vec::as_slice).collect();
            let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = flood.publish_host_planes(&refs, &strides, None);
            }
        });
        let t = Instant::now();
        for _ in 0..20 {
            let started = Instant::now();
            let out = next(&mut b);
            assert!(
                started.elapsed() < Duration::from_millis(500),
                "{:?}",
                started.elapsed()
            );
            assert!(!out.cameras[0].valid);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(t.elapsed() < Duration::from_secs(5));
    });
    drop(quiet);
}

#[test]
fn a_camera_that_tears_every_copy_holds_no_batch_up() {
    // 64 MiB frames in 2 slots under DROP_OLDEST (so read as COPY), published as fast as
    // slots turn over: every copy is overwritten before its check. The batch gives up on the
    // camera within its read instead of retrying it forever.
    let rig = Rig::new("bt", 2);
    let mut quiet = rig.publisher(0, Format::Nv12, 32, 32, Policy::DropOldest);
    let flood = Publisher::create(rig.key(1), rig.envs[0].publisher_options()).unwrap();
    let mut ring = FrameRingConfig::new(Format::Rgba, 4096, 4096);
    ring.ring_size = 2;
    flood.enable_frames(ring).unwrap();
    let mut b = Batch::open(&rig.keys(), spec(), rig.options(BatchPolicy::Latest)).unwrap();
    quiet.publish(1);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let slot = flood.acquire().unwrap();
                flood.publish(slot, None).unwrap();
            }
        });
        s.spawn(move || {
            let started = Instant::now();
            let out = next(&mut b);
            let _ = tx.send((out.cameras[0].valid, started.elapsed()));
            drop(out);
            drop(b);
        });
        // Bounded: a batch stuck on the camera fails the test (the flood stops, so its
        // reader then ends too).
        let got = rx.recv_timeout(Duration::from_secs(10));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (quiet_valid, took) = got.expect("the batch was still reading after 10 s");
        assert!(quiet_valid, "the quiet camera's frame is in the batch");
        assert!(took < Duration::from_secs(1), "the batch took {took:?}");
    });
    drop(quiet);
}

#[test]
fn a_ring_replaced_with_another_size_and_format_is_followed_at_the_same_index() {
    let rig = Rig::new("br", 2);
    let mut c0 = rig.publisher(0, Format::Nv12, 64, 48, Policy::DropOldest);
    let mut c1 = rig.publisher(1, Format::Nv12, 32, 32, Policy::DropOldest);
    let spec = spec();
    let mut b = Batch::open(&rig.keys(), spec, rig.options(BatchPolicy::Latest)).unwrap();
    c0.publish(1);
    c1.publish(1);
    let out = next(&mut b);
    assert!(out.cameras.iter().all(|c| c.valid));
    assert_eq!(out.cameras[0].source, Some((64, 48, Format::Nv12)));
    drop(out);
    // Camera 0's publisher changes its ring: another size and format.
    c0.p.replace_frames(FrameRingConfig::new(Format::Yuv420p, 24, 40))
        .unwrap();
    c0.frames.clear();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        c0.publish(2);
        c1.publish(2);
        let out = next(&mut b);
        if out.cameras[0].valid && out.cameras[0].source == Some((24, 40, Format::Yuv420p)) {
            assert_eq!(out.cameras[0].placement, Some(placement(24, 40, &spec)));
            check_output(&out, &[Some(&c0), Some(&c1)], &spec);
            break;
        }
        assert!(Instant::now() < deadline, "the new ring was never followed");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(b.is_connected(0));
}

#[test]
fn next_unless_stops_a_long_wait_when_asked() {
    // A connected camera that publishes nothing, under a 30 s "all": the wait ends within a
    // slice of `stop` saying so, without a batch; a later batch still comes.
    let rig = Rig::new("bs", 1);
    let mut cam = rig.publisher(0, Format::Nv12, 32, 32, Policy::DropOldest);
    let timeout = Duration::from_secs(30);
    let mut b = Batch::open(
        &rig.keys(),
        spec(),
        rig.options(BatchPolicy::All { timeout }),
    )
    .unwrap();
    let t = Instant::now();
    let mut asked = 0;
    let mut stop = || {
        asked += 1;
        t.elapsed() >= Duration::from_millis(200)
    };
    // SAFETY: a host batch; no stream.
    let got = unsafe { b.next_unless(None, &mut stop) }.unwrap();
    assert!(got.is_none(), "a batch without a frame");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    assert!(asked >= 2, "asked {asked} times");
    cam.publish(1);
    let out = next(&mut b);
    assert!(out.cameras[0].valid);
}
