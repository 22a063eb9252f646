//! Packet ring benchmark (§10): what one publisher costs and delivers to 1 and 8 reader
//! processes, against the same packets through a Unix stream socket and UDP on 127.0.0.1 (one
//! reader), and against memcpy bandwidth as the upper limit.
//!
//! ```text
//! cargo run --release -p cuframes-core --example packet_bench            # 6 s throttled runs
//! cargo run --release -p cuframes-core --example packet_bench -- 10 40000 # secs, packets
//! ```
//!
//! Stream: 20 Mbit/s at 30 fps, GOP 30, a keyframe 8x the size of a P frame (I ~540 KB,
//! P ~68 KB, +-20 % jitter). Two modes:
//! - *throttled*: packets published at 30 fps for `secs` seconds (the real-time case);
//! - *unthrottled*: `packets` packets as fast as the writer can (capacity; ring readers that
//!   fall behind are lapped and count overruns; the Unix socket blocks the sender instead; UDP
//!   drops);
//! - *equal load*: the unthrottled packets again at 90 % of the rate the Unix socket sustained,
//!   for the 1-copy demuxer and the socket (latency at the same throughput).
//!
//! Each payload carries its seq and the CLOCK_MONOTONIC time just before publish, so each
//! reader measures publish-to-read latency. Reader CPU comes from `wait4`'s rusage of each
//! reader process. Readers are this binary re-executed with `PKT_BENCH_ROLE` set.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::UdpSocket;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use cuframes_core::packet_ring::{
    PacketRingConfig, PacketRingReader, PacketRingWriter, PacketSink,
};
use cuframes_core::testing::monotonic_ns;
use cuframes_core::wire::PACKET_FLAG_KEY;
use cuframes_core::{ErrorCode, Key};

const ROLE_ENV: &str = "PKT_BENCH_ROLE";
const ARG_ENV: &str = "PKT_BENCH_ARG";
const FPS: u64 = 30;
const GOP: u64 = 30;
const BITRATE: f64 = 20e6;
const UDP_CHUNK: usize = 60_000;
const UDP_HDR: usize = 16;
/// The spinning demuxer row's `spin` (more than the unthrottled stream's packet interval).
const SPIN: Duration = Duration::from_micros(100);

// ---------------------------------------------------------------------------------------------
// The stream.

/// Packet sizes of the 20 Mbit/s, 30 fps stream, deterministic.
fn stream_sizes(n: usize) -> Vec<usize> {
    let avg = BITRATE / 8.0 / FPS as f64;
    let p = avg * GOP as f64 / (GOP as f64 - 1.0 + 8.0);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let jitter = 0.8 + (x % 1000) as f64 / 2500.0;
            let base = if i as u64 % GOP == 0 { 8.0 * p } else { p };
            (base * jitter) as usize
        })
        .collect()
}

fn stamp(buf: &mut [u8], seq: u64) {
    buf[0..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..16].copy_from_slice(&monotonic_ns().to_le_bytes());
}

fn stamped_ns(buf: &[u8]) -> i64 {
    i64::from_le_bytes(buf[8..16].try_into().unwrap())
}

/// How the writer paces its packets.
#[derive(Clone, Copy)]
enum Pace {
    /// As fast as it can.
    Unthrottled,
    /// At the stream's frame rate (real time).
    RealTime,
    /// At this many packets per second (the same load for every transport).
    PacketsPerSec(f64),
}

/// Waits until packet `i` is due (absolute schedule: a late packet does not delay the next).
struct Pacer {
    start: Instant,
    interval: Option<Duration>,
}

impl Pacer {
    fn new(pace: Pace) -> Pacer {
        let interval = match pace {
            Pace::Unthrottled => None,
            Pace::RealTime => Some(Duration::from_nanos(1_000_000_000 / FPS)),
            Pace::PacketsPerSec(r) => Some(Duration::from_secs_f64(1.0 / r)),
        };
        Pacer {
            start: Instant::now(),
            interval,
        }
    }

    fn wait(&self, i: usize) {
        let Some(interval) = self.interval else {
            return;
        };
        let due = self.start + interval * i as u32;
        loop {
            let now = Instant::now();
            if due <= now {
                return;
            }
            // A sleep overshoots by the timer slack (~50 µs): sleep only the part of a long
            // wait that leaves room for it, poll the rest (rates of 10^4 packets/s and more).
            if due - now > Duration::from_micros(200) {
                std::thread::sleep(due - now - Duration::from_micros(100));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reader side (child processes).

/// One packet as a reader saw it: for the tail breakdown (where p99 comes from).
struct Sample {
    lat_ns: i64,
    key: bool,
    /// Nothing was ready when the reader asked: it waited (slept on the futex or the socket,
    /// or spun) for this packet.
    waited: bool,
    /// Packets (ring) or bytes (socket) already waiting when the reader asked.
    backlog: u64,
}

struct Recorder {
    samples: Vec<Sample>,
    packets: u64,
    bytes: u64,
    first: Option<Instant>,
    last: Instant,
}

fn pct_us(sorted: &[i64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

impl Recorder {
    fn new() -> Recorder {
        Recorder {
            samples: Vec::with_capacity(1 << 16),
            packets: 0,
            bytes: 0,
            first: None,
            last: Instant::now(),
        }
    }

    /// `backlog`: what was ready when the reader asked for this packet (0: it waited).
    fn record(&mut self, payload: &[u8], backlog: u64) {
        let now = monotonic_ns();
        let seq = u64::from_le_bytes(payload[0..8].try_into().unwrap());
        self.samples.push(Sample {
            lat_ns: now - stamped_ns(payload),
            key: seq.saturating_sub(1) % GOP == 0,
            waited: backlog == 0,
            backlog,
        });
        self.packets += 1;
        self.bytes += payload.len() as u64;
        self.last = Instant::now();
        self.first.get_or_insert(self.last);
    }

    fn print(self, overruns: u64, lost: u64) {
        let sorted = |f: &dyn Fn(&Sample) -> bool| {
            let mut v: Vec<i64> = self
                .samples
                .iter()
                .filter(|s| f(s))
                .map(|s| s.lat_ns)
                .collect();
            v.sort_unstable();
            v
        };
        let all = sorted(&|_| true);
        let p99_ns = all.get(((all.len().max(1) - 1) as f64 * 0.99).round() as usize);
        let tail: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| p99_ns.is_some_and(|&t| s.lat_ns >= t))
            .collect();
        let share = |f: &dyn Fn(&Sample) -> bool| {
            100.0 * tail.iter().filter(|s| f(s)).count() as f64 / tail.len().max(1) as f64
        };
        let waited = self.samples.iter().filter(|s| s.waited).count();
        let secs = self
            .first
            .map_or(0.0, |f| self.last.duration_since(f).as_secs_f64());
        println!(
            "BENCH-RESULT packets={} bytes={} secs={secs:.6} overruns={overruns} lost={lost} \
             p50_us={:.1} p99_us={:.1} max_us={:.1} p99_key_us={:.1} p99_nonkey_us={:.1} \
             waited_pct={:.1} p99_waited_us={:.1} p99_ready_us={:.1} tail_key_pct={:.0} \
             tail_waited_pct={:.0} tail_backlog={:.0}",
            self.packets,
            self.bytes,
            pct_us(&all, 0.5),
            pct_us(&all, 0.99),
            pct_us(&all, 1.0),
            pct_us(&sorted(&|s| s.key), 0.99),
            pct_us(&sorted(&|s| !s.key), 0.99),
            100.0 * waited as f64 / self.samples.len().max(1) as f64,
            pct_us(&sorted(&|s| s.waited), 0.99),
            pct_us(&sorted(&|s| !s.waited), 0.99),
            share(&|s| s.key),
            share(&|s| s.waited),
            tail.iter().map(|s| s.backlog as f64).sum::<f64>() / tail.len().max(1) as f64,
        );
    }
}

/// Packets published and not yet read by `r` (0: the next read sleeps first).
fn ring_backlog(r: &PacketRingReader) -> u64 {
    r.published_seq().saturating_sub(r.stats().last_seq)
}

fn ring_reader(shm: &str) {
    let mut r = PacketRingReader::open(shm).unwrap();
    println!("BENCH-READY");
    let mut rec = Recorder::new();
    let mut out = Vec::new();
    loop {
        let backlog = ring_backlog(&r);
        match r.next_packet(Some(Duration::from_secs(60)), &mut out) {
            Ok(_) => rec.record(&out, backlog),
            Err(e) if e.code() == ErrorCode::Disconnected => break,
            Err(e) => panic!("ring reader: {e}"),
        }
    }
    rec.print(r.stats().overruns, 0);
}

/// A fresh buffer per packet, made the way the demuxer's AVPacket is: `av_new_packet` mallocs
/// the payload without clearing it (only the padding after it is zeroed), and whoever took the
/// previous packet frees that one. `vec![0; len]`, which this bench used before, clears every
/// byte first: a second pass over each packet that the demuxer does not make, which made this
/// reader slower than it is in FFmpeg.
struct FreshPacket {
    ptr: *mut u8,
    len: usize,
}

/// `AV_INPUT_BUFFER_PADDING_SIZE`: zeroed bytes after every AVPacket's payload.
const AV_PADDING: usize = 64;

impl FreshPacket {
    fn new() -> FreshPacket {
        FreshPacket {
            ptr: std::ptr::null_mut(),
            len: 0,
        }
    }

    /// The previous packet is handed on (freed), a new one of `len` bytes is allocated.
    fn renew(&mut self, len: usize) -> &mut [u8] {
        self.release();
        // SAFETY: malloc of a non-zero size; the result is checked for NULL below.
        let ptr = unsafe { libc::malloc(len + AV_PADDING) }.cast::<u8>();
        assert!(!ptr.is_null(), "malloc of {len} bytes failed");
        // SAFETY: the padding lies inside the allocation just made (len + AV_PADDING bytes).
        unsafe { std::ptr::write_bytes(ptr.add(len), 0, AV_PADDING) };
        self.ptr = ptr;
        self.len = len;
        // SAFETY: `len` bytes at `ptr` belong to this allocation, which lives until the next
        // `renew` or the drop, both of which need `&mut self` and so end this borrow first.
        // The bytes are not initialised, like av_new_packet's: the callers only write them
        // (the reader's copy writes every byte) before `payload` reads them, the same contract
        // as the C demuxer's buffer callback (src/api/packet.rs).
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }

    /// The packet's bytes (after a successful read has written them all).
    fn payload(&self) -> &[u8] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: `len` bytes of our live allocation, written by the read that filled them.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    fn release(&mut self) {
        // SAFETY: `ptr` is NULL or our own malloc'd block, freed once (it is reset here).
        unsafe { libc::free(self.ptr.cast()) };
        self.ptr = std::ptr::null_mut();
        self.len = 0;
    }
}

impl Drop for FreshPacket {
    fn drop(&mut self) {
        self.release();
    }
}

impl PacketSink for FreshPacket {
    fn buffer(&mut self, len: usize) -> cuframes_core::Result<&mut [u8]> {
        Ok(self.renew(len))
    }
}

/// What the cuframes_pkt demuxer does per packet: `copies` 2 = the packet into the reader's
/// buffer, then into a fresh packet (the demuxer before next_packet_into); 1 = straight into
/// a fresh packet (next_packet_into). `spin`: poll this long before each sleep (the
/// demuxer's `spin` option).
fn demuxer_reader(shm: &str, copies: u32, spin: Duration) {
    let mut r = PacketRingReader::open(shm).unwrap();
    r.set_spin(spin);
    println!("BENCH-READY");
    let mut rec = Recorder::new();
    let mut out = Vec::new();
    let mut fresh = FreshPacket::new();
    loop {
        let backlog = ring_backlog(&r);
        let got = if copies == 2 {
            r.next_packet(Some(Duration::from_secs(60)), &mut out)
                .map(|_| fresh.renew(out.len()).copy_from_slice(&out))
        } else {
            r.next_packet_into(Some(Duration::from_secs(60)), &mut fresh)
                .map(|_| ())
        };
        match got {
            Ok(()) => rec.record(std::hint::black_box(fresh.payload()), backlog),
            Err(e) if e.code() == ErrorCode::Disconnected => break,
            Err(e) => panic!("ring reader: {e}"),
        }
    }
    rec.print(r.stats().overruns, 0);
}

fn unix_reader(path: &str) {
    let mut s = UnixStream::connect(path).unwrap();
    println!("BENCH-READY");
    let mut rec = Recorder::new();
    let mut buf = Vec::new();
    let mut len = [0u8; 4];
    loop {
        let backlog = socket_ready_bytes(&s);
        if s.read_exact(&mut len).is_err() {
            break;
        }
        let n = u32::from_le_bytes(len) as usize;
        if n == 0 {
            break;
        }
        buf.resize(n, 0);
        s.read_exact(&mut buf).unwrap();
        rec.record(&buf, backlog);
    }
    rec.print(0, 0);
}

/// Bytes already queued on the socket (FIONREAD; 0: the next read sleeps first).
fn socket_ready_bytes(s: &UnixStream) -> u64 {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which points at `n`.
    unsafe { libc::ioctl(s.as_raw_fd(), libc::FIONREAD, &mut n) };
    n.max(0) as u64
}

fn set_rcvbuf(sock: &UdpSocket, bytes: i32) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket and a pointer to an int of the right size.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const i32).cast(),
            4,
        );
    }
}

fn udp_reader() {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    set_rcvbuf(&s, 32 << 20);
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    println!("BENCH-READY port={}", s.local_addr().unwrap().port());
    let mut rec = Recorder::new();
    let mut dgram = vec![0u8; 65536];
    let mut pkt = Vec::new();
    let (mut cur, mut got, mut lost, mut last_done) = (u64::MAX, 0usize, 0u64, 0u64);
    while let Ok(n) = s.recv(&mut dgram) {
        if n < UDP_HDR {
            break; // end marker
        }
        let seq = u64::from_le_bytes(dgram[0..8].try_into().unwrap());
        let total = u32::from_le_bytes(dgram[8..12].try_into().unwrap()) as usize;
        let off = u32::from_le_bytes(dgram[12..16].try_into().unwrap()) as usize;
        if seq != cur {
            cur = seq;
            got = 0;
            pkt.resize(total, 0);
        }
        pkt[off..off + n - UDP_HDR].copy_from_slice(&dgram[UDP_HDR..n]);
        got += n - UDP_HDR;
        if got == total {
            lost += seq - last_done - 1;
            last_done = seq;
            rec.record(&pkt, 1);
        }
    }
    rec.print(0, lost);
}

// ---------------------------------------------------------------------------------------------
// Parent side.

struct Reader {
    child: Child,
    out: BufReader<ChildStdout>,
    ready: String,
}

fn spawn_reader(role: &str, arg: &str) -> Reader {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ROLE_ENV, role)
        .env(ARG_ENV, arg)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut ready = String::new();
    out.read_line(&mut ready).unwrap();
    assert!(ready.starts_with("BENCH-READY"), "{ready:?}");
    Reader { child, out, ready }
}

#[derive(Debug, Default, Clone)]
struct Measured {
    packets: u64,
    bytes: u64,
    secs: f64,
    overruns: u64,
    lost: u64,
    p50_us: f64,
    p99_us: f64,
    cpu_s: f64,
    wall_s: f64,
    /// Where the tail comes from (the reader's breakdown fields, as printed).
    tail: Vec<(String, f64)>,
}

impl Measured {
    fn pps(&self) -> f64 {
        self.packets as f64 / self.secs.max(1e-9)
    }
    fn mbps(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.secs.max(1e-9)
    }
    fn cpu_pct(&self) -> f64 {
        100.0 * self.cpu_s / self.wall_s.max(1e-9)
    }
    fn cpu_us_per_packet(&self) -> f64 {
        1e6 * self.cpu_s / (self.packets.max(1) as f64)
    }
}

/// Collect a reader's result line and its CPU time (wait4 rusage).
fn finish(mut r: Reader, started: Instant) -> Measured {
    let mut line = String::new();
    let mut all = String::new();
    while r.out.read_line(&mut line).unwrap() > 0 {
        if line.starts_with("BENCH-RESULT") {
            all = line.clone();
        }
        line.clear();
    }
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = r.child.id() as libc::pid_t;
    // SAFETY: waits for the child we spawned, by pid.
    unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let wall_s = started.elapsed().as_secs_f64();
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let get = |k: &str| -> f64 {
        all.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {all:?}"))
            .parse()
            .unwrap()
    };
    Measured {
        packets: get("packets") as u64,
        bytes: get("bytes") as u64,
        secs: get("secs"),
        overruns: get("overruns") as u64,
        lost: get("lost") as u64,
        p50_us: get("p50_us"),
        p99_us: get("p99_us"),
        cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
        wall_s,
        tail: TAIL_FIELDS
            .iter()
            .map(|k| (k.to_string(), get(k)))
            .collect(),
    }
}

fn self_cpu_s() -> f64 {
    // SAFETY: as above.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: fills ru for this process.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

struct RunResult {
    readers: Vec<Measured>,
    writer_cpu_s: f64,
    writer_secs: f64,
}

fn run_ring(packets: &[Vec<u8>], n_readers: usize, pace: Pace) -> RunResult {
    run_ring_as("ring", packets, n_readers, pace)
}

fn run_ring_as(role: &str, packets: &[Vec<u8>], n_readers: usize, pace: Pace) -> RunResult {
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

fn run_unix(packets: &[Vec<u8>], pace: Pace) -> RunResult {
    let path = std::env::temp_dir().join(format!("cuframes-bench-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let reader = spawn_reader("unix", path.to_str().unwrap());
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

fn run_udp(packets: &[Vec<u8>], pace: Pace) -> RunResult {
    let reader = spawn_reader("udp", "");
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

/// memcpy bandwidth in GB/s for `len`-byte copies.
fn memcpy_gbps(len: usize, total: usize) -> f64 {
    let src = vec![0x5Au8; len];
    let mut dst = vec![0u8; len];
    let iters = (total / len).max(1);
    let t = Instant::now();
    for _ in 0..iters {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    (iters * len) as f64 / 1e9 / t.elapsed().as_secs_f64()
}

fn row(name: &str, run: &RunResult, m: &Measured) {
    println!(
        "| {name} | {:.0} | {:.1} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {:.1} | {:.1} |",
        m.pps(),
        m.mbps(),
        m.p50_us,
        m.p99_us,
        m.cpu_pct(),
        m.cpu_us_per_packet(),
        m.overruns + m.lost,
        100.0 * run.writer_cpu_s / run.writer_secs.max(1e-9),
        m.packets as f64
    );
}

fn header(title: &str) {
    println!("\n### {title}\n");
    println!(
        "| transport | packets/s | MB/s | p50 µs | p99 µs | reader CPU % | reader CPU µs/pkt | \
         lost (overruns/drops) | writer CPU % | packets read |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
}

const TAIL_FIELDS: [&str; 8] = [
    "p99_key_us",
    "p99_nonkey_us",
    "waited_pct",
    "p99_waited_us",
    "p99_ready_us",
    "tail_key_pct",
    "tail_waited_pct",
    "tail_backlog",
];

/// Where each 1-reader p99 comes from: keyframes or not, after a wait or not, and what was
/// already queued when the reader asked for the packets of the tail (ring: packets; socket:
/// bytes).
fn tail_table(rows: &[(&str, &Measured)]) {
    println!("\nWhere the p99 comes from (1 reader; tail = packets at or above p99):\n");
    println!(
        "| reader | p99 µs | p99 keyframes | p99 others | reads that waited % | p99 after a \
         wait | p99 ready | tail: keyframes % | tail: after a wait % | tail: mean backlog |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (name, m) in rows {
        let f: Vec<String> = m.tail.iter().map(|(_, v)| format!("{v:.1}")).collect();
        println!("| {name} | {:.0} | {} |", m.p99_us, f.join(" | "));
    }
}

fn mean(ms: &[Measured], f: impl Fn(&Measured) -> f64) -> f64 {
    ms.iter().map(&f).sum::<f64>() / ms.len().max(1) as f64
}

/// Returns the packets per second the Unix socket reader got (the load for `equal_load`).
fn scenario(
    title: &str,
    packets: &[Vec<u8>],
    pace: Pace,
    memcpy_small: f64,
    memcpy_big: f64,
) -> f64 {
    header(title);
    let r1 = run_ring(packets, 1, pace);
    row("ring, 1 reader", &r1, &r1.readers[0]);
    let r8 = run_ring(packets, 8, pace);
    for (i, m) in r8.readers.iter().enumerate() {
        row(&format!("ring, 8 readers: #{i}"), &r8, m);
    }
    let ux = run_unix(packets, pace);
    row("Unix stream socket, 1 reader", &ux, &ux.readers[0]);
    let ud = run_udp(packets, pace);
    row("UDP 127.0.0.1, 1 reader", &ud, &ud.readers[0]);
    // The demuxer's way of reading, before and after next_packet_into (a fresh packet each).
    let two = run_ring_as("ring-demuxer-2", packets, 1, pace);
    row(
        "ring, demuxer pattern: into the reader's buffer, then into a fresh packet (2 copies)",
        &two,
        &two.readers[0],
    );
    let one = run_ring_as("ring-demuxer-1", packets, 1, pace);
    row(
        "ring, demuxer pattern: next_packet_into a fresh packet (1 copy)",
        &one,
        &one.readers[0],
    );

    let spin = run_ring_as("ring-demuxer-1-spin", packets, 1, pace);
    row(
        "ring, demuxer pattern, 1 copy, spin 100 µs before each sleep",
        &spin,
        &spin.readers[0],
    );

    tail_table(&[
        ("ring, plain", &r1.readers[0]),
        ("ring, demuxer 2 copies", &two.readers[0]),
        ("ring, demuxer 1 copy", &one.readers[0]),
        ("ring, demuxer 1 copy, spin 100 µs", &spin.readers[0]),
        ("Unix socket", &ux.readers[0]),
    ]);
    let ring = &r1.readers[0];
    let (u, d) = (&ux.readers[0], &ud.readers[0]);
    println!("\nRatios (ring with 1 reader / baseline; > 1 means the ring has more):\n");
    for (name, b) in [("Unix socket", u), ("UDP", d)] {
        println!(
            "- vs {name}: MB/s {:.2}, packets delivered {:.2}, p50 latency {:.2}, p99 latency \
             {:.2}, reader CPU per packet {:.2}",
            ring.mbps() / b.mbps(),
            ring.packets as f64 / b.packets.max(1) as f64,
            ring.p50_us / b.p50_us.max(1e-9),
            ring.p99_us / b.p99_us.max(1e-9),
            ring.cpu_us_per_packet() / b.cpu_us_per_packet().max(1e-9),
        );
    }
    let (two, one, spin) = (&two.readers[0], &one.readers[0], &spin.readers[0]);
    println!(
        "- demuxer pattern, 1 copy / 2 copies: reader CPU per packet {:.2}, MB/s {:.2}, p99 {:.2}; \
         1 copy against the Unix socket: p99 {:.2}; 1 copy spinning 100 µs against the Unix \
         socket: p99 {:.2}, reader CPU per packet {:.2}, reader CPU % {:.1} vs {:.1}",
        one.cpu_us_per_packet() / two.cpu_us_per_packet().max(1e-9),
        one.mbps() / two.mbps().max(1e-9),
        one.p99_us / two.p99_us.max(1e-9),
        one.p99_us / u.p99_us.max(1e-9),
        spin.p99_us / u.p99_us.max(1e-9),
        spin.cpu_us_per_packet() / u.cpu_us_per_packet().max(1e-9),
        spin.cpu_pct(),
        u.cpu_pct()
    );
    let total8 = r8.readers.iter().map(Measured::mbps).sum::<f64>();
    println!(
        "- vs memcpy ({memcpy_small:.1} GB/s in cache, {memcpy_big:.1} GB/s for 64 MiB): \
         1 reader {:.3} / {:.3}; 8 readers together ({total8:.0} MB/s) {:.3} / {:.3}",
        ring.mbps() / 1e3 / memcpy_small,
        ring.mbps() / 1e3 / memcpy_big,
        total8 / 1e3 / memcpy_small,
        total8 / 1e3 / memcpy_big
    );
    println!(
        "- 8 readers: mean p50 {:.0} µs, mean p99 {:.0} µs, {} overruns in total",
        mean(&r8.readers, |m| m.p50_us),
        mean(&r8.readers, |m| m.p99_us),
        r8.readers.iter().map(|m| m.overruns).sum::<u64>()
    );
    ux.readers[0].pps()
}

/// The unthrottled comparison is one of two different loads: the ring's writer never waits,
/// the socket's blocks when its buffer is full, so each latency there belongs to its own
/// throughput. Here both carry the same load, `pps` packets per second, below what the socket
/// sustained unthrottled: latency at equal throughput.
fn equal_load(packets: &[Vec<u8>], pps: f64) {
    header(&format!(
        "Equal load: the same stream at {pps:.0} packets/s ({:.0} MB/s), 90 % of what the Unix \
         socket sustained unthrottled",
        pps * packets.iter().map(Vec::len).sum::<usize>() as f64 / packets.len() as f64 / 1e6
    ));
    let pace = Pace::PacketsPerSec(pps);
    let one = run_ring_as("ring-demuxer-1", packets, 1, pace);
    row(
        "ring, demuxer pattern: next_packet_into a fresh packet (1 copy)",
        &one,
        &one.readers[0],
    );
    let ux = run_unix(packets, pace);
    row("Unix stream socket, 1 reader", &ux, &ux.readers[0]);
    let (one, u) = (&one.readers[0], &ux.readers[0]);
    tail_table(&[("ring, demuxer 1 copy", one), ("Unix socket", u)]);
    println!(
        "\n- ring 1 copy / Unix socket at equal load: p50 {:.2}, p99 {:.2}, reader CPU per \
         packet {:.2}",
        one.p50_us / u.p50_us.max(1e-9),
        one.p99_us / u.p99_us.max(1e-9),
        one.cpu_us_per_packet() / u.cpu_us_per_packet().max(1e-9),
    );
}

fn main() {
    if let Ok(role) = std::env::var(ROLE_ENV) {
        let arg = std::env::var(ARG_ENV).unwrap_or_default();
        match role.as_str() {
            "ring" => ring_reader(&arg),
            "ring-demuxer-2" => demuxer_reader(&arg, 2, Duration::ZERO),
            "ring-demuxer-1" => demuxer_reader(&arg, 1, Duration::ZERO),
            "ring-demuxer-1-spin" => demuxer_reader(&arg, 1, SPIN),
            "unix" => unix_reader(&arg),
            "udp" => udp_reader(),
            other => panic!("unknown role {other}"),
        }
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    let secs: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(6);
    let fast_n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20_000);

    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("packet_bench: {cpus} CPUs, throttled {secs} s, unthrottled {fast_n} packets");
    let small = memcpy_gbps(84_000, 2 << 30);
    let big = memcpy_gbps(64 << 20, 4 << 30);
    println!("\nmemcpy: {small:.1} GB/s for 84 KB copies (cache), {big:.1} GB/s for 64 MiB copies");

    let make = |n: usize| -> Vec<Vec<u8>> {
        stream_sizes(n)
            .into_iter()
            .enumerate()
            .map(|(i, len)| vec![i as u8; len])
            .collect()
    };
    let real_time = make(secs as usize * FPS as usize);
    let avg = real_time.iter().map(Vec::len).sum::<usize>() as f64 / real_time.len() as f64;
    println!(
        "stream: {} packets, mean {avg:.0} B ({:.1} Mbit/s at {FPS} fps), keyframe every {GOP}",
        real_time.len(),
        avg * 8.0 * FPS as f64 / 1e6
    );
    scenario(
        "Throttled: 20 Mbit/s, 30 fps (real time)",
        &real_time,
        Pace::RealTime,
        small,
        big,
    );
    let fast = make(fast_n);
    let socket_pps = scenario(
        "Unthrottled: the same stream as fast as possible",
        &fast,
        Pace::Unthrottled,
        small,
        big,
    );
    equal_load(&fast, 0.9 * socket_pps);
}
