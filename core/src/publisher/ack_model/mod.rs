//! An exhaustive model check of subscriber-bit ownership and the STRICT_WAIT ACK protocol.
//!
//! # What is modelled
//!
//! Every interleaving, at the real interleaving points, of:
//! - **the publishing thread** (`FrameWriter::acquire` + `publish`, with `Inner` as the
//!   `AckAuthority`): take the old frame of the slot from the writer's own record; compute
//!   its required ACKs (table lock); read the ACKs (the slot's bitmap, or the waited-for
//!   owners' ACK pages); then go on, or wait and recompute, or, when the timeout fires (a
//!   nondeterministic choice, not a clock), `declare_dead` (table lock again); invalidate
//!   the slot and clear its bitmap; write and publish the frame;
//! - **the server thread**: admit a connecting subscriber (`subscribe`: the generation check,
//!   `free_bit`, insert, `clear_ack_bit`, and `initial_seq` by production's rule: the last
//!   published seq, or 0 on a replacement ring whose writer reused no slot yet); refuse a SUBSCRIBE whose
//!   HELLO_RESP described a replaced ring; notice a kick and send ERROR (Phase::GivenUp);
//!   send a retired subscriber SHUTDOWN(NEW_RING) and close it; notice a closed socket and
//!   `release` the connection's bits; and, with `Config::peer_errors`, take an error path that
//!   `release`s an admitted connection at once;
//! - **two subscriber processes**: A reads in COPY mode and is connecting from the start; B reads
//!   ZERO_COPY and connects when it likes. Each may leave at any moment and join again as a new
//!   connection (`Config::sessions` bounds how often). A session reads the next frame (`next()`
//!   with lapping; COPY: check the slot seq, copy, seqlock recheck; ZERO_COPY: borrow), ACKs
//!   in two steps (under the gate lock: `revoked` and the slot seq checked, then the `fetch_or`
//!   into the bitmap or the store into its page; between them the ACK is *in flight*, the
//!   publisher may run but `revoke_acks` may not), releases a borrowed frame, takes an ERROR
//!   (revoke, stop reading), and leaves (revoke, then UNSUBSCRIBE and close).
//!
//! The subscriber table is the production `Table`: every transition that touches it builds a
//! real `Table` from the state, calls the production methods (`required_acks`, `kick`,
//! `free_bit`, `insert`, `get`, `remove`, `iter`) and stores the result back, so that the
//! model checks the real ownership code. The SHM (slot seqs, ACK bitmaps, global_seq, which
//! frame's pixels each slot holds) and the ACK pages are plain fields that mirror
//! `frame_ring::writer`, `frame_ring::reader` and `frame_ring::ack_page` step by step.
//!
//! An explicit-state search over plain values was chosen over loom: what matters here is the
//! protocol's interleaving across processes (sockets, SHM, a server thread), not the memory
//! model of one process's atomics, and loom could not run the socket and memfd code anyway.
//!
//! # Ring replacement
//!
//! With `Config::frames_after_replacement`, the publishing thread may run
//! `Publisher::replace_frames` once, between two frames: the generation moves, the table's
//! production `retire_frame_subscribers` retires the old ring's frame subscribers, and a fresh
//! ring takes the old one's place (seqs from 1). Sessions remember the generation they mapped
//! (at HELLO_RESP). Retired sessions are sent away (SHUTDOWN(NEW_RING), close) and come back
//! as new connections, as returners. The model keeps only the current ring: a session of the
//! old one reads nothing more from it, and its ACKs land in the old ring's bitmap or its own
//! page, which the new ring's waits never read (a retired entry is owed nothing). Two more
//! invariants come with it: no subscriber is admitted to a generation it did not map, and no
//! subscriber of the old ring is given up on over a frame of the new one. The publisher's wait
//! for returns (`wait_for_returns`, bounded by the ACK timeout) is not modelled: the publisher
//! may go on at any point, which is what a timeout allows, so every real run is a run of the
//! model. (That is also why the table's count of returns due is not part of a state.)
//!
//! # What is abstracted, and why that is sound
//!
//! - Time: a timeout may fire at every read of the ACKs that finds one missing, which covers
//!   every timing of the real clock.
//! - Memory order: each step is sequentially consistent. The production code orders its
//!   stores with release/acquire and SeqCst, and each ACK is one atomic RMW or store, so the
//!   races that matter are those between steps, and all of those are explored.
//! - Steps merged into one have nothing in between that could tell them apart: the
//!   acquire with its wait-or-not decision; the invalidation with the clear of the bitmap
//!   (only an ACK landing could come between, and the clear erases it either way); the frame
//!   write with its publish (the slot is INVALID meanwhile; a held frame is damaged by the
//!   write either way); `next()`'s loads of global_seq and the slot seq; the COPY seqlock
//!   recheck with `ack()`'s check of the same word, and a ZERO_COPY release with that check
//!   (a change in between only makes the ACK fail, as a torn copy does); admission, which runs
//!   under the table lock while neither the bit's old owner (gone) nor its new one (no
//!   SUBSCRIBE_RESP yet) can write it. Every run of the merged model is a run of the real one,
//!   so what it finds is real.
//! - A COPY subscriber ACKs inside `try_copy`, on its own thread: it cannot poll its socket or
//!   leave while an ACK of its is in flight (Rust ownership forbids it). A ZERO_COPY frame's
//!   release may run on another thread (a CUDA host function), concurrently with anything its
//!   subscriber does, and a frame may outlive its subscriber.
//! - A ZERO_COPY session holds at most one frame. DROP_OLDEST is not modelled: it never waits,
//!   so the ACK protocol cannot protect anything there. Publication on a stream is not
//!   modelled either: its host function does the same R24 stores as a synchronous publish
//!   (`Publication::make_visible`), and the writer waits for a pending one before it acquires
//!   the slot again, so for this protocol it is a publish that takes longer. Process death is a leave without an
//!   ACK afterwards, a subset of what a leave can do. A peer closing during its handshake is
//!   like one that never connected. After an ERROR or the server's close the model's
//!   subscriber stops reading (on a close without ERROR the real one still reads what was
//!   published, but with ACKs revoked, which changes no ACK).
//! - States are canonical: finished connections are dropped, ids renumbered, fields that
//!   can no longer matter are cleared (a page entry that is not the frame now in its slot
//!   can never count again: seqs in a slot only grow). The visited set keeps a lossless
//!   320-bit packing of each state.
//!
//! # Why the bounds suffice
//!
//! Every defect below needs one slot reused twice (a frame, the frame whose ACKs carry the
//! stray one, and the write that destroys it), one stalled or leaving old owner of a bit and
//! one new owner. So a ring of 1 slot and 3 frames shows all four, and two sessions per
//! process let a process be old and new owner (needed when a ZERO_COPY ACK outlives its
//! session and the victim must also hold a ZERO_COPY frame). The ring of 2 slots and 4 frames
//! adds lapping across slots, and ACKs in flight for one slot while the other is rewritten.
//! Frames, sessions and bits are bounded, so the state space is finite. It is explored
//! breadth first, so a counterexample is a shortest one.
//!
//! # The defects each fix prevents (each is found when its switch is off)
//!
//! 1. `quarantine`: a kicked bit freed at once is given to B while A, not having read its
//!    ERROR yet, ACKs with it a frame that B holds; the publisher overwrites B's frame.
//! 2. `kick_by_owner`: the missing bit is freed and reassigned between `required_acks` and
//!    the kick, and the kick hits the innocent newcomer.
//! 3. `revoke_before_close`: an ACK in flight of a closing subscriber lands after its bit was
//!    reassigned (in the bitmap of a frame the new owner holds).
//! 4. `clear_stale_bits_at_admission`: an ACK in flight when its owner was kicked lands in a
//!    later frame's bitmap and counts as the next owner's ACK.
//! 5. `refuse_stale_subscribe`: a handshake that straddles a replacement is admitted to the new
//!    ring while it mapped the old one.
//! 6. `retire_on_replacement`: the old ring's subscribers are counted on for the new ring's
//!    frames, and given up on over them.
//!
//! A stray ACK (1, 3, 4) usually shows first as a frame lost by the new owner, which had not
//! read it yet when the stray ACK let the publisher overwrite it; the tests also search with
//! that invariant off, to reach the overwrite of a frame the new owner holds.
//!
//! With ACK pages none of 1, 3, 4 is possible, even with all three of their fixes off. A page
//! belongs to one connection and records which seq it ACKs, so a stray ACK lands in the old
//! owner's page and counts for nobody. Defect 2 is about the table and remains.
//!
//! # What the model shows about the server
//!
//! The server's error paths (`Err` from `serve`, `check_deadline_and_kick` or the outbox
//! flush: a malformed or unexpected message, 64 KiB unread in the outbox, a failed write),
//! and `Ok(false)` after a peer's ERROR, `release` an admitted connection at once. The peer's
//! socket is still open, and the peer has not revoked. For a bitmap (plain v4) subscriber
//! this bypasses the quarantine: its late ACK counts for the next owner of its bit, as in
//! defect 1 (`an_error_release_bypasses_the_quarantine_of_bitmap_acks`). With ACK pages it is
//! harmless.
//!
//! # Invariants, checked in every state
//!
//! - A borrowed (ZERO_COPY) frame whose holder the publisher still counts on (its connection
//!   owns its bit and is not kicked) is never overwritten.
//! - A session that is counted on never loses a frame (lapped, slot already reused, or torn
//!   copy): under STRICT_WAIT only a kicked subscriber may lose frames.
//! - No innocent subscriber is kicked. Innocent means it owed nothing for the frame whose
//!   wait timed out, because it joined at or after that frame (`initial_seq >= seq`) or reads
//!   a ring that was replaced since: however promptly it ACKs, it cannot be why the wait timed
//!   out.
//! - No subscriber is admitted to a ring generation other than the one it mapped.
//!
//! # Files
//!
//! `model` (the state), `transitions` (the steps, the invariants, the canonical form; on
//! `model`), `pack` (the visited set's keys; on `model`), `explore` (the search; on the three
//! before it) and `tests` (the searches and what each must find).

mod explore;
mod model;
mod pack;
mod tests;
mod transitions;
