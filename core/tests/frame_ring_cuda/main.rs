//! The frame ring on CUDA VMM memory (GPU machine only; skipped with the reason elsewhere).
//! Frames are written by a kernel on the publisher's stream while another stream loads the
//! device, and every subscriber process checks every byte on its own GPU with a kernel:
//! both policies, COPY and ZERO_COPY, and no host copy on the way.
//!
//! Also the release paths (R12) and context hygiene: a frame released on a stream and its
//! subscriber destroyed before the stream ran is torn down on our release thread, not in the
//! CUDA host function (no failed driver release, memory and mappings flat over 1000 cycles);
//! dropping a zero-copy frame waits for the GPU work queued before it, a COPY frame before its
//! buffer is reused; publication on the stream (`publish_on_stream`) returns at once and shows
//! a frame only after its GPU work, and a publisher with publications pending tears down after
//! them; and no call of the library replaces the caller's current context.
//!
//! Files: bit_exact.rs (subscriber processes check every frame on their GPU), publication.rs
//! (publication on a stream), release.rs (the release paths), context.rs (the caller's
//! current context), no_driver.rs (a CUDA ring where there is no driver). The fixture (the
//! GPU or the skip with its reason, a publisher with a CUDA ring and a subscriber on its
//! device) is `test_support::cuda_pair`.

mod bit_exact;
mod context;
mod no_driver;
mod publication;
mod release;

use cuframes_test_support::child;

#[test]
fn child_entry() {
    let Some(mode) = child::role() else {
        return;
    };
    bit_exact::gpu_subscriber(&mode);
}
