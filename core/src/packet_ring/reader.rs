//! The subscriber side of the packet ring: open and validate the SHM, then read packets per
//! §10.7 as fixed by R8, R9, R26 and R29.
//!
//! # Trust
//!
//! The SHM is mapped **read-only** and everything in it is treated as hostile: the header is
//! validated once at open (magic, version, geometry, exact file size, extradata size; see
//! [`super::shm_region::validate_header`]) and the geometry is cached, and every value read from a
//! slot is checked before it is used as an offset or a length. A corrupted or malicious ring
//! produces an error (`Protocol`), an overrun, or a timeout — never a panic, an out-of-bounds
//! read or a packet larger than `data_size`. (One thing a read-only mapping cannot prevent: a
//! peer that *truncates* the file makes accesses beyond the new end raise SIGBUS.)
//! Header and slot fields are loaded with [`Mapping::load_u64`]/[`Mapping::load_u32`] (a
//! Relaxed load plus fences, the only atomic access Rust allows on read-only memory), and
//! the futex sleep only hands the kernel the address of `global_seq`.
//!
//! # Read, step by step, and why
//!
//! 1. Nothing new (`global_seq <= last_seq`): return `Disconnected` if the writer shut down
//!    (only now, so every published packet is read first) or is dead; otherwise sleep on the
//!    R13 futex word (low 32 bits of `global_seq`), bounded by the timeout. With
//!    [`PacketRingReader::set_spin`] the reader first polls `global_seq` (and the shutdown
//!    flag) for that long: a packet published meanwhile is read without waiting for a futex
//!    wake-up, at the cost of a busy CPU while it polls. The default sleeps at once.
//!    The sleep is cut into slices of [`LIVENESS_INTERVAL`] so that a crashed producer
//!    (`liveness::is_alive(producer_pid)`) and the rare shutdown that raced our check are
//!    noticed.
//! 2. `want = last_seq + 1`; load the slot's `seq` with **acquire** (R29, first read). If it is
//!    not `want` the slot was reused (or is being rewritten: `UINT64_MAX`): overrun.
//! 3. Read the fields and **validate them** (size 1..=data_size, known flags only,
//!    `data_offset + size <= write_offset`). An invalid value with an unchanged slot seq is
//!    corruption (`Protocol`); with a changed seq it was a torn read (overrun).
//! 4. R8 pre-check: `write_offset - data_offset > data_size` means the bytes are already
//!    overwritten: overrun without copying.
//! 5. Copy the payload (two pieces on wrap, §10.7).
//! 6. **Acquire fence**, then re-read the slot `seq` (R29, second read) and `write_offset`
//!    (R8). The fence pairs with the writer's release fence: if any byte we copied or any field
//!    we read came from a newer packet, these loads see that packet's invalidated slot seq or
//!    advanced `write_offset`. A changed seq, or `write_offset - data_offset > data_size`,
//!    is an overrun; we never return bytes that were overwritten during the copy.
//! 7. On an overrun (R9, which fixes §10.7's no-op re-anchor): count it, re-anchor at the
//!    newest keyframe (`last_keyframe_seq`) when it lies ahead of the lost packet, otherwise
//!    wait for the next keyframe (the newest one is already behind us, §10.8 "moves on to the
//!    next keyframe"), and set DISCONTINUITY on the first packet returned afterwards. By
//!    default the overrun is handled inside `next_packet`, which then returns that keyframe;
//!    [`PacketRingReader::set_overrun_errors`] makes it return `PacketOverrun` once instead.
//!
//! # What a reader allocates
//!
//! A publisher chooses the data ring's size and each packet's; [`PacketLimits`] (the
//! `limits` module) bounds what a reader maps and copies.
//!
//! Where to start (§10.8, R26): at open, and with [`PacketRingReader::start_at_last_keyframe`],
//! the next packet is the newest keyframe; when no keyframe was published yet the reader waits
//! for the first KEY (packets before it are skipped: a decoder could not use them). With the
//! publisher's GOP store ([`PacketRingReader::set_gop_store`]) a start on a keyframe the ring
//! has already overwritten (a GOP longer than the ring) reads that keyframe and the rest of its
//! GOP from the store until the ring holds the next packet wanted, instead of waiting for the
//! next keyframe.

use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorCode, Result};
use crate::futex;
use crate::liveness;
use crate::packet_ring::gop_store::{GopStoreReader, StoreRead};
use crate::packet_ring::limits::PacketLimits;
use crate::packet_ring::output::{PacketInfo, PacketSink};
use crate::packet_ring::shm_region::{self, Geometry};
use crate::packet_ring::shm_region::{
    HDR_GLOBAL_SEQ, HDR_LAST_KEYFRAME_SEQ, HDR_PRODUCER_PID, HDR_SHUTDOWN_FLAG, HDR_WRITE_OFFSET,
    SLOT_DATA_OFFSET, SLOT_DATA_SIZE, SLOT_DTS, SLOT_FLAGS, SLOT_PTS, SLOT_SEQ,
};
use crate::shm::{self, Mapping};
use crate::wire::packet::PACKET_HEADER_SIZE;
use crate::wire::{INVALID_SEQ, PACKET_FLAGS_KNOWN, PACKET_FLAG_DISCONTINUITY, PACKET_FLAG_KEY};

/// How often a waiting reader checks that the producer is still alive (and re-checks the
/// shutdown flag, whose wake-up can race the start of a futex wait).
pub const LIVENESS_INTERVAL: Duration = Duration::from_millis(100);

/// Overruns one `next_packet` call handles before its deadline applies to re-anchoring.
const MAX_OVERRUNS_PER_POLL: u32 = 4;

/// Counters of a reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketReaderStats {
    /// Packets returned.
    pub packets: u64,
    /// Payload bytes returned.
    pub bytes: u64,
    /// Overruns detected (each one lost at least one packet; R9).
    pub overruns: u64,
    /// Seq of the last packet returned (0 before the first).
    pub last_seq: u64,
    /// Packets skipped because they were larger than `PacketLimits::max_packet_size` (each
    /// one a loss: the reader resumed at a keyframe flagged DISCONTINUITY). Not in `overruns`.
    pub oversized: u64,
    /// Packets read from the publisher's GOP store because the ring no longer held them
    /// (a start on a keyframe the ring had lost; included in `packets`).
    pub from_gop_store: u64,
}

/// Result of one attempt at reading seq `want`.
enum Attempt {
    /// The packet and its payload's size.
    Ok(PacketInfo, usize),
    Overrun,
    /// A packet of this many bytes, more than the reader accepts: not copied.
    Oversized(u32),
}

/// One reader of a packet ring (any number may read the same ring).
pub struct PacketRingReader {
    map: Mapping,
    geo: Geometry,
    codec_id: u32,
    /// Seq of the last packet consumed (or skipped): the next one wanted is `last_seq + 1`.
    last_seq: u64,
    /// `Some(x)`: waiting for a keyframe with seq > x before reading on (R9, R26).
    resync_after: Option<u64>,
    /// R9: the next packet returned carries DISCONTINUITY.
    discontinuity: bool,
    overrun_errors: bool,
    /// Whether a waiting reader checks that `producer_pid` is alive. Off when the caller
    /// watches the publisher another way (a subscriber's socket): in another PID namespace
    /// (containers) the recorded pid means nothing here.
    check_producer_pid: bool,
    /// Poll this long before each futex sleep (zero: sleep at once).
    spin: Duration,
    /// The largest packet read (`PacketLimits::max_packet_size`, at most `data_size`).
    max_packet: u32,
    /// The publisher's GOP store (extension), when it sent one.
    gop_store: Option<GopStoreReader>,
    /// Positioned on a keyframe and not yet back in the ring: what the ring lost of this
    /// GOP is read from the GOP store. Only a start is served from it: a reader lapped in
    /// the middle of a GOP skips to a keyframe, as without a store.
    from_keyframe: bool,
    stats: PacketReaderStats,
}

impl PacketRingReader {
    /// Map `/dev/shm/<shm_name>` read-only (a leading `/` is accepted, R19) and validate it,
    /// with the default [`PacketLimits`].
    pub fn open(shm_name: &str) -> Result<PacketRingReader> {
        Self::open_with(shm_name, PacketLimits::default())
    }

    /// [`Self::open`] with `limits`: a data ring larger than `max_ring_size` is refused
    /// (`NoMemory`, before its pages are touched); packets larger than `max_packet_size` are
    /// skipped.
    pub fn open_with(shm_name: &str, limits: PacketLimits) -> Result<PacketRingReader> {
        let name = shm_name.strip_prefix('/').unwrap_or(shm_name);
        let (_fd, map) = shm::open(name, PACKET_HEADER_SIZE, false)?;
        Self::from_mapping_with(map, limits)
    }

    /// Validate an existing mapping of a whole packet SHM (tests, fuzzing, fd-passing
    /// transports), with the default [`PacketLimits`]. The reader never writes through it,
    /// even when it is writable.
    pub fn from_mapping(map: Mapping) -> Result<PacketRingReader> {
        Self::from_mapping_with(map, PacketLimits::default())
    }

    /// [`Self::from_mapping`] with `limits`.
    pub fn from_mapping_with(map: Mapping, limits: PacketLimits) -> Result<PacketRingReader> {
        let (geo, codec_id) = shm_region::validate_header(&map)?;
        // Before the pages are populated: a ring is only mapped (address space) until then.
        if u64::from(geo.data_size) > limits.max_ring_size {
            return Err(Error::new(
                ErrorCode::NoMemory,
                format!(
                    "the packet ring's data ring is {} bytes, more than this reader maps \
                     (max_packet_ring_size {}): raise max_packet_ring_size to read this stream",
                    geo.data_size, limits.max_ring_size
                ),
            ));
        }
        // Map every page now (its size was just validated to be exactly the ring's): the first
        // lap through the ring then costs no page fault per 4 KiB on the latency path. A
        // peer that truncated the object meanwhile gives an error here, not a SIGBUS.
        map.populate().map_err(|e| {
            Error::protocol(format!(
                "cannot map the packet ring's pages (was it truncated?): {}",
                e.message()
            ))
        })?;
        let mut reader = PacketRingReader {
            map,
            geo,
            codec_id,
            last_seq: 0,
            resync_after: None,
            discontinuity: false,
            overrun_errors: false,
            check_producer_pid: true,
            spin: Duration::ZERO,
            max_packet: limits
                .max_packet_size
                .min(u64::from(geo.data_size))
                .try_into()
                .unwrap_or(geo.data_size),
            gop_store: None,
            from_keyframe: false,
            stats: PacketReaderStats::default(),
        };
        reader.start_at_last_keyframe();
        Ok(reader)
    }

    /// `AV_CODEC_ID_*` of the stream (read at open; fixed for the ring's lifetime, §10.3).
    pub fn codec_id(&self) -> u32 {
        self.codec_id
    }

    /// Slots in the ring (`ring_slots` of the header, validated at open).
    pub fn ring_slots(&self) -> u32 {
        self.geo.ring_slots
    }

    /// Size of the data ring: no packet returned is larger.
    pub fn data_size(&self) -> u32 {
        self.geo.data_size
    }

    /// The largest packet this reader returns: `PacketLimits::max_packet_size`, at most
    /// `data_size`. Larger ones are skipped ([`PacketReaderStats::oversized`]).
    pub fn max_packet_size(&self) -> u32 {
        self.max_packet
    }

    /// The codec extradata as it is now (it may be set after open, before the first packet),
    /// copied out with its size validated (<= 4096).
    pub fn extradata(&self) -> Result<Vec<u8>> {
        shm_region::read_extradata(&self.map)
    }

    /// Position at the newest keyframe (§10.8); when none was published yet, wait for the
    /// first KEY (R26). This is also where a fresh reader starts.
    pub fn start_at_last_keyframe(&mut self) {
        let kf = self.load(HDR_LAST_KEYFRAME_SEQ, Ordering::Acquire);
        self.start_at(kf);
    }

    /// Read what the ring has lost of the GOP a start is on from `store`, the publisher's GOP
    /// store (the GOP_STORE message): a start on a keyframe the ring already overwrote then
    /// returns it at once instead of waiting for the next keyframe.
    pub fn set_gop_store(&mut self, store: GopStoreReader) {
        self.gop_store = Some(store);
    }

    /// Position so that the next packet returned is `seq` (HELLO_RESP's `initial_packet_seq`);
    /// `0` means "wait for the first keyframe" (R26). A seq no longer in the ring gives an
    /// overrun on the next read, handled as in R9.
    pub fn start_at(&mut self, seq: u64) {
        self.discontinuity = false;
        if seq == 0 || seq == INVALID_SEQ {
            self.last_seq = 0;
            self.resync_after = Some(0);
            self.from_keyframe = false;
        } else {
            self.last_seq = seq - 1;
            self.resync_after = None;
            self.from_keyframe = true;
        }
    }

    /// With `true`, an overrun makes `next_packet` return `PacketOverrun` once (after
    /// re-anchoring); the following call returns the keyframe with DISCONTINUITY. With `false`
    /// (the default) the overrun is only counted and signalled by DISCONTINUITY.
    /// With `false`, a waiting reader no longer ends the stream when `producer_pid` is not a
    /// live process of this PID namespace; the caller detects the publisher's death itself
    /// (the control plane does, through socket EOF).
    pub fn set_producer_pid_check(&mut self, on: bool) {
        self.check_producer_pid = on;
    }

    /// Before each sleep, poll the ring this long for a new packet (zero, the default: sleep
    /// at once). For latency-critical readers: a packet published during the poll is read
    /// within about a microsecond instead of after a futex wake-up (tens to hundreds of
    /// microseconds when the CPU was idle), and a reader that keeps up with a fast stream
    /// never sleeps. The poll only loads from the ring: it costs the writer nothing.
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// Whether `next_packet` returns `PacketOverrun` once after a loss (on) or re-anchors at a
    /// keyframe by itself (off, the default).
    pub fn set_overrun_errors(&mut self, on: bool) {
        self.overrun_errors = on;
    }

    /// The ring's `global_seq` now: the seq of the newest published packet.
    pub fn published_seq(&self) -> u64 {
        self.load(HDR_GLOBAL_SEQ, Ordering::Acquire)
    }

    /// The ring's `last_keyframe_seq` now.
    pub fn last_keyframe_seq(&self) -> u64 {
        self.load(HDR_LAST_KEYFRAME_SEQ, Ordering::Acquire)
    }

    /// The producer pid the header names.
    pub fn producer_pid(&self) -> u64 {
        self.load(HDR_PRODUCER_PID, Ordering::Relaxed)
    }

    /// The reader's counters.
    pub fn stats(&self) -> PacketReaderStats {
        self.stats
    }

    fn load(&self, offset: usize, order: Ordering) -> u64 {
        self.map.load_u64(offset, order)
    }

    /// The next packet into `out` (resized to the payload; its capacity is reused), waiting at
    /// most `timeout` (`None`: forever; `Some(ZERO)`: poll). Errors: `Timeout`, `Disconnected`
    /// (shutdown or dead producer, after every published packet was read), `Protocol`
    /// (corrupted ring), and `PacketOverrun` only with [`Self::set_overrun_errors`].
    pub fn next_packet(
        &mut self,
        timeout: Option<Duration>,
        out: &mut Vec<u8>,
    ) -> Result<PacketInfo> {
        self.next_packet_into(timeout, out)
    }

    /// `next_packet` with the payload copied once, straight from the ring into the buffer
    /// `sink` hands out for it (an `AVPacket`'s, say): the seqlock (R29) and the data ring's
    /// position (R8) are checked again after that copy, and a copy that raced the writer is
    /// thrown away (the sink is asked again for the packet the reader re-anchors on). An
    /// error from the sink is returned and the packet is not consumed: the next call reads
    /// it again.
    pub fn next_packet_into(
        &mut self,
        timeout: Option<Duration>,
        sink: &mut dyn PacketSink,
    ) -> Result<PacketInfo> {
        let out = sink;
        let deadline = timeout.map(|t| Instant::now().checked_add(t));
        // `Some(None)`: a timeout too large to represent, i.e. forever.
        let deadline = deadline.flatten();
        let mut producer_dead = false;
        let mut last_liveness = Instant::now();
        let mut overruns_here = 0u32;
        loop {
            // Shutdown first, then the seqs: the writer stores shutdown after its last publish,
            // so when we see the flag the loads below see every packet.
            let shut = self.load(HDR_SHUTDOWN_FLAG, Ordering::Acquire) != 0;
            if let Some(after) = self.resync_after {
                // Keyframe before global_seq: the writer stores them in the opposite order, so
                // an honest ring always shows kf <= gs here.
                let kf = self.load(HDR_LAST_KEYFRAME_SEQ, Ordering::Acquire);
                let gs = self.load(HDR_GLOBAL_SEQ, Ordering::Acquire);
                if kf > after && kf <= gs && kf != INVALID_SEQ {
                    // R26: the *first* keyframe after the start point that is still in the
                    // ring, not the newest: a subscriber that waited must not skip GOPs.
                    self.last_seq = self.first_keyframe_after(after, kf, gs) - 1;
                    self.resync_after = None;
                    self.from_keyframe = true;
                } else {
                    if shut || producer_dead {
                        return Err(self.disconnected(shut));
                    }
                    self.wait(gs, deadline, &mut producer_dead, &mut last_liveness)?;
                    continue;
                }
            }
            let gs = self.load(HDR_GLOBAL_SEQ, Ordering::Acquire);
            if gs <= self.last_seq {
                if shut || producer_dead {
                    return Err(self.disconnected(shut));
                }
                self.wait(gs, deadline, &mut producer_dead, &mut last_liveness)?;
                continue;
            }
            let want = self.last_seq + 1;
            let attempt = self.try_read(want, out)?;
            match attempt {
                Attempt::Ok(mut info, len) => {
                    if self.discontinuity {
                        info.flags |= PACKET_FLAG_DISCONTINUITY;
                        self.discontinuity = false;
                    }
                    self.last_seq = want;
                    self.stats.packets += 1;
                    self.stats.bytes += len as u64;
                    self.stats.last_seq = want;
                    return Ok(info);
                }
                Attempt::Overrun | Attempt::Oversized(_) => {
                    let lost = match attempt {
                        Attempt::Oversized(size) => self.skip_oversized(want, size),
                        _ => self.overrun(want),
                    };
                    self.re_anchor(want);
                    if self.overrun_errors {
                        return Err(Error::new(ErrorCode::PacketOverrun, lost));
                    }
                    // A live writer can lap a slow reader again while it re-anchors; the
                    // deadline bounds that (a poll still gets its re-anchored keyframe).
                    overruns_here += 1;
                    if let Some(d) = deadline.filter(|_| overruns_here > MAX_OVERRUNS_PER_POLL) {
                        if Instant::now() >= d {
                            return Err(Error::new(
                                ErrorCode::Timeout,
                                "timed out re-anchoring after a lost packet (overrun or oversized)",
                            ));
                        }
                    }
                }
            }
        }
    }

    fn disconnected(&self, shut: bool) -> Error {
        if shut {
            Error::new(
                ErrorCode::Disconnected,
                "the publisher shut the packet ring down",
            )
        } else {
            Error::new(
                ErrorCode::Disconnected,
                format!(
                    "the packet ring's producer (pid {}) is gone",
                    self.producer_pid()
                ),
            )
        }
    }

    /// Sleep until `global_seq` moves past `seen`, a wake-up, the end of a liveness slice or
    /// the deadline (`Timeout`). Checks the producer's liveness once per slice without
    /// progress.
    fn wait(
        &self,
        seen: u64,
        deadline: Option<Instant>,
        producer_dead: &mut bool,
        last_liveness: &mut Instant,
    ) -> Result<()> {
        let now = Instant::now();
        let mut slice = LIVENESS_INTERVAL;
        if let Some(d) = deadline {
            if now >= d {
                return Err(Error::new(
                    ErrorCode::Timeout,
                    "no packet within the timeout",
                ));
            }
            slice = slice.min(d - now);
        }
        if !self.spin.is_zero() {
            if self.spin_for_publish(seen, self.spin.min(slice)) {
                return Ok(());
            }
            slice = slice.saturating_sub(now.elapsed());
        }
        // A spin as long as the slice leaves nothing to sleep: the caller looks again and
        // spins on, without a system call.
        if !slice.is_zero() {
            futex::wait(
                self.map.atomic_u32(HDR_GLOBAL_SEQ),
                seen as u32,
                Some(slice),
            );
        }
        if self.check_producer_pid
            && self.load(HDR_GLOBAL_SEQ, Ordering::Acquire) == seen
            && last_liveness.elapsed() >= LIVENESS_INTERVAL
        {
            *last_liveness = Instant::now();
            if !liveness::is_alive(self.producer_pid()) {
                // The caller re-checks global_seq once more: the producer may have published
                // right before it died.
                *producer_dead = true;
            }
        }
        Ok(())
    }

    /// Poll `global_seq` and the shutdown flag for up to `budget`: true as soon as either
    /// changed (the caller looks again at once), false when the budget is spent. The clock is
    /// read every 64 polls: cheap, and still within a few microseconds of the budget.
    fn spin_for_publish(&self, seen: u64, budget: Duration) -> bool {
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                if self.load(HDR_GLOBAL_SEQ, Ordering::Acquire) != seen
                    || self.load(HDR_SHUTDOWN_FLAG, Ordering::Acquire) != 0
                {
                    return true;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= budget {
                return false;
            }
        }
    }

    /// The first seq in `(after, newest_kf]` still in the ring whose slot is a KEY, read
    /// under the slot seqlock (R29); `newest_kf` when none is found (it is a keyframe).
    fn first_keyframe_after(&self, after: u64, newest_kf: u64, gs: u64) -> u64 {
        let oldest_in_ring = gs.saturating_sub(self.geo.ring_slots as u64 - 1).max(1);
        for seq in (after + 1).max(oldest_in_ring)..newest_kf {
            let slot = self.geo.slot_offset(seq);
            let seq_atomic = self.map.atomic_u64(slot + SLOT_SEQ);
            if seq_atomic.load(Ordering::Acquire) != seq {
                continue;
            }
            let flags = self.map.load_u32(slot + SLOT_FLAGS, Ordering::Relaxed);
            fence(Ordering::Acquire);
            if seq_atomic.load(Ordering::Acquire) == seq && flags & PACKET_FLAG_KEY != 0 {
                return seq;
            }
        }
        newest_kf
    }

    /// Count packet `seq` as lapped, and return the words for it.
    fn overrun(&mut self, seq: u64) -> String {
        self.stats.overruns += 1;
        format!("packet {seq} was overwritten before it could be read; resuming at a keyframe")
    }

    /// Count packet `seq` of `size` bytes as skipped for its size, say so on the first one
    /// (a stream of them says it once: the count is in the stats), and return the words.
    fn skip_oversized(&mut self, seq: u64, size: u32) -> String {
        self.stats.oversized += 1;
        let what = format!(
            "packet {seq} is {size} bytes, more than this reader accepts (max_packet_size {}): \
             skipped, resuming at a keyframe; raise max_packet_size to read such packets",
            self.max_packet
        );
        if self.stats.oversized == 1 && !self.overrun_errors {
            crate::util::diag!("{what}");
        }
        what
    }

    /// R9, after losing `lost` (lapped, or skipped for its size): DISCONTINUITY on the next
    /// packet; resume at the newest keyframe if it lies beyond `lost`, otherwise wait for a
    /// keyframe newer than `lost`.
    fn re_anchor(&mut self, lost: u64) {
        self.discontinuity = true;
        let kf = self.load(HDR_LAST_KEYFRAME_SEQ, Ordering::Acquire);
        if kf > lost && kf != INVALID_SEQ {
            self.last_seq = kf - 1;
            self.resync_after = None;
            self.from_keyframe = true;
        } else {
            self.last_seq = lost;
            self.resync_after = Some(lost);
            self.from_keyframe = false;
        }
    }

    /// Seq `want` from the ring, or, when the ring has lost it on a start from a keyframe,
    /// from the GOP store.
    fn try_read(&mut self, want: u64, sink: &mut dyn PacketSink) -> Result<Attempt> {
        let attempt = self.try_read_ring(want, sink)?;
        let Some(store) = self.gop_store.as_ref().filter(|_| self.from_keyframe) else {
            return Ok(attempt);
        };
        match attempt {
            Attempt::Ok(..) => {
                // Back in the ring: it holds everything from here on.
                self.from_keyframe = false;
                Ok(attempt)
            }
            Attempt::Overrun => Ok(match store.read(want, self.max_packet, sink)? {
                StoreRead::Hit(info, len) => {
                    self.stats.from_gop_store += 1;
                    Attempt::Ok(info, len)
                }
                StoreRead::Oversized(size) => Attempt::Oversized(size),
                StoreRead::Miss => Attempt::Overrun,
            }),
            Attempt::Oversized(_) => Ok(attempt),
        }
    }

    /// Steps 2-6 of the module comment for seq `want`.
    fn try_read_ring(&self, want: u64, sink: &mut dyn PacketSink) -> Result<Attempt> {
        let m = &self.map;
        if want == INVALID_SEQ {
            return Err(Error::protocol(
                "packet ring global_seq reached UINT64_MAX (corrupted header)",
            ));
        }
        let slot = self.geo.slot_offset(want);
        let seq_atomic = m.atomic_u64(slot + SLOT_SEQ);
        // 2. R29 first read.
        if seq_atomic.load(Ordering::Acquire) != want {
            return Ok(Attempt::Overrun);
        }
        // 3. Fields, validated.
        let pts_ns = m.load_u64(slot + SLOT_PTS, Ordering::Relaxed) as i64;
        let dts_ns = m.load_u64(slot + SLOT_DTS, Ordering::Relaxed) as i64;
        let data_offset = m.load_u64(slot + SLOT_DATA_OFFSET, Ordering::Relaxed);
        let size = m.load_u32(slot + SLOT_DATA_SIZE, Ordering::Relaxed);
        let flags = m.load_u32(slot + SLOT_FLAGS, Ordering::Relaxed);
        let write_offset = m.load_u64(HDR_WRITE_OFFSET, Ordering::Acquire);
        let data_size = u64::from(self.geo.data_size);

        let problem = if size == 0 {
            Some("payload size 0".to_owned())
        } else if size > self.geo.data_size {
            Some(format!(
                "payload size {size} exceeds the {data_size}-byte data ring"
            ))
        } else if flags & !PACKET_FLAGS_KNOWN != 0 {
            Some(format!("reserved flag bits set ({flags:#x})"))
        } else if !matches!(
            data_offset.checked_add(u64::from(size)),
            Some(end) if end <= write_offset
        ) {
            Some(format!(
                "payload [{data_offset}, +{size}) lies beyond write_offset {write_offset}"
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            // A torn read of a slot being rewritten looks the same: only an unchanged seq
            // makes it corruption.
            fence(Ordering::Acquire);
            if seq_atomic.load(Ordering::Relaxed) != want {
                return Ok(Attempt::Overrun);
            }
            return Err(Error::protocol(format!(
                "packet ring slot for seq {want} is corrupt: {problem}"
            )));
        }
        // 4. R8 pre-check (no wrap: write_offset >= data_offset + size here).
        if write_offset - data_offset > data_size {
            return Ok(Attempt::Overrun);
        }

        // Larger than this reader accepts: skipped before any buffer is asked for it. Only
        // an unchanged seq makes it this packet's size, not a torn read of a newer one.
        if size > self.max_packet {
            fence(Ordering::Acquire);
            if seq_atomic.load(Ordering::Relaxed) != want {
                return Ok(Attempt::Overrun);
            }
            return Ok(Attempt::Oversized(size));
        }

        // 5. Copy, into the sink's buffer of exactly `len` bytes.
        let len = size as usize;
        let out = sink.buffer(len)?;
        if out.len() != len {
            return Err(Error::invalid(format!(
                "the packet sink gave {} bytes for a {len}-byte packet",
                out.len()
            )));
        }
        let [(o1, l1), (o2, l2)] = self.geo.data_ranges(data_offset, len);
        m.read_bytes(o1, &mut out[..l1]);
        if l2 > 0 {
            m.read_bytes(o2, &mut out[l1..l1 + l2]);
        }

        // 6. Acquire fence, then R29 second read and R8 re-check.
        fence(Ordering::Acquire);
        if seq_atomic.load(Ordering::Relaxed) != want {
            return Ok(Attempt::Overrun);
        }
        let write_offset2 = m.load_u64(HDR_WRITE_OFFSET, Ordering::Relaxed);
        if write_offset2.wrapping_sub(data_offset) > data_size {
            return Ok(Attempt::Overrun);
        }
        Ok(Attempt::Ok(
            PacketInfo {
                seq: want,
                pts_ns,
                dts_ns,
                flags,
            },
            len,
        ))
    }
}

impl std::fmt::Debug for PacketRingReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketRingReader")
            .field("geometry", &self.geo)
            .field("codec_id", &self.codec_id)
            .field("last_seq", &self.last_seq)
            .field("resync_after", &self.resync_after)
            .field("stats", &self.stats)
            .finish()
    }
}
