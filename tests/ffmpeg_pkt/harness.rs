//! What the tests share: the sources and their references, the publisher and recorder
//! command lines, and waits on a ring.

use std::time::{Duration, Instant};

use cuframes_core::packet_ring::PacketRingReader;
use cuframes_test_support::ffmpeg::*;
use cuframes_test_support::packet_shm_name;

pub const SECS: fn(u64) -> Duration = Duration::from_secs;

/// A source stream of a test, and how to get its packets in the ring's (Annex B) form.
pub struct Source {
    /// Name of the committed reference: fate-samples/<name>.framemd5.
    pub name: &'static str,
    /// The file ffmpeg reads (MP4 or Matroska).
    pub path: std::path::PathBuf,
    /// The bitstream filter that turns the container's packets into the ring's form.
    pub bsf: Option<&'static str>,
}

/// H.264 High with B-frames (pts != dts), Matroska with avcC.
pub fn h264_bframes_mkv() -> Source {
    Source {
        name: "test-25fps-bframes.mkv",
        path: sample("test-25fps-bframes.mkv"),
        bsf: Some("h264_mp4toannexb"),
    }
}

/// A raw Annex B sample remuxed to MP4 by this ffmpeg (raw streams carry no timestamps).
pub fn remuxed_mp4(s: &Scratch, raw: &'static str, bsf: &'static str) -> Source {
    let out = s.path(&format!("{raw}.mp4"));
    s.ffmpeg_ok(
        "remux",
        &[
            "-v",
            "fatal",
            "-framerate",
            "25",
            "-i",
            sample(raw).to_str().unwrap(),
            "-c",
            "copy",
            "-video_track_timescale",
            "12800",
            out.to_str().unwrap(),
        ],
    );
    Source {
        name: raw,
        path: out,
        bsf: Some(bsf),
    }
}

/// The AV1 IVF sample remuxed to Matroska (av1C extradata).
pub fn av1_mkv(s: &Scratch) -> Source {
    let raw = "test-25fps.av1.ivf";
    let out = s.path("av1.mkv");
    s.ffmpeg_ok(
        "remux",
        &[
            "-v",
            "error",
            "-i",
            sample(raw).to_str().unwrap(),
            "-c",
            "copy",
            out.to_str().unwrap(),
        ],
    );
    Source {
        name: raw,
        path: out,
        bsf: None,
    }
}

/// Clear AV_PKT_FLAG_DISCARD (0x4) from framemd5's `F=` field: MP4 edit lists mark leading
/// packets DISCARD, a flag the packet ring has no bit for (docs/ffmpeg.md).
pub fn without_discard(mut v: Vec<PacketLine>) -> Vec<PacketLine> {
    for p in &mut v {
        let mut parts: Vec<String> = Vec::new();
        for part in p.extra.split(", ").filter(|x| !x.is_empty()) {
            if let Some(hex) = part.strip_prefix("F=0x") {
                let f = u32::from_str_radix(hex, 16).unwrap() & !0x4;
                if f != 0x1 {
                    parts.push(format!("F=0x{f:X}"));
                }
            } else {
                parts.push(part.to_owned());
            }
        }
        p.extra = parts.join(", ");
    }
    v
}

/// framemd5 of the source's packets in the ring's form, checked against the committed one.
pub fn reference(s: &Scratch, src: &Source) -> Vec<PacketLine> {
    let out = s.path("ref.framemd5");
    let mut args = vec!["-v", "error", "-copyts", "-i", src.path.to_str().unwrap()];
    args.extend(["-map", "0:v:0", "-c", "copy"]);
    if let Some(b) = src.bsf {
        args.extend(["-bsf:v", b]);
    }
    args.extend(["-f", "framemd5", out.to_str().unwrap()]);
    s.ffmpeg_ok("reference", &args);
    let got = without_discard(read_framemd5(&out));
    let mut committed = read_framemd5(&sample(&format!("{}.framemd5", src.name)));
    // The committed files were made with FFmpeg 9.0. Older FFmpegs' hevc_mp4toannexb write
    // the parameter sets they prepend to the first keyframe differently (7.1: same size,
    // other bytes), so against another version the first packet's hash is not compared;
    // every timestamp, size and other hash is. The round trip itself compares the ring
    // with this FFmpeg's own reference, byte for byte.
    if src.bsf.is_some() && !ffmpeg_version(s).starts_with("9.0") {
        if let (Some(c), Some(g)) = (committed.first_mut(), got.first()) {
            c.md5.clone_from(&g.md5);
        }
    }
    assert_same_packets(
        &format!("source vs fate-samples/{}.framemd5", src.name),
        &got,
        &committed,
    );
    got
}

/// "7.1.5" from `ffmpeg -version`.
pub fn ffmpeg_version(s: &Scratch) -> String {
    s.ffmpeg_ok("version", &["-version"]);
    let out = s.stdout("version");
    out.split_whitespace().nth(2).unwrap_or_default().to_owned()
}

/// ffmpeg arguments publishing `src` as `key` with `-c copy` (input options `input`, muxer
/// options `output`). The ring holds the whole sample, so no subscriber can be overrun.
pub fn publisher_args<'a>(
    src: &'a Source,
    key: &'a str,
    input: &[&'a str],
    output: &[&'a str],
) -> Vec<&'a str> {
    let mut a = vec!["-v", "error"];
    a.extend_from_slice(input);
    a.extend([
        "-i",
        src.path.to_str().unwrap(),
        "-map",
        "0:v:0",
        "-c",
        "copy",
    ]);
    a.extend(["-f", "cuframes_pkt", "-ring_slots", "1024"]);
    a.extend_from_slice(output);
    a.push(key);
    a
}

/// A recorder: `-c copy` of the ring into framemd5 `<log>.framemd5`, in the ring's own
/// nanosecond time base (lossless) and with the publisher's timestamps (`-copyts`).
pub fn spawn_recorder(s: &Scratch, log: &str, key: &str) -> (Proc, std::path::PathBuf) {
    spawn_recorder_with(s, log, key, &[])
}

/// `spawn_recorder` with more demuxer options (before `-i`).
pub fn spawn_recorder_with(
    s: &Scratch,
    log: &str,
    key: &str,
    demuxer_opts: &[&str],
) -> (Proc, std::path::PathBuf) {
    let out = s.path(&format!("{log}.framemd5"));
    let mut args = vec![
        "-v",
        "error",
        "-f",
        "cuframes_pkt",
        "-wait_publisher",
        "10",
        "-timebase",
        "1/1000000000",
        "-copyts",
    ];
    args.extend_from_slice(demuxer_opts);
    args.extend_from_slice(&[
        "-i",
        key,
        "-c",
        "copy",
        "-f",
        "framemd5",
        out.to_str().unwrap(),
    ]);
    let p = s.spawn_ffmpeg(log, &args);
    (p, out)
}

/// Indices of the keyframes of a source (ffprobe packet flags).
pub fn keyframe_indices(s: &Scratch, src: &Source) -> Vec<usize> {
    let out = s.ffprobe_ok(
        "keyframes",
        &[
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "packet=flags",
            "-of",
            "csv=p=0",
            src.path.to_str().unwrap(),
        ],
        SECS(30),
    );
    out.lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with('K'))
        .map(|(i, _)| i)
        .collect()
}

pub use cuframes_test_support::wait_published;

/// [`wait_published`] for the ring of the publisher with `pid` (a killed predecessor's ring
/// stays until its successor replaces it).
pub fn wait_published_by(key: &str, pid: u32, seq: u64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let name = packet_shm_name(key);
    loop {
        if let Ok(r) = PacketRingReader::open(&name) {
            if r.producer_pid() == pid as u64 && r.published_seq() >= seq {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{key}: {seq} packets of publisher {pid} not published in {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// (size, md5) of every decoded picture of a framemd5 file, in output order.
pub fn pictures(path: &std::path::Path) -> Vec<(u64, String)> {
    read_framemd5(path)
        .into_iter()
        .map(|p| (p.size, p.md5))
        .collect()
}

/// Every picture of the source, decoded: edit lists ignored (the ring has no DISCARD flag)
/// and no frame dropped for its timestamp (raw samples remuxed without B-frame pts).
pub fn decoded_pictures(s: &Scratch, src: &Source) -> Vec<(u64, String)> {
    let out = s.path("source-decoded.framemd5");
    let mut args = vec!["-v", "error"];
    if src.path.extension().is_some_and(|e| e == "mp4") {
        args.extend(["-ignore_editlist", "1"]);
    }
    args.extend(["-i", src.path.to_str().unwrap(), "-fps_mode", "passthrough"]);
    args.extend(["-f", "framemd5", out.to_str().unwrap()]);
    s.ffmpeg_ok("source-decode", &args);
    pictures(&out)
}
