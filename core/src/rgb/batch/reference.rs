//! The batched conversion evaluated in float64 (tests only): the steps of the module
//! documentation with exact-as-possible arithmetic (coefficients from Kr and Kb in f64,
//! source coordinates and weights in f64), against which the f32 path's error is measured
//! and bounded per element type.

use super::input::HostBatchInput;
use super::placement::content_box;
use super::spec::BatchSpec;
use crate::rgb::spec::{ColourMatrix, ColourRange, RgbLayout};
use crate::wire::Format;

/// R, G, B in `[0, 1]` of pixel `(x, y)` of `input`, in f64.
fn source_pixel(input: &HostBatchInput<'_>, x: usize, y: usize) -> [f64; 3] {
    let g = &input.geometry;
    let planes = g.planes();
    let byte = |i: usize, x: usize, y: usize| input.planes[i][y * planes[i].pitch + x];
    let word = |i: usize, x: usize, y: usize| {
        let o = y * planes[i].pitch + 2 * x;
        u16::from_ne_bytes([input.planes[i][o], input.planes[i][o + 1]])
    };
    let clamp = |v: f64| v.clamp(0.0, 1.0);
    if let Format::Rgba | Format::Bgra = g.format {
        let (r, b) = if g.format == Format::Rgba {
            (0, 2)
        } else {
            (2, 0)
        };
        let px = |c: usize| clamp(f64::from(byte(0, 4 * x + c, y)) / 255.0);
        return [px(r), px(1), px(b)];
    }
    let (bits, yv, u, v) = match g.format {
        Format::Nv12 => (
            8,
            f64::from(byte(0, x, y)),
            f64::from(byte(1, 2 * (x >> 1), y >> 1)),
            f64::from(byte(1, 2 * (x >> 1) + 1, y >> 1)),
        ),
        Format::P010 | Format::P016 => {
            let shift = if g.format == Format::P010 { 6 } else { 0 };
            (
                16 - shift,
                f64::from(word(0, x, y) >> shift),
                f64::from(word(1, 2 * (x >> 1), y >> 1) >> shift),
                f64::from(word(1, 2 * (x >> 1) + 1, y >> 1) >> shift),
            )
        }
        Format::Yuv420p => (
            8,
            f64::from(byte(0, x, y)),
            f64::from(byte(1, x >> 1, y >> 1)),
            f64::from(byte(2, x >> 1, y >> 1)),
        ),
        Format::Yuv444p => (
            8,
            f64::from(byte(0, x, y)),
            f64::from(byte(1, x, y)),
            f64::from(byte(2, x, y)),
        ),
        Format::Rgba | Format::Bgra | Format::None => {
            unreachable!("packed formats return above; NONE has no geometry")
        }
    };
    let step = f64::from(1u32 << (bits - 8));
    let max = f64::from((1u32 << bits) - 1);
    let (y_off, y_range, c_off, c_range) = match input.range {
        ColourRange::Limited => (16.0 * step, 219.0 * step, 128.0 * step, 224.0 * step),
        ColourRange::Full => (0.0, max, f64::from(1u32 << (bits - 1)), max),
    };
    let (kr, kb) = match input.matrix {
        ColourMatrix::Bt601 => (0.299, 0.114),
        ColourMatrix::Bt709 => (0.2126, 0.0722),
        ColourMatrix::Bt2020 => (0.2627, 0.0593),
    };
    let kg = 1.0 - kr - kb;
    let yy = (yv - y_off) / y_range;
    let uu = (u - c_off) / c_range;
    let vv = (v - c_off) / c_range;
    [
        clamp(yy + 2.0 * (1.0 - kr) * vv),
        clamp(yy - 2.0 * kb * (1.0 - kb) / kg * uu - 2.0 * kr * (1.0 - kr) / kg * vv),
        clamp(yy + 2.0 * (1.0 - kb) * uu),
    ]
}

/// The two samples and weights of output position `d` along an axis, in f64.
fn tap(d: usize, src: usize, content: usize) -> (usize, usize, f64, f64) {
    let s = ((d as f64 + 0.5) * (src as f64 / content as f64) - 0.5).max(0.0);
    let i0 = (s.floor() as usize).min(src - 1);
    let i1 = (i0 + 1).min(src - 1);
    let l1 = s - i0 as f64;
    (i0, i1, 1.0 - l1, l1)
}

/// Every element of the batch, before the store (normalised, or clamped to `[0, 1]`), in
/// the output's order.
pub(super) fn reference_batch(inputs: &[Option<HostBatchInput<'_>>], spec: &BatchSpec) -> Vec<f64> {
    let (w_out, h_out) = (spec.width as usize, spec.height as usize);
    let mut out = vec![0f64; inputs.len() * 3 * w_out * h_out];
    for (n, input) in inputs.iter().enumerate() {
        let image = &mut out[n * 3 * w_out * h_out..(n + 1) * 3 * w_out * h_out];
        let boxed = input.as_ref().map(|i| {
            let (w, h) = (i.geometry.width, i.geometry.height);
            let (bx, by, bw, bh) = content_box(w, h, spec);
            (
                i,
                w as usize,
                h as usize,
                [bx, by, bw, bh].map(|v| v as usize),
            )
        });
        for y in 0..h_out {
            for x in 0..w_out {
                let mut v = spec.pad.map(f64::from);
                if let Some((i, w, h, [bx, by, bw, bh])) = boxed {
                    if (bx..bx + bw).contains(&x) && (by..by + bh).contains(&y) {
                        let (x0, x1, lx0, lx1) = tap(x - bx, w, bw);
                        let (y0, y1, ly0, ly1) = tap(y - by, h, bh);
                        let [p00, p01, p10, p11] = [(x0, y0), (x1, y0), (x0, y1), (x1, y1)]
                            .map(|(sx, sy)| source_pixel(i, sx, sy));
                        for c in 0..3 {
                            v[c] = ly0 * (lx0 * p00[c] + lx1 * p01[c])
                                + ly1 * (lx0 * p10[c] + lx1 * p11[c]);
                        }
                    }
                }
                for (c, value) in v.into_iter().enumerate() {
                    let value = match spec.normalize {
                        Some(nz) => (value - f64::from(nz.mean[c])) / f64::from(nz.std[c]),
                        None => value.clamp(0.0, 1.0),
                    };
                    let i = match spec.layout {
                        RgbLayout::Chw => (c * h_out + y) * w_out + x,
                        RgbLayout::Hwc => (y * w_out + x) * 3 + c,
                    };
                    image[i] = value;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::{half_to_f32, input, random_frame, Rng, FORMATS, LAYOUTS};
    use super::super::{batch_bytes, convert_batch_host, BatchSpec, Normalize, Resize};
    use super::*;
    use crate::rgb::spec::RgbDtype;

    /// The largest |f32 path - float64| of a batch, in the output's units (uint8 codes for
    /// `uint8`), and the largest excess over the element type's own rounding (half a code,
    /// half an f16 ulp of the reference value; 0 for f32).
    fn errors(spec: &BatchSpec, inputs: &[Option<HostBatchInput<'_>>]) -> (f64, f64) {
        let mut out = vec![0u8; batch_bytes(inputs.len(), spec)];
        convert_batch_host(inputs, spec, &mut out).unwrap();
        let want = reference_batch(inputs, spec);
        let (mut max, mut excess) = (0f64, 0f64);
        for (i, &r) in want.iter().enumerate() {
            let (got, r, rounding) = match spec.dtype {
                RgbDtype::U8 => (f64::from(out[i]), r * 255.0, 0.5),
                RgbDtype::F16 => {
                    let h = half_to_f32(u16::from_ne_bytes([out[2 * i], out[2 * i + 1]]));
                    // Half an ulp of binary16 at |r| (normal range: 2^(e - 10) / 2).
                    let ulp = 2f64.powi(r.abs().max(2f64.powi(-14)).log2().floor() as i32 - 10);
                    (f64::from(h), r, ulp / 2.0)
                }
                RgbDtype::F32 => (
                    f64::from(f32::from_ne_bytes(
                        out[4 * i..4 * i + 4].try_into().unwrap(),
                    )),
                    r,
                    0.0,
                ),
            };
            let e = (got - r).abs();
            max = max.max(e);
            excess = excess.max(e - rounding);
        }
        (max, excess)
    }

    #[test]
    fn the_f32_path_is_within_bounds_of_a_float64_reference() {
        // Every format (random samples: the worst case for interpolation), downscaled,
        // upscaled and at odd sizes, a 1080p frame (source coordinates up to 1920), letterboxed and stretched, with and without ImageNet
        // normalisation, both layouts.
        let mut rng = Rng(0xfeed_beef);
        let mut frames: Vec<_> = FORMATS
            .iter()
            .zip([
                (160, 90),
                (13, 7),
                (64, 64),
                (99, 41),
                (41, 99),
                (250, 3),
                (2, 2),
            ])
            .map(|(&f, (w, h))| random_frame(&mut rng, f, w, h))
            .collect();
        frames.push(random_frame(&mut rng, Format::Nv12, 1920, 1080));
        let descs = [
            (ColourMatrix::Bt709, ColourRange::Limited),
            (ColourMatrix::Bt601, ColourRange::Full),
            (ColourMatrix::Bt2020, ColourRange::Limited),
        ];
        let inputs: Vec<_> = frames
            .iter()
            .enumerate()
            .map(|(i, (g, d))| {
                let (m, r) = descs[i % 3];
                Some(input(d, g, m, r))
            })
            .collect();
        let imagenet = Normalize {
            mean: [0.485, 0.456, 0.406],
            std: [0.229, 0.224, 0.225],
        };
        let mut report = Vec::new();
        for (dtype, normalize) in [
            (RgbDtype::U8, None),
            (RgbDtype::F16, None),
            (RgbDtype::F32, None),
            (RgbDtype::F16, Some(imagenet)),
            (RgbDtype::F32, Some(imagenet)),
        ] {
            let (mut max, mut excess) = (0f64, 0f64);
            for layout in LAYOUTS {
                for (resize, (w, h)) in
                    [(Resize::Letterbox, (64, 48)), (Resize::Stretch, (37, 120))]
                {
                    let spec = BatchSpec {
                        width: w,
                        height: h,
                        dtype,
                        layout,
                        resize,
                        pad: [114.0 / 255.0; 3],
                        normalize,
                    };
                    let (m, e) = errors(&spec, &inputs);
                    (max, excess) = (max.max(m), excess.max(e));
                }
            }
            let name = format!(
                "{dtype:?}{}",
                if normalize.is_some() {
                    " normalised"
                } else {
                    ""
                }
            );
            report.push(format!(
                "{name}: {max:.3e} (beyond the type's rounding: {excess:.3e})"
            ));
            // The f32 arithmetic adds at most a few f32 ulps of 1 (normalised: of 1/std)
            // to the rounding of the stored type (measured: 1.6e-7 and 7.8e-7).
            let bound = if normalize.is_some() { 2e-6 } else { 5e-7 };
            let bound = if dtype == RgbDtype::U8 {
                255.0 * bound
            } else {
                bound
            };
            assert!(
                excess <= bound,
                "{name}: error {max:e}, {excess:e} beyond the rounding"
            );
        }
        println!(
            "max abs error vs the float64 reference (uint8 in codes): {}",
            report.join("; ")
        );
    }
}
