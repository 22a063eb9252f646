//! What the tests share beyond the camera: the publisher command line (the systemd unit's
//! ExecStart), waits on a ring, and what is checked of a recording.

use std::path::Path;
use std::time::{Duration, Instant};

use cuframes_core::packet_ring::PacketRingReader;
use cuframes_test_support::ffmpeg::{repo, Scratch};
use cuframes_test_support::packet_shm_name;

use super::annexb::{read_access_units, AccessUnit};
use super::camera::Codec;

pub const SECS: fn(u64) -> Duration = Duration::from_secs;

/// The camera unit (contrib/systemd/cuframes-camera@.service).
pub fn camera_unit() -> std::path::PathBuf {
    repo().join("contrib/systemd/cuframes-camera@.service")
}

/// The installed path of ffmpeg in the units; the tests put the build's in its place.
pub const UNIT_FFMPEG: &str = "/usr/local/bin/ffmpeg";

/// The recorder unit (contrib/systemd/cuframes-recorder@.service).
pub fn recorder_unit() -> std::path::PathBuf {
    repo().join("contrib/systemd/cuframes-recorder@.service")
}

/// A unit's `ExecStart=` as systemd runs it for instance `instance`: its words (quotes
/// removed), specifiers `%i` and `%%` resolved, `$$` made `$` and `${VAR}` taken from `vars`
/// (what the EnvironmentFile sets). The tests run exactly this command.
pub fn unit_exec(unit: &Path, instance: &str, vars: &[(&str, &str)]) -> Vec<String> {
    let text = std::fs::read_to_string(unit).unwrap_or_else(|e| panic!("{}: {e}", unit.display()));
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("ExecStart="))
        .collect();
    assert_eq!(lines.len(), 1, "{}: one ExecStart= line", unit.display());
    let line = &lines[0]["ExecStart=".len()..];
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in line.chars() {
        match (quote, c) {
            (None, '\'') | (None, '"') => {
                quote = Some(c);
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (_, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    assert!(quote.is_none(), "{}: unbalanced quotes", unit.display());
    if in_word {
        words.push(cur);
    }
    words
        .into_iter()
        .map(|w| {
            let mut out = String::new();
            let mut it = w.chars().peekable();
            while let Some(c) = it.next() {
                match (c, it.peek().copied()) {
                    ('%', Some('%')) => {
                        it.next();
                        out.push('%');
                    }
                    ('%', Some('i')) => {
                        it.next();
                        out.push_str(instance);
                    }
                    ('%', other) => panic!("unexpected specifier %{other:?} in {w:?}"),
                    ('$', Some('$')) => {
                        it.next();
                        out.push('$');
                    }
                    ('$', Some('{')) => {
                        it.next();
                        let name: String = it.by_ref().take_while(|&c| c != '}').collect();
                        let v = vars
                            .iter()
                            .find(|(k, _)| *k == name)
                            .unwrap_or_else(|| panic!("unset variable {name} in {w:?}"));
                        out.push_str(v.1);
                    }
                    (c, _) => out.push(c),
                }
            }
            out
        })
        .collect()
}

/// A unit's `NAME=<seconds>` setting.
pub fn unit_setting_secs(unit: &Path, name: &str) -> u64 {
    let text = std::fs::read_to_string(unit).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}: no {name}=<seconds>", unit.display()))
}

/// The camera publisher, as the camera unit runs it (without its executable):
/// `… -i URL … -f cuframes_pkt KEY`.
pub fn publisher_args(url: &str, key: &str) -> Vec<String> {
    let mut argv = unit_exec(
        &camera_unit(),
        key,
        &[("CAMERA_URL", url), ("CUFRAMES_KEY", key)],
    );
    assert_eq!(argv[0], UNIT_FFMPEG);
    argv.remove(0);
    argv
}

pub use cuframes_test_support::wait_published;

/// Wait until the ring of `key` belongs to a publisher other than `old` (a pid) and has
/// published at least `seq` packets; returns the new publisher's pid.
pub fn wait_new_publisher(key: &str, old: u64, seq: u64, timeout: Duration) -> u64 {
    let deadline = Instant::now() + timeout;
    let name = packet_shm_name(key);
    loop {
        if let Ok(r) = PacketRingReader::open(&name) {
            if r.producer_pid() != old && r.published_seq() >= seq {
                return r.producer_pid();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{key}: no new publisher with {seq} packets in {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The pid of the ring's publisher (0: none yet).
pub fn ring_publisher(key: &str) -> u64 {
    PacketRingReader::open(&packet_shm_name(key)).map_or(0, |r| r.producer_pid())
}

/// Decode a file completely; it must decode with no error printed.
pub fn assert_decodes_cleanly(s: &Scratch, log: &str, file: &Path) {
    let (ok, err) = s.ffmpeg(
        log,
        &[
            "-v",
            "error",
            "-xerror",
            "-i",
            file.to_str().unwrap(),
            "-f",
            "null",
            "-",
        ],
        SECS(60),
    );
    assert!(
        ok && err.trim().is_empty(),
        "{} does not decode cleanly:\n{err}",
        file.display()
    );
}

/// One packet of a file as ffprobe shows it.
#[derive(Debug, Clone)]
pub struct Probed {
    pub pts: Option<i64>,
    pub dts: Option<i64>,
    pub key: bool,
}

/// The video packets of a file (timestamps in its stream's time base).
pub fn probe_packets(s: &Scratch, log: &str, file: &Path) -> Vec<Probed> {
    let out = s.ffprobe_ok(
        log,
        &[
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "packet=pts,dts,flags",
            "-of",
            "csv=p=0",
            file.to_str().unwrap(),
        ],
        SECS(60),
    );
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            Probed {
                pts: f.first().and_then(|v| v.parse().ok()),
                dts: f.get(1).and_then(|v| v.parse().ok()),
                key: f.get(2).is_some_and(|v| v.starts_with('K')),
            }
        })
        .collect()
}

/// The access units of a recording (Matroska, MPEG-TS, ...), turned back into Annex B.
pub fn recorded_access_units(s: &Scratch, log: &str, codec: Codec, file: &Path) -> Vec<AccessUnit> {
    let raw = s.path(&format!("{log}.annexb"));
    s.ffmpeg_ok(
        log,
        &[
            "-v",
            "error",
            "-i",
            file.to_str().unwrap(),
            "-map",
            "0:v:0",
            "-c",
            "copy",
            "-bsf:v",
            codec.to_annexb(),
            "-f",
            codec.name(),
            raw.to_str().unwrap(),
        ],
    );
    read_access_units(codec, &raw)
}

/// Keyframe flags agree with the pictures: a packet is flagged KEY exactly when its access
/// unit is an IDR (H.264) or IRAP (HEVC) picture.
pub fn assert_key_flags(what: &str, codec: Codec, packets: &[Probed], aus: &[AccessUnit]) {
    assert_eq!(packets.len(), aus.len(), "{what}: packets vs access units");
    for (i, (p, au)) in packets.iter().zip(aus).enumerate() {
        assert_eq!(
            p.key,
            super::annexb::is_key(codec, au),
            "{what}: packet {i}: KEY flag {} for {au:?}",
            p.key
        );
    }
}

/// Timestamps strictly increase (`pick` selects pts or dts).
pub fn assert_increasing(what: &str, packets: &[Probed], pick: fn(&Probed) -> Option<i64>) {
    let ts: Vec<i64> = packets.iter().filter_map(pick).collect();
    assert_eq!(
        ts.len(),
        packets.len(),
        "{what}: packets without a timestamp"
    );
    if let Some(i) = ts.windows(2).position(|w| w[0] >= w[1]) {
        panic!(
            "{what}: timestamps go back at packet {}: {:?}",
            i + 1,
            &ts[i..(i + 2)]
        );
    }
}

/// FFmpeg's RTSP demuxer gives the first access unit no timestamp (its parser completes the
/// unit before the RTP timestamp is attached): libavformat warns once and gives it the
/// next one a muxer expects (0, right with `-copyts`). Anything else a publisher prints at
/// the unit's log level is a failure.
pub const RTSP_FIRST_PACKET_WARNING: &str = "Timestamps are unset in a packet for stream 0";

pub fn assert_publisher_log_clean(log: &str) {
    let other: Vec<&str> = log
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains(RTSP_FIRST_PACKET_WARNING))
        .collect();
    assert!(
        other.is_empty() && log.matches(RTSP_FIRST_PACKET_WARNING).count() <= 1,
        "the publisher printed:\n{log}"
    );
}
