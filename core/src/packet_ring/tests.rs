//! Unit tests of the packet ring: publish/read, wrap-around, R18, late start, extradata,
//! refusals, overrun re-anchoring (R8, R9, R29), shutdown and liveness.
//!
//! Every SHM object is named with the pid and a unique suffix and is unlinked by a guard on
//! drop, so a failing test leaves nothing in /dev/shm.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::shm_region::*;
use super::*;
use crate::error::ErrorCode;
use crate::paths::Key;
use crate::shm;
use crate::shm::residency::{kernel_populates, resident_bytes_of};
use crate::wire::{PACKET_FLAG_CORRUPT, PACKET_FLAG_KEY, PACKET_FLAG_LAST_IN_AU};

/// Unlinks an SHM object on drop (also when the test panics).
pub(super) struct ShmGuard(pub String);

impl Drop for ShmGuard {
    fn drop(&mut self) {
        let _ = shm::unlink(&self.0);
    }
}

/// A unique key and the guard of its packet SHM.
pub(super) fn unique_key(tag: &str) -> (Key, ShmGuard) {
    let key = Key::new(&format!(
        "t-{tag}-{}-{}",
        std::process::id(),
        crate::util::unique_suffix()
    ))
    .unwrap();
    let guard = ShmGuard(key.packet_shm_name());
    (key, guard)
}

pub(super) fn writer(tag: &str, slots: u32, data: u32) -> (PacketRingWriter, ShmGuard) {
    let (key, guard) = unique_key(tag);
    let w = PacketRingWriter::create(
        &key,
        PacketRingConfig {
            codec_id: crate::wire::CODEC_ID_H264,
            extradata: vec![0, 0, 0, 1, 0x67, 0x42],
            ring_slots: slots,
            data_size: data,
        },
        0o600,
    )
    .unwrap();
    (w, guard)
}

fn payload(seq: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seq as usize * 31 + i * 7) as u8)
        .collect()
}

const POLL: Option<Duration> = Some(Duration::ZERO);

#[test]
fn publish_and_read_round_trip() {
    let (mut w, _g) = writer("rt", 8, 4096);
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    assert_eq!(r.codec_id(), crate::wire::CODEC_ID_H264);
    assert_eq!(r.ring_slots(), 8);
    assert_eq!(r.data_size(), 4096);
    assert_eq!(r.extradata().unwrap(), vec![0, 0, 0, 1, 0x67, 0x42]);

    let mut out = Vec::new();
    assert_eq!(
        r.next_packet(POLL, &mut out).unwrap_err().code(),
        ErrorCode::Timeout
    );
    // R18: first seq 1.
    let s1 = w
        .publish(
            &payload(1, 100),
            10,
            5,
            PACKET_FLAG_KEY | PACKET_FLAG_LAST_IN_AU,
        )
        .unwrap();
    assert_eq!(s1, 1);
    let s2 = w
        .publish(&payload(2, 33), 20, 15, PACKET_FLAG_CORRUPT)
        .unwrap();
    assert_eq!(s2, 2);
    let p = r.next_packet(POLL, &mut out).unwrap();
    assert_eq!(
        p,
        PacketInfo {
            seq: 1,
            pts_ns: 10,
            dts_ns: 5,
            flags: PACKET_FLAG_KEY | PACKET_FLAG_LAST_IN_AU
        }
    );
    assert!(p.is_key() && p.is_last_in_au() && !p.is_discontinuity());
    assert_eq!(out, payload(1, 100));
    let p = r.next_packet(POLL, &mut out).unwrap();
    assert_eq!((p.seq, p.pts_ns, p.dts_ns), (2, 20, 15));
    assert!(p.is_corrupt());
    assert_eq!(out, payload(2, 33));
    assert_eq!(
        r.next_packet(POLL, &mut out).unwrap_err().code(),
        ErrorCode::Timeout
    );
    let st = r.stats();
    assert_eq!(
        (st.packets, st.bytes, st.overruns, st.last_seq),
        (2, 133, 0, 2)
    );
    let ws = w.stats();
    assert_eq!((ws.packets, ws.bytes, ws.last_keyframe_seq), (2, 133, 1));
    assert_eq!(
        (w.seq(), w.bytes_written(), w.last_keyframe_seq()),
        (2, 133, 1)
    );
    // Missing pts (R25) passes through.
    w.publish(b"x", crate::wire::NO_PTS, crate::wire::NO_PTS, 0)
        .unwrap();
    let p = r.next_packet(POLL, &mut out).unwrap();
    assert_eq!((p.pts_ns, p.dts_ns), (i64::MIN, i64::MIN));
}

#[test]
fn header_is_initialised_per_spec() {
    let (w, _g) = writer("hdr", 5, 1000);
    let (_fd, m) = shm::open(w.shm_name(), 0, false).unwrap();
    assert_eq!(m.len(), crate::wire::packet::packet_shm_size(5, 1000));
    assert_eq!(m.atomic_u32(HDR_MAGIC).load(Ordering::Relaxed), 0xCC7C_1DCD);
    assert_eq!(m.atomic_u32(HDR_PROTO_VERSION).load(Ordering::Relaxed), 4);
    assert_eq!(m.atomic_u32(HDR_RING_SLOTS).load(Ordering::Relaxed), 5);
    assert_eq!(m.atomic_u32(HDR_DATA_SIZE).load(Ordering::Relaxed), 1000);
    assert_eq!(m.atomic_u32(HDR_CODEC_ID).load(Ordering::Relaxed), 27);
    assert_eq!(
        m.atomic_u64(HDR_PRODUCER_PID).load(Ordering::Relaxed),
        u64::from(std::process::id())
    );
    for off in [
        HDR_GLOBAL_SEQ,
        HDR_LAST_KEYFRAME_SEQ,
        HDR_WRITE_OFFSET,
        HDR_SHUTDOWN_FLAG,
    ] {
        assert_eq!(m.atomic_u64(off).load(Ordering::Relaxed), 0);
    }
    for i in 0..5 {
        let slot = crate::wire::packet::packet_slot_offset(i);
        assert_eq!(m.atomic_u64(slot).load(Ordering::Relaxed), u64::MAX);
    }
}

#[test]
fn wraparound_split_reads() {
    // 4 slots, 100 bytes: packets of 30 wrap the data ring every few packets.
    let (mut w, _g) = writer("wrap", 4, 100);
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    r.start_at(1);
    let mut out = Vec::new();
    let mut split_seen = 0;
    for seq in 1..=50u64 {
        let len = 1 + (seq as usize * 13) % 100;
        let off = w.bytes_written();
        w.publish(&payload(seq, len), seq as i64, 0, PACKET_FLAG_KEY)
            .unwrap();
        if off % 100 + len as u64 > 100 {
            split_seen += 1;
        }
        let p = r.next_packet(POLL, &mut out).unwrap();
        assert_eq!(p.seq, seq);
        assert_eq!(out, payload(seq, len), "seq {seq}");
    }
    assert!(split_seen > 10, "{split_seen}");
    // A packet of exactly data_size fits.
    w.publish(&payload(51, 100), 0, 0, 0).unwrap();
    r.next_packet(POLL, &mut out).unwrap();
    assert_eq!(out, payload(51, 100));
    assert_eq!(r.stats().overruns, 0);
}

#[test]
fn fresh_reader_waits_for_first_keyframe() {
    let (mut w, _g) = writer("firstkey", 8, 4096);
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    let mut out = Vec::new();
    // R26: non-key packets before the first KEY are skipped.
    w.publish(b"a", 0, 0, 0).unwrap();
    w.publish(b"b", 0, 0, 0).unwrap();
    assert_eq!(
        r.next_packet(POLL, &mut out).unwrap_err().code(),
        ErrorCode::Timeout
    );
    w.publish(b"KEY", 0, 0, PACKET_FLAG_KEY).unwrap();
    w.publish(b"d", 0, 0, 0).unwrap();
    let p = r.next_packet(POLL, &mut out).unwrap();
    assert_eq!((p.seq, out.as_slice()), (3, &b"KEY"[..]));
    assert!(!p.is_discontinuity());
    assert_eq!(r.next_packet(POLL, &mut out).unwrap().seq, 4);
    // start_at(1) reads everything from the beginning.
    r.start_at(1);
    assert_eq!(r.next_packet(POLL, &mut out).unwrap().seq, 1);
}

#[test]
fn late_reader_starts_on_keyframe() {
    let (mut w, _g) = writer("late", 16, 1 << 16);
    for seq in 1..=40u64 {
        let flags = if seq % 10 == 1 { PACKET_FLAG_KEY } else { 0 };
        w.publish(&payload(seq, 50), seq as i64, 0, flags).unwrap();
    }
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    let mut out = Vec::new();
    let p = r.next_packet(POLL, &mut out).unwrap();
    assert_eq!(p.seq, 31);
    assert!(p.is_key() && !p.is_discontinuity());
    for seq in 32..=40 {
        assert_eq!(r.next_packet(POLL, &mut out).unwrap().seq, seq);
    }
    assert_eq!(r.stats().overruns, 0);
    // Re-positioning later.
    w.publish(b"k", 0, 0, PACKET_FLAG_KEY).unwrap();
    w.publish(b"n", 0, 0, 0).unwrap();
    r.start_at(35);
    assert_eq!(r.next_packet(POLL, &mut out).unwrap().seq, 35);
    r.start_at_last_keyframe();
    assert_eq!(r.next_packet(POLL, &mut out).unwrap().seq, 41);
}

#[test]
fn late_start_on_lost_keyframe_moves_to_next_keyframe() {
    // GOP 20 > 8 slots: the newest keyframe has left the slot ring (§10.8 risk).
    let (mut w, _g) = writer("lostkey", 8, 1 << 16);
    for seq in 1..=35u64 {
        let flags = if seq % 20 == 1 { PACKET_FLAG_KEY } else { 0 };
        w.publish(&payload(seq, 10), 0, 0, flags).unwrap();
    }
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    let mut out = Vec::new();
    assert_eq!(
        r.next_packet(POLL, &mut out).unwrap_err().code(),
        ErrorCode::Timeout
    );
    assert_eq!(r.stats().overruns, 1);
    for seq in 36..=40u64 {
        w.publish(&payload(seq, 10), 0, 0, 0).unwrap();
    }
    assert_eq!(
        r.next_packet(POLL, &mut out).unwrap_err().code(),
        ErrorCode::Timeout
    );
    w.publish(&payload(41, 10), 0, 0, PACKET_FLAG_KEY).unwrap();
    let p = r.next_packet(POLL, &mut out).unwrap();
    assert_eq!(p.seq, 41);
    assert!(p.is_key() && p.is_discontinuity());
    assert_eq!(out, payload(41, 10));
}

#[test]
fn extradata_set_once_before_first_packet() {
    let (key, _g) = unique_key("xd");
    let mut w = PacketRingWriter::create(
        &key,
        PacketRingConfig {
            codec_id: crate::wire::CODEC_ID_HEVC,
            ..Default::default()
        },
        0o600,
    )
    .unwrap();
    assert_eq!(w.ring_slots(), 64);
    assert_eq!(w.data_size(), 8 << 20);
    let r = PacketRingReader::open(&format!("/{}", w.shm_name())).unwrap();
    assert_eq!(r.codec_id(), 173);
    assert!(r.extradata().unwrap().is_empty());
    let xd: Vec<u8> = (0..4096).map(|i| i as u8).collect();
    assert_eq!(
        w.set_extradata(&[0; 4097]).unwrap_err().code(),
        ErrorCode::InvalidArg
    );
    w.set_extradata(&xd).unwrap();
    // Re-readable by an already open reader.
    assert_eq!(r.extradata().unwrap(), xd);
    w.set_extradata(&xd).unwrap();
    assert_eq!(
        w.set_extradata(b"other").unwrap_err().code(),
        ErrorCode::InvalidArg
    );
    // Empty extradata cannot be set after the first packet.
    let (mut w2, _g2) = {
        let (key, g) = unique_key("xd2");
        let w = PacketRingWriter::create(&key, PacketRingConfig::default(), 0o600).unwrap();
        (w, g)
    };
    w2.publish(b"p", 0, 0, PACKET_FLAG_KEY).unwrap();
    let e = w2.set_extradata(b"late").unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArg);
    assert!(e.message().contains("before the first packet"), "{e}");
}

#[test]
fn refusals_touch_nothing() {
    let (mut w, _g) = writer("refuse", 4, 64);
    let (_fd, m) = shm::open(w.shm_name(), 0, false).unwrap();
    let mut before = vec![0u8; m.len()];
    m.read_bytes(0, &mut before);
    let e = w.publish(&[0; 65], 0, 0, 0).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArg);
    assert!(
        e.message().contains("65 bytes") && e.message().contains("64-byte"),
        "{e}"
    );
    let e = w.publish(&[], 0, 0, 0).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArg);
    assert!(e.message().contains("empty"), "{e}");
    let e = w.publish(b"x", 0, 0, 1 << 4).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArg);
    assert!(e.message().contains("reserved"), "{e}");
    let mut after = vec![0u8; m.len()];
    m.read_bytes(0, &mut after);
    assert_eq!(before, after);
    assert_eq!(w.seq(), 0);

    // Bad configurations.
    let (key, _g2) = unique_key("refuse2");
    for (slots, data, xd) in [(0, 64, 0), (1025, 64, 0), (4, 0, 0), (4, 64, 4097)] {
        let e = PacketRingWriter::create(
            &key,
            PacketRingConfig {
                codec_id: 27,
                extradata: vec![0; xd],
                ring_slots: slots,
                data_size: data,
            },
            0o600,
        )
        .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArg, "{slots} {data} {xd}");
    }
    // The name is taken: exclusive creation.
    let e = PacketRingWriter::create(
        &Key::new(&w.shm_name()["cuframes-".len()..w.shm_name().len() - "-packets".len()]).unwrap(),
        PacketRingConfig::default(),
        0o600,
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::AlreadyExists);
    // After shutdown.
    w.shutdown();
    assert_eq!(
        w.publish(b"x", 0, 0, 0).unwrap_err().code(),
        ErrorCode::InvalidArg
    );
}

#[test]
fn slot_overrun_reanchors_at_keyframe_with_discontinuity() {
    let (mut w, _g) = writer("ovr", 8, 1 << 16);
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    let mut out = Vec::new();
    for seq in 1..=3u64 {
        w.publish(
            &payload(seq, 20),
            0,
            0,
            if seq == 1 { PACKET_FLAG_KEY } else { 0 },
        )
        .unwrap();
    }
    assert_eq!(r.next_packet(POLL, &mut out).unwrap().seq, 1);
    // Lap the slot ring: 30 more packets, keyframes every 5.
    for seq in 4..=33u64 {
        let flags = if seq % 5 == 0 { PACKET_FLAG_KEY } else { 0 };
        w.publish(&payload(seq, 20), 0, 0, flags).unwrap();
    }
    let p = r.next_packet(POLL, &mut out).unwrap();
    assert_eq!(p.seq, 30);
    assert!(p.is_key() && p.is_discontinuity());
    assert_eq!(out, payload(30, 20));
    let p = r.next_packet(POLL, &mut out).unwrap();
    assert_eq!(p.seq, 31);
    assert!(!p.is_discontinuity());
    assert_eq!(r.stats().overruns, 1);
}

#[test]
fn data_overrun_is_detected_even_when_the_slot_is_valid() {
    // R8: 64 slots but only 100 data bytes: the slot of seq 2 stays valid while its bytes are
    // overwritten by seqs 3..=5.
    let (mut w, _g) = writer("r8", 64, 100);
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    r.set_overrun_errors(true);
    let mut out = Vec::new();
    w.publish(&payload(1, 40), 0, 0, PACKET_FLAG_KEY).unwrap();
    assert_eq!(r.next_packet(POLL, &mut out).unwrap().seq, 1);
    w.publish(&payload(2, 40), 0, 0, 0).unwrap();
    w.publish(&payload(3, 40), 0, 0, 0).unwrap();
    w.publish(&payload(4, 40), 0, 0, PACKET_FLAG_KEY).unwrap();
    w.publish(&payload(5, 10), 0, 0, 0).unwrap();
    // The slot of seq 2 still says seq 2, but its bytes [40, 80) were overwritten by seq 4.
    let e = r.next_packet(POLL, &mut out).unwrap_err();
    assert_eq!(e.code(), ErrorCode::PacketOverrun);
    let p = r.next_packet(POLL, &mut out).unwrap();
    assert_eq!(p.seq, 4);
    assert!(p.is_discontinuity() && p.is_key());
    assert_eq!(out, payload(4, 40));
    assert_eq!(r.next_packet(POLL, &mut out).unwrap().seq, 5);
    assert_eq!(r.stats().overruns, 1);
}

#[test]
fn shutdown_disconnects_after_the_last_packet() {
    let (mut w, _g) = writer("shut", 8, 4096);
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    let mut out = Vec::new();
    w.publish(b"k", 0, 0, PACKET_FLAG_KEY).unwrap();
    w.publish(b"p", 0, 0, 0).unwrap();
    w.shutdown();
    w.shutdown();
    assert_eq!(r.next_packet(POLL, &mut out).unwrap().seq, 1);
    assert_eq!(r.next_packet(None, &mut out).unwrap().seq, 2);
    let e = r.next_packet(None, &mut out).unwrap_err();
    assert_eq!(e.code(), ErrorCode::Disconnected);
    // Dropping the writer unlinks the SHM.
    let name = w.shm_name().to_owned();
    drop(w);
    assert_eq!(
        PacketRingReader::open(&name).unwrap_err().code(),
        ErrorCode::NotFound
    );
}

#[test]
fn blocked_reader_wakes_on_publish_and_on_shutdown() {
    let (mut w, _g) = writer("wake", 8, 4096);
    let name = w.shm_name().to_owned();
    let h = std::thread::spawn(move || {
        let mut r = PacketRingReader::open(&name).unwrap();
        let mut out = Vec::new();
        let t = Instant::now();
        let p = r.next_packet(Some(Duration::from_secs(10)), &mut out);
        let first = (p.map(|p| p.seq), t.elapsed());
        let t = Instant::now();
        let e = r.next_packet(None, &mut out).unwrap_err().code();
        (first, e, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(50));
    w.publish(b"k", 0, 0, PACKET_FLAG_KEY).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    w.shutdown();
    let ((seq, waited), e, waited2) = h.join().unwrap();
    assert_eq!(seq.unwrap(), 1);
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(e, ErrorCode::Disconnected);
    assert!(waited2 < Duration::from_secs(2), "{waited2:?}");
}

/// Voluntary context switches of the calling thread so far (each sleep is one).
fn voluntary_switches() -> i64 {
    // SAFETY: rusage is plain data; getrusage fills it for the calling thread.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    ru.ru_nvcsw
}

/// A reader (spinning for `spin` or not) reads 20 packets published 2 ms apart; how often it
/// slept meanwhile.
fn sleeps_while_reading(tag: &str, spin: Duration) -> i64 {
    let (mut w, _g) = writer(tag, 32, 1 << 16);
    w.publish(b"k", 0, 0, PACKET_FLAG_KEY).unwrap();
    let name = w.shm_name().to_owned();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut r = PacketRingReader::open(&name).unwrap();
        r.set_spin(spin);
        let mut out = Vec::with_capacity(64);
        r.next_packet(POLL, &mut out).unwrap();
        ready_tx.send(()).unwrap();
        let before = voluntary_switches();
        for want in 2..=21u64 {
            let p = r.next_packet(Some(Duration::from_secs(10)), &mut out);
            assert_eq!(p.unwrap().seq, want);
        }
        voluntary_switches() - before
    });
    ready_rx.recv().unwrap();
    for i in 1..=20 {
        std::thread::sleep(Duration::from_millis(2));
        w.publish(&payload(i, 100), i as i64, i as i64, 0).unwrap();
    }
    h.join().unwrap()
}

#[test]
fn a_spinning_reader_reads_without_sleeping() {
    // The control: a sleeping reader sleeps for (nearly) every packet.
    let slept = sleeps_while_reading("nospin", Duration::ZERO);
    assert!(
        slept >= 10,
        "a sleeping reader slept {slept} times for 20 packets"
    );
    let slept = sleeps_while_reading("spin", Duration::from_secs(1));
    assert!(
        slept <= 2,
        "a spinning reader slept {slept} times for 20 packets"
    );
}

#[test]
fn a_spinning_reader_keeps_its_timeout_and_sees_shutdown() {
    let (mut w, _g) = writer("spinend", 8, 4096);
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    r.set_spin(Duration::from_secs(10));
    let mut out = Vec::new();
    let t = Instant::now();
    let e = r.next_packet(Some(Duration::from_millis(150)), &mut out);
    assert_eq!(e.unwrap_err().code(), ErrorCode::Timeout);
    let el = t.elapsed();
    assert!(
        el >= Duration::from_millis(140) && el < Duration::from_secs(2),
        "{el:?}"
    );
    let h = std::thread::spawn(move || {
        let t = Instant::now();
        let e = r.next_packet(None, &mut out).unwrap_err().code();
        (e, t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(50));
    w.shutdown();
    let (e, el) = h.join().unwrap();
    assert_eq!(e, ErrorCode::Disconnected);
    assert!(el < Duration::from_secs(2), "{el:?}");
}

#[test]
fn timeout_is_bounded() {
    let (_w, _g) = writer("timeout", 8, 4096);
    let mut r = PacketRingReader::open(_w.shm_name()).unwrap();
    let mut out = Vec::new();
    let t = Instant::now();
    let e = r
        .next_packet(Some(Duration::from_millis(150)), &mut out)
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Timeout);
    let el = t.elapsed();
    assert!(
        el >= Duration::from_millis(140) && el < Duration::from_secs(2),
        "{el:?}"
    );
}

#[test]
fn dead_producer_disconnects_a_waiting_reader() {
    let (w, _g) = writer("dead", 8, 4096);
    // Pretend the producer is a process that has exited (and was reaped).
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = u64::from(child.id());
    child.wait().unwrap();
    let (_fd, m) = shm::open(w.shm_name(), 0, true).unwrap();
    m.atomic_u64(HDR_PRODUCER_PID).store(pid, Ordering::Relaxed);
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    let mut out = Vec::new();
    let t = Instant::now();
    let e = r
        .next_packet(Some(Duration::from_secs(10)), &mut out)
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
    assert!(e.message().contains(&pid.to_string()), "{e}");
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[test]
fn concurrent_writer_and_reader_threads_never_see_torn_packets() {
    let (mut w, _g) = writer("threads", 16, 4096);
    let name = w.shm_name().to_owned();
    let n = 20_000u64;
    let h = std::thread::spawn(move || {
        let mut r = PacketRingReader::open(&name).unwrap();
        r.start_at(0);
        let mut out = Vec::new();
        let mut last = 0;
        loop {
            match r.next_packet(Some(Duration::from_secs(10)), &mut out) {
                Ok(p) => {
                    assert!(p.seq > last);
                    if last == 0 {
                        assert!(p.is_key(), "starts on a keyframe");
                    } else if p.seq != last + 1 {
                        assert!(p.is_discontinuity() && p.is_key());
                    }
                    last = p.seq;
                    assert_eq!(p.pts_ns, p.seq as i64);
                    assert_eq!(out, payload(p.seq, 1 + (p.seq as usize * 37) % 700));
                }
                Err(e) => {
                    assert_eq!(e.code(), ErrorCode::Disconnected, "{e}");
                    break;
                }
            }
        }
        r.stats()
    });
    for seq in 1..=n {
        let flags = if seq % 8 == 1 { PACKET_FLAG_KEY } else { 0 };
        w.publish(
            &payload(seq, 1 + (seq as usize * 37) % 700),
            seq as i64,
            0,
            flags,
        )
        .unwrap();
    }
    w.shutdown();
    let st = h.join().unwrap();
    assert!(st.packets > 0 && st.last_seq <= n);
}

/// `next_packet_into` copies straight into the consumer's buffer and checks the seqlock after
/// that copy: a writer that laps the ring *during* the copy (here from inside the sink, before
/// it hands its buffer out) makes the reader throw the copy away, re-anchor on a keyframe and
/// ask the sink again; the bytes it returns are that packet's.
#[test]
fn a_copy_into_the_sink_that_races_the_writer_is_redone() {
    struct LappingSink<'a> {
        w: &'a mut PacketRingWriter,
        asked: Vec<usize>,
        buf: Vec<u8>,
        lap: bool,
    }
    impl PacketSink for LappingSink<'_> {
        fn buffer(&mut self, len: usize) -> crate::Result<&mut [u8]> {
            self.asked.push(len);
            if std::mem::take(&mut self.lap) {
                for seq in 3..=40u64 {
                    let flags = if seq % 10 == 0 { PACKET_FLAG_KEY } else { 0 };
                    self.w
                        .publish(&payload(seq, 20 + seq as usize), 0, 0, flags)
                        .unwrap();
                }
            }
            self.buf.resize(len, 0xEE);
            Ok(&mut self.buf)
        }
    }
    let (mut w, _g) = writer("sinkrace", 8, 1 << 16);
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    w.publish(&payload(1, 21), 0, 0, PACKET_FLAG_KEY).unwrap();
    w.publish(&payload(2, 22), 0, 0, 0).unwrap();
    let mut out = Vec::new();
    assert_eq!(r.next_packet(POLL, &mut out).unwrap().seq, 1);
    let mut sink = LappingSink {
        w: &mut w,
        asked: Vec::new(),
        buf: Vec::new(),
        lap: true,
    };
    let p = r.next_packet_into(POLL, &mut sink).unwrap();
    assert_eq!(p.seq, 40, "re-anchored on the newest keyframe");
    assert!(p.is_key() && p.is_discontinuity());
    assert_eq!(sink.asked, vec![22, 60], "asked for seq 2, then for seq 40");
    assert_eq!(sink.buf, payload(40, 60));
    assert_eq!(r.stats().overruns, 1);
}

/// A sink that has no buffer (an allocation failure) gets a clear error, and the packet is
/// not lost: the next read returns it.
#[test]
fn a_sink_without_a_buffer_loses_no_packet() {
    struct NoMemory;
    impl PacketSink for NoMemory {
        fn buffer(&mut self, len: usize) -> crate::Result<&mut [u8]> {
            Err(crate::Error::new(
                ErrorCode::NoMemory,
                format!("no {len} bytes"),
            ))
        }
    }
    let (mut w, _g) = writer("sinkfail", 8, 4096);
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    w.publish(&payload(1, 50), 7, 7, PACKET_FLAG_KEY).unwrap();
    let e = r.next_packet_into(POLL, &mut NoMemory).unwrap_err();
    assert_eq!(e.code(), ErrorCode::NoMemory);
    let mut out = Vec::new();
    let p = r.next_packet(POLL, &mut out).unwrap();
    assert_eq!((p.seq, p.pts_ns), (1, 7));
    assert_eq!(out, payload(1, 50));
    assert_eq!(r.stats().packets, 1);
}

#[test]
fn the_ring_is_resident_on_both_sides_before_the_first_packet() {
    if !kernel_populates() {
        println!("SKIPPED: this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)");
        return;
    }
    let (w, _g) = writer("resident", 64, 8 << 20);
    let size = validate_config(64, 8 << 20, 6).unwrap().shm_size();
    let name = w.shm_name().to_owned();
    // The writer's mapping: every page allocated at create, none published yet.
    assert!(
        resident_bytes_of(&name) >= size,
        "writer: {} of {size} bytes resident",
        resident_bytes_of(&name)
    );
    let _r = PacketRingReader::open(&name).unwrap();
    // And the reader's: mapped at open, not on its first lap.
    assert!(
        resident_bytes_of(&name) >= 2 * size,
        "writer and reader: {} of {} bytes resident",
        resident_bytes_of(&name),
        2 * size
    );
}

#[test]
fn a_truncated_ring_is_refused_at_open_not_faulted_on_later() {
    if !kernel_populates() {
        println!("SKIPPED: this kernel has no MADV_POPULATE_READ (Linux < 5.14)");
        return;
    }
    let (w, _g) = writer("trunc", 8, 1 << 16);
    let size = validate_config(8, 1 << 16, 6).unwrap().shm_size();
    let (fd, len) = crate::shm::open_regular(w.shm_name(), true).unwrap();
    assert_eq!(len, size);
    let map = crate::shm::Mapping::map(std::os::fd::AsFd::as_fd(&fd), len, false, "t").unwrap();
    // A peer cuts the object after the reader mapped it (the header stays intact): reading
    // the data area would now raise SIGBUS.
    nix::unistd::ftruncate(std::os::fd::AsFd::as_fd(&fd), 8192).unwrap();
    let Err(e) = PacketRingReader::from_mapping(map) else {
        panic!("a truncated ring was accepted");
    };
    assert_eq!(e.code(), ErrorCode::Protocol, "{e}");
    assert!(e.message().contains("truncated"), "{e}");
}
