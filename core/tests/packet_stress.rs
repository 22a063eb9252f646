//! Multi-process stress test of the packet ring (§10, R8, R9, R29).
//!
//! The test process is the single writer: it publishes 1,000,000 packets as fast as it can
//! into a ring small enough to be lapped all the time (64 slots, 256 KiB of data; packet sizes
//! random, mostly small with some up to 96 KiB so that both the slot ring and the data ring
//! wrap first at different moments), a KEY every 48 packets. Eight reader processes at
//! different speeds verify every packet they get: the payload embeds its seq, its length and a
//! checksum of the rest, so a torn or overwritten packet that the ring wrongly accepted is
//! counted as corrupt. Required: zero corrupt packets, strictly increasing seqs, every gap
//! marked by DISCONTINUITY on a keyframe (R9), the late reader starts on a keyframe.
//!
//! The readers are this test binary re-executed (`test_support::child`) in the role `<index>`
//! with the filter `packet_stress_child`, so no extra binary is needed. `CUFRAMES_PKT_STRESS_PACKETS` overrides the packet count for quick local runs.
//!
//! CI runs it in release (`cargo test --release -p cuframes-core --test packet_stress`);
//! it also passes in debug builds, more slowly (see docs/benchmarks.md, "Packet ring").

use cuframes_test_support as common;

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use common::{child, Rng};
use cuframes_core::packet_ring::{PacketRingConfig, PacketRingReader, PacketRingWriter};
use cuframes_core::wire::PACKET_FLAG_KEY;
use cuframes_core::{ErrorCode, Key};

const SHM_ENV: &str = "CUFRAMES_PKT_STRESS_SHM";
const TOTAL_ENV: &str = "CUFRAMES_PKT_STRESS_PACKETS";
const DEFAULT_PACKETS: u64 = 1_000_000;
const SLOTS: u32 = 64;
const DATA: u32 = 256 * 1024;
const KEY_EVERY: u64 = 48;
const READERS: usize = 8;
/// The reader that opens the ring only after a third of the packets were published.
const LATE_READER: usize = 7;
/// seq (8) + length (4) + reserved (4) + checksum (8).
const HDR: usize = 24;

fn total_packets() -> u64 {
    std::env::var(TOTAL_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_PACKETS)
}

fn checksum(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap());
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01B3).rotate_left(29);
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// Build packet `seq` into `buf`: size from `rng`, body from a seq-seeded generator.
fn make_packet(seq: u64, rng: &mut Rng, buf: &mut Vec<u8>) {
    let r = rng.next();
    let len = if r % 100 < 97 {
        HDR + (r >> 8) as usize % 1000
    } else {
        4096 + (r >> 8) as usize % (96 * 1024 - 4096)
    };
    buf.clear();
    buf.resize(len, 0);
    let mut body = Rng(seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    for c in buf[HDR..].chunks_mut(8) {
        let w = body.next().to_le_bytes();
        c.copy_from_slice(&w[..c.len()]);
    }
    let sum = checksum(&buf[HDR..]);
    buf[0..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    buf[16..24].copy_from_slice(&sum.to_le_bytes());
}

/// Is `data` exactly what the writer published as `seq`?
fn verify(seq: u64, data: &[u8]) -> bool {
    data.len() >= HDR
        && u64::from_le_bytes(data[0..8].try_into().unwrap()) == seq
        && u32::from_le_bytes(data[8..12].try_into().unwrap()) as usize == data.len()
        && u64::from_le_bytes(data[16..24].try_into().unwrap()) == checksum(&data[HDR..])
}

/// Busy work that stands for a slower consumer (a decoder), without sleeping.
fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Child side: one reader process. Prints `STRESS-READY` once the ring is open and one
/// `STRESS-RESULT k=v ...` line at the end.
#[test]
fn packet_stress_child() {
    let Some(role) = child::role() else {
        return; // Not a child: nothing to do.
    };
    let idx: usize = role.parse().unwrap();
    let shm = std::env::var(SHM_ENV).unwrap();
    let total = total_packets();
    let mut r = PacketRingReader::open(&shm).unwrap();
    println!("STRESS-READY {idx}");
    let mut late_kf = 0;
    if idx == LATE_READER {
        while r.published_seq() < total / 3 {
            std::thread::sleep(Duration::from_millis(1));
        }
        late_kf = r.last_keyframe_seq();
        r.start_at_last_keyframe();
    }
    let (spin_each, sleep_every, sleep_for) = match idx {
        2 => (Duration::from_micros(1), 0, Duration::ZERO),
        3 => (Duration::from_micros(5), 0, Duration::ZERO),
        4 => (Duration::from_micros(20), 0, Duration::ZERO),
        5 => (Duration::ZERO, 64, Duration::from_millis(1)),
        6 => (Duration::ZERO, 16, Duration::from_millis(10)),
        _ => (Duration::ZERO, 0, Duration::ZERO),
    };
    let mut out = Vec::new();
    let (mut last, mut corrupt, mut gaps_unmarked, mut disc, mut first_seq, mut first_key) =
        (0u64, 0u64, 0u64, 0u64, 0u64, false);
    let t0 = Instant::now();
    let end = loop {
        match r.next_packet(Some(Duration::from_secs(30)), &mut out) {
            Ok(p) => {
                if last == 0 {
                    first_seq = p.seq;
                    first_key = p.is_key();
                }
                if p.seq <= last {
                    panic!("reader {idx}: seq {} after {last}", p.seq);
                }
                if p.is_discontinuity() {
                    disc += 1;
                }
                if last != 0 && p.seq != last + 1 && !(p.is_discontinuity() && p.is_key()) {
                    gaps_unmarked += 1;
                }
                if !verify(p.seq, &out)
                    || p.pts_ns != p.seq as i64 * 1000
                    || p.dts_ns != p.pts_ns - 1
                    || p.is_key() != (p.seq % KEY_EVERY == 1)
                {
                    corrupt += 1;
                }
                last = p.seq;
                if !spin_each.is_zero() {
                    spin(spin_each);
                }
                if sleep_every != 0 && p.seq % sleep_every == 0 {
                    std::thread::sleep(sleep_for);
                }
            }
            Err(e) if e.code() == ErrorCode::Disconnected => break "disconnected".to_owned(),
            Err(e) => break format!("error:{}", e.code().name()),
        }
    };
    let st = r.stats();
    println!(
        "STRESS-RESULT idx={idx} packets={} bytes={} overruns={} disc={disc} corrupt={corrupt} \
         unmarked_gaps={gaps_unmarked} last={last} first={first_seq} first_key={first_key} \
         late_kf={late_kf} secs={:.2} end={end}",
        st.packets,
        st.bytes,
        st.overruns,
        t0.elapsed().as_secs_f64()
    );
}

/// Kills (by pid) and reaps the children this test started if it fails midway.
struct Children(Vec<(Child, BufReader<ChildStdout>)>);

impl Drop for Children {
    fn drop(&mut self) {
        for (c, _) in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

/// Unlinks the SHM even if the writer was never created or leaked.
struct ShmGuard(String);

impl Drop for ShmGuard {
    fn drop(&mut self) {
        let _ = cuframes_core::shm::unlink(&self.0);
    }
}

fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {line:?}"))
        .to_owned()
}

#[test]
fn packet_ring_multiprocess_stress() {
    if child::role().is_some() {
        return; // The child runs packet_stress_child only.
    }
    let total = total_packets();
    let key = Key::new(&format!(
        "stress-{}-{}",
        std::process::id(),
        cuframes_core::testing::unique_suffix()
    ))
    .unwrap();
    let _guard = ShmGuard(key.packet_shm_name());
    let mut w = PacketRingWriter::create(
        &key,
        PacketRingConfig {
            codec_id: cuframes_core::wire::CODEC_ID_H264,
            extradata: vec![0, 0, 0, 1, 0x67],
            ring_slots: SLOTS,
            data_size: DATA,
        },
        0o600,
    )
    .unwrap();
    let mut children = Children(Vec::new());
    for idx in 0..READERS {
        let mut child = child::command_for("packet_stress_child", &idx.to_string())
            .env(SHM_ENV, w.shm_name())
            .env(TOTAL_ENV, total.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        children.0.push((child, out));
    }
    for (_, out) in &mut children.0 {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "a reader died early");
            if line.contains("STRESS-READY") {
                break;
            }
        }
    }

    let t0 = Instant::now();
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    let mut buf = Vec::new();
    for seq in 1..=total {
        make_packet(seq, &mut rng, &mut buf);
        let flags = if seq % KEY_EVERY == 1 {
            PACKET_FLAG_KEY
        } else {
            0
        };
        assert_eq!(
            w.publish(&buf, seq as i64 * 1000, seq as i64 * 1000 - 1, flags)
                .unwrap(),
            seq
        );
    }
    let publish_secs = t0.elapsed().as_secs_f64();
    let stats = w.stats();
    w.shutdown();
    println!(
        "writer: {} packets, {:.1} MiB in {publish_secs:.2} s ({:.0} packets/s)",
        stats.packets,
        stats.bytes as f64 / (1 << 20) as f64,
        stats.packets as f64 / publish_secs
    );

    let mut results = Vec::new();
    for (child, out) in &mut children.0 {
        let mut result = None;
        for line in out.lines() {
            let line = line.unwrap();
            if let Some(at) = line.find("STRESS-RESULT") {
                result = Some(line[at..].to_owned());
            }
        }
        let status = child.wait().unwrap();
        let line = result.unwrap_or_else(|| panic!("a reader printed no result ({status})"));
        println!("{line}");
        assert!(status.success(), "reader failed ({status}): {line}");
        results.push(line);
    }
    let mut total_overruns = 0;
    for line in &results {
        let idx: usize = field(line, "idx").parse().unwrap();
        assert_eq!(
            field(line, "corrupt"),
            "0",
            "corrupt packets accepted: {line}"
        );
        assert_eq!(field(line, "unmarked_gaps"), "0", "{line}");
        assert_eq!(field(line, "end"), "disconnected", "{line}");
        assert_eq!(field(line, "first_key"), "true", "{line}");
        let packets: u64 = field(line, "packets").parse().unwrap();
        assert!(packets > 0, "{line}");
        // (`last` may stop short of `total`: a reader lapped near the end waits for a
        // keyframe that never comes, R9, and then sees the shutdown.)
        assert!(
            field(line, "last").parse::<u64>().unwrap() <= total,
            "{line}"
        );
        if idx == LATE_READER {
            let first: u64 = field(line, "first").parse().unwrap();
            assert!(first > total / 3 - KEY_EVERY, "{line}");
            assert_eq!(first % KEY_EVERY, 1, "{line}");
        } else {
            // Seq 1, or a later keyframe when the reader was lapped before its first read.
            assert_eq!(
                field(line, "first").parse::<u64>().unwrap() % KEY_EVERY,
                1,
                "{line}"
            );
        }
        total_overruns += field(line, "overruns").parse::<u64>().unwrap();
    }
    println!(
        "total: {total} packets published, {total_overruns} overruns over {READERS} readers, \
         {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
