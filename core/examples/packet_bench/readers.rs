//! The reader processes, one per role: the ring read plainly or as the `cuframes_pkt` demuxer
//! reads it, a Unix stream socket, and UDP. Each prints a ready line, reads until the writer
//! ends, and prints its `Recorder`'s result line.

use std::io::Read;
use std::net::UdpSocket;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use cuframes_core::packet_ring::PacketRingReader;
use cuframes_core::ErrorCode;

use crate::cli::Role;
use crate::fresh_packet::FreshPacket;
use crate::recorder::Recorder;
use crate::stream::UDP_HDR;

/// The spinning demuxer row's `spin` (more than the unthrottled stream's packet interval).
const SPIN: Duration = Duration::from_micros(100);

/// Plays `role` with `arg` (the SHM name or the socket path).
pub fn run(role: Role, arg: &str) {
    match role {
        Role::Ring => ring_reader(arg),
        Role::Demuxer2 => demuxer_reader(arg, 2, Duration::ZERO),
        Role::Demuxer1 => demuxer_reader(arg, 1, Duration::ZERO),
        Role::Demuxer1Spin => demuxer_reader(arg, 1, SPIN),
        Role::Unix => unix_reader(arg),
        Role::Udp => udp_reader(),
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

/// buffer, then into a fresh packet (a demuxer without next_packet_into); 1 = straight into
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
