//! Batched conversion for inference: the frames of N cameras (any format of the ring, mixed
//! sizes, each with its own matrix and range) into one `[N, 3, H, W]` or `[N, H, W, 3]`
//! image batch of `uint8`, `float16` or `float32`, converted, resized and normalised in
//! **one kernel launch** on the GPU ([`BatchKernel`]) or on the host
//! ([`convert_batch_host`]), with the same f32 operations in the same order on both sides,
//! so both give the same bits.
//!
//! It replaces the loop "`to_rgb` each frame (float, `0..=1`), `torch.nn.functional.
//! interpolate` it, pad it, normalise it, stack": per output element,
//!
//! 1. **Where**: the camera's frame is fitted into its image by [`placement()`] (letterbox:
//!    aspect kept, centred, offsets rounded down; stretch: per axis). Pixels outside the
//!    content box, and every pixel of a camera without a frame (`None`), take the pad colour
//!    [`BatchSpec::pad`].
//! 2. **Convert**: each source pixel the resize reads is converted to R, G, B in `0..=1`
//!    exactly as [`to_rgb_host`](crate::rgb::to_rgb_host) does it (the same coefficients,
//!    chroma from the sample that covers the pixel, the same divisions), then clamped to
//!    `[0, 1]`.
//! 3. **Resize**: bilinear, the convention of `interpolate(mode="bilinear",
//!    align_corners=False)` (half-pixel centres, edge samples repeated, no antialiasing):
//!    output pixel `X` of the content box reads source coordinate `s = max((X + 0.5) · inv -
//!    0.5, 0)` with `inv = w / content_width` (an f32 division), samples `i0 = min(⌊s⌋, w -
//!    1)`, `i1 = min(i0 + 1, w - 1)`, weights `l1 = s - i0`, `l0 = 1 - l1`; the same
//!    vertically; the value is `ly0·(lx0·p00 + lx1·p01) + ly1·(lx0·p10 + lx1·p11)`. A frame
//!    whose content box has its own size is copied exactly (`s = X`, `l1 = 0`).
//! 4. **Normalise** (optional, [`Normalize`]): `v' = (v - mean) / std` per channel (the pad
//!    colour too); without it `v` is clamped to `[0, 1]` again.
//! 5. **Store**: `uint8` = `⌊v·255 + 0.5⌋`; `float16` rounded to nearest even; `float32` as
//!    is (the stores of [`crate::rgb`]).
//!
//! Every step is an f32 operation, each rounded on its own (the kernel is compiled without
//! FMA contraction), which is what makes the host and the GPU agree bit for bit. Against a
//! float64 evaluation of the same steps (`reference`, in the tests) the f32 result is off by
//! at most a few units in the last place before the store; `docs/batch-conversion.md` states the bounds
//! measured per element type.
//!
//! One file per job:
//! - [`spec`]: [`BatchSpec`], [`Resize`], [`Normalize`], [`batch_bytes`].
//! - [`mod@placement`]: the content box and the transform back to source pixels.
//! - [`input`]: one camera's frame, on the GPU ([`BatchInput`]) or the host
//!   ([`HostBatchInput`]).
//! - `camera`: the per-camera numbers, validated on the host; the kernel reads them as they
//!   are.
//! - `host`: [`convert_batch_host`].
//! - [`cuda`]: [`BatchKernel`], the launch of `kernel.cu` (embedded as `kernel.ptx`, which
//!   `scripts/gen-ptx.sh` regenerates) and the upload of the per-camera numbers.
//! - `reference` (tests only): the float64 evaluation.

mod camera;
pub mod cuda;
mod host;
pub mod input;
pub mod placement;
pub mod spec;

pub use cuda::BatchKernel;
pub use host::convert_batch_host;
pub use input::{BatchInput, HostBatchInput};
pub use placement::{placement, Placement};
pub use spec::{batch_bytes, BatchSpec, Normalize, Resize, MAX_BATCH_CAMERAS};

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
