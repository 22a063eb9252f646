//! Unit tests of the GOP store: a late start on a keyframe the ring lost reads it and the rest
//! of its GOP from the store, in order and complete; live and lapped readers behave as
//! without it; the bound holds; a subscriber cannot change the store, and a store that lies
//! is refused or read as an error, never out of bounds.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};

use super::gop_store::*;
use super::tests::writer;
use super::*;
use crate::error::ErrorCode;
use crate::shm::{self, Mapping};
use crate::wire::gop_store::*;
use crate::wire::{PACKET_FLAG_DISCONTINUITY, PACKET_FLAG_KEY};

const POLL: Option<Duration> = Some(Duration::ZERO);

fn payload(seq: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seq as usize * 131 + i * 7) as u8)
        .collect()
}

/// Publish `n` packets, a keyframe every `gop`, sizes varied; returns the seqs of keyframes.
fn publish(w: &mut PacketRingWriter, n: u64, gop: u64) -> Vec<u64> {
    let mut keys = Vec::new();
    for _ in 0..n {
        let seq = w.seq() + 1;
        let key = (seq - 1) % gop == 0;
        let len = if key {
            3000
        } else {
            200 + (seq % 7) as usize * 50
        };
        let flags = if key { PACKET_FLAG_KEY } else { 0 };
        assert_eq!(
            w.publish(&payload(seq, len), seq as i64 * 10, seq as i64 * 10, flags)
                .unwrap(),
            seq
        );
        if key {
            keys.push(seq);
        }
    }
    keys
}

fn late_reader(w: &PacketRingWriter, with_store: bool) -> PacketRingReader {
    let mut r = PacketRingReader::open(w.shm_name()).unwrap();
    if with_store {
        let fd = w.gop_store_descriptor().unwrap().unwrap();
        r.set_gop_store(GopStoreReader::import(fd, u64::MAX).unwrap());
    }
    r
}

/// Read and check packets `from..=to`: in order, intact, none flagged DISCONTINUITY.
fn read_all(r: &mut PacketRingReader, from: u64, to: u64) {
    let mut out = Vec::new();
    for seq in from..=to {
        let info = r.next_packet(POLL, &mut out).unwrap();
        assert_eq!(info.seq, seq);
        assert_eq!(info.pts_ns, seq as i64 * 10);
        assert_eq!(out, payload(seq, out.len()), "payload of {seq}");
        assert_eq!(info.flags & PACKET_FLAG_DISCONTINUITY, 0, "packet {seq}");
    }
}

#[test]
fn a_late_start_on_a_lost_keyframe_reads_its_gop_from_the_store() {
    let (mut w, _g) = writer("gs-late", 8, 64 << 10);
    publish(&mut w, 30, 100); // one GOP of 30 packets, the ring holds 8
    let mut r = late_reader(&w, true);
    read_all(&mut r, 1, 30);
    let s = r.stats();
    assert_eq!(
        s.from_gop_store, 22,
        "1..=22 from the store, 23..=30 from the ring"
    );
    assert_eq!(s.overruns, 0);
    // On in the ring, as a live reader.
    publish(&mut w, 5, 100);
    read_all(&mut r, 31, 35);
    assert_eq!(r.stats().from_gop_store, 22);
    assert_eq!(
        r.next_packet(POLL, &mut Vec::new()).unwrap_err().code(),
        ErrorCode::Timeout
    );
}

#[test]
fn without_the_store_a_late_start_waits_for_the_next_keyframe() {
    let (mut w, _g) = writer("gs-base", 8, 64 << 10);
    publish(&mut w, 30, 100);
    let mut r = late_reader(&w, false);
    assert_eq!(
        r.next_packet(POLL, &mut Vec::new()).unwrap_err().code(),
        ErrorCode::Timeout
    );
    // And a publisher without a store sends none.
    let (mut w2, _g2) = writer("gs-none", 8, 64 << 10);
    w2.set_gop_store(None).unwrap();
    assert!(w2.gop_store_descriptor().unwrap().is_none());
    assert_eq!(w2.gop_store_size(), 0);
    publish(&mut w2, 1, 100);
    assert!(w2.set_gop_store(Some(GopStoreConfig::default())).is_err());
}

#[test]
fn a_start_in_the_previous_gop_reads_on_into_the_next() {
    let (mut w, _g) = writer("gs-prev", 8, 64 << 10);
    publish(&mut w, 20, 20); // GOP 1..=20
    let mut r = late_reader(&w, true); // starts at 1
    publish(&mut w, 15, 20); // GOP 21..=40 begins in the other bank
    read_all(&mut r, 1, 35);
    assert!(r.stats().from_gop_store >= 27);
}

#[test]
fn a_reader_too_slow_for_both_banks_re_anchors_on_the_newest_keyframe() {
    let (mut w, _g) = writer("gs-slow", 8, 64 << 10);
    publish(&mut w, 10, 10);
    let mut r = late_reader(&w, true); // at 1, from the store
    let mut out = Vec::new();
    assert_eq!(r.next_packet(POLL, &mut out).unwrap().seq, 1);
    // Two more GOPs: the bank of 1..=10 is reused for 21..=30.
    let keys = publish(&mut w, 25, 10);
    assert_eq!(keys, vec![11, 21, 31]);
    // 2 is gone from ring and store: lost, re-anchored on 31 (in the ring), flagged.
    let info = r.next_packet(POLL, &mut out).unwrap();
    assert_eq!(info.seq, 31);
    assert!(info.is_key() && info.is_discontinuity());
    assert_eq!(r.stats().overruns, 1);
}

#[test]
fn a_live_reader_never_touches_the_store() {
    let (mut w, _g) = writer("gs-live", 8, 64 << 10);
    publish(&mut w, 1, 50);
    let mut r = late_reader(&w, true);
    let mut out = Vec::new();
    for _ in 0..200 {
        publish(&mut w, 1, 50);
        let info = r.next_packet(POLL, &mut out).unwrap();
        assert_eq!(info.flags & PACKET_FLAG_DISCONTINUITY, 0);
    }
    read_all(&mut r, 201, 201);
    assert_eq!(r.stats().from_gop_store, 0);
    assert_eq!(r.stats().packets, 201);
}

#[test]
fn a_reader_lapped_mid_gop_skips_to_a_keyframe_as_without_the_store() {
    let (mut w, _g) = writer("gs-lap", 8, 64 << 10);
    publish(&mut w, 1, 100);
    let mut r = late_reader(&w, true);
    read_all(&mut r, 1, 1);
    publish(&mut w, 20, 100); // 2..=21: 2..=13 lapped, mid-GOP
    assert_eq!(
        r.next_packet(POLL, &mut Vec::new()).unwrap_err().code(),
        ErrorCode::Timeout,
        "waits for the next keyframe"
    );
    assert_eq!(r.stats().overruns, 1);
    assert_eq!(r.stats().from_gop_store, 0);
}

#[test]
fn a_gop_larger_than_the_store_is_not_kept() {
    let (mut w, _g) = writer("gs-big", 8, 64 << 10);
    w.set_gop_store(Some(GopStoreConfig {
        bytes_per_gop: 8000,
        packets_per_gop: 1000,
    }))
    .unwrap();
    publish(&mut w, 30, 100); // 3000 + 29 * ~350 bytes > 8000
    assert_eq!(w.gop_store_overflows(), 1);
    let mut r = late_reader(&w, true);
    assert_eq!(
        r.next_packet(POLL, &mut Vec::new()).unwrap_err().code(),
        ErrorCode::Timeout,
        "as without a store: no partial GOP"
    );
    // The next GOP that fits is kept again.
    publish(&mut w, 70, 100);
    publish(&mut w, 12, 100); // GOP 101..=112 (3000 + 11 * ~350)
    let mut r = late_reader(&w, true);
    read_all(&mut r, 101, 112);
    // Too many packets counts as too large too.
    let (mut w, _g) = writer("gs-many", 8, 64 << 10);
    w.set_gop_store(Some(GopStoreConfig {
        bytes_per_gop: 1 << 20,
        packets_per_gop: 10,
    }))
    .unwrap();
    publish(&mut w, 11, 100);
    assert_eq!(w.gop_store_overflows(), 1);
    assert_eq!(w.gop_store_size(), GS_ENTRIES + 2 * 10 * 32 + 2 * (1 << 20));
}

#[test]
fn config_limits() {
    for (bytes, packets) in [(0, 1), (1, 0), (1, MAX_GOP_STORE_ENTRIES + 1)] {
        let e = GopStoreWriter::create(GopStoreConfig {
            bytes_per_gop: bytes,
            packets_per_gop: packets,
        })
        .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArg);
    }
}

/// What a subscriber holding the descriptor can try: none of it changes the store.
#[test]
fn a_subscriber_cannot_write_resize_or_punch_the_store() {
    let (mut w, _g) = writer("gs-seal", 8, 64 << 10);
    publish(&mut w, 30, 100);
    let fd = w.gop_store_descriptor().unwrap().unwrap();
    let size = shm::file_size(fd.as_fd()).unwrap();
    assert!(Mapping::map(fd.as_fd(), size, true, "hostile").is_err());
    // Nor a read-only shared mapping made writable afterwards.
    let ro = Mapping::map(fd.as_fd(), size, false, "hostile").unwrap();
    // SAFETY: mprotect on a mapping this test owns; it is expected to fail and change nothing.
    let rc =
        unsafe { libc::mprotect(ro.as_ptr().cast(), size, libc::PROT_READ | libc::PROT_WRITE) };
    assert_eq!(rc, -1, "a read-only mapping of the store became writable");
    assert!(nix::unistd::ftruncate(fd.as_fd(), 0).is_err());
    assert!(nix::unistd::ftruncate(fd.as_fd(), size as i64 * 2).is_err());
    assert!(nix::unistd::write(fd.as_fd(), b"garbage").is_err());
    assert!(nix::sys::uio::pwrite(fd.as_fd(), b"garbage", 0x40).is_err());
    let punch = nix::fcntl::fallocate(
        fd.as_fd(),
        nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
            | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
        0,
        size as i64,
    );
    assert!(punch.is_err());
    assert!(fcntl(
        fd.as_fd(),
        FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_WRITE) // would stop the publisher's writes
    )
    .is_err());
    // The store still serves the GOP intact.
    let mut r = late_reader(&w, true);
    read_all(&mut r, 1, 30);
}

/// A store made by hand: `entries`/`bytes` in the header, sealed as the publisher seals it
/// unless `seal` is false; returned with a writable mapping to forge the rest.
fn forged(entries: u32, bytes: u64, size: usize, seal: bool) -> (OwnedFd, Mapping) {
    let fd = shm::sealable_memfd("forged-gop-store", size.max(GS_ENTRIES)).unwrap();
    let m = Mapping::map(fd.as_fd(), size.max(GS_ENTRIES), true, "forged").unwrap();
    m.atomic_u32(GS_MAGIC)
        .store(GOP_STORE_MAGIC, Ordering::Relaxed);
    m.atomic_u32(GS_VERSION)
        .store(GOP_STORE_VERSION, Ordering::Relaxed);
    m.atomic_u32(GS_BANK_ENTRIES)
        .store(entries, Ordering::Relaxed);
    m.atomic_u64(GS_BANK_DATA_SIZE)
        .store(bytes, Ordering::Relaxed);
    // Smaller than a header: cut after writing it (the mapping is not touched again).
    nix::unistd::ftruncate(fd.as_fd(), size as i64).unwrap();
    if seal {
        fcntl(
            fd.as_fd(),
            FcntlArg::F_ADD_SEALS(
                SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_FUTURE_WRITE,
            ),
        )
        .unwrap();
    }
    (fd, m)
}

#[test]
fn a_store_that_lies_is_refused_or_read_as_an_error() {
    let geo = GopStoreGeometry {
        bank_entries: 4,
        bank_data_size: 1000,
    };
    let size = geo.size();
    let dup = |fd: &OwnedFd| fd.try_clone().unwrap();
    // Not sealed: another process could change it under us.
    let (fd, _m) = forged(4, 1000, size, false);
    let e = GopStoreReader::import(fd, u64::MAX).unwrap_err();
    assert!(e.message().contains("not sealed"), "{e}");
    // Header sizes that do not match the object, or absurd ones.
    for (entries, bytes, size) in [
        (4, 1000, size - 1),
        (4, 1001, size),
        (0, 1000, size),
        (MAX_GOP_STORE_ENTRIES + 1, 1000, size),
        (4, 0, size),
        (4, u64::MAX, size),
        (4, 1000, 16),
    ] {
        let (fd, _m) = forged(entries, bytes, size.max(1), true);
        let e = GopStoreReader::import(fd, u64::MAX).unwrap_err();
        assert_eq!(
            e.code(),
            ErrorCode::Protocol,
            "{entries} {bytes} {size}: {e}"
        );
    }
    // Larger than the reader maps.
    let (fd, _m) = forged(4, 1000, size, true);
    let e = GopStoreReader::import(dup(&fd), 999).unwrap_err();
    assert_eq!(e.code(), ErrorCode::NoMemory);
    // A good header whose entries lie: errors and misses, never a read out of bounds.
    let m = _m; // our writable mapping (made before the seal, as the publisher's)
    let r = GopStoreReader::import(fd, u64::MAX).unwrap();
    let h = geo.bank_header(0);
    let e0 = geo.entry(0, 0);
    m.atomic_u64(h + GS_BANK_KEY_SEQ)
        .store(10, Ordering::Relaxed);
    m.atomic_u64(h + GS_BANK_COUNT)
        .store(u64::MAX, Ordering::Relaxed); // more than the bank holds
    let mut out = Vec::new();
    let entry = |off: u64, len: u32, flags: u32| {
        m.atomic_u64(e0 + GE_DATA_OFFSET)
            .store(off, Ordering::Relaxed);
        m.atomic_u32(e0 + GE_DATA_SIZE)
            .store(len, Ordering::Relaxed);
        m.atomic_u32(e0 + GE_FLAGS).store(flags, Ordering::Relaxed);
    };
    for (off, len, flags) in [
        (0, 0, PACKET_FLAG_KEY),
        (999, 2, PACKET_FLAG_KEY),
        (u64::MAX, 2, PACKET_FLAG_KEY),
        (0, u32::MAX, PACKET_FLAG_KEY),
        (0, 10, 0x100),
        (0, 10, 0), // a GOP that does not start on a keyframe
    ] {
        entry(off, len, flags);
        let e = r.read(10, u32::MAX, &mut out).unwrap_err();
        assert_eq!(e.code(), ErrorCode::Protocol, "{off} {len} {flags:#x}: {e}");
    }
    entry(990, 10, PACKET_FLAG_KEY);
    assert!(matches!(
        r.read(10, 9, &mut out).unwrap(),
        StoreRead::Oversized(10)
    ));
    assert!(matches!(
        r.read(10, 10, &mut out).unwrap(),
        StoreRead::Hit(_, 10)
    ));
    // Entries past the bank's own count of 4 are never read; seqs before the key neither.
    for want in [9, 14, u64::MAX] {
        assert!(matches!(
            r.read(want, 10, &mut out).unwrap(),
            StoreRead::Miss
        ));
    }
    // A bank being rewritten (key UINT64_MAX) or empty (0) holds nothing.
    for key in [u64::MAX, 0] {
        m.atomic_u64(h + GS_BANK_KEY_SEQ)
            .store(key, Ordering::Relaxed);
        assert!(matches!(r.read(10, 10, &mut out).unwrap(), StoreRead::Miss));
    }
}
