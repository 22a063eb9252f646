//! The per-pixel host conversion (one pixel at a time, the formulas of the module
//! documentation of [`crate::rgb`] verbatim): the reference the fast row code of `host` is
//! held to, bit for bit, by the tests here.

use super::coefficients::{Coefficients, SourceKind};
use super::spec::{rgb_size, RgbDtype, RgbLayout, RgbSpec};
use super::store::f32_to_f16;
use crate::format::FrameGeometry;

/// R, G, B of one pixel from its samples, unclamped (as the kernel computes it).
fn rgb(k: &Coefficients, y: f32, u: f32, v: f32) -> [f32; 3] {
    let yy = (y - k.y_offset) / k.y_range;
    let uu = (u - k.c_offset) / k.c_range;
    let vv = (v - k.c_offset) / k.c_range;
    [
        yy + k.r_v * vv,
        yy - k.g_u * uu - k.g_v * vv,
        yy + k.b_u * uu,
    ]
}

/// `to_rgb_host` of the reference: same contract, sizes checked by assertions.
pub(super) fn to_rgb_reference(
    src: &[u8],
    geometry: &FrameGeometry,
    spec: &RgbSpec,
    out: &mut [u8],
) {
    let k = Coefficients::new(geometry.format, spec).expect("a convertible format");
    let (w, h) = (geometry.width as usize, geometry.height as usize);
    assert_eq!(
        out.len(),
        rgb_size(geometry.width, geometry.height, spec.dtype)
    );
    assert!(src.len() >= geometry.frame_size);
    let planes = geometry.planes();
    // Row `y` of plane `i` (the geometry was validated: every row lies inside frame_size).
    let row = |i: usize, y: usize| -> &[u8] {
        let p = planes[i];
        &src[p.offset + y * p.pitch..p.offset + y * p.pitch + p.row_bytes]
    };
    let load16 =
        |r: &[u8], x: usize| f32::from(u16::from_ne_bytes([r[2 * x], r[2 * x + 1]]) >> k.shift);
    for y in 0..h {
        for x in 0..w {
            let rgb = match k.kind {
                SourceKind::Rgba | SourceKind::Bgra => {
                    let px = &row(0, y)[4 * x..4 * x + 4];
                    let (r, b) = if k.kind == SourceKind::Rgba {
                        (px[0], px[2])
                    } else {
                        (px[2], px[0])
                    };
                    [
                        f32::from(r) / 255.0,
                        f32::from(px[1]) / 255.0,
                        f32::from(b) / 255.0,
                    ]
                }
                SourceKind::SemiPlanar8 => {
                    let c = row(1, y >> 1);
                    rgb(
                        &k,
                        f32::from(row(0, y)[x]),
                        f32::from(c[2 * (x >> 1)]),
                        f32::from(c[2 * (x >> 1) + 1]),
                    )
                }
                SourceKind::SemiPlanar16 => {
                    let c = row(1, y >> 1);
                    rgb(
                        &k,
                        load16(row(0, y), x),
                        load16(c, 2 * (x >> 1)),
                        load16(c, 2 * (x >> 1) + 1),
                    )
                }
                SourceKind::Planar420 | SourceKind::Planar444 => {
                    let (cx, cy) = if k.kind == SourceKind::Planar420 {
                        (x >> 1, y >> 1)
                    } else {
                        (x, y)
                    };
                    rgb(
                        &k,
                        f32::from(row(0, y)[x]),
                        f32::from(row(1, cy)[cx]),
                        f32::from(row(2, cy)[cx]),
                    )
                }
            };
            for (c, value) in rgb.into_iter().enumerate() {
                let i = match spec.layout {
                    RgbLayout::Chw => (c * h + y) * w + x,
                    RgbLayout::Hwc => (y * w + x) * 3 + c,
                };
                store(out, spec.dtype, k.out_scale, i, value);
            }
        }
    }
}

/// Element `i` of the output, clamped and converted as the kernel's `cf_store`.
fn store(out: &mut [u8], dtype: RgbDtype, out_scale: f32, i: usize, value: f32) {
    let v = value.clamp(0.0, 1.0);
    match dtype {
        RgbDtype::U8 => out[i] = (v * out_scale + 0.5).floor() as u8,
        RgbDtype::F16 => out[2 * i..2 * i + 2].copy_from_slice(&f32_to_f16(v).to_ne_bytes()),
        RgbDtype::F32 => out[4 * i..4 * i + 4].copy_from_slice(&v.to_ne_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rgb::{to_rgb_host, ColourMatrix, ColourRange};
    use crate::wire::Format;

    const MATRICES: [ColourMatrix; 3] = [
        ColourMatrix::Bt601,
        ColourMatrix::Bt709,
        ColourMatrix::Bt2020,
    ];
    const RANGES: [ColourRange; 2] = [ColourRange::Limited, ColourRange::Full];
    const DTYPES: [RgbDtype; 3] = [RgbDtype::U8, RgbDtype::F16, RgbDtype::F32];
    const LAYOUTS: [RgbLayout; 2] = [RgbLayout::Chw, RgbLayout::Hwc];

    fn specs() -> impl Iterator<Item = RgbSpec> {
        MATRICES.into_iter().flat_map(|matrix| {
            RANGES.into_iter().flat_map(move |range| {
                DTYPES.into_iter().flat_map(move |dtype| {
                    LAYOUTS.into_iter().map(move |layout| RgbSpec {
                        matrix,
                        range,
                        dtype,
                        layout,
                    })
                })
            })
        })
    }

    /// Both conversions of `src`; panics at the first element that differs.
    fn assert_same(src: &[u8], geometry: &FrameGeometry, spec: &RgbSpec, what: &str) {
        let size = rgb_size(geometry.width, geometry.height, spec.dtype);
        let (mut fast, mut slow) = (vec![0xa5u8; size], vec![0x5au8; size]);
        to_rgb_host(src, geometry, spec, &mut fast).expect("fast conversion");
        to_rgb_reference(src, geometry, spec, &mut slow);
        if let Some(i) = fast.iter().zip(&slow).position(|(a, b)| a != b) {
            panic!(
                "{what} {:?} {}x{} {spec:?}: byte {i} of {size} is {} (reference {})",
                geometry.format, geometry.width, geometry.height, fast[i], slow[i]
            );
        }
    }

    /// A small deterministic generator (xorshift64*): the same frames on every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn fill(&mut self, b: &mut [u8]) {
            for c in b.chunks_mut(8) {
                let v = self.next().to_ne_bytes();
                c.copy_from_slice(&v[..c.len()]);
            }
        }
    }

    #[test]
    fn every_8bit_triple_converts_as_the_reference() {
        // 16 YUV444p frames of 4096x256 hold each (y, u, v) once: pixel p = y | u << 8 | v << 16.
        // Each spec goes through them all (CHW for even frames, HWC for odd ones); a frame of
        // 2^20 pixels is converted by several threads, so band edges are covered too.
        let l = FrameGeometry::new(Format::Yuv444p, 4096, 256).unwrap();
        let planes = l.planes().to_vec();
        let mut frames = Vec::new();
        for f in 0..16u32 {
            let mut src = vec![0u8; l.frame_size];
            for row in 0..256usize {
                for x in 0..4096usize {
                    let p = (f << 20) | (row as u32) << 12 | x as u32;
                    for (i, plane) in planes.iter().enumerate() {
                        src[plane.offset + row * plane.pitch + x] = (p >> (8 * i)) as u8;
                    }
                }
            }
            frames.push(src);
        }
        for matrix in MATRICES {
            for range in RANGES {
                for dtype in DTYPES {
                    for (f, src) in frames.iter().enumerate() {
                        let spec = RgbSpec {
                            matrix,
                            range,
                            dtype,
                            layout: LAYOUTS[f % 2],
                        };
                        assert_same(src, &l, &spec, &format!("triples of frame {f}"));
                    }
                }
            }
        }
    }

    #[test]
    fn random_frames_of_every_format_convert_as_the_reference() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let formats = [
            Format::Nv12,
            Format::P010,
            Format::P016,
            Format::Yuv420p,
            Format::Yuv444p,
            Format::Rgba,
            Format::Bgra,
        ];
        // Odd sizes (a last chroma sample for one pixel, a last chroma row for one row), a
        // single pixel, rows at a padded pitch, and frames big enough to be split over threads.
        let small = [(1, 1), (2, 2), (3, 5), (17, 9), (64, 33), (333, 77)];
        for format in formats {
            for &(w, h) in &small {
                let dense = FrameGeometry::new(format, w, h).unwrap();
                let rows: Vec<u32> = dense.planes().iter().map(|p| p.row_bytes as u32).collect();
                let padded_uv = rows.get(1).map_or(0, |r| r + 32);
                let padded = FrameGeometry::with_pitches(format, w, h, rows[0] + 64, padded_uv);
                let layouts = [dense, padded.unwrap()];
                for l in &layouts {
                    let mut src = vec![0u8; l.frame_size];
                    rng.fill(&mut src);
                    for spec in specs() {
                        assert_same(&src, l, &spec, "random");
                    }
                }
            }
            for (i, (w, h)) in [(1920u32, 1080u32), (1283, 721)].into_iter().enumerate() {
                let l = FrameGeometry::new(format, w, h).unwrap();
                let mut src = vec![0u8; l.frame_size];
                rng.fill(&mut src);
                // Every dtype and layout, the matrices and ranges in turn (a 1080p reference
                // conversion is slow).
                for (j, spec) in specs()
                    .enumerate()
                    .filter(|(j, _)| j % 6 == (i * 3 + format as usize) % 6)
                {
                    assert_same(&src, &l, &spec, &format!("large random #{j}"));
                }
            }
        }
    }

    #[test]
    fn sixteen_bit_extremes_convert_as_the_reference() {
        // Every 16-bit sample value as luma, against chroma of every 16-bit value in steps
        // (P016 reads all 16 bits, P010 the top 10 of them): clamping on both sides.
        for format in [Format::P010, Format::P016] {
            let l = FrameGeometry::new(format, 256, 256).unwrap();
            let p = l.planes().to_vec();
            let mut src = vec![0u8; l.frame_size];
            for row in 0..256usize {
                for x in 0..256usize {
                    let v = ((row << 8) | x) as u16;
                    src[p[0].offset + row * p[0].pitch + 2 * x..][..2]
                        .copy_from_slice(&v.to_ne_bytes());
                }
            }
            for row in 0..128usize {
                for x in 0..256usize {
                    // U, V alternate; their values sweep 0..=65535 in steps of 257 over x.
                    let v = ((x * 257 + row * 4099) & 0xffff) as u16;
                    src[p[1].offset + row * p[1].pitch + 2 * x..][..2]
                        .copy_from_slice(&v.to_ne_bytes());
                }
            }
            for spec in specs() {
                assert_same(&src, &l, &spec, "16-bit sweep");
            }
        }
    }
}
