//! YUV/RGB frames to RGB images ready for inference: the colour arithmetic, shared by the host
//! implementation here and the CUDA kernel (`crate::cuda::convert`, same formulas, same
//! order of operations, so both give the same bits).
//!
//! What is converted: every [`Format`] of the ring. Chroma is taken from the sample that
//! covers the pixel (nearest neighbour; 4:2:0 chroma is not interpolated), so the result does
//! not depend on the chroma siting. The output is dense: `[3][height][width]` (CHW) or
//! `[height][width][3]` (HWC), channels R, G, B, each in `0..=1` as a float or `0..=255`
//! as `uint8` (rounded to nearest).
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
//! correctly rounded on both sides and keeps white exactly 1.0. Kr, Kb: BT.601 0.299, 0.114; BT.709 0.2126, 0.0722; BT.2020
//! 0.2627, 0.0593. RGBA/BGRA frames are reordered and divided by 255 (no matrix).

use crate::error::{Error, Result};
use crate::format::FrameLayout;
use crate::wire::Format;

mod host;
#[cfg(test)]
mod reference;

/// The YCbCr matrix of the source (ISO/IEC 23091-2 MatrixCoefficients 5/6, 1 and 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorMatrix {
    Bt601,
    Bt709,
    Bt2020,
}

/// Whether the samples use the whole code range or the "studio" (limited, video) range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorRange {
    Limited,
    Full,
}

/// Element type of the RGB output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RgbDtype {
    U8,
    F16,
    F32,
}

impl RgbDtype {
    pub fn size(self) -> usize {
        match self {
            RgbDtype::U8 => 1,
            RgbDtype::F16 => 2,
            RgbDtype::F32 => 4,
        }
    }
}

/// Order of the RGB output: planar `[3][h][w]` or interleaved `[h][w][3]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RgbLayout {
    Chw,
    Hwc,
}

/// What to convert to, and how to read the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RgbSpec {
    pub matrix: ColorMatrix,
    pub range: ColorRange,
    pub dtype: RgbDtype,
    pub layout: RgbLayout,
}

impl Default for RgbSpec {
    /// BT.709, limited range (what an HD camera sends), `uint8`, CHW.
    fn default() -> RgbSpec {
        RgbSpec {
            matrix: ColorMatrix::Bt709,
            range: ColorRange::Limited,
            dtype: RgbDtype::U8,
            layout: RgbLayout::Chw,
        }
    }
}

/// How the source's planes are read (the kernel's `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum SourceKind {
    SemiPlanar8 = 0,
    SemiPlanar16 = 1,
    Planar420 = 2,
    Planar444 = 3,
    Rgba = 4,
    Bgra = 5,
}

/// The numbers of one conversion: the formulas of the module documentation, evaluated once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Coefficients {
    pub kind: SourceKind,
    /// Right shift of 16-bit samples (P010 keeps its 10 bits at the top).
    pub shift: u32,
    pub y_offset: f32,
    pub y_range: f32,
    pub c_offset: f32,
    pub c_range: f32,
    pub r_v: f32,
    pub g_u: f32,
    pub g_v: f32,
    pub b_u: f32,
    /// 255 for `uint8`, 1 for floats.
    pub out_scale: f32,
}

impl Coefficients {
    pub fn new(format: Format, spec: &RgbSpec) -> Result<Coefficients> {
        let (kind, bits, shift) = match format {
            Format::Nv12 => (SourceKind::SemiPlanar8, 8, 0),
            Format::P010 => (SourceKind::SemiPlanar16, 10, 6),
            Format::P016 => (SourceKind::SemiPlanar16, 16, 0),
            Format::Yuv420p => (SourceKind::Planar420, 8, 0),
            Format::Yuv444p => (SourceKind::Planar444, 8, 0),
            Format::Rgba => (SourceKind::Rgba, 8, 0),
            Format::Bgra => (SourceKind::Bgra, 8, 0),
            Format::None => {
                return Err(Error::new(
                    crate::ErrorCode::Format,
                    "a frame of format NONE has no pixels to convert",
                ))
            }
        };
        // In f64, rounded once to f32: the kernel receives these same f32 values.
        let step = f64::from(1u32 << (bits - 8));
        let max = f64::from((1u32 << bits) - 1);
        let (y_offset, y_range, c_offset, c_range) = match spec.range {
            ColorRange::Limited => (16.0 * step, 219.0 * step, 128.0 * step, 224.0 * step),
            ColorRange::Full => (0.0, max, f64::from(1u32 << (bits - 1)), max),
        };
        let (kr, kb) = match spec.matrix {
            ColorMatrix::Bt601 => (0.299, 0.114),
            ColorMatrix::Bt709 => (0.2126, 0.0722),
            ColorMatrix::Bt2020 => (0.2627, 0.0593),
        };
        let kg = 1.0 - kr - kb;
        Ok(Coefficients {
            kind,
            shift,
            y_offset: y_offset as f32,
            y_range: y_range as f32,
            c_offset: c_offset as f32,
            c_range: c_range as f32,
            r_v: (2.0 * (1.0 - kr)) as f32,
            g_u: (2.0 * kb * (1.0 - kb) / kg) as f32,
            g_v: (2.0 * kr * (1.0 - kr) / kg) as f32,
            b_u: (2.0 * (1.0 - kb)) as f32,
            out_scale: if spec.dtype == RgbDtype::U8 {
                255.0
            } else {
                1.0
            },
        })
    }
}

/// Bytes of the RGB image of a `width` x `height` frame.
pub fn rgb_size(width: u32, height: u32, dtype: RgbDtype) -> usize {
    3 * width as usize * height as usize * dtype.size()
}

/// Converts a host frame: `src` holds the frame as laid out by `layout` (planes at their
/// offsets and pitches, as [`crate::subscriber::Frame::copy_to`] writes it), `out` receives
/// exactly [`rgb_size`] bytes (native-endian elements).
pub fn to_rgb_host(src: &[u8], layout: &FrameLayout, spec: &RgbSpec, out: &mut [u8]) -> Result<()> {
    let k = Coefficients::new(layout.format, spec)?;
    let (w, h) = (layout.width as usize, layout.height as usize);
    if out.len() != rgb_size(layout.width, layout.height, spec.dtype) {
        return Err(Error::invalid(format!(
            "RGB output of {} bytes for a {w}x{h} {:?} image (needs {})",
            out.len(),
            spec.dtype,
            rgb_size(layout.width, layout.height, spec.dtype)
        )));
    }
    if src.len() < layout.frame_size {
        return Err(Error::invalid(format!(
            "frame of {} bytes, its layout needs {}",
            src.len(),
            layout.frame_size
        )));
    }
    host::convert(src, layout, spec, &k, out);
    Ok(())
}

/// A `uint8` output element from an unclamped value, as the kernel's `cf_store`:
/// `floor(clamp(v, 0, 1) · 255 + 0.5)`. `max`/`min` instead of `clamp` turn NaN into 0 (what
/// `clamp` then `as u8` give it too); the sum is at least 0.5, so truncating it (one vector
/// instruction) is the floor.
#[inline(always)]
#[allow(clippy::manual_clamp)] // clamp keeps NaN, which the SAFETY argument below excludes
fn store_u8(value: f32) -> u8 {
    let v = value.max(0.0).min(1.0) * 255.0 + 0.5;
    // SAFETY: `v` is finite and in 0.5..=255.5 (max/min never return NaN): it fits an i32.
    unsafe { v.to_int_unchecked::<i32>() as u8 }
}

/// IEEE 754 binary16 of `v`, rounded to nearest even (PTX `cvt.rn.f16.f32`). Only values in
/// [0, 1] reach it, but it is exact for every finite input (subnormals, overflow to infinity).
pub(crate) fn f32_to_f16(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    if exp == 0xff {
        // Infinity or NaN (a quiet NaN keeps a mantissa bit).
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    // The significand with its implicit bit (24 bits), and how far to shift it down to the
    // 11 bits of a normal half (or fewer for a subnormal).
    let (sig, shift) = if e <= 0 {
        if e < -10 {
            return sign; // below half the smallest subnormal: rounds to zero
        }
        (mant | 0x80_0000, (14 - e) as u32)
    } else {
        (mant | 0x80_0000, 13)
    };
    let mut half = sig >> shift;
    let rest = sig & ((1 << shift) - 1);
    let halfway = 1 << (shift - 1);
    if rest > halfway || (rest == halfway && half & 1 == 1) {
        half += 1;
    }
    // For normals `half` holds the implicit bit at bit 10: adding the biased exponent above
    // it carries a rounding overflow into the exponent, as IEEE wants.
    let value = if e <= 0 {
        half
    } else {
        ((e as u32 - 1) << 10) + half
    };
    sign | value as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_matches_known_values() {
        for (v, h) in [
            (0.0f32, 0x0000u16),
            (1.0, 0x3c00),
            (0.5, 0x3800),
            (-2.0, 0xc000),
            (65504.0, 0x7bff),
            (65520.0, 0x7c00), // rounds up to infinity
            (1.0 / 3.0, 0x3555),
            (6.103_515_6e-5, 0x0400),     // smallest normal
            (5.960_464_5e-8, 0x0001),     // smallest subnormal
            (2.980_232_2e-8, 0x0000),     // exactly half of it: ties to even (0)
            (1.0 + 1.0 / 2048.0, 0x3c00), // halfway between 1 and the next half: even
            (1.0 + 3.0 / 2048.0, 0x3c02), // halfway, odd below: up
            (f32::INFINITY, 0x7c00),
        ] {
            assert_eq!(f32_to_f16(v), h, "{v}");
        }
        assert_eq!(f32_to_f16(f32::NAN) & 0x7e00, 0x7e00);
    }

    fn layout(format: Format, w: u32, h: u32) -> FrameLayout {
        FrameLayout::new(format, w, h).expect("layout")
    }

    #[test]
    fn limited_range_black_and_white_are_exact() {
        let l = layout(Format::Nv12, 4, 2);
        let mut src = vec![0u8; l.frame_size];
        let [y, uv, ..] = l.planes() else { panic!() };
        for r in 0..2 {
            src[y.offset + r * y.pitch..][..2].fill(16); // black
            src[y.offset + r * y.pitch + 2..][..2].fill(235); // white
        }
        src[uv.offset..][..4].fill(128);
        for spec in [
            RgbSpec::default(),
            RgbSpec {
                matrix: ColorMatrix::Bt601,
                ..RgbSpec::default()
            },
        ] {
            let mut out = vec![0u8; rgb_size(4, 2, RgbDtype::U8)];
            to_rgb_host(&src, &l, &spec, &mut out).unwrap();
            for c in 0..3 {
                assert_eq!(&out[c * 8..c * 8 + 4], &[0, 0, 255, 255], "channel {c}");
            }
        }
    }

    #[test]
    fn bt709_and_bt601_differ_on_colour() {
        // Pure red in BT.709 limited range: Y 63, Cb 102, Cr 240.
        let l = layout(Format::Yuv444p, 2, 2);
        let mut src = vec![0u8; l.frame_size];
        let p = l.planes().to_vec();
        for (plane, value) in [(0, 63u8), (1, 102), (2, 240)] {
            for r in 0..2 {
                src[p[plane].offset + r * p[plane].pitch..][..2].fill(value);
            }
        }
        let mut out = vec![0u8; rgb_size(2, 2, RgbDtype::U8)];
        let hwc = RgbSpec {
            layout: RgbLayout::Hwc,
            ..RgbSpec::default()
        };
        to_rgb_host(&src, &l, &hwc, &mut out).unwrap();
        let px = &out[..3];
        assert!(
            px[0] >= 253 && px[1] <= 2 && px[2] <= 2,
            "709 red decodes as {px:?}"
        );
        to_rgb_host(
            &src,
            &l,
            &RgbSpec {
                matrix: ColorMatrix::Bt601,
                ..hwc
            },
            &mut out,
        )
        .unwrap();
        // BT.601 reads the same samples as a duller red: R = (63-16)/219 + 1.402·(240-128)/224.
        assert_eq!(out[0], 233, "601 reads 709 red as {:?}", &out[..3]);
    }

    #[test]
    fn p010_uses_its_top_ten_bits() {
        let l = layout(Format::P010, 2, 2);
        let mut src = vec![0u8; l.frame_size];
        let p = l.planes().to_vec();
        for r in 0..2 {
            for x in 0..2 {
                // Y = 940 (10-bit white), Cb = Cr = 512, stored << 6 with garbage in the low bits.
                let yv: u16 = (940 << 6) | 0x3f;
                src[p[0].offset + r * p[0].pitch + 2 * x..][..2].copy_from_slice(&yv.to_ne_bytes());
            }
        }
        for x in 0..2 {
            src[p[1].offset + 2 * x..][..2].copy_from_slice(&((512u16 << 6) | 0x15).to_ne_bytes());
        }
        let mut out = vec![0u8; rgb_size(2, 2, RgbDtype::F32)];
        to_rgb_host(
            &src,
            &l,
            &RgbSpec {
                dtype: RgbDtype::F32,
                ..RgbSpec::default()
            },
            &mut out,
        )
        .unwrap();
        for v in out.chunks(4) {
            assert_eq!(f32::from_ne_bytes(v.try_into().unwrap()), 1.0);
        }
    }

    #[test]
    fn wrong_sizes_and_format_none_are_refused() {
        let l = layout(Format::Nv12, 4, 2);
        let src = vec![0u8; l.frame_size];
        let mut short = vec![0u8; 5];
        assert!(to_rgb_host(&src, &l, &RgbSpec::default(), &mut short).is_err());
        let mut out = vec![0u8; rgb_size(4, 2, RgbDtype::U8)];
        assert!(to_rgb_host(&src[..10], &l, &RgbSpec::default(), &mut out).is_err());
        let e = Coefficients::new(Format::None, &RgbSpec::default()).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::Format);
    }
}
