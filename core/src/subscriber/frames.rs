//! The frame ring, subscriber side: §6 reads with the R10 seqlock, ACKs (R12, R23), and
//! the frames handed to the user.

use std::os::fd::OwnedFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use crate::format::FrameLayout;
use crate::frames::shm::{
    FrameShm, SUB_DELIVERED_OFFSET, SUB_DROPPED_OVERRUN_OFFSET, SUB_DROPPED_TORN_OFFSET,
};
use crate::futex;
use crate::memory::SlotImport;
use crate::util::realtime_ns;
use crate::wire::{MemoryKind, Policy};

/// The mapped ring, shared by the reader and the zero-copy frames it hands out.
pub(crate) struct RingView {
    pub shm: FrameShm,
    pub _shm_fd: OwnedFd,
    pub slots: Box<dyn SlotImport>,
    pub bit: usize,
    pub policy: Policy,
    pub ring_size: usize,
}

impl RingView {
    /// ACK `seq` in slot `k` (§6 steps 3–4, R23), unless the slot already moved on.
    pub fn ack(&self, k: usize, seq: u64) {
        if self.shm.slot_seq(k).load(Ordering::Acquire) != seq {
            return;
        }
        self.shm
            .slot_ack(k)
            .fetch_or(1u64 << self.bit, Ordering::Release);
        self.shm
            .sub_last_seen(self.bit)
            .fetch_max(seq, Ordering::AcqRel);
        self.shm
            .sub_last_ack_ns(self.bit)
            .store(realtime_ns() as u64, Ordering::Release);
        if self.policy == Policy::StrictWait {
            futex::wake_all(self.shm.slot_ack_word(k));
        }
    }

    pub fn count(&self, which: usize) {
        self.shm
            .sub_counter(self.bit, which)
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Counters of one subscriber (also visible to operators in its SHM slot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameStats {
    pub delivered: u64,
    /// Frames overwritten before this subscriber read them (DROP_OLDEST lapping).
    pub dropped_overrun: u64,
    /// Frames rewritten while they were being copied (seqlock mismatch, R10).
    pub dropped_torn: u64,
}

/// Where a frame's bytes are.
pub(crate) enum FrameData {
    /// COPY mode, host: the subscriber's own buffer.
    Owned(Vec<u8>),
    /// ZERO_COPY: the ring's slot, ACKed when the frame is released (R12).
    Borrowed {
        ring: Arc<RingView>,
        index: usize,
        acked: bool,
    },
}

/// A frame handed to the user.
pub struct Frame {
    pub seq: u64,
    pub pts_ns: i64,
    pub layout: Arc<FrameLayout>,
    pub(crate) data: FrameData,
}

impl Frame {
    /// True when the bytes are the ring's own (ZERO_COPY), not a copy.
    pub fn is_zero_copy(&self) -> bool {
        matches!(self.data, FrameData::Borrowed { .. })
    }

    /// Memory kind of the bytes.
    pub fn memory_kind(&self) -> MemoryKind {
        match &self.data {
            FrameData::Owned(_) => MemoryKind::HostMemfd,
            FrameData::Borrowed { ring, .. } => ring.slots.kind(),
        }
    }

    /// Address of plane 0 (host pointer, or device pointer for CUDA frames).
    pub fn address(&self) -> u64 {
        match &self.data {
            FrameData::Owned(v) => v.as_ptr() as u64,
            FrameData::Borrowed { ring, index, .. } => ring.slots.slot_address(*index),
        }
    }

    /// The whole frame as host bytes (host memory only).
    pub fn bytes(&self) -> Option<&[u8]> {
        match &self.data {
            FrameData::Owned(v) => Some(v),
            FrameData::Borrowed { ring, index, .. }
                if ring.slots.kind() == MemoryKind::HostMemfd =>
            {
                // SAFETY: the import maps at least frame_size bytes read-only for as long as
                // `ring` lives, and this frame holds it.
                Some(unsafe {
                    std::slice::from_raw_parts(
                        ring.slots.slot_address(*index) as *const u8,
                        self.layout.frame_size,
                    )
                })
            }
            FrameData::Borrowed { .. } => None,
        }
    }

    /// Plane `i` as host bytes: (bytes from the plane's start, pitch).
    pub fn plane(&self, i: usize) -> Option<(&[u8], usize)> {
        let p = *self.layout.planes().get(i)?;
        let bytes = self.bytes()?;
        Some((
            &bytes[p.offset..p.offset + p.pitch * (p.rows - 1) + p.row_bytes],
            p.pitch,
        ))
    }

    /// Release the frame: a zero-copy frame is ACKed now. (Dropping does the same.)
    pub fn release(mut self) {
        self.ack_now();
    }

    fn ack_now(&mut self) {
        if let FrameData::Borrowed { ring, index, acked } = &mut self.data {
            if !*acked {
                ring.ack(*index, self.seq);
                *acked = true;
            }
        }
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        self.ack_now();
    }
}

/// Reader state.
pub(crate) struct FrameReader {
    pub ring: Arc<RingView>,
    pub layout: Arc<FrameLayout>,
    pub last_seq: u64,
    pub zero_copy: bool,
    pub stats: FrameStats,
}

/// What one attempt to read found.
pub(crate) enum Attempt {
    Frame(Frame),
    /// Nothing new.
    Empty,
    /// A frame was lost (lapped or torn); try again at once.
    Skipped,
}

impl FrameReader {
    pub fn try_read(&mut self) -> Attempt {
        let ring = &self.ring;
        let g = ring.shm.global_seq().load(Ordering::Acquire);
        if g <= self.last_seq {
            return Attempt::Empty;
        }
        let mut want = self.last_seq + 1;
        let n = ring.ring_size as u64;
        if g - want >= n {
            // Lapped (DROP_OLDEST): everything older than the newest frame is being
            // overwritten. Jump to the newest.
            let lost = g - want;
            self.stats.dropped_overrun += lost;
            ring.shm
                .sub_counter(ring.bit, SUB_DROPPED_OVERRUN_OFFSET)
                .fetch_add(lost, Ordering::Relaxed);
            want = g;
        }
        let k = (want % n) as usize;
        let s1 = ring.shm.slot_seq(k).load(Ordering::Acquire);
        if s1 != want {
            // Rewritten before we got there.
            self.last_seq = want;
            self.stats.dropped_overrun += 1;
            ring.count(SUB_DROPPED_OVERRUN_OFFSET);
            return Attempt::Skipped;
        }
        let pts_ns = ring.shm.slot_pts(k).load(Ordering::Acquire) as i64;
        let frame = if self.zero_copy {
            Frame {
                seq: want,
                pts_ns,
                layout: self.layout.clone(),
                data: FrameData::Borrowed {
                    ring: ring.clone(),
                    index: k,
                    acked: false,
                },
            }
        } else {
            let mut buf = vec![0u8; self.layout.frame_size];
            copy_slot(ring, k, &mut buf);
            fence(Ordering::Acquire);
            if ring.shm.slot_seq(k).load(Ordering::Acquire) != want {
                // R10: the publisher rewrote the slot while we copied it.
                self.last_seq = want;
                self.stats.dropped_torn += 1;
                ring.count(SUB_DROPPED_TORN_OFFSET);
                return Attempt::Skipped;
            }
            ring.ack(k, want);
            Frame {
                seq: want,
                pts_ns,
                layout: self.layout.clone(),
                data: FrameData::Owned(buf),
            }
        };
        self.last_seq = want;
        self.stats.delivered += 1;
        ring.count(SUB_DELIVERED_OFFSET);
        Attempt::Frame(frame)
    }
}

fn copy_slot(ring: &RingView, k: usize, out: &mut [u8]) {
    match ring.slots.kind() {
        MemoryKind::HostMemfd => {
            // SAFETY: the import maps at least mapped_size >= frame_size bytes of slot k.
            let src = unsafe {
                std::slice::from_raw_parts(ring.slots.slot_address(k) as *const u8, out.len())
            };
            out.copy_from_slice(src);
        }
        MemoryKind::CudaVmm => {
            // COPY of a CUDA slot into host memory is done by the CUDA reader path.
            out.fill(0);
        }
    }
}

impl Frame {
    /// Release after the CUDA work queued on `stream` (a `CUstream`, may be null) has
    /// finished (R12). Host frames, and a null stream, release now.
    pub fn release_after_stream(self, stream: *mut std::ffi::c_void) {
        let _ = stream;
        self.release();
    }
}
