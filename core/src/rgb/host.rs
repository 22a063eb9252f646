//! The host conversion, row by row: the same f32 operations in the same order as the
//! per-pixel formulas of the module documentation (and the CUDA kernel), arranged so that
//! the compiler vectorises them:
//!
//! - a chroma row is turned once into its four products (`r_v·V`, `g_u·U`, `g_v·V`, `b_u·U`),
//!   spread to one value per pixel, and serves both luma rows of 4:2:0;
//! - a luma row is loaded into f32, then R, G, B of the whole row are computed by straight
//!   loops over equal-length slices (no per-pixel branch on the format or the layout);
//! - bands of rows go to threads (`std::thread::scope`), as OpenCV's `cvtColor` does, when
//!   the frame is large enough to repay starting them.
//!
//! Rust never contracts a multiply and an add into an FMA, so vector lanes round exactly as
//! the scalar code does: the output bits are those of the per-pixel reference (the tests
//! compare them exhaustively).

use super::coefficients::{Coefficients, SourceKind};
use super::spec::{rgb_size, RgbDtype, RgbLayout, RgbSpec};
use super::store::{f32_to_f16, store_u8};
use crate::error::{Error, Result};
use crate::format::{FrameGeometry, Plane};

/// Pixels below which one thread converts the whole frame (starting threads costs more).
const PARALLEL_MIN_PIXELS: usize = 1 << 18;
/// The most threads one conversion uses.
const MAX_THREADS: usize = 8;

/// Per-row working memory of one band.
struct Scratch {
    y: Vec<f32>,
    /// The chroma products of the current chroma row, one value per pixel.
    rv: Vec<f32>,
    gu: Vec<f32>,
    gv: Vec<f32>,
    bu: Vec<f32>,
    /// The chroma samples of the current chroma row (U, V), as loaded.
    cu: Vec<f32>,
    cv: Vec<f32>,
    /// Per chroma sample: r_v·V and b_u·U before spreading (4:2:0).
    cr: Vec<f32>,
    cb: Vec<f32>,
    r: Vec<f32>,
    g: Vec<f32>,
    b: Vec<f32>,
    /// The converted channel rows of an interleaved output, before interleaving.
    packed: Vec<u8>,
}

impl Scratch {
    fn new(w: usize) -> Scratch {
        let v = || vec![0f32; w];
        Scratch {
            y: v(),
            rv: v(),
            gu: v(),
            gv: v(),
            bu: v(),
            cu: v(),
            cv: v(),
            cr: v(),
            cb: v(),
            r: v(),
            g: v(),
            b: v(),
            packed: vec![0u8; 3 * 4 * w],
        }
    }
}

/// Where one band writes: the rows of each channel plane (CHW) or the interleaved rows (HWC).
enum BandOut<'a> {
    Chw([&'a mut [u8]; 3]),
    Hwc(&'a mut [u8]),
}

/// Converts a host frame: `src` holds the frame as laid out by `geometry` (planes at their
/// offsets and pitches, as [`crate::subscriber::Frame::copy_to`] writes it), `out` receives
/// exactly [`rgb_size`] bytes (native-endian elements).
pub fn to_rgb_host(
    src: &[u8],
    geometry: &FrameGeometry,
    spec: &RgbSpec,
    out: &mut [u8],
) -> Result<()> {
    let k = Coefficients::new(geometry.format, spec)?;
    let (w, h) = (geometry.width as usize, geometry.height as usize);
    if out.len() != rgb_size(geometry.width, geometry.height, spec.dtype) {
        return Err(Error::invalid(format!(
            "RGB output of {} bytes for a {w}x{h} {:?} image (needs {})",
            out.len(),
            spec.dtype,
            rgb_size(geometry.width, geometry.height, spec.dtype)
        )));
    }
    if src.len() < geometry.frame_size {
        return Err(Error::invalid(format!(
            "frame of {} bytes, its layout needs {}",
            src.len(),
            geometry.frame_size
        )));
    }
    convert(src, geometry, spec, &k, out);
    Ok(())
}

/// Converts the frame in `src` (validated by [`to_rgb_host`]: sizes, geometry) into `out`.
fn convert(src: &[u8], geometry: &FrameGeometry, spec: &RgbSpec, k: &Coefficients, out: &mut [u8]) {
    let (w, h) = (geometry.width as usize, geometry.height as usize);
    if w == 0 || h == 0 {
        return;
    }
    let threads = if w * h < PARALLEL_MIN_PIXELS {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_THREADS)
    };
    // Bands of an even number of rows: a 4:2:0 chroma row never straddles two bands.
    let band_rows = (h.div_ceil(threads) + 1) & !1;
    let row_bytes = w * spec.dtype.size();
    let bands: Vec<(usize, BandOut<'_>)> = match spec.layout {
        RgbLayout::Hwc => out
            .chunks_mut(band_rows * 3 * row_bytes)
            .enumerate()
            .map(|(i, o)| (i * band_rows, BandOut::Hwc(o)))
            .collect(),
        RgbLayout::Chw => {
            let (r, gb) = out.split_at_mut(h * row_bytes);
            let (g, b) = gb.split_at_mut(h * row_bytes);
            let chunk = band_rows * row_bytes;
            r.chunks_mut(chunk)
                .zip(g.chunks_mut(chunk))
                .zip(b.chunks_mut(chunk))
                .enumerate()
                .map(|(i, ((r, g), b))| (i * band_rows, BandOut::Chw([r, g, b])))
                .collect()
        }
    };
    let planes = geometry.planes();
    let job = |(y0, o): (usize, BandOut<'_>)| band(src, planes, w, y0, k, spec.dtype, o);
    if bands.len() == 1 {
        bands.into_iter().for_each(job);
    } else {
        std::thread::scope(|s| {
            let mut bands = bands.into_iter();
            let mine = bands.next();
            for b in bands {
                s.spawn(move || job(b));
            }
            // This thread converts the first band meanwhile.
            mine.into_iter().for_each(job);
        });
    }
}

/// Rows `y0..` of the frame (as many as `out` holds), on the widest vector unit the CPU has.
fn band(
    src: &[u8],
    planes: &[Plane],
    w: usize,
    y0: usize,
    k: &Coefficients,
    dtype: RgbDtype,
    out: BandOut<'_>,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above), all `band_avx2` requires.
        return unsafe { band_avx2(src, planes, w, y0, k, dtype, out) };
    }
    band_impl(src, planes, w, y0, k, dtype, out)
}

/// `band_impl` compiled for AVX2 (8 lanes; FMA stays off, so every lane rounds as scalar
/// code does).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn band_avx2(
    src: &[u8],
    planes: &[Plane],
    w: usize,
    y0: usize,
    k: &Coefficients,
    dtype: RgbDtype,
    out: BandOut<'_>,
) {
    band_impl(src, planes, w, y0, k, dtype, out)
}

#[inline(always)]
fn band_impl(
    src: &[u8],
    planes: &[Plane],
    w: usize,
    y0: usize,
    k: &Coefficients,
    dtype: RgbDtype,
    mut out: BandOut<'_>,
) {
    let row_bytes = w * dtype.size();
    let rows = match &out {
        BandOut::Chw([r, ..]) => r.len() / row_bytes,
        BandOut::Hwc(o) => o.len() / (3 * row_bytes),
    };
    let row = |i: usize, y: usize| -> &[u8] {
        let p = planes[i];
        &src[p.offset + y * p.pitch..][..p.row_bytes]
    };
    let mut s = Scratch::new(w);
    let mut chroma_row = usize::MAX;
    for y in y0..y0 + rows {
        match k.kind {
            SourceKind::Rgba | SourceKind::Bgra => {
                let (ri, bi) = if k.kind == SourceKind::Rgba {
                    (0, 2)
                } else {
                    (2, 0)
                };
                for (x, px) in row(0, y).chunks_exact(4).enumerate() {
                    s.r[x] = f32::from(px[ri]) / 255.0;
                    s.g[x] = f32::from(px[1]) / 255.0;
                    s.b[x] = f32::from(px[bi]) / 255.0;
                }
            }
            kind => {
                let cy = if kind == SourceKind::Planar444 {
                    y
                } else {
                    y >> 1
                };
                if cy != chroma_row {
                    chroma_row = cy;
                    load_chroma(&mut s, k, |i| row(i, cy));
                }
                if let (BandOut::Chw(planes), RgbDtype::U8 | RgbDtype::F32) = (&mut out, dtype) {
                    // The common case in one pass: load the luma, compute and store each
                    // pixel's R, G, B.
                    let r = y - y0;
                    let [ro, go, bo] = planes;
                    let rows = [ro, go, bo].map(|p| &mut p[r * row_bytes..][..row_bytes]);
                    if k.kind == SourceKind::SemiPlanar16 {
                        load_luma(&mut s.y, k, row(0, y));
                        let luma = &s.y[..w];
                        rgb_store_chw(&s, k, |x| luma[x], dtype, rows);
                    } else {
                        let luma = &row(0, y)[..w];
                        rgb_store_chw(&s, k, |x| f32::from(luma[x]), dtype, rows);
                    }
                    continue;
                }
                load_luma(&mut s.y, k, row(0, y));
                rgb_row(&mut s, k);
            }
        }
        let r = y - y0;
        match &mut out {
            BandOut::Chw(planes) => {
                for (plane, values) in planes.iter_mut().zip([&s.r, &s.g, &s.b]) {
                    store_row(&mut plane[r * row_bytes..][..row_bytes], values, dtype);
                }
            }
            BandOut::Hwc(o) => {
                let o = &mut o[r * 3 * row_bytes..][..3 * row_bytes];
                store_row_interleaved(o, [&s.r, &s.g, &s.b], &mut s.packed, dtype);
            }
        }
    }
}

/// The chroma products of one chroma row (planes 1 and, planar, 2), one per pixel.
#[inline(always)]
fn load_chroma<'a>(s: &mut Scratch, k: &Coefficients, row: impl Fn(usize) -> &'a [u8]) {
    let w = s.rv.len();
    let subsampled = k.kind != SourceKind::Planar444;
    let n = if subsampled { w.div_ceil(2) } else { w };
    let (cu, cv) = (&mut s.cu[..n], &mut s.cv[..n]);
    match k.kind {
        SourceKind::SemiPlanar8 => {
            for ((u, v), p) in cu.iter_mut().zip(cv.iter_mut()).zip(row(1).chunks_exact(2)) {
                *u = f32::from(p[0]);
                *v = f32::from(p[1]);
            }
        }
        SourceKind::SemiPlanar16 => {
            for ((u, v), p) in cu.iter_mut().zip(cv.iter_mut()).zip(row(1).chunks_exact(4)) {
                *u = f32::from(u16::from_ne_bytes([p[0], p[1]]) >> k.shift);
                *v = f32::from(u16::from_ne_bytes([p[2], p[3]]) >> k.shift);
            }
        }
        _ => {
            for (u, &b) in cu.iter_mut().zip(row(1)) {
                *u = f32::from(b);
            }
            for (v, &b) in cv.iter_mut().zip(row(2)) {
                *v = f32::from(b);
            }
        }
    }
    let products = |u: f32, v: f32| {
        let uu = (u - k.c_offset) / k.c_range;
        let vv = (v - k.c_offset) / k.c_range;
        (k.r_v * vv, k.g_u * uu, k.g_v * vv, k.b_u * uu)
    };
    if subsampled {
        // The products per sample (in place: U becomes g_u·U, V g_v·V; the R and B terms go
        // to the per-sample tails), then pixels 2c and 2c + 1 take sample c.
        let (cr, cb) = (&mut s.cr[..n], &mut s.cb[..n]);
        for (((u, v), r), b) in cu
            .iter_mut()
            .zip(cv.iter_mut())
            .zip(cr.iter_mut())
            .zip(cb.iter_mut())
        {
            (*r, *u, *v, *b) = products(*u, *v);
        }
        spread(&mut s.rv, cr);
        spread(&mut s.gu, cu);
        spread(&mut s.gv, cv);
        spread(&mut s.bu, cb);
    } else {
        let pixels = s.rv.iter_mut().zip(&mut s.gu).zip(&mut s.gv).zip(&mut s.bu);
        for ((((rv, gu), gv), bu), (&u, &v)) in pixels.zip(cu.iter().zip(cv.iter())) {
            (*rv, *gu, *gv, *bu) = products(u, v);
        }
    }
}

/// `pixels[x] = samples[x / 2]` (an odd last pixel takes the last sample alone).
#[inline(always)]
fn spread(pixels: &mut [f32], samples: &[f32]) {
    let mut pairs = pixels.chunks_exact_mut(2);
    for (p, &v) in (&mut pairs).zip(samples) {
        p[0] = v;
        p[1] = v;
    }
    if let ([last], Some(&v)) = (pairs.into_remainder(), samples.last()) {
        *last = v;
    }
}

#[inline(always)]
fn load_luma(y: &mut [f32], k: &Coefficients, row: &[u8]) {
    match k.kind {
        SourceKind::SemiPlanar16 => {
            for (v, p) in y.iter_mut().zip(row.chunks_exact(2)) {
                *v = f32::from(u16::from_ne_bytes([p[0], p[1]]) >> k.shift);
            }
        }
        _ => {
            for (v, &b) in y.iter_mut().zip(row) {
                *v = f32::from(b);
            }
        }
    }
}

/// R, G, B of a row from its luma and the per-pixel chroma products (unclamped).
#[inline(always)]
fn rgb_row(s: &mut Scratch, k: &Coefficients) {
    let w = s.y.len();
    let (y, rv, gu, gv, bu) = (&s.y[..w], &s.rv[..w], &s.gu[..w], &s.gv[..w], &s.bu[..w]);
    let (r, g, b) = (&mut s.r[..w], &mut s.g[..w], &mut s.b[..w]);
    for x in 0..w {
        let yy = (y[x] - k.y_offset) / k.y_range;
        r[x] = yy + rv[x];
        g[x] = yy - gu[x] - gv[x];
        b[x] = yy + bu[x];
    }
}

/// R, G, B of a row, computed as `rgb_row` does and stored as `store_row` does, in one
/// loop (planar output, `uint8` or `float32`).
#[inline(always)]
fn rgb_store_chw(
    s: &Scratch,
    k: &Coefficients,
    luma: impl Fn(usize) -> f32,
    dtype: RgbDtype,
    [ro, go, bo]: [&mut [u8]; 3],
) {
    let w = s.rv.len();
    let (rv, gu, gv, bu) = (&s.rv[..w], &s.gu[..w], &s.gv[..w], &s.bu[..w]);
    let pixel = |x: usize| {
        let yy = (luma(x) - k.y_offset) / k.y_range;
        (yy + rv[x], yy - gu[x] - gv[x], yy + bu[x])
    };
    if dtype == RgbDtype::U8 {
        let (ro, go, bo) = (&mut ro[..w], &mut go[..w], &mut bo[..w]);
        for x in 0..w {
            let (r, g, b) = pixel(x);
            ro[x] = store_u8(r);
            go[x] = store_u8(g);
            bo[x] = store_u8(b);
        }
    } else {
        let (ro, go, bo) = (&mut ro[..4 * w], &mut go[..4 * w], &mut bo[..4 * w]);
        for x in 0..w {
            let (r, g, b) = pixel(x);
            ro[4 * x..4 * x + 4].copy_from_slice(&r.clamp(0.0, 1.0).to_ne_bytes());
            go[4 * x..4 * x + 4].copy_from_slice(&g.clamp(0.0, 1.0).to_ne_bytes());
            bo[4 * x..4 * x + 4].copy_from_slice(&b.clamp(0.0, 1.0).to_ne_bytes());
        }
    }
}

/// One channel row of the output, clamped and converted as the kernel's `cf_store`.
#[inline(always)]
fn store_row(out: &mut [u8], values: &[f32], dtype: RgbDtype) {
    match dtype {
        RgbDtype::U8 => {
            for (o, &v) in out.iter_mut().zip(values) {
                *o = store_u8(v);
            }
        }
        RgbDtype::F16 => {
            for (o, &v) in out.chunks_exact_mut(2).zip(values) {
                o.copy_from_slice(&f32_to_f16(v.clamp(0.0, 1.0)).to_ne_bytes());
            }
        }
        RgbDtype::F32 => {
            for (o, &v) in out.chunks_exact_mut(4).zip(values) {
                o.copy_from_slice(&v.clamp(0.0, 1.0).to_ne_bytes());
            }
        }
    }
}

/// One interleaved (HWC) row of the output: each channel converted as a row first (the
/// vectorised part), then the elements interleaved.
#[inline(always)]
fn store_row_interleaved(
    out: &mut [u8],
    channels: [&[f32]; 3],
    packed: &mut [u8],
    dtype: RgbDtype,
) {
    let size = dtype.size();
    let w = channels[0].len();
    let (rb, rest) = packed.split_at_mut(w * size);
    let (gb, bb) = rest.split_at_mut(w * size);
    for (buf, values) in [&mut *rb, &mut *gb, &mut *bb].into_iter().zip(channels) {
        store_row(buf, values, dtype);
    }
    match size {
        1 => interleave::<1>(out, rb, gb, bb),
        2 => interleave::<2>(out, rb, gb, bb),
        _ => interleave::<4>(out, rb, gb, bb),
    }
}

/// Pixel x of `out` = element x of `r`, `g`, `b` (elements of `N` bytes; a constant size
/// makes each copy a plain move).
#[inline(always)]
fn interleave<const N: usize>(out: &mut [u8], r: &[u8], g: &[u8], b: &[u8]) {
    let px = r
        .chunks_exact(N)
        .zip(g.chunks_exact(N))
        .zip(b.chunks_exact(N));
    for (o, ((r, g), b)) in out.chunks_exact_mut(3 * N).zip(px) {
        o[..N].copy_from_slice(r);
        o[N..2 * N].copy_from_slice(g);
        o[2 * N..3 * N].copy_from_slice(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rgb::spec::{ColourMatrix, RgbDtype, RgbLayout};
    use crate::wire::Format;

    fn geometry(format: Format, w: u32, h: u32) -> FrameGeometry {
        FrameGeometry::new(format, w, h).expect("geometry")
    }

    #[test]
    fn limited_range_black_and_white_are_exact() {
        let l = geometry(Format::Nv12, 4, 2);
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
                matrix: ColourMatrix::Bt601,
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
        let l = geometry(Format::Yuv444p, 2, 2);
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
                matrix: ColourMatrix::Bt601,
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
        let l = geometry(Format::P010, 2, 2);
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
        let l = geometry(Format::Nv12, 4, 2);
        let src = vec![0u8; l.frame_size];
        let mut short = vec![0u8; 5];
        assert!(to_rgb_host(&src, &l, &RgbSpec::default(), &mut short).is_err());
        let mut out = vec![0u8; rgb_size(4, 2, RgbDtype::U8)];
        assert!(to_rgb_host(&src[..10], &l, &RgbSpec::default(), &mut out).is_err());
        let e = Coefficients::new(Format::None, &RgbSpec::default()).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::Format);
    }
}
