//! The writer's side of one run per transport: the packet ring (with its readers in any role),
//! a Unix stream socket and UDP on 127.0.0.1, each paced as asked.

use std::io::Write;
use std::net::UdpSocket;
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use cuframes_core::packet_ring::{PacketRingConfig, PacketRingWriter};
use cuframes_core::wire::PACKET_FLAG_KEY;
use cuframes_core::Key;

use crate::bench_common::cpu::self_cpu;
use crate::cli::Role;
use crate::measure::{finish, spawn_reader, Reader, RunResult};
use crate::stream::{stamp, Pace, Pacer, GOP, UDP_CHUNK, UDP_HDR};

/// This process's CPU time so far, in seconds.
fn self_cpu_s() -> f64 {
    self_cpu().as_secs_f64()
}

/// The ring with `n_readers` plain readers.
pub fn run_ring(packets: &[Vec<u8>], n_readers: usize, pace: Pace) -> RunResult {
    run_ring_as(Role::Ring, packets, n_readers, pace)
}

/// The ring with `n_readers` readers in `role`.
pub fn run_ring_as(role: Role, packets: &[Vec<u8>], n_readers: usize, pace: Pace) -> RunResult {
    let key = Key::new(&format!(
        "bench-{}-{}",
        std::process::id(),
        cuframes_core::testing::unique_suffix()
    ))
    .unwrap();
    let mut w = PacketRingWriter::create(
        &key,
        PacketRingConfig {
            codec_id: cuframes_core::wire::CODEC_ID_H264,
            ..Default::default()
        },
        0o600,
    )
    .unwrap();
    let readers: Vec<Reader> = (0..n_readers)
        .map(|_| spawn_reader(role, w.shm_name()))
        .collect();
    let started = Instant::now();
    let cpu0 = self_cpu_s();
    let pacer = Pacer::new(pace);
    let mut buf = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        pacer.wait(i);
        buf.clear();
        buf.extend_from_slice(p);
        stamp(&mut buf, i as u64 + 1);
        let flags = if i as u64 % GOP == 0 {
            PACKET_FLAG_KEY
        } else {
            0
        };
        w.publish(&buf, i as i64, i as i64, flags).unwrap();
    }
    let writer_secs = pacer.start.elapsed().as_secs_f64();
    let writer_cpu_s = self_cpu_s() - cpu0;
    w.shutdown();
    let readers = readers.into_iter().map(|r| finish(r, started)).collect();
    drop(w);
    RunResult {
        readers,
        writer_cpu_s,
        writer_secs,
    }
}

/// A Unix stream socket with one reader (length-prefixed packets).
pub fn run_unix(packets: &[Vec<u8>], pace: Pace) -> RunResult {
    let path = std::env::temp_dir().join(format!("cuframes-bench-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let reader = spawn_reader(Role::Unix, path.to_str().unwrap());
    let (mut s, _) = listener.accept().unwrap();
    let _ = std::fs::remove_file(&path);
    let started = Instant::now();
    let cpu0 = self_cpu_s();
    let pacer = Pacer::new(pace);
    let mut buf = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        pacer.wait(i);
        buf.clear();
        buf.extend_from_slice(&(p.len() as u32).to_le_bytes());
        buf.extend_from_slice(p);
        stamp(&mut buf[4..], i as u64 + 1);
        s.write_all(&buf).unwrap();
    }
    s.write_all(&0u32.to_le_bytes()).unwrap();
    let writer_secs = pacer.start.elapsed().as_secs_f64();
    let writer_cpu_s = self_cpu_s() - cpu0;
    let m = finish(reader, started);
    RunResult {
        readers: vec![m],
        writer_cpu_s,
        writer_secs,
    }
}

/// UDP on 127.0.0.1 with one reader (packets in chunks of `UDP_CHUNK`).
pub fn run_udp(packets: &[Vec<u8>], pace: Pace) -> RunResult {
    let reader = spawn_reader(Role::Udp, "");
    let port: u16 = reader
        .ready
        .trim()
        .rsplit('=')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(("127.0.0.1", port)).unwrap();
    let started = Instant::now();
    let cpu0 = self_cpu_s();
    let pacer = Pacer::new(pace);
    let mut buf = Vec::new();
    let mut dgram = Vec::with_capacity(UDP_CHUNK + UDP_HDR);
    for (i, p) in packets.iter().enumerate() {
        pacer.wait(i);
        let seq = i as u64 + 1;
        buf.clear();
        buf.extend_from_slice(p);
        stamp(&mut buf, seq);
        for (k, chunk) in buf.chunks(UDP_CHUNK).enumerate() {
            dgram.clear();
            dgram.extend_from_slice(&seq.to_le_bytes());
            dgram.extend_from_slice(&(buf.len() as u32).to_le_bytes());
            dgram.extend_from_slice(&((k * UDP_CHUNK) as u32).to_le_bytes());
            dgram.extend_from_slice(chunk);
            // A full receive buffer drops datagrams (that is UDP); ENOBUFS is ignored too.
            let _ = s.send(&dgram);
        }
    }
    let writer_secs = pacer.start.elapsed().as_secs_f64();
    let writer_cpu_s = self_cpu_s() - cpu0;
    for _ in 0..20 {
        let _ = s.send(b"end");
        std::thread::sleep(Duration::from_millis(5));
    }
    let m = finish(reader, started);
    RunResult {
        readers: vec![m],
        writer_cpu_s,
        writer_secs,
    }
}
