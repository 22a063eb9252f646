//! Tests of the host batch conversion: what it computes (against `to_rgb_host`, known
//! bilinear values, the placement, the pad, the layouts), and what it refuses.

use super::*;
use crate::format::FrameGeometry;
use crate::rgb::spec::rgb_size;
use crate::rgb::spec::{ColourMatrix, ColourRange, RgbDtype, RgbLayout, RgbSpec};
use crate::rgb::to_rgb_host;
use crate::wire::Format;

pub(super) const FORMATS: [Format; 7] = [
    Format::Nv12,
    Format::P010,
    Format::P016,
    Format::Yuv420p,
    Format::Yuv444p,
    Format::Rgba,
    Format::Bgra,
];
pub(super) const DTYPES: [RgbDtype; 3] = [RgbDtype::U8, RgbDtype::F16, RgbDtype::F32];
pub(super) const LAYOUTS: [RgbLayout; 2] = [RgbLayout::Chw, RgbLayout::Hwc];

/// A small deterministic generator (xorshift64*): the same frames on every run.
pub(super) struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            let v = self.next().to_ne_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// A frame of random samples: its geometry and bytes.
pub(super) fn random_frame(
    rng: &mut Rng,
    format: Format,
    w: u32,
    h: u32,
) -> (FrameGeometry, Vec<u8>) {
    let g = FrameGeometry::new(format, w, h).expect("geometry");
    let mut data = vec![0u8; g.frame_size];
    rng.fill(&mut data);
    (g, data)
}

pub(super) fn input<'a>(
    data: &'a [u8],
    g: &FrameGeometry,
    matrix: ColourMatrix,
    range: ColourRange,
) -> HostBatchInput<'a> {
    HostBatchInput::from_frame(data, g.clone(), matrix, range).expect("input")
}

pub(super) fn spec(
    width: u32,
    height: u32,
    dtype: RgbDtype,
    layout: RgbLayout,
    resize: Resize,
) -> BatchSpec {
    BatchSpec {
        width,
        height,
        dtype,
        layout,
        resize,
        pad: [114.0 / 255.0; 3],
        normalize: None,
    }
}

pub(super) fn convert(inputs: &[Option<HostBatchInput<'_>>], spec: &BatchSpec) -> Vec<u8> {
    let mut out = vec![0xa5u8; batch_bytes(inputs.len(), spec)];
    convert_batch_host(inputs, spec, &mut out).expect("batch conversion");
    out
}

/// Element `i` of an output as f32.
fn element(out: &[u8], dtype: RgbDtype, i: usize) -> f32 {
    match dtype {
        RgbDtype::U8 => f32::from(out[i]),
        RgbDtype::F16 => half_to_f32(u16::from_ne_bytes([out[2 * i], out[2 * i + 1]])),
        RgbDtype::F32 => f32::from_ne_bytes(out[4 * i..4 * i + 4].try_into().unwrap()),
    }
}

/// IEEE binary16 to f32 (exact).
pub(super) fn half_to_f32(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let mant = f32::from(h & 0x3ff);
    match exp {
        0 => sign * mant * 2f32.powi(-24),
        0x1f => sign * f32::INFINITY,
        e => sign * (1.0 + mant / 1024.0) * 2f32.powi(e - 15),
    }
}

#[test]
fn a_frame_at_its_own_size_is_to_rgb_bit_for_bit() {
    // Stretch to the frame's own size reads each source pixel with weight 1: the batch image
    // is to_rgb's, for every format, matrix, range, element type and layout, at odd sizes.
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for format in FORMATS {
        for (w, h) in [(1, 1), (3, 5), (17, 9), (64, 33)] {
            let (g, data) = random_frame(&mut rng, format, w, h);
            for (matrix, range) in [
                (ColourMatrix::Bt601, ColourRange::Full),
                (ColourMatrix::Bt709, ColourRange::Limited),
                (ColourMatrix::Bt2020, ColourRange::Limited),
            ] {
                for dtype in DTYPES {
                    for layout in LAYOUTS {
                        let s = spec(w, h, dtype, layout, Resize::Stretch);
                        let batch = convert(&[Some(input(&data, &g, matrix, range))], &s);
                        let rgb = RgbSpec {
                            matrix,
                            range,
                            dtype,
                            layout,
                        };
                        let mut want = vec![0u8; rgb_size(w, h, dtype)];
                        to_rgb_host(&data, &g, &rgb, &mut want).unwrap();
                        assert!(
                            batch == want,
                            "{format:?} {w}x{h} {rgb:?}: the batch differs from to_rgb"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bilinear_follows_torch_half_pixel_convention() {
    // Known values of torch.nn.functional.interpolate(mode="bilinear", align_corners=False)
    // on one RGBA row (R channel): 2 -> 4 samples gives [a, .75a+.25b, .25a+.75b, b]
    // (edges repeated), 4 -> 2 the means of pairs, 3 -> 2 [.75·x0 + .25·x1, .25·x1 + .75·x2].
    let row = |values: &[u8]| {
        let g = FrameGeometry::new(Format::Rgba, values.len() as u32, 1).unwrap();
        let mut data = vec![0u8; g.frame_size];
        for (x, &v) in values.iter().enumerate() {
            data[4 * x] = v;
        }
        (g, data)
    };
    let red = |values: &[u8], out_w: u32| -> Vec<f32> {
        let (g, data) = row(values);
        let s = spec(out_w, 1, RgbDtype::F32, RgbLayout::Chw, Resize::Stretch);
        let out = convert(
            &[Some(input(
                &data,
                &g,
                ColourMatrix::Bt709,
                ColourRange::Full,
            ))],
            &s,
        );
        (0..out_w as usize)
            .map(|x| element(&out, RgbDtype::F32, x))
            .collect()
    };
    let v = |x: u8| f32::from(x) / 255.0;
    assert_eq!(red(&[0, 255], 4), [0.0, 0.25, 0.75, 1.0]);
    let got = red(&[0, 100, 200, 255], 2);
    for (g, want) in got
        .iter()
        .zip([(v(0) + v(100)) / 2.0, (v(200) + v(255)) / 2.0])
    {
        assert!((g - want).abs() < 1e-6, "{got:?}");
    }
    let got = red(&[0, 100, 200], 2);
    for (g, want) in got
        .iter()
        .zip([0.25 * v(100), 0.25 * v(100) + 0.75 * v(200)])
    {
        assert!((g - want).abs() < 1e-6, "{got:?}");
    }
}

#[test]
fn letterbox_pads_around_the_content_resized_alone() {
    // The content box of a letterboxed camera is the frame stretched to the box's size;
    // every other pixel is the pad colour (114 in uint8). Landscape and portrait, odd sizes,
    // a frame smaller than the image.
    let mut rng = Rng(7);
    for (w, h, out_w, out_h) in [
        (48, 27, 32, 32),
        (27, 48, 31, 32),
        (7, 5, 9, 9),
        (5, 3, 40, 21),
    ] {
        let (g, data) = random_frame(&mut rng, Format::Nv12, w, h);
        for layout in LAYOUTS {
            let s = spec(out_w, out_h, RgbDtype::U8, layout, Resize::Letterbox);
            let p = placement(w, h, &s);
            let out = convert(
                &[Some(input(
                    &data,
                    &g,
                    ColourMatrix::Bt709,
                    ColourRange::Limited,
                ))],
                &s,
            );
            let alone_spec = spec(
                p.content_width,
                p.content_height,
                RgbDtype::U8,
                layout,
                Resize::Stretch,
            );
            let alone = convert(
                &[Some(input(
                    &data,
                    &g,
                    ColourMatrix::Bt709,
                    ColourRange::Limited,
                ))],
                &alone_spec,
            );
            let (ox, oy) = (p.offset_x as usize, p.offset_y as usize);
            let (cw, ch) = (p.content_width as usize, p.content_height as usize);
            let at = |c: usize, y: usize, x: usize, w: usize, h: usize| match layout {
                RgbLayout::Chw => (c * h + y) * w + x,
                RgbLayout::Hwc => (y * w + x) * 3 + c,
            };
            let (ow, oh) = (out_w as usize, out_h as usize);
            for y in 0..oh {
                for x in 0..ow {
                    for c in 0..3 {
                        let got = out[at(c, y, x, ow, oh)];
                        let inside = (ox..ox + cw).contains(&x) && (oy..oy + ch).contains(&y);
                        let want = if inside {
                            alone[at(c, y - oy, x - ox, cw, ch)]
                        } else {
                            114
                        };
                        assert_eq!(
                            got, want,
                            "{w}x{h} in {out_w}x{out_h} {layout:?}: ({x}, {y}) channel {c}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_mixed_batch_is_each_camera_converted_alone() {
    // Formats, sizes, matrices and ranges mixed in one batch, a camera without a frame among
    // them: each image is what a batch of that camera alone gives, the absent one all pad.
    let mut rng = Rng(99);
    let cams: Vec<_> = [
        (
            Format::Nv12,
            64,
            36,
            ColourMatrix::Bt709,
            ColourRange::Limited,
        ),
        (
            Format::P010,
            30,
            50,
            ColourMatrix::Bt2020,
            ColourRange::Limited,
        ),
        (
            Format::Yuv420p,
            17,
            17,
            ColourMatrix::Bt601,
            ColourRange::Full,
        ),
        (
            Format::Bgra,
            8,
            3,
            ColourMatrix::Bt709,
            ColourRange::Limited,
        ),
        (
            Format::Yuv444p,
            100,
            20,
            ColourMatrix::Bt601,
            ColourRange::Limited,
        ),
        (Format::P016, 9, 9, ColourMatrix::Bt709, ColourRange::Full),
        (Format::Rgba, 2, 2, ColourMatrix::Bt709, ColourRange::Full),
    ]
    .into_iter()
    .map(|(f, w, h, m, r)| {
        let (g, data) = random_frame(&mut rng, f, w, h);
        (g, data, m, r)
    })
    .collect();
    for dtype in DTYPES {
        for layout in LAYOUTS {
            for resize in [Resize::Letterbox, Resize::Stretch] {
                let s = spec(24, 20, dtype, layout, resize);
                let mut inputs: Vec<_> = cams
                    .iter()
                    .map(|(g, d, m, r)| Some(input(d, g, *m, *r)))
                    .collect();
                inputs.insert(3, None);
                let out = convert(&inputs, &s);
                let size = s.image_bytes();
                for (n, i) in inputs.iter().enumerate() {
                    let image = &out[n * size..(n + 1) * size];
                    match i {
                        Some(i) => {
                            assert!(image == convert(&[Some(i.clone())], &s), "camera {n} {s:?}")
                        }
                        None => assert!(image == convert(&[None], &s), "absent camera {n}"),
                    }
                }
            }
        }
    }
}

#[test]
fn absent_cameras_are_the_pad_colour_in_every_dtype() {
    let pad = [0.0, 114.0 / 255.0, 1.0];
    for dtype in DTYPES {
        for layout in LAYOUTS {
            let s = BatchSpec {
                pad,
                ..spec(5, 3, dtype, layout, Resize::Letterbox)
            };
            let out = convert(&[None, None], &s);
            for i in 0..2 * 3 * 15 {
                let c = match layout {
                    RgbLayout::Chw => (i / 15) % 3,
                    RgbLayout::Hwc => i % 3,
                };
                let want = match dtype {
                    RgbDtype::U8 => [0.0, 114.0, 255.0][c],
                    RgbDtype::F16 => half_to_f32(crate::rgb::store::f32_to_f16(pad[c])),
                    RgbDtype::F32 => pad[c],
                };
                assert_eq!(
                    element(&out, dtype, i),
                    want,
                    "{dtype:?} {layout:?} element {i}"
                );
            }
        }
    }
    // A negative zero pad is stored as +0.0 (the clamp of -0.0 differs between instructions).
    let s = BatchSpec {
        pad: [-0.0; 3],
        ..spec(1, 1, RgbDtype::F32, RgbLayout::Chw, Resize::Stretch)
    };
    assert!(convert(&[None], &s).iter().all(|&b| b == 0));
}

#[test]
fn normalisation_applies_to_pixels_and_pad() {
    let mut rng = Rng(3);
    let (g, data) = random_frame(&mut rng, Format::Nv12, 40, 20);
    let norm = Normalize {
        mean: [0.485, 0.456, 0.406],
        std: [0.229, 0.224, 0.225],
    };
    for layout in LAYOUTS {
        let plain = spec(32, 32, RgbDtype::F32, layout, Resize::Letterbox);
        let normed = BatchSpec {
            normalize: Some(norm),
            ..plain
        };
        let inputs = [
            Some(input(&data, &g, ColourMatrix::Bt709, ColourRange::Limited)),
            None,
        ];
        let (a, b) = (convert(&inputs, &plain), convert(&inputs, &normed));
        let mut outside = 0;
        for i in 0..a.len() / 4 {
            let c = match layout {
                RgbLayout::Chw => (i / (32 * 32)) % 3,
                RgbLayout::Hwc => i % 3,
            };
            let want = (element(&a, RgbDtype::F32, i) - norm.mean[c]) / norm.std[c];
            let got = element(&b, RgbDtype::F32, i);
            assert_eq!(got.to_bits(), want.to_bits(), "element {i}");
            outside += usize::from(!(0.0..=1.0).contains(&got));
        }
        assert!(
            outside > 1000,
            "normalised values leave 0..=1 unclamped ({outside})"
        );
        // float16 holds the same values rounded.
        let h = convert(
            &inputs,
            &BatchSpec {
                dtype: RgbDtype::F16,
                ..normed
            },
        );
        for i in 0..a.len() / 4 {
            let want = crate::rgb::store::f32_to_f16(element(&b, RgbDtype::F32, i));
            assert_eq!(
                u16::from_ne_bytes([h[2 * i], h[2 * i + 1]]),
                want,
                "f16 element {i}"
            );
        }
    }
}

#[test]
fn nchw_and_nhwc_hold_the_same_values() {
    let mut rng = Rng(11);
    let (g, data) = random_frame(&mut rng, Format::Yuv420p, 33, 21);
    for dtype in DTYPES {
        let inputs = [
            None,
            Some(input(&data, &g, ColourMatrix::Bt601, ColourRange::Limited)),
        ];
        let chw = convert(
            &inputs,
            &spec(13, 7, dtype, RgbLayout::Chw, Resize::Letterbox),
        );
        let hwc = convert(
            &inputs,
            &spec(13, 7, dtype, RgbLayout::Hwc, Resize::Letterbox),
        );
        let e = dtype.size();
        for n in 0..2 {
            for c in 0..3 {
                for p in 0..13 * 7 {
                    let a = (n * 3 + c) * 91 + p;
                    let b = n * 273 + p * 3 + c;
                    assert_eq!(
                        chw[a * e..(a + 1) * e],
                        hwc[b * e..(b + 1) * e],
                        "{dtype:?} {n} {c} {p}"
                    );
                }
            }
        }
    }
}

#[test]
fn each_camera_uses_its_own_matrix_and_range() {
    // The same samples under BT.709 limited and BT.601 full differ, and each camera's image is
    // to_rgb's with its own description.
    let mut rng = Rng(5);
    let (g, data) = random_frame(&mut rng, Format::Yuv444p, 8, 8);
    let descs = [
        (ColourMatrix::Bt709, ColourRange::Limited),
        (ColourMatrix::Bt601, ColourRange::Full),
    ];
    let inputs: Vec<_> = descs
        .iter()
        .map(|&(m, r)| Some(input(&data, &g, m, r)))
        .collect();
    let s = spec(8, 8, RgbDtype::U8, RgbLayout::Chw, Resize::Stretch);
    let out = convert(&inputs, &s);
    let (a, b) = out.split_at(s.image_bytes());
    assert_ne!(a, b);
    for (image, (matrix, range)) in [a, b].into_iter().zip(descs) {
        let mut want = vec![0u8; s.image_bytes()];
        let rgb = RgbSpec {
            matrix,
            range,
            ..RgbSpec::default()
        };
        to_rgb_host(&data, &g, &rgb, &mut want).unwrap();
        assert_eq!(image, &want[..]);
    }
}

#[test]
fn planes_that_do_not_fit_their_slices_are_refused_without_reading() {
    let mut rng = Rng(13);
    let (g, data) = random_frame(&mut rng, Format::Yuv420p, 32, 16);
    let s = spec(16, 16, RgbDtype::U8, RgbLayout::Chw, Resize::Letterbox);
    let good = input(&data, &g, ColourMatrix::Bt709, ColourRange::Limited);
    let refused = |inputs: &[Option<HostBatchInput<'_>>], words: &str| {
        let mut out = vec![0x5au8; batch_bytes(inputs.len(), &s)];
        let e = convert_batch_host(inputs, &s, &mut out).unwrap_err();
        assert!(e.to_string().contains(words), "{e} lacks {words:?}");
        assert!(
            out.iter().all(|&b| b == 0x5a),
            "an output was written before the refusal"
        );
    };
    // A chroma plane one byte short (its last row), named with its camera.
    let mut short = good.clone();
    short.planes[2] = &short.planes[2][..g.planes()[2].span_at(g.planes()[2].pitch).unwrap() - 1];
    refused(
        &[None, Some(good.clone()), Some(short)],
        "camera 2: plane 2",
    );
    // A luma plane given as an empty slice.
    let mut empty = good.clone();
    empty.planes[0] = &[];
    refused(&[Some(empty)], "camera 0: plane 0");
    // A geometry whose public fields were changed after it was made (taller than its planes).
    let mut taller = good.clone();
    taller.geometry.height = 64;
    refused(&[Some(taller)], "does not match its own planes");
    let mut wider = good.clone();
    wider.geometry.pitch_y = 4096 * 4;
    refused(&[Some(wider)], "camera 0");
    // A frame buffer shorter than its geometry cannot even become an input.
    let e = HostBatchInput::from_frame(
        &data[..data.len() - 1],
        g.clone(),
        ColourMatrix::Bt709,
        ColourRange::Limited,
    )
    .unwrap_err();
    assert!(e.to_string().contains("needs"), "{e}");
    // No cameras, too many, an output of the wrong size, an invalid spec.
    refused(&[], "a batch of 0 cameras");
    let many: Vec<_> = (0..=MAX_BATCH_CAMERAS).map(|_| None).collect();
    let mut out = vec![0u8; batch_bytes(many.len(), &s)];
    assert!(convert_batch_host(&many, &s, &mut out).is_err());
    let mut out = vec![0u8; batch_bytes(1, &s) + 1];
    let e = convert_batch_host(&[None], &s, &mut out).unwrap_err();
    assert!(e.to_string().contains("needs"), "{e}");
    let mut out = vec![0u8; batch_bytes(1, &s)];
    let bad = BatchSpec { width: 0, ..s };
    assert!(convert_batch_host(&[None], &bad, &mut out).is_err());
}

#[test]
fn large_batches_use_threads_and_give_the_same_bits() {
    // 20 cameras of 72x72 f32: above the threading threshold; the result equals each camera
    // converted alone (one thread each).
    let mut rng = Rng(17);
    let frames: Vec<_> = (0..20)
        .map(|i| random_frame(&mut rng, FORMATS[i % 7], 50 + i as u32, 40))
        .collect();
    let s = spec(72, 72, RgbDtype::F32, RgbLayout::Chw, Resize::Letterbox);
    assert!(batch_bytes(20, &s) / 4 >= 1 << 18);
    let inputs: Vec<_> = frames
        .iter()
        .map(|(g, d)| Some(input(d, g, ColourMatrix::Bt709, ColourRange::Limited)))
        .collect();
    let out = convert(&inputs, &s);
    for (n, i) in inputs.iter().enumerate() {
        let alone = convert(std::slice::from_ref(i), &s);
        assert!(
            out[n * s.image_bytes()..(n + 1) * s.image_bytes()] == alone[..],
            "camera {n}"
        );
    }
}

#[test]
fn the_vector_f16_store_rounds_as_the_scalar_one() {
    // Every 2^12th f32 bit pattern of both signs (normals, subnormals of both formats,
    // overflow to infinity) plus exact ties of binary16 around 1, in a row long enough for
    // the 8-wide path and a remainder: the F16C conversion gives f32_to_f16's bits.
    let mut values: Vec<f32> = (0..1u32 << 20)
        .map(|i| f32::from_bits(i << 12))
        .filter(|v| v.is_finite())
        .collect();
    values.extend((0..2048).map(|i| 1.0 + (2 * i + 1) as f32 / 2048.0 / 2.0));
    values.extend([65504.0, 65519.99, 65520.0, 6.0e-8, 2.98e-8, -0.0, 0.0]);
    values.push(0.1); // a remainder after the chunks of 8
    let mut out = vec![0u8; 2 * values.len()];
    super::host::store_f16(&values, &mut out);
    for (i, &v) in values.iter().enumerate() {
        let got = u16::from_ne_bytes([out[2 * i], out[2 * i + 1]]);
        assert_eq!(got, crate::rgb::store::f32_to_f16(v), "{v:e}");
    }
}
