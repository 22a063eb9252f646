//! RGB conversion, a feature on top of the frame layers: YUV/RGB frames to RGB images ready
//! for inference, on the host ([`to_rgb_host`]) and on the GPU ([`RgbKernel`]), with the same
//! formulas in the same order of operations, so both give the same bits.
//!
//! What is converted: every [`Format`](crate::wire::Format) of the ring. Chroma is taken from
//! the sample that covers the pixel (nearest neighbour; 4:2:0 chroma is not interpolated), so
//! the result does not depend on the chroma siting. The output is dense: `[3][height][width]`
//! (CHW) or `[height][width][3]` (HWC), channels R, G, B, each in `0..=1` as a float or
//! `0..=255` as `uint8` (rounded to nearest).
//!
//! Per pixel, with `y`, `u`, `v` the samples (P010: shifted down to 10 bits):
//!
//! ```text
//! Y = (y - y_offset) / y_range        limited: y_offset = 16·2^(n-8),  y_range = 219·2^(n-8)
//! U = (u - c_offset) / c_range        limited: c_offset = 128·2^(n-8), c_range = 224·2^(n-8)
//! V = (v - c_offset) / c_range        full:    y_offset = 0, y_range = c_range = 2^n - 1,
//!                                              c_offset = 2^(n-1)
//! R = Y + r_v·V                       r_v = 2(1 - Kr)
//! G = Y - g_u·U - g_v·V               g_u = 2Kb(1 - Kb)/Kg, g_v = 2Kr(1 - Kr)/Kg, Kg = 1 - Kr - Kb
//! B = Y + b_u·U                       b_u = 2(1 - Kb)
//! ```
//!
//! then clamped to `[0, 1]`. Divisions, not multiplications by reciprocals: IEEE division is
//! correctly rounded on both sides and keeps white exactly 1.0. Kr, Kb: BT.601 0.299, 0.114;
//! BT.709 0.2126, 0.0722; BT.2020 0.2627, 0.0593. RGBA/BGRA frames are reordered and divided
//! by 255 (no matrix).
//!
//! One file per job:
//! - [`spec`]: what to convert to ([`RgbSpec`]: matrix, range, element type, channel order),
//!   and the matrix and range a stream's [`ColourInfo`](crate::colour::ColourInfo) names.
//! - `coefficients`: the formulas above evaluated once per conversion, for host and kernel.
//! - `store`: output elements (`uint8` rounding, IEEE binary16) exactly as the kernel stores
//!   them.
//! - `host`: [`to_rgb_host`], the row-wise, vectorised and threaded host conversion;
//!   `reference` (tests only) is the per-pixel form it is held to bit for bit.
//! - [`cuda`]: [`RgbKernel`], the launch of `kernel.cu` (embedded as `kernel.ptx`, which
//!   `scripts/gen-ptx.sh` regenerates).
//! - [`batch`]: N cameras into one resized, normalised image batch in one kernel launch
//!   ([`batch::BatchKernel`], [`batch::convert_batch_host`]), sharing `coefficients` and
//!   `store`.

pub mod batch;
mod coefficients;
pub mod cuda;
mod host;
#[cfg(test)]
mod reference;
pub mod spec;
mod store;

pub use cuda::RgbKernel;
pub use host::to_rgb_host;
pub use spec::{rgb_size, ColourMatrix, ColourRange, RgbDtype, RgbLayout, RgbSpec};
