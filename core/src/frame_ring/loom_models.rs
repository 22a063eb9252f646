//! Memory-order models of the frame ring under loom (`--cfg loom`, `docs/testing.md`): every
//! interleaving and every value the C++11 memory model lets a load return, within loom's
//! preemption bound (`LOOM_MAX_PREEMPTIONS`).
//!
//! The reader ([`FrameReader`], [`RingView::ack`]), the ACK page ([`AckPage`]) and the
//! publication ([`Publication::make_visible`]) are the production code, running over the
//! loom-tracked memory of `crate::sync` (`FrameShm::model`, `AckPage::model`). The writer's
//! acquire (`FrameWriter::acquire`: invalidate the slot, clear its bitmap, fence) is repeated
//! here as [`invalidate`], because a `FrameWriter` needs slot memfds and a real SHM object;
//! [`invalidate`] must stay the same three operations as `acquire`'s.
//!
//! The ACK protocol across processes (bit ownership, replacement) is `publisher::ack_model`'s;
//! these models check only what that one assumes: that each step it takes as atomic is ordered
//! as it assumes.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU64;

use super::ack_page::AckPage;
use super::publication::Publication;
use super::reader::{Attempt, FrameReader, RingView};
use super::shm_region::FrameShm;
use crate::memory::SlotImport;
use crate::sync::{fence, Ordering};
use crate::wire::{MemoryKind, Policy, INVALID_SEQ};

/// Slot memory is the models' own; the reader only needs to be told there is a slot.
struct NoSlots;

impl SlotImport for NoSlots {
    fn kind(&self) -> MemoryKind {
        MemoryKind::HostMemfd
    }

    fn mapped_size(&self) -> usize {
        0
    }

    fn slot_address(&self, _index: usize) -> u64 {
        0
    }
}

/// Any descriptor will do for the view's SHM descriptor: nothing reads it.
fn some_fd() -> OwnedFd {
    std::fs::File::open("/dev/null").unwrap().into()
}

/// A subscriber's view (bit 1) of the ring in `shm`, one slot, and its ACK page if any.
fn view(shm: &FrameShm, policy: Policy, page: Option<AckPage>) -> RingView {
    RingView::new(
        shm.share(),
        some_fd(),
        Box::new(NoSlots),
        1,
        policy,
        1,
        page,
    )
}

/// A fresh ring as `FrameShm::initialise` leaves it for what the models read: slot 0 invalid,
/// nothing published.
fn fresh_ring() -> Arc<FrameShm> {
    let shm = FrameShm::model();
    shm.slot_seq(0).store(INVALID_SEQ, Ordering::Relaxed);
    Arc::new(shm)
}

/// `FrameWriter::acquire`'s R24/R10 stores before a single byte of slot `k` is written.
fn invalidate(shm: &FrameShm, k: usize) {
    shm.slot_seq(k).store(INVALID_SEQ, Ordering::Release);
    shm.slot_ack(k).store(0, Ordering::Release);
    fence(Ordering::SeqCst);
}

/// Two words of frame `seq`: a copy that mixes two frames shows it.
const WORDS: usize = 2;

fn pts_of(seq: u64) -> u64 {
    1000 + seq
}

/// The writer's side of frames 1..=`frames` in a ring of one slot, with what `acquire`,
/// the caller's write and `publish` (`commit`, `make_visible`) do, in that order. `fenced`
/// false leaves out acquire's fence: the broken writer the model must catch.
fn write_frames(p: &Publication, data: &[AtomicU64; WORDS], frames: u64, fenced: bool) {
    for seq in 1..=frames {
        if fenced {
            invalidate(&p.shm, 0);
        } else {
            p.shm.slot_seq(0).store(INVALID_SEQ, Ordering::Relaxed);
            p.shm.slot_ack(0).store(0, Ordering::Relaxed);
        }
        for w in data {
            w.store(seq, Ordering::Relaxed);
        }
        p.shm.slot_pts(0).store(pts_of(seq), Ordering::Relaxed);
        p.make_visible(0, seq);
    }
}

/// (a) The seqlock: a COPY reader runs `try_copy` beside a writer that publishes frame 1 and
/// rewrites the one slot with frame 2. Whatever the interleaving and whatever older values
/// the loads may return, a frame `try_copy` delivers is whole and the one its seq names, with
/// its own pts; a copy that mixed two frames is dropped by the re-check.
fn seqlock(fenced: bool) {
    loom::model(move || {
        let shm = fresh_ring();
        let publication = Publication::new(Arc::clone(&shm));
        let data = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let writer = {
            let data = Arc::clone(&data);
            loom::thread::spawn(move || write_frames(&publication, &data, 2, fenced))
        };
        let ring = view(&shm, Policy::DropOldest, None);
        let mut reader = FrameReader::new(0);
        for _ in 0..2 {
            let copied = reader.try_copy(&ring, |_| {
                Ok([
                    data[0].load(Ordering::Relaxed),
                    data[1].load(Ordering::Relaxed),
                ])
            });
            if let Attempt::Frame {
                seq, pts_ns, data, ..
            } = copied
            {
                assert_eq!(data, [seq; WORDS], "frame {seq} delivered torn");
                assert_eq!(pts_ns as u64, pts_of(seq), "frame {seq} with another's pts");
            }
        }
        writer.join().unwrap();
    });
}

#[test]
fn loom_a_delivered_copy_is_never_torn() {
    seqlock(true);
}

/// The model has teeth: without the fence of acquire (and with relaxed invalidation) a torn
/// copy gets through, and the model finds it.
#[test]
#[should_panic(expected = "delivered torn")]
fn loom_a_writer_without_the_acquire_fence_is_caught() {
    seqlock(false);
}

/// (b) The ACK page: a subscriber reads frame 1 (ZERO_COPY: in the slot, after the borrow;
/// COPY: inside `try_copy`) and ACKs it through `RingView::ack` into its page; the publisher
/// looks at the page with `has_acked` and, when the ACK is there, rewrites the slot. The
/// slot's bytes are a loom `UnsafeCell`: loom fails the model if the rewrite is not ordered
/// after every read the subscriber made before its ACK (the page's store is release, the
/// publisher's load acquire).
fn ack_then_reuse(zero_copy: bool) {
    loom::model(move || {
        let shm = fresh_ring();
        let publication = Publication::new(Arc::clone(&shm));
        // loom's threads need no `Send`, and loom checks every access to the cell itself.
        #[allow(clippy::arc_with_non_send_sync)]
        let slot = Arc::new(UnsafeCell::new(0u64));
        // Frame 1, published before the subscriber looks (the seqlock is model (a)).
        invalidate(&shm, 0);
        // SAFETY: no other thread exists yet.
        slot.with_mut(|p| unsafe { *p = 1 });
        publication.make_visible(0, 1);

        let page = AckPage::model();
        let publisher_side = page.share();
        let ring = view(&shm, Policy::StrictWait, Some(page));
        let publisher = {
            let slot = Arc::clone(&slot);
            loom::thread::spawn(move || {
                // One look instead of a wait: the interleavings where the ACK is not there yet
                // are those where the publisher would wait (or time out, which declares the
                // subscriber dead and is the ack_model's business).
                if publisher_side.has_acked(0, 1) {
                    invalidate(&publication.shm, 0);
                    // SAFETY: the ACK says the subscriber is done with frame 1; loom checks
                    // that this write is ordered after its reads.
                    slot.with_mut(|p| unsafe { *p = 2 });
                    publication.make_visible(0, 2);
                }
            })
        };
        let mut reader = FrameReader::new(0);
        // SAFETY: the reads the ACK protocol must order before the publisher's rewrite.
        let read = || slot.with(|p| unsafe { *p });
        if zero_copy {
            match reader.try_borrow(&ring) {
                Attempt::Frame { seq, index, .. } => {
                    assert_eq!(read(), seq);
                    assert!(ring.ack(index, seq), "the slot still holds frame {seq}");
                }
                _ => panic!("frame 1 was published before the subscriber looked"),
            }
        } else {
            match reader.try_copy(&ring, |_| Ok(read())) {
                Attempt::Frame { seq, data, .. } => assert_eq!((seq, data), (1, 1)),
                _ => panic!("frame 1 was published before the subscriber looked"),
            }
        }
        publisher.join().unwrap();
    });
}

#[test]
fn loom_b_the_slot_is_reused_only_after_a_zero_copy_reader_acked() {
    ack_then_reuse(true);
}

#[test]
fn loom_b_the_slot_is_reused_only_after_a_copy_reader_acked() {
    ack_then_reuse(false);
}
