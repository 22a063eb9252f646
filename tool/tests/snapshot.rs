//! `cuframes snapshot KEY FILE` as a user runs it: a publisher of this test process publishes
//! pattern frames; the tool's PNG, decoded with the png crate, is bit for bit core's
//! `to_rgb_host` of the frame it names, for every ring format, with and without a colour
//! description. Then what goes wrong: no publisher, one that comes late, no frame, a
//! packet-only publisher, a file that cannot be written, a symlink planted at FILE. The CUDA
//! ring variant runs on the GPU machine (scripts/gpu-check.sh) and prints SKIPPED here.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cuframes_core::colour::{ColourInfo, MATRIX_BT470BG, RANGE_FULL};
use cuframes_core::format::FrameGeometry;
use cuframes_core::packet_ring::PacketRingConfig;
use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher};
use cuframes_core::rgb::{
    rgb_size, to_rgb_host, ColourMatrix, ColourRange, RgbDtype, RgbLayout, RgbSpec,
};
use cuframes_core::wire::{Format, CODEC_ID_H264};
use cuframes_test_support::{no_cuda, planes_for, TestEnv};

/// The tool: `$CUFRAMES_TOOL_BIN` where the test binary runs away from its build
/// (scripts/gpu-check.sh carries both to the GPU machine), else the one cargo built.
fn bin() -> std::ffi::OsString {
    std::env::var_os("CUFRAMES_TOOL_BIN")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_cuframes").into())
}
/// Every call of the tool ends within this (its own waits are shorter).
const TOOL_LIMIT: Duration = Duration::from_secs(30);

/// Run the tool with a bounded wait: killed (and the test failed) past `TOOL_LIMIT`.
fn tool(env: &TestEnv, args: &[&str]) -> Output {
    let mut child = Command::new(bin())
        .arg("--runtime-dir")
        .arg(&env.dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + TOOL_LIMIT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cuframes {args:?} ran longer than {TOOL_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A publisher thread of this process: frame `n` (1, 2, ...) holds the pattern planes of
/// seed `n`, one every 10 ms until dropped. `frames` maps each published seq to its seed.
struct Publishing {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    frames: Arc<Mutex<HashMap<u64, u64>>>,
    layout: FrameGeometry,
}

impl Publishing {
    fn start(env: &TestEnv, config: FrameRingConfig) -> Publishing {
        let stop = Arc::new(AtomicBool::new(false));
        let frames = Arc::new(Mutex::new(HashMap::new()));
        let (tx, rx) = mpsc::channel();
        let (opts, key) = (env.publisher_options(), env.key.clone());
        let (stop2, frames2) = (stop.clone(), frames.clone());
        let thread = std::thread::spawn(move || {
            let p = Publisher::create(&key, opts).unwrap();
            p.enable_frames(config).unwrap();
            let layout = p.frame_layout().unwrap().clone();
            tx.send(layout.clone()).unwrap();
            let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
            let mut seed = 1u64;
            while !stop2.load(Ordering::Relaxed) {
                let planes = planes_for(&layout, seed);
                let refs: Vec<&[u8]> = planes.iter().map(Vec::as_slice).collect();
                let seq = p
                    .publish_host_planes(&refs, &strides, Some(seed as i64 * 1_000_000))
                    .unwrap();
                frames2.lock().unwrap().insert(seq, seed);
                seed += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        let layout = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        Publishing {
            stop,
            thread: Some(thread),
            frames,
            layout,
        }
    }

    /// The frame the publisher gave seq `seq`, laid out as the ring lays it out.
    fn frame(&self, seq: u64) -> Vec<u8> {
        let seed = *self
            .frames
            .lock()
            .unwrap()
            .get(&seq)
            .unwrap_or_else(|| panic!("frame {seq} was not published"));
        let mut bytes = vec![0u8; self.layout.frame_size];
        for (p, dense) in self
            .layout
            .planes()
            .iter()
            .zip(planes_for(&self.layout, seed))
        {
            for (r, row) in dense.chunks_exact(p.row_bytes).enumerate() {
                let at = p.offset + r * p.pitch;
                bytes[at..at + row.len()].copy_from_slice(row);
            }
        }
        bytes
    }
}

impl Drop for Publishing {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Decode a PNG with the png crate: (width, height, RGB bytes); it must be 8-bit RGB.
fn decode_png(path: &Path) -> (u32, u32, Vec<u8>) {
    let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let mut reader = png::Decoder::new(file).read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(
        (info.color_type, info.bit_depth),
        (png::ColorType::Rgb, png::BitDepth::Eight)
    );
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// The seq the tool's report names ("KEY: frame SEQ (...)").
fn reported_seq(stdout: &str) -> u64 {
    let rest = stdout
        .split(": frame ")
        .nth(1)
        .unwrap_or_else(|| panic!("no frame seq in {stdout:?}"));
    rest.split_whitespace().next().unwrap().parse().unwrap()
}

fn hwc(matrix: ColourMatrix, range: ColourRange) -> RgbSpec {
    RgbSpec {
        matrix,
        range,
        dtype: RgbDtype::U8,
        layout: RgbLayout::Hwc,
    }
}

/// Snapshot a ring of `format` published with `colour` and check it bit for bit against
/// `to_rgb_host(expected)`; returns the PNG's pixels.
fn check_snapshot(
    tag: &str,
    format: Format,
    memory: MemoryChoice,
    colour: Option<ColourInfo>,
    expected: RgbSpec,
) -> Vec<u8> {
    let env = TestEnv::new(tag);
    // Odd sizes: the last 4:2:0 chroma sample of a row (and the last row's) covers one pixel.
    let (w, h) = (37, 21);
    let mut config = FrameRingConfig::new(format, w, h);
    config.memory = memory;
    config.colour = colour;
    let publishing = Publishing::start(&env, config);
    let file = env.dir.join("snap.png");
    let out = tool(&env, &["snapshot", &env.key, file.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{format:?}: {stdout}{stderr}");
    assert!(
        stdout.contains(&format!("({w}x{h} {}", format.name())),
        "{stdout}"
    );
    let seq = reported_seq(&stdout);
    let frame = publishing.frame(seq);
    drop(publishing);
    let (pw, ph, pixels) = decode_png(&file);
    assert_eq!((pw, ph), (w, h));
    let mut want = vec![0u8; rgb_size(w, h, RgbDtype::U8)];
    to_rgb_host(
        &frame,
        &FrameGeometry::new(format, w, h).unwrap(),
        &expected,
        &mut want,
    )
    .unwrap();
    assert!(
        pixels == want,
        "{format:?}: the PNG of frame {seq} is not to_rgb_host of it ({expected:?})"
    );
    // Nothing but the PNG is left in the directory (no temporary file).
    let names: Vec<String> = std::fs::read_dir(&env.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".sock") && !n.ends_with(".lock"))
        .collect();
    assert_eq!(names, ["snap.png"], "left in the runtime directory");
    pixels
}

#[test]
fn every_host_format_is_to_rgb_host_of_the_frame_bit_for_bit() {
    let default = hwc(ColourMatrix::Bt709, ColourRange::Limited);
    for format in [
        Format::Nv12,
        Format::P010,
        Format::P016,
        Format::Yuv420p,
        Format::Yuv444p,
        Format::Rgba,
        Format::Bgra,
    ] {
        check_snapshot("snapfmt", format, MemoryChoice::Host, None, default);
    }
}

/// A stream that says BT.601 full range is read so (as Python's `to_rgb` reads it), and the
/// result differs from the BT.709 limited reading, so the check can fail.
#[test]
fn the_colour_description_picks_the_matrix_and_range() {
    let described = ColourInfo {
        matrix: MATRIX_BT470BG,
        range: RANGE_FULL,
        ..ColourInfo::default()
    };
    let got = check_snapshot(
        "snapcol",
        Format::Nv12,
        MemoryChoice::Host,
        Some(described),
        hwc(ColourMatrix::Bt601, ColourRange::Full),
    );
    let env = TestEnv::new("snapcol2");
    let publishing = Publishing::start(&env, {
        let mut c = FrameRingConfig::new(Format::Nv12, 37, 21);
        c.colour = Some(described);
        c
    });
    let file = env.dir.join("again.png");
    let out = tool(&env, &["snapshot", &env.key, file.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("read as BT.601 full range"), "{stdout}");
    let frame = publishing.frame(reported_seq(&stdout));
    let mut as709 = vec![0u8; got.len()];
    let layout = FrameGeometry::new(Format::Nv12, 37, 21).unwrap();
    to_rgb_host(
        &frame,
        &layout,
        &hwc(ColourMatrix::Bt709, ColourRange::Limited),
        &mut as709,
    )
    .unwrap();
    assert_ne!(
        decode_png(&file).2,
        as709,
        "the colour description was ignored"
    );
}

/// The CUDA ring: the frame is downloaded plane by plane and converted on the host, bit for
/// bit as for a host ring. Runs on the GPU machine (scripts/gpu-check.sh).
#[test]
fn a_cuda_ring_is_downloaded_and_converted() {
    if let Some(why) = no_cuda() {
        println!("SKIPPED (no CUDA device; runs in scripts/gpu-check.sh): {why}");
        return;
    }
    let default = hwc(ColourMatrix::Bt709, ColourRange::Limited);
    for format in [Format::Nv12, Format::P010, Format::Yuv420p, Format::Bgra] {
        check_snapshot(
            "snapcuda",
            format,
            MemoryChoice::Cuda { device: 0 },
            None,
            default,
        );
    }
    println!("CUDA ring snapshots: nv12, p010, yuv420p, bgra bit-exact against to_rgb_host");
}

#[test]
fn no_publisher_is_a_clear_error_at_once_or_after_waiting() {
    let env = TestEnv::new("snapnone");
    let file = env.dir.join("snap.png");
    let started = Instant::now();
    let out = tool(&env, &["snapshot", &env.key, file.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("cannot subscribe to {}", env.key))
            && stderr.contains("--wait-publisher"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(!file.exists());
    let started = Instant::now();
    let out = tool(
        &env,
        &[
            "snapshot",
            &env.key,
            file.to_str().unwrap(),
            "--wait-publisher",
            "0.5",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert!(!file.exists());
}

/// `--wait-publisher` waits for a publisher that comes after the tool started.
#[test]
fn a_publisher_that_comes_later_is_waited_for() {
    let env = TestEnv::new("snaplate");
    let file = env.dir.join("late.png");
    let child = Command::new(bin())
        .arg("--runtime-dir")
        .arg(&env.dir)
        .args([
            "snapshot",
            &env.key,
            file.to_str().unwrap(),
            "--wait-publisher",
            "20",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Killed if the test fails before it is waited for.
    struct Reap(Option<std::process::Child>);
    impl Drop for Reap {
        fn drop(&mut self) {
            if let Some(c) = &mut self.0 {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let mut child = Reap(Some(child));
    std::thread::sleep(Duration::from_millis(400));
    let _publishing = Publishing::start(&env, FrameRingConfig::new(Format::Nv12, 16, 16));
    let deadline = Instant::now() + TOOL_LIMIT;
    let c = child.0.as_mut().unwrap();
    while c.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the snapshot never ended");
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.0.take().unwrap().wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(decode_png(&file).0, 16);
}

#[test]
fn no_frame_within_the_timeout_and_a_packet_only_publisher_are_clear_errors() {
    let env = TestEnv::new("snapidle");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_frames(FrameRingConfig::new(Format::Nv12, 16, 16))
        .unwrap();
    let file = env.dir.join("idle.png");
    let started = Instant::now();
    let out = tool(
        &env,
        &[
            "snapshot",
            &env.key,
            file.to_str().unwrap(),
            "--timeout",
            "0.3",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("no frame from {} within 0.300 s", env.key)),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(!file.exists());
    drop(p);

    let env = TestEnv::new("snappkt");
    let p = Publisher::create(&env.key, env.publisher_options()).unwrap();
    p.enable_packets(PacketRingConfig {
        codec_id: CODEC_ID_H264,
        ..PacketRingConfig::default()
    })
    .unwrap();
    let out = tool(&env, &["snapshot", &env.key, file.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("cannot subscribe to {}", env.key)),
        "{stderr}"
    );
    assert!(!file.exists());
}

/// A file that cannot be written is an error naming it; a symlink planted at FILE is
/// replaced by the PNG and what it points to is left alone; a directory at FILE is an error
/// and stays a directory. No temporary file is left behind.
#[test]
fn unwritable_files_and_planted_symlinks() {
    let env = TestEnv::new("snapfile");
    let _publishing = Publishing::start(&env, FrameRingConfig::new(Format::Nv12, 16, 16));
    let out_dir = env.dir.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let missing = out_dir.join("no-such-dir").join("snap.png");
    let out = tool(&env, &["snapshot", &env.key, missing.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("cannot write {}", missing.display())),
        "{stderr}"
    );

    let precious = out_dir.join("precious");
    std::fs::write(&precious, b"not a png").unwrap();
    let link = out_dir.join("snap.png");
    std::os::unix::fs::symlink(&precious, &link).unwrap();
    let out = tool(&env, &["snapshot", &env.key, link.to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert_eq!(std::fs::read(&precious).unwrap(), b"not a png");
    assert!(!std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert_eq!(decode_png(&link).0, 16);

    let dir_at_file = out_dir.join("a-directory");
    std::fs::create_dir(&dir_at_file).unwrap();
    let out = tool(&env, &["snapshot", &env.key, dir_at_file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(dir_at_file.is_dir());
    let mut left: Vec<PathBuf> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    left.sort();
    assert_eq!(left, [dir_at_file, precious, link]);
}

/// Hostile sockets at the key: one that takes connections into its backlog and never answers,
/// one that never accepts (a full backlog). The snapshot gives up within its `--timeout` with
/// a clear error, and writes nothing.
#[test]
fn a_silent_or_never_accepting_socket_at_the_key_ends_within_the_timeout() {
    use cuframes_test_support::squat_never_accepting;
    let silent = TestEnv::new("snapsilent");
    let at = |env: &TestEnv| {
        cuframes_core::paths::socket_path(&env.dir, &cuframes_core::Key::new(&env.key).unwrap())
            .unwrap()
    };
    let _listener = std::os::unix::net::UnixListener::bind(at(&silent)).unwrap();
    let full = TestEnv::new("snapfull");
    let _squatter = squat_never_accepting(&full.dir.join(".squat"), &at(&full));
    for env in [&silent, &full] {
        let file = env.dir.join("snap.png");
        let started = Instant::now();
        let out = tool(
            env,
            &[
                "snapshot",
                &env.key,
                file.to_str().unwrap(),
                "--timeout",
                "0.5",
            ],
        );
        let took = started.elapsed();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert!(
            stderr.contains(&format!("cannot subscribe to {}", env.key)),
            "{stderr}"
        );
        assert!(took < Duration::from_secs(5), "took {took:?}: {stderr}");
        assert!(!file.exists());
        println!("{}: gave up after {took:?}: {}", env.key, stderr.trim());
    }
}

/// A ring that changes size (and format) under the snapshot: the publisher swaps between a
/// 32x18 NV12 ring and a 21x13 YUV420P one every 40 ms, each generation's frames holding the
/// pattern of its own geometry. Every snapshot is a whole frame of one generation: its size
/// is the one reported, and its pixels are `to_rgb_host` of that generation's frame.
#[test]
fn a_ring_that_changes_size_gives_whole_frames_of_one_generation() {
    let env = TestEnv::new("snapresize");
    let geometries = [(Format::Nv12, 32, 18), (Format::Yuv420p, 21, 13)];
    let seed_of = |w: u32| u64::from(w) * 7;
    let stop = Arc::new(AtomicBool::new(false));
    let (opts, key, stop2) = (env.publisher_options(), env.key.clone(), stop.clone());
    let (tx, rx) = mpsc::channel();
    let publisher = std::thread::spawn(move || {
        let p = Publisher::create(&key, opts).unwrap();
        p.enable_frames(FrameRingConfig::new(Format::Nv12, 32, 18))
            .unwrap();
        tx.send(()).unwrap();
        let mut generation = 0usize;
        while !stop2.load(Ordering::Relaxed) {
            let (format, w, h) = geometries[generation % 2];
            if generation > 0 {
                p.replace_frames(FrameRingConfig::new(format, w, h))
                    .unwrap();
            }
            let layout = p.frame_layout().unwrap();
            let planes = planes_for(&layout, seed_of(w));
            let refs: Vec<&[u8]> = planes.iter().map(Vec::as_slice).collect();
            let strides: Vec<usize> = layout.planes().iter().map(|p| p.row_bytes).collect();
            for _ in 0..4 {
                p.publish_host_frame(&layout, &refs, &strides, None)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(10));
            }
            generation += 1;
        }
    });
    struct Stop(Arc<AtomicBool>, Option<JoinHandle<()>>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
            if let Some(t) = self.1.take() {
                let _ = t.join();
            }
        }
    }
    let _stop = Stop(stop, Some(publisher));
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..12 {
        let file = env.dir.join(format!("snap{i}.png"));
        let out = tool(&env, &["snapshot", &env.key, file.to_str().unwrap()]);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}{stderr}");
        let (w, h, pixels) = decode_png(&file);
        let &(format, _, _) = geometries
            .iter()
            .find(|g| (g.1, g.2) == (w, h))
            .unwrap_or_else(|| panic!("a {w}x{h} snapshot: no generation has that size"));
        assert!(
            stdout.contains(&format!("({w}x{h} {}", format.name())),
            "{stdout}"
        );
        let layout = FrameGeometry::new(format, w, h).unwrap();
        let mut frame = vec![0u8; layout.frame_size];
        for (p, dense) in layout.planes().iter().zip(planes_for(&layout, seed_of(w))) {
            for (r, row) in dense.chunks_exact(p.row_bytes).enumerate() {
                let at = p.offset + r * p.pitch;
                frame[at..at + row.len()].copy_from_slice(row);
            }
        }
        let mut want = vec![0u8; rgb_size(w, h, RgbDtype::U8)];
        let spec = hwc(ColourMatrix::Bt709, ColourRange::Limited);
        to_rgb_host(&frame, &layout, &spec, &mut want).unwrap();
        assert!(
            pixels == want,
            "snapshot {i} ({w}x{h}) is not its generation's frame"
        );
        seen.insert((w, h));
    }
    println!("12 snapshots across ring generations, sizes seen: {seen:?}");
}

/// A publisher announcing the largest frames a ring allows (16384x16384 NV12, 400 MB a slot):
/// the snapshot refuses it with the limit in
/// words before it makes any host buffer (about 2 GB for the frame and its RGB image), ends
/// at once and writes nothing; the tool's peak memory is the ring it maps and little more.
#[test]
fn a_frame_larger_than_the_snapshot_limit_is_refused_before_any_copy() {
    let env = TestEnv::new("snaphuge");
    let stop = Arc::new(AtomicBool::new(false));
    let (opts, key, stop2) = (env.publisher_options(), env.key.clone(), stop.clone());
    let (tx, rx) = mpsc::channel();
    let publisher = std::thread::spawn(move || {
        let p = Publisher::create(&key, opts).unwrap();
        let mut config = FrameRingConfig::new(Format::Nv12, 16384, 16384);
        config.ring_size = 2;
        p.enable_frames(config).unwrap();
        tx.send(()).unwrap();
        while !stop2.load(Ordering::Relaxed) {
            let slot = p.acquire().unwrap();
            p.publish(slot, None).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let file = env.dir.join("huge.png");
    let started = Instant::now();
    // Reaped by the wait4 below, which also gives its peak memory.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new(bin())
        .arg("--runtime-dir")
        .arg(&env.dir)
        .args(["snapshot", &env.key, file.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    // SAFETY: rusage is plain integers and timevals, for which all zero bytes are valid.
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    loop {
        // SAFETY: `status` and `usage` are valid for writes; the pid is this test's child,
        // reaped here (WNOHANG polls, so the wait stays bounded).
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(r >= 0, "wait4: {}", std::io::Error::last_os_error());
        if r == pid {
            break;
        }
        if started.elapsed() > TOOL_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            stop.store(true, Ordering::Relaxed);
            panic!("cuframes snapshot of a 16384x16384 ring ran longer than {TOOL_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (mut stdout, mut stderr) = (String::new(), String::new());
    use std::io::Read;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    publisher.join().unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 1,
        "{status:#x} {stdout}{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "the frames of {} are 16384x16384 (268435456 pixels)",
            env.key
        )) && stderr.contains("at most 67108864 pixels (8192x8192)"),
        "{stderr}"
    );
    assert!(!file.exists());
    // ru_maxrss is in KiB and counts the ring's two slots the reader maps (393216 KiB each);
    // a copy of a frame and its RGB image would add 1179648 KiB.
    let ring = 2 * 393_216;
    assert!(
        usage.ru_maxrss < ring + 200 * 1024,
        "peak RSS {} KiB",
        usage.ru_maxrss
    );
}

/// A snapshot killed while it writes its file (SIGKILL, or Ctrl-C, whose default action
/// ends the tool) leaves FILE as it was and nothing else in its directory: the image is
/// written to a file without a name, which gets one only once it is whole.
#[test]
fn a_snapshot_killed_while_writing_leaves_no_temporary_file() {
    let env = TestEnv::new("snapkill");
    // 8192x8192, the largest frame a snapshot converts: its PNG takes seconds to write.
    let stop = Arc::new(AtomicBool::new(false));
    let (opts, key, stop2) = (env.publisher_options(), env.key.clone(), stop.clone());
    let (tx, rx) = mpsc::channel();
    let publisher = std::thread::spawn(move || {
        let p = Publisher::create(&key, opts).unwrap();
        let mut config = FrameRingConfig::new(Format::Nv12, 8192, 8192);
        config.ring_size = 2;
        p.enable_frames(config).unwrap();
        tx.send(()).unwrap();
        while !stop2.load(Ordering::Relaxed) {
            let slot = p.acquire().unwrap();
            p.publish(slot, None).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let out_dir = env.dir.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let file = out_dir.join("snap.png");
    std::fs::write(&file, b"the old image").unwrap();
    for signal in [libc::SIGKILL, libc::SIGINT] {
        let mut cmd = Command::new(bin());
        cmd.arg("--runtime-dir")
            .arg(&env.dir)
            .args(["snapshot", &env.key, file.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SIGINT at its default in the tool: a suite run in the background by a
        // non-interactive shell inherits it ignored, and so would the tool.
        // SAFETY: between fork and exec only signal(2), which is async-signal-safe.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        // The file is being written once the tool has an open file in the directory (by
        // name, or unnamed: /proc/PID/fd shows "out/#NUMBER (deleted)" for O_TMPFILE).
        let started = Instant::now();
        let writing = loop {
            let open_here = std::fs::read_dir(format!("/proc/{}/fd", child.id()))
                .into_iter()
                .flatten()
                .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .any(|p| p.starts_with(&out_dir));
            if open_here || child.try_wait().unwrap().is_some() {
                break open_here;
            }
            if started.elapsed() > TOOL_LIMIT {
                break false;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, signal) };
        let status = child.wait().unwrap();
        assert!(
            writing,
            "the tool never opened a file in {}",
            out_dir.display()
        );
        assert!(!status.success(), "{status:?}");
        let left: Vec<_> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["snap.png"], "after signal {signal}");
        assert_eq!(std::fs::read(&file).unwrap(), b"the old image");
    }
    stop.store(true, Ordering::Relaxed);
    publisher.join().unwrap();
}
