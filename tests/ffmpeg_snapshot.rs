//! Snapshots with FFmpeg on the host-memory ring (CI): `ffmpeg -f cuframes -i KEY -frames:v 1
//! snap.png` (and `.jpg`) while `hwupload_cuframes=memory=host` publishes testsrc. The PNG is,
//! pixel for pixel, one of the frames that FFmpeg's own conversion of the same source makes
//! (testsrc -> format -> PNG, every frame), for every ring format FFmpeg converts from; the JPEG
//! has the frame's size and is close to one of them. Skipped without a cuframes FFmpeg build
//! (scripts/build-ffmpeg.sh) or one without the PNG/JPEG encoders. The CUDA ring commands are a
//! step of scripts/gpu-check.sh.

use std::collections::BTreeSet;
use std::time::Duration;

use cuframes_test_support::ffmpeg::{find, frame_lines, Scratch};

const SIZE: &str = "64x48";
/// The publisher's source: long enough for every snapshot of a test; killed at the test's end.
const SOURCE: &str = "testsrc=s=64x48:r=25:d=30";
const SECS: fn(u64) -> Duration = Duration::from_secs;

/// The build has what snapshots need (the encoders, the image2 muxer and demuxer); prints
/// SKIPPED otherwise.
fn has_image_support(env: &Scratch) -> bool {
    let (ok, _) = env.ffmpeg("encoders", &["-encoders"], SECS(30));
    let encoders = env.stdout("encoders");
    let (_, _) = env.ffmpeg("muxers", &["-muxers"], SECS(30));
    let muxers = env.stdout("muxers");
    let found = ok
        && [" png ", " mjpeg "].iter().all(|e| encoders.contains(e))
        && muxers.contains(" image2 ");
    if !found {
        println!(
            "SKIPPED (this FFmpeg build has no png/mjpeg encoder or image2 muxer: \
             rebuild with scripts/build-ffmpeg.sh)"
        );
    }
    found
}

/// Start a host-ring publisher of `fmt` frames under a new key.
fn publish(env: &Scratch, fmt: &str) -> String {
    let key = env.key(&format!("snap{}", fmt.len()));
    let filter = format!("format={fmt},hwupload_cuframes=key={key}:memory=host");
    env.spawn_ffmpeg(
        &format!("pub-{fmt}"),
        &[
            "-re", "-f", "lavfi", "-i", SOURCE, "-vf", &filter, "-f", "null", "-",
        ],
    );
    key
}

/// The hash of every decoded picture of `input` (an image or an image2 pattern), as
/// framemd5 prints them.
fn picture_hashes(env: &Scratch, log: &str, input: &str, extra: &[&str]) -> Vec<String> {
    let out = env.path(&format!("{log}.md5"));
    let mut args = vec!["-v", "error", "-i", input];
    args.extend_from_slice(extra);
    args.extend(["-f", "framemd5", out.to_str().unwrap()]);
    env.ffmpeg_ok(log, &args);
    frame_lines(&std::fs::read_to_string(out).unwrap())
        .iter()
        .map(|l| l.rsplit(',').next().unwrap().trim().to_owned())
        .collect()
}

/// `ffmpeg -f cuframes -i KEY -frames:v 1 FILE` (with a wait for the publisher), required to
/// succeed; returns its stderr.
fn snapshot(env: &Scratch, key: &str, file: &str, extra_out: &[&str]) -> String {
    let path = env.path(file);
    let mut args = vec!["-y", "-f", "cuframes", "-wait_publisher", "10", "-i", key];
    args.extend(["-frames:v", "1"]);
    args.extend_from_slice(extra_out);
    args.push(path.to_str().unwrap());
    let (ok, err) = env.ffmpeg(&format!("snap-{file}"), &args, SECS(30));
    assert!(ok, "ffmpeg {args:?} failed:\n{err}");
    err
}

/// "width=64\nheight=48" of an image, by ffprobe.
fn probed_size(env: &Scratch, file: &str) -> String {
    env.ffprobe_ok(
        &format!("probe-{file}"),
        &[
            "-v",
            "error",
            "-show_entries",
            "stream=width,height",
            "-of",
            "default=nw=1",
            env.path(file).to_str().unwrap(),
        ],
        SECS(30),
    )
}

fn png_matches_ffmpeg_conversion(fmt: &str) {
    let Some(ff) = find() else { return };
    let env = Scratch::new(&ff, &format!("snap-{fmt}"));
    if !has_image_support(&env) {
        return;
    }
    let key = publish(&env, fmt);
    // The plain command of the documentation (image2 warns that the name has no pattern).
    snapshot(&env, &key, "snap.png", &[]);
    assert_eq!(probed_size(&env, "snap.png").trim(), "width=64\nheight=48");
    // Every frame of the source through FFmpeg's own conversion to PNG, decoded.
    let pattern = env.path("ref%03d.png");
    env.ffmpeg_ok(
        "reference",
        &[
            "-v",
            "error",
            "-f",
            "lavfi",
            "-i",
            SOURCE,
            "-vf",
            &format!("format={fmt}"),
            "-frames:v",
            "200",
            pattern.to_str().unwrap(),
        ],
    );
    let want: BTreeSet<String> =
        picture_hashes(&env, "reference-decoded", pattern.to_str().unwrap(), &[])
            .into_iter()
            .collect();
    assert!(
        want.len() > 100,
        "testsrc frames must differ ({})",
        want.len()
    );
    let got = picture_hashes(
        &env,
        "snap-decoded",
        env.path("snap.png").to_str().unwrap(),
        &[],
    );
    assert_eq!(got.len(), 1);
    assert!(
        want.contains(&got[0]),
        "{fmt}: the snapshot's pixels are none of the source's frames converted by FFmpeg"
    );
    println!("{fmt}: the PNG snapshot is one of the source's frames, pixel for pixel");
}

#[test]
fn png_snapshot_nv12() {
    png_matches_ffmpeg_conversion("nv12");
}
#[test]
fn png_snapshot_yuv420p() {
    png_matches_ffmpeg_conversion("yuv420p");
}
#[test]
fn png_snapshot_yuv444p() {
    png_matches_ffmpeg_conversion("yuv444p");
}
#[test]
fn png_snapshot_p010le() {
    png_matches_ffmpeg_conversion("p010le");
}
#[test]
fn png_snapshot_rgba() {
    png_matches_ffmpeg_conversion("rgba");
}
#[test]
fn png_snapshot_bgra() {
    png_matches_ffmpeg_conversion("bgra");
}

/// The JPEG snapshot (with `-update 1`, the documented form, which image2 takes without a
/// warning) decodes to the frame's size, and its pixels are within JPEG's loss of one of the
/// source's frames.
#[test]
fn jpeg_snapshot_decodes_to_the_frame() {
    let Some(ff) = find() else { return };
    let env = Scratch::new(&ff, "snap-jpeg");
    if !has_image_support(&env) {
        return;
    }
    let key = publish(&env, "nv12");
    let err = snapshot(&env, &key, "snap.jpg", &["-update", "1"]);
    assert!(
        !err.contains("image sequence pattern"),
        "-update 1 still warns:\n{err}"
    );
    assert_eq!(probed_size(&env, "snap.jpg").trim(), "width=64\nheight=48");
    let raw = |log: &str, input: &[&str]| -> Vec<u8> {
        let out = env.path(&format!("{log}.rgb"));
        let mut args = vec!["-v", "error"];
        args.extend_from_slice(input);
        args.extend(["-pix_fmt", "rgb24", "-f", "rawvideo", out.to_str().unwrap()]);
        env.ffmpeg_ok(log, &args);
        std::fs::read(out).unwrap()
    };
    let jpeg = raw("jpeg-rgb", &["-i", env.path("snap.jpg").to_str().unwrap()]);
    let frame = 64 * 48 * 3;
    assert_eq!(jpeg.len(), frame);
    let source = raw(
        "source-rgb",
        &[
            "-f",
            "lavfi",
            "-i",
            SOURCE,
            "-vf",
            "format=nv12",
            "-frames:v",
            "200",
        ],
    );
    let best = source
        .chunks_exact(frame)
        .map(|f| {
            f.iter()
                .zip(&jpeg)
                .map(|(a, b)| u64::from(a.abs_diff(*b)))
                .sum::<u64>() as f64
                / frame as f64
        })
        .fold(f64::INFINITY, f64::min);
    // testsrc's sharp colour bars cost JPEG (4:2:0, default quality) a few levels on average;
    // a wrong frame size, format or garbage costs tens.
    assert!(
        best < 8.0,
        "mean difference {best:.2} to the nearest source frame"
    );
    println!("{SIZE} JPEG snapshot: mean difference {best:.2} levels to the nearest source frame");
}
