//! FFmpeg frame path on the host-memory ring (CI): testsrc through `hwupload_cuframes` and
//! back through `-f cuframes` gives the framemd5 of the direct path, for every pixel format
//! the ring carries, under both policies, with 8 readers at once. Skipped without a cuframes
//! FFmpeg build (scripts/build-ffmpeg.sh).

use std::time::Duration;

use cuframes_core::publisher::{FrameRingConfig, MemoryChoice, Publisher, PublisherOptions};
use cuframes_core::wire::{Format, Policy};
use cuframes_test_support::ffmpeg::{find, frame_lines, Scratch};
use cuframes_test_support::{no_cuda, publish_pattern, wait_until};

const FORMATS: [&str; 7] = [
    "nv12", "yuv420p", "p010le", "p016le", "yuv444p", "rgba", "bgra",
];
const READERS: usize = 8;
const FRAMES: usize = 8;
const SIZE: &str = "64x48";

/// 8 frames at 25 fps (a duration, not -frames:v: the filter graph would run one frame more
/// than the output keeps).
fn testsrc() -> String {
    format!("testsrc=s={SIZE}:r=25:d=0.32")
}

/// framemd5 of the direct path: testsrc -> format -> framemd5.
fn direct(env: &Scratch, fmt: &str, out: &str) -> String {
    let path = env.path(out);
    let (ok, err) = env.ffmpeg(
        out,
        &[
            "-f",
            "lavfi",
            "-i",
            &testsrc(),
            "-vf",
            &format!("format={fmt}"),
            "-f",
            "framemd5",
            path.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert!(ok, "direct path failed: {err}");
    std::fs::read_to_string(path).unwrap()
}

/// Publish with `policy` while READERS `-f cuframes` processes write framemd5 files; returns
/// the readers' files.
fn through_ring(env: &Scratch, fmt: &str, policy: &str) -> Vec<String> {
    let key = env.key(&format!("{}{}", &fmt[..3], &policy[..1]));
    let ring = if policy == "strict_wait" { "2" } else { "16" };
    let mut readers = Vec::new();
    for r in 0..READERS {
        let out = env.path(&format!("{key}-{r}.md5"));
        let log = format!("{key}-{r}");
        let i = env.spawn_ffmpeg(
            &log,
            &[
                "-f",
                "cuframes",
                "-framerate",
                "25",
                "-wait_publisher",
                "30",
                "-read_timeout",
                "30",
                "-name",
                &format!("reader{r}"),
                "-i",
                &key,
                "-f",
                "framemd5",
                out.to_str().unwrap(),
            ],
        );
        readers.push((i, out, log));
    }
    // -re lets FFmpeg's initial burst (0.5 s, all 8 frames) through at once: under drop_oldest
    // nobody waits for the readers, and a ring of 16 slots holds every frame for them.
    let filter = format!(
        "format={fmt},hwupload_cuframes=key={key}:memory=host:policy={policy}:ring_size={ring}:\
         ack_timeout=10:wait_subscribers={READERS}:wait_timeout=30"
    );
    let pub_log = format!("{key}-pub");
    let p = env.spawn_ffmpeg(
        &pub_log,
        &[
            "-re",
            "-f",
            "lavfi",
            "-i",
            &testsrc(),
            "-vf",
            &filter,
            "-f",
            "null",
            "-",
        ],
    );
    let ok = env.wait(p, Duration::from_secs(60)).success();
    let log = env.stderr(&pub_log);
    assert!(ok, "publisher ({fmt}, {policy}) failed:\n{log}");
    assert!(log.contains("host memfd"), "expected a host ring:\n{log}");
    let mut files = Vec::new();
    for (i, out, log) in readers {
        let ok = env.wait(i, Duration::from_secs(30)).success();
        let text = env.stderr(&log);
        assert!(ok, "reader ({fmt}, {policy}) failed:\n{text}");
        files.push(std::fs::read_to_string(out).unwrap());
    }
    files
}

fn check_format(fmt: &str) {
    let Some(ff) = find() else { return };
    let env = Scratch::new(&ff, fmt);
    let want = direct(&env, fmt, "direct.md5");
    let want_frames = frame_lines(&want);
    assert_eq!(want_frames.len(), FRAMES);
    for policy in ["strict_wait", "drop_oldest"] {
        for (r, got) in through_ring(&env, fmt, policy).iter().enumerate() {
            assert_eq!(
                frame_lines(got),
                want_frames,
                "{fmt} {policy} reader {r}: framemd5 differs from the direct path\n\
                 direct:\n{want}\nthrough the ring:\n{got}"
            );
        }
    }
}

#[test]
fn roundtrip_nv12() {
    check_format(FORMATS[0]);
}
#[test]
fn roundtrip_yuv420p() {
    check_format(FORMATS[1]);
}
#[test]
fn roundtrip_p010le() {
    check_format(FORMATS[2]);
}
#[test]
fn roundtrip_p016le() {
    check_format(FORMATS[3]);
}
#[test]
fn roundtrip_yuv444p() {
    check_format(FORMATS[4]);
}
#[test]
fn roundtrip_rgba() {
    check_format(FORMATS[5]);
}
#[test]
fn roundtrip_bgra() {
    check_format(FORMATS[6]);
}

/// Size and format changes: a source that changes size twice mid-stream (a camera
/// switching resolution) makes `hwupload_cuframes` publish a new ring generation each time;
/// every reader follows: its frames take the new size. A reader with `-reinit_filter 0`
/// passes them on as they are and its framemd5 (sizes and hashes of every frame) equals the
/// direct path's; a reader with ffmpeg's defaults reconfigures its filter graph on each change
/// and scales to the size its output was opened with, exactly as the direct path followed by
/// that scale. The first change is not an error that ends the readers' streams.
#[test]
fn size_changes_make_new_ring_generations_that_readers_follow() {
    let Some(ff) = find() else { return };
    let env = Scratch::new(&ff, "resize");
    // 64x48 for frames 0-1, 80x40 for 2-4, 48x32 after (scale counts n from its first output).
    let chain = "scale=w='if(lt(n\\,3)\\,64\\,if(lt(n\\,6)\\,80\\,48))':\
                 h='if(lt(n\\,3)\\,48\\,if(lt(n\\,6)\\,40\\,32))':eval=frame,format=nv12";
    let src = "testsrc=s=64x48:r=25:d=0.36";
    let direct = |name: &str, vf: &str| {
        let path = env.path(&format!("{name}.md5"));
        let args = ["-f", "lavfi", "-i", src, "-vf", vf, "-f", "framemd5"];
        let mut args: Vec<&str> = args.to_vec();
        args.push(path.to_str().unwrap());
        env.ffmpeg_ok(name, &args);
        std::fs::read_to_string(&path).unwrap()
    };
    let want = direct("direct", chain);
    let want_lines = frame_lines(&want);
    let sizes: std::collections::BTreeSet<&str> = want_lines
        .iter()
        .map(|l| l.split(',').nth(4).unwrap().trim())
        .collect();
    assert_eq!(sizes.len(), 3, "the source must change size twice:\n{want}");
    let want_scaled = frame_lines(&direct("direct-scaled", &format!("{chain},scale=64:48")));
    for policy in ["strict_wait", "drop_oldest"] {
        let key = env.key(&format!("resize{}", &policy[..1]));
        let mut readers = Vec::new();
        for reinit in ["0", "1"] {
            let out = env.path(&format!("{key}-{reinit}.md5"));
            let log = format!("{key}-{reinit}");
            let p = env.spawn_ffmpeg(
                &log,
                &[
                    "-reinit_filter",
                    reinit,
                    "-f",
                    "cuframes",
                    "-framerate",
                    "25",
                    "-wait_publisher",
                    "30",
                    "-read_timeout",
                    "30",
                    "-i",
                    &key,
                    "-f",
                    "framemd5",
                    out.to_str().unwrap(),
                ],
            );
            readers.push((p, out, log, reinit));
        }
        let pub_log = format!("{key}-pub");
        // Real time: -re with an initial burst of 1 ms (FFmpeg's default burst, 0.5 s, is the
        // whole source, and 0 means that default). Under drop_oldest nobody waits, and a
        // reader follows a new ring only while its generation lasts (in a burst of 9 frames
        // readers skipped the middle one). At 25 fps each generation lasts 80-160 ms;
        // following one takes about a millisecond.
        let publisher = env.spawn_ffmpeg(
            &pub_log,
            &[
                "-re",
                "-readrate_initial_burst",
                "0.001",
                "-f",
                "lavfi",
                "-i",
                src,
                "-vf",
                &format!(
                    "{chain},hwupload_cuframes=key={key}:memory=host:policy={policy}:\
                     ring_size=16:ack_timeout=10:wait_subscribers=2:wait_timeout=30"
                ),
                "-f",
                "null",
                "-",
            ],
        );
        let ok = env.wait(publisher, Duration::from_secs(60)).success();
        let log = env.stderr(&pub_log);
        assert!(ok, "publisher ({policy}) failed:\n{log}");
        assert!(
            log.contains("published a new ring generation")
                && log.contains("2 new ring generations"),
            "two new generations expected:\n{log}"
        );
        for (p, out, log, reinit) in readers {
            let ok = env.wait(p, Duration::from_secs(30)).success();
            let text = env.stderr(&log);
            assert!(ok, "reader ({policy}) failed:\n{text}");
            assert!(text.contains("the publisher's ring changed"), "{text}");
            let got = std::fs::read_to_string(out).unwrap();
            let (expected, what) = if reinit == "0" {
                (&want_lines, "the direct path")
            } else {
                (&want_scaled, "the direct path scaled to 64x48")
            };
            assert_eq!(
                &frame_lines(&got),
                expected,
                "{policy}, -reinit_filter {reinit}: framemd5 through the ring differs from \
                 {what}\ndirect:\n{want}\nring:\n{got}\n{text}"
            );
        }
    }
}

/// The options are documented in `ffmpeg -h`.
#[test]
fn options_are_documented() {
    let Some(ff) = find() else { return };
    let env = Scratch::new(&ff, "help");
    let help = |log: &str, what: &str| {
        let (ok, err) = env.ffmpeg(log, &["-h", what], Duration::from_secs(30));
        assert!(ok, "ffmpeg -h {what}: {err}");
        env.stdout(log)
    };
    let f = help("filter-help", "filter=hwupload_cuframes");
    for opt in [
        "key",
        "ring_size",
        "policy",
        "strict_wait",
        "ack_timeout",
        "memory",
        "device",
        "wait_subscribers",
        "wait_timeout",
    ] {
        assert!(f.contains(opt), "filter help lacks {opt}:\n{f}");
    }
    let d = help("device-help", "demuxer=cuframes");
    for opt in [
        "mode",
        "zero_copy",
        "output",
        "software",
        "framerate",
        "wait_publisher",
        "handshake_timeout",
        "read_timeout",
        "reconnect",
        "spin",
        "wait_publisher_exit",
    ] {
        assert!(d.contains(opt), "device help lacks {opt}:\n{d}");
    }
}

/// Without a publisher the device fails after its connect timeout, with cuframes' reason.
#[test]
fn missing_publisher_is_a_clear_error() {
    let Some(ff) = find() else { return };
    let env = Scratch::new(&ff, "nopub");
    let key = env.key("nopub");
    let (ok, err) = env.ffmpeg(
        "nopub",
        &[
            "-f",
            "cuframes",
            "-wait_publisher",
            "0.2",
            "-i",
            &key,
            "-f",
            "null",
            "-",
        ],
        Duration::from_secs(30),
    );
    assert!(!ok);
    assert!(err.contains("Cannot subscribe"), "{err}");
}

/// Metadata downstream: sample aspect ratio, range, primaries, transfer and matrix go through
/// the ring. The whole framemd5, headers (`#sar`) included, equals the direct path's (not a
/// `#sar` of 0/1 with every tag "unknown"), and a BT.709 and a BT.601 source keep their tags
/// frame by frame (`ffprobe -show_frames` of what a reader records).
#[test]
fn colour_tags_and_aspect_ratio_survive_the_ring() {
    let Some(ff) = find() else { return };
    let env = Scratch::new(&ff, "colour");
    let cases = [
        // (name, setsar, setparams, what ffprobe must show)
        (
            "709",
            "16/11",
            "range=tv:color_primaries=bt709:color_trc=bt709:colorspace=bt709",
            ["tv", "bt709", "bt709", "bt709", "16:11"],
        ),
        (
            "601",
            "10/11",
            "range=pc:color_primaries=smpte170m:color_trc=smpte170m:colorspace=smpte170m",
            ["pc", "smpte170m", "smpte170m", "smpte170m", "10:11"],
        ),
    ];
    for (name, sar, params, want_tags) in cases {
        let chain = format!("setsar={sar},setparams={params},format=yuv420p");
        let direct_md5 = env.path(&format!("{name}-direct.md5"));
        env.ffmpeg_ok(
            &format!("{name}-direct"),
            &[
                "-f",
                "lavfi",
                "-i",
                &testsrc(),
                "-vf",
                &chain,
                "-f",
                "framemd5",
                direct_md5.to_str().unwrap(),
            ],
        );
        let key = env.key(&format!("col{name}"));
        let md5 = env.path(&format!("{name}-ring.md5"));
        let mkv = env.path(&format!("{name}-ring.mkv"));
        let reader = |log: &str, out: &[&str]| {
            let mut args = vec![
                "-f",
                "cuframes",
                "-framerate",
                "25",
                "-wait_publisher",
                "30",
                "-read_timeout",
                "30",
                "-i",
                &key,
            ];
            args.extend_from_slice(out);
            env.spawn_ffmpeg(log, &args)
        };
        let r_md5 = reader(
            &format!("{name}-r-md5"),
            &["-f", "framemd5", md5.to_str().unwrap()],
        );
        let r_mkv = reader(
            &format!("{name}-r-mkv"),
            &["-c:v", "rawvideo", "-f", "matroska", mkv.to_str().unwrap()],
        );
        let publisher = env.spawn_ffmpeg(
            &format!("{name}-pub"),
            &[
                "-f",
                "lavfi",
                "-i",
                &testsrc(),
                "-vf",
                &format!(
                    "{chain},hwupload_cuframes=key={key}:memory=host:policy=strict_wait:\
                     ack_timeout=10:wait_subscribers=2:wait_timeout=30"
                ),
                "-f",
                "null",
                "-",
            ],
        );
        env.wait_ok(publisher, Duration::from_secs(60));
        env.wait_ok(r_md5, Duration::from_secs(30));
        env.wait_ok(r_mkv, Duration::from_secs(30));
        let want = std::fs::read_to_string(&direct_md5).unwrap();
        let got = std::fs::read_to_string(&md5).unwrap();
        assert!(want.contains(&format!("#sar 0: {sar}")), "{want}");
        assert_eq!(
            got, want,
            "{name}: framemd5 through the ring, headers included"
        );
        let frames = env.ffprobe_ok(
            &format!("{name}-probe"),
            &[
                "-v",
                "error",
                "-show_frames",
                "-show_entries",
                "frame=color_range,color_primaries,color_transfer,color_space,sample_aspect_ratio",
                "-of",
                "csv=p=0",
                mkv.to_str().unwrap(),
            ],
            Duration::from_secs(30),
        );
        let lines: Vec<&str> = frames.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), FRAMES, "{name}: {frames}");
        for l in lines {
            let mut fields: Vec<&str> = l.split(',').collect();
            fields.sort_unstable();
            let mut want: Vec<&str> = want_tags.to_vec();
            want.sort_unstable();
            assert_eq!(fields, want, "{name}: frame tags {l:?}");
        }
    }
}

/// Frames each ring of `through_replaced_ring` carries.
const PER_RING: usize = 4;

/// One `-f cuframes` reader of `through_replaced_ring`: input options (before `-i`) and
/// output options (before `-f framemd5`).
type Reader<'a> = (&'a [&'a str], &'a [&'a str]);

/// A ring moved between host and CUDA memory: a publisher in this process (STRICT_WAIT, so nothing is lost) publishes
/// PER_RING NV12 frames in a ring of `first` memory, 64x48, then replaces it by a ring of
/// `second` memory and size and publishes as many again; each reader writes framemd5. Returns
/// each reader's (frame size, hash) per frame and its log; every reader must end cleanly.
fn through_replaced_ring(
    env: &Scratch,
    name: &str,
    first: MemoryChoice,
    second: (MemoryChoice, u32, u32),
    readers: &[Reader],
) -> Vec<(Vec<(String, String)>, String)> {
    let key = env.key(name);
    let procs: Vec<_> = readers
        .iter()
        .enumerate()
        .map(|(r, (input, output))| {
            let out = env.path(&format!("{name}-{r}.md5"));
            let log = format!("{name}-{r}");
            let mut args = vec![
                "-f",
                "cuframes",
                "-wait_publisher",
                "30",
                "-read_timeout",
                "30",
            ];
            args.extend_from_slice(input);
            args.extend_from_slice(&["-i", &key]);
            args.extend_from_slice(output);
            args.extend_from_slice(&["-f", "framemd5", out.to_str().unwrap()]);
            (env.spawn_ffmpeg(&log, &args), out, log)
        })
        .collect();
    let config = |memory: MemoryChoice, w: u32, h: u32| {
        let mut c = FrameRingConfig::new(Format::Nv12, w, h);
        c.memory = memory;
        c.policy = Policy::StrictWait;
        c.ring_size = PER_RING;
        c.ack_timeout = Duration::from_secs(10);
        c
    };
    let p = Publisher::create(
        &key,
        PublisherOptions {
            runtime_dir: Some(env.dir.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    p.enable_frames(config(first, 64, 48)).unwrap();
    wait_until("the readers", Duration::from_secs(30), || {
        p.ready_subscriber_count() == readers.len()
    });
    // One clock over both rings (the frame seqs restart at 1 in the new ring).
    let mut pts = 0;
    for ring in 0..2 {
        if ring == 1 {
            let (memory, w, h) = second;
            p.replace_frames(config(memory, w, h)).unwrap();
        }
        for seq in 1..=PER_RING as u64 {
            pts += 40_000_000;
            publish_pattern(&p, seq, Some(pts)).unwrap();
        }
    }
    drop(p); // the end: readers drain, then EOF
    procs
        .into_iter()
        .map(|(proc, out, log)| {
            env.wait_ok(proc, Duration::from_secs(60));
            let text = std::fs::read_to_string(out).unwrap();
            let frames = frame_lines(&text)
                .iter()
                .map(|l| {
                    let f: Vec<&str> = l.split(',').map(str::trim).collect();
                    (f[4].to_owned(), f[5].to_owned())
                })
                .collect();
            (frames, env.stderr(&log))
        })
        .collect()
}

/// A host ring replaced by a host ring of another size: every frame of both, with its own
/// size. (CI; the other memory kinds need a GPU: the tests below.)
#[test]
fn a_replaced_host_ring_of_another_size_is_followed() {
    let Some(ff) = find() else { return };
    let env = Scratch::new(&ff, "hosthost");
    let host = MemoryChoice::Host;
    // -reinit_filter 0: the frames as they come (ffmpeg would scale them to the first size).
    let readers: [Reader; 2] = [
        (&["-reinit_filter", "0"], &[]),
        (&["-reinit_filter", "0", "-mode", "copy"], &[]),
    ];
    for (r, (frames, log)) in through_replaced_ring(&env, "hh", host, (host, 80, 40), &readers)
        .into_iter()
        .enumerate()
    {
        let sizes: Vec<&str> = frames.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(
            sizes,
            [["4608"; PER_RING], ["4800"; PER_RING]].concat(),
            "reader {r}:\n{log}"
        );
        assert!(log.contains("the publisher's ring changed"), "{log}");
    }
}

/// The GPU tests of a ring moved between memories print SKIPPED with the reason where there is no CUDA device. Run
/// them on a GPU host with a cuframes FFmpeg build: `cargo test --release --test
/// ffmpeg_frames -- ring_moved` (or `CUFRAMES_FFMPEG=/path/to/ffmpeg`).
fn no_gpu() -> bool {
    match no_cuda() {
        Some(why) => {
            eprintln!("SKIPPED (no CUDA device; needs a GPU host): {why}");
            true
        }
        None => false,
    }
}

/// Both rings carry the same frames (same size, same seqs): frame i of the second ring must
/// equal frame i of the first, byte for byte, whatever memory each was in.
fn assert_same_frames_in_both_rings(r: usize, frames: &[(String, String)], log: &str) {
    assert_eq!(frames.len(), 2 * PER_RING, "reader {r}:\n{log}");
    assert_eq!(
        frames[..PER_RING],
        frames[PER_RING..],
        "reader {r}: the second ring's frames differ from the first's\n{log}"
    );
    assert!(
        frames.iter().all(|f| f.0 == "4608"),
        "reader {r}: {frames:?}"
    );
}

/// A host ring replaced by a CUDA ring: the output stays software (the stream said so), the
/// CUDA frames are downloaded on a CUDA device the input sets up then (`wrap_frame` must not
/// take a reference to a device context that was never made: `av_buffer_ref(NULL)` crashes).
#[test]
fn a_ring_moved_from_host_to_cuda_memory_is_followed() {
    let Some(ff) = find() else { return };
    if no_gpu() {
        return;
    }
    let env = Scratch::new(&ff, "host2cuda");
    let cuda = (MemoryChoice::Cuda { device: 0 }, 64, 48);
    let readers: [Reader; 2] = [(&[], &[]), (&["-mode", "copy"], &[])];
    for (r, (frames, log)) in through_replaced_ring(&env, "hc", MemoryChoice::Host, cuda, &readers)
        .into_iter()
        .enumerate()
    {
        assert_same_frames_in_both_rings(r, &frames, &log);
        assert!(log.contains("moved to CUDA memory"), "{log}");
    }
}

/// A CUDA ring replaced by a host ring: CUDA output (the default from a CUDA ring) gets the
/// host frames uploaded, software output gets them as they are.
#[test]
fn a_ring_moved_from_cuda_to_host_memory_is_followed() {
    let Some(ff) = find() else { return };
    if no_gpu() {
        return;
    }
    let env = Scratch::new(&ff, "cuda2host");
    let host = (MemoryChoice::Host, 64, 48);
    let readers: [Reader; 2] = [
        (&[], &["-vf", "hwdownload,format=nv12"]),
        (&["-output", "software"], &[]),
    ];
    let cuda = MemoryChoice::Cuda { device: 0 };
    for (r, (frames, log)) in through_replaced_ring(&env, "ch", cuda, host, &readers)
        .into_iter()
        .enumerate()
    {
        assert_same_frames_in_both_rings(r, &frames, &log);
        assert!(log.contains("moved to host memory"), "{log}");
    }
}

/// After the publisher ended the stream, a reader releases its GPU state only once the
/// publisher's process has exited, up to `-wait_publisher_exit` (the driver would make the
/// publisher's teardown wait for the readers'). The publisher here is this test process,
/// which lives on after ending the stream: a reader waits the whole option, and with 0 it
/// ends at once.
#[test]
fn a_reader_waits_for_the_publisher_process_up_to_wait_publisher_exit() {
    let Some(ff) = find() else { return };
    let env = Scratch::new(&ff, "pubexit");
    let mut ends = Vec::new();
    for (i, wait) in ["2", "0"].iter().enumerate() {
        let key = env.key(&format!("pe{i}"));
        let opts = PublisherOptions {
            runtime_dir: Some(env.path("")),
            ..Default::default()
        };
        let p = Publisher::create(&key, opts).unwrap();
        let mut cfg = FrameRingConfig::new(Format::Nv12, 64, 48);
        cfg.memory = MemoryChoice::Host;
        p.enable_frames(cfg).unwrap();
        let log = format!("pe{i}");
        let r = env.spawn_ffmpeg(
            &log,
            &[
                "-loglevel",
                "verbose",
                "-f",
                "cuframes",
                "-wait_publisher_exit",
                wait,
                "-read_timeout",
                "30",
                "-i",
                &key,
                "-f",
                "null",
                "-",
            ],
        );
        wait_until("the reader", Duration::from_secs(30), || {
            p.ready_subscriber_count() == 1
        });
        for n in 1..=3 {
            publish_pattern(&p, n, Some(n as i64 * 40_000_000)).unwrap();
        }
        drop(p);
        let t = std::time::Instant::now();
        assert!(
            env.wait(r, Duration::from_secs(30)).success(),
            "{}",
            env.stderr(&log)
        );
        let took = t.elapsed();
        let err = env.stderr(&log);
        assert!(err.contains("End of stream"), "{err}");
        assert!(err.contains("3 frames out"), "{err}");
        ends.push(took);
    }
    assert!(
        ends[0] >= Duration::from_millis(1900),
        "-wait_publisher_exit 2: {ends:?}"
    );
    assert!(
        ends[1] < Duration::from_millis(1500),
        "-wait_publisher_exit 0: {ends:?}"
    );
}
