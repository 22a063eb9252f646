//! The batched conversion on the host ([`convert_batch_host`]): the kernel's sequence of f32
//! operations (`kernel.cu`), arranged by rows so that each source row is converted once per
//! output row pair that reads it rather than four times per output pixel; cameras go to
//! threads. The result is the kernel's, bit for bit (`core/tests/rgb_batch_cuda.rs`).

use super::camera::CameraParams;
use super::input::HostBatchInput;
use super::spec::{batch_bytes, check_cameras, BatchSpec};
use crate::error::{Error, Result};
use crate::rgb::coefficients::SourceKind;
use crate::rgb::spec::{RgbDtype, RgbLayout};
use crate::rgb::store::{f32_to_f16, store_u8};

/// Output elements below which one thread converts the whole batch.
const PARALLEL_MIN_ELEMENTS: usize = 1 << 18;
/// The most threads one batch uses.
const MAX_THREADS: usize = 8;

/// Converts `inputs` (one per camera; `None`: a camera without a frame, filled with the
/// pad colour) into `out`, exactly [`batch_bytes`]`(inputs.len(), spec)` bytes laid out as
/// `spec` says (native-endian elements). Every input is checked before anything is written:
/// the spec, the number of cameras, each geometry and each plane slice's length; an input
/// that does not hold its planes is refused naming the camera, never read out of bounds.
pub fn convert_batch_host(
    inputs: &[Option<HostBatchInput<'_>>],
    spec: &BatchSpec,
    out: &mut [u8],
) -> Result<()> {
    spec.validate()?;
    check_cameras(inputs.len())?;
    let need = batch_bytes(inputs.len(), spec);
    if out.len() != need {
        return Err(Error::invalid(format!(
            "batch output of {} bytes for {} {}x{} {:?} images (needs {need})",
            out.len(),
            inputs.len(),
            spec.width,
            spec.height,
            spec.dtype
        )));
    }
    let mut cameras = Vec::with_capacity(inputs.len());
    for (n, input) in inputs.iter().enumerate() {
        cameras.push(match input {
            Some(i) => (
                i.params(spec)
                    .map_err(|e| Error::new(e.code(), format!("camera {n}: {}", e.message())))?,
                i.planes,
            ),
            None => (CameraParams::absent(), [&[][..]; 3]),
        });
    }
    let finish = Finish::new(spec);
    let threads = if out.len() / spec.dtype.size() < PARALLEL_MIN_ELEMENTS {
        1
    } else {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_THREADS)
            .min(cameras.len())
    };
    let jobs: Vec<Job<'_, '_>> = cameras
        .iter()
        .zip(out.chunks_mut(spec.image_bytes()))
        .collect();
    let run = |jobs: Vec<Job<'_, '_>>| {
        for ((cam, planes), image) in jobs {
            convert_camera(cam, planes, spec, &finish, image);
        }
    };
    if threads <= 1 {
        run(jobs);
    } else {
        // Cameras dealt round-robin: neighbouring cameras often share a size.
        let mut shares: Vec<Vec<_>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, job) in jobs.into_iter().enumerate() {
            shares[i % threads].push(job);
        }
        std::thread::scope(|s| {
            let mut shares = shares.into_iter();
            let mine = shares.next();
            for share in shares {
                s.spawn(move || run(share));
            }
            if let Some(share) = mine {
                run(share);
            }
        });
    }
    Ok(())
}

/// One camera's numbers and planes, and its image in the output.
type Job<'c, 'o> = (&'c (CameraParams, [&'c [u8]; 3]), &'o mut [u8]);

/// The last steps of every output element (kernel.cu `bc_finish`, `bc_put`).
pub(super) struct Finish {
    normalize: bool,
    mean: [f32; 3],
    std: [f32; 3],
    /// The pad colour, with a negative zero made positive (the clamp of -0.0 is not the same
    /// instruction's answer on both sides).
    pad: [f32; 3],
    dtype: RgbDtype,
}

impl Finish {
    pub(super) fn new(spec: &BatchSpec) -> Finish {
        let (normalize, mean, std) = match spec.normalize {
            Some(n) => (true, n.mean, n.std),
            None => (false, [0.0; 3], [1.0; 3]),
        };
        Finish {
            normalize,
            mean,
            std,
            pad: spec.pad.map(|v| v + 0.0),
            dtype: spec.dtype,
        }
    }

    /// Channel `c`'s row as stored: normalised, or clamped (in place).
    #[inline(always)]
    fn finish_row(&self, c: usize, row: &mut [f32]) {
        if self.normalize {
            let (mean, std) = (self.mean[c], self.std[c]);
            for v in row {
                *v = (*v - mean) / std;
            }
        } else {
            for v in row {
                *v = clamp01(*v);
            }
        }
    }
}

/// Stores finished values as dense elements of `dtype` (`out`: exactly their bytes).
#[inline(always)]
fn store_values(dtype: RgbDtype, values: &[f32], out: &mut [u8]) {
    match dtype {
        RgbDtype::U8 => {
            for (o, &v) in out.iter_mut().zip(values) {
                *o = store_u8(v);
            }
        }
        RgbDtype::F16 => store_f16(values, out),
        RgbDtype::F32 => {
            for (o, &v) in out.chunks_exact_mut(4).zip(values) {
                o.copy_from_slice(&v.to_ne_bytes());
            }
        }
    }
}

/// IEEE binary16 of each value, rounded to nearest even: F16C's conversion where the CPU
/// has it (the same rounding as `f32_to_f16`, 8 values an instruction), else `f32_to_f16`.
#[inline(always)]
pub(super) fn store_f16(values: &[f32], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("f16c") && std::arch::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has F16C and AVX (checked just above), all `store_f16_f16c` needs.
        return unsafe { store_f16_f16c(values, out) };
    }
    for (o, &v) in out.chunks_exact_mut(2).zip(values) {
        o.copy_from_slice(&f32_to_f16(v).to_ne_bytes());
    }
}

/// `store_f16` with `vcvtps2ph` (round to nearest even, exceptions suppressed).
///
/// # Safety
/// The CPU must support F16C and AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn store_f16_f16c(values: &[f32], out: &mut [u8]) {
    use std::arch::x86_64::{
        _mm256_cvtps_ph, _mm256_loadu_ps, _mm_storeu_si128, _MM_FROUND_TO_NEAREST_INT,
    };
    let mut chunks = values.chunks_exact(8);
    let mut outs = out.chunks_exact_mut(16);
    for (v, o) in (&mut chunks).zip(&mut outs) {
        // SAFETY: `v` holds 8 f32 and `o` 16 bytes (exact chunks); unaligned loads and
        // stores.
        unsafe {
            let h = _mm256_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm256_loadu_ps(v.as_ptr()));
            _mm_storeu_si128(o.as_mut_ptr() as *mut _, h);
        }
    }
    for (o, &v) in outs
        .into_remainder()
        .chunks_exact_mut(2)
        .zip(chunks.remainder())
    {
        o.copy_from_slice(&f32_to_f16(v).to_ne_bytes());
    }
}

/// One output row of a camera: R, G, B values (unfinished) into the image, on the widest
/// vector unit the CPU has.
fn store_row(
    f: &Finish,
    vals: &mut [Vec<f32>; 3],
    y: usize,
    spec: &BatchSpec,
    packed: &mut [u8],
    image: &mut [u8],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above), all `store_row_avx2` requires.
        return unsafe { store_row_avx2(f, vals, y, spec, packed, image) };
    }
    store_row_impl(f, vals, y, spec, packed, image)
}

/// `store_row_impl` compiled for AVX2 (FMA stays off).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn store_row_avx2(
    f: &Finish,
    vals: &mut [Vec<f32>; 3],
    y: usize,
    spec: &BatchSpec,
    packed: &mut [u8],
    image: &mut [u8],
) {
    store_row_impl(f, vals, y, spec, packed, image)
}

#[inline(always)]
fn store_row_impl(
    f: &Finish,
    vals: &mut [Vec<f32>; 3],
    y: usize,
    spec: &BatchSpec,
    packed: &mut [u8],
    image: &mut [u8],
) {
    let (w, h) = (spec.width as usize, spec.height as usize);
    let e = f.dtype.size();
    for (c, row) in vals.iter_mut().enumerate() {
        f.finish_row(c, &mut row[..w]);
    }
    match spec.layout {
        RgbLayout::Chw => {
            for (c, row) in vals.iter().enumerate() {
                store_values(
                    f.dtype,
                    &row[..w],
                    &mut image[((c * h + y) * w) * e..][..w * e],
                );
            }
        }
        RgbLayout::Hwc => {
            // Each channel converted as a row (the vectorised part), then interleaved.
            let (r, rest) = packed[..3 * w * e].split_at_mut(w * e);
            let (g, b) = rest.split_at_mut(w * e);
            for (buf, row) in [&mut *r, &mut *g, &mut *b].into_iter().zip(vals.iter()) {
                store_values(f.dtype, &row[..w], buf);
            }
            let out = &mut image[y * w * 3 * e..][..3 * w * e];
            for (x, o) in out.chunks_exact_mut(3 * e).enumerate() {
                o[..e].copy_from_slice(&r[x * e..(x + 1) * e]);
                o[e..2 * e].copy_from_slice(&g[x * e..(x + 1) * e]);
                o[2 * e..].copy_from_slice(&b[x * e..(x + 1) * e]);
            }
        }
    }
}

/// `min(max(v, 0), 1)` (kernel.cu `bc_clamp01`; no NaN reaches it).
#[inline(always)]
#[allow(clippy::manual_clamp)] // the kernel's fmaxf/fminf, in its order
fn clamp01(v: f32) -> f32 {
    v.max(0.0).min(1.0)
}

/// R, G, B in `0..=1` of one YCbCr pixel (the formulas of [`crate::rgb`], then the clamp).
#[inline(always)]
fn yuv_rgb(c: &CameraParams, y: f32, u: f32, v: f32) -> [f32; 3] {
    let yy = (y - c.y_offset) / c.y_range;
    let uu = (u - c.c_offset) / c.c_range;
    let vv = (v - c.c_offset) / c.c_range;
    [
        clamp01(yy + c.r_v * vv),
        clamp01(yy - c.g_u * uu - c.g_v * vv),
        clamp01(yy + c.b_u * uu),
    ]
}

/// One interpolation tap along an axis (kernel.cu `bc_tap_of`): output position `d` of a
/// content box of `box_len` pixels over `n` source pixels reads source coordinate
/// `s = (d + 0.5) · n / box_len - 0.5 = ((2d + 1)·n - box_len) / (2·box_len)`, clamped at 0
/// (torch's bilinear, align_corners=False). The quotient and remainder are integers (at most
/// 32767·16384 < 2^32), so the samples are exactly `i0 = ⌊s⌋` and `i1 = min(i0 + 1, n - 1)`,
/// and the weight `l1 = remainder / (2·box_len)` is one correctly rounded division;
/// `l0 = 1 - l1`. From the last sample on (`i0 = n - 1`, both samples the same) `l1` is 0. Computing `s` in floats instead (as torch does) errs by an
/// ulp of the coordinate: 1e-4 of a pixel's weight at 1080p.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tap {
    pub i0: u32,
    pub i1: u32,
    pub l0: f32,
    pub l1: f32,
}

#[inline(always)]
pub(super) fn tap(d: u32, box_len: u32, n: u32) -> Tap {
    let num = (2 * d + 1) * n;
    let (i0, l1) = if num <= box_len {
        (0, 0.0)
    } else {
        let (num, den) = (num - box_len, 2 * box_len);
        let q = num / den;
        if q >= n - 1 {
            (n - 1, 0.0)
        } else {
            (q, (num % den) as f32 / den as f32)
        }
    };
    Tap {
        i0,
        i1: (i0 + 1).min(n - 1),
        l0: 1.0 - l1,
        l1,
    }
}

/// One source row's samples as f32, one value per pixel (chroma spread to its pixels):
/// Y, U, V, or R, G, B for packed formats.
struct Samples {
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

/// Source row `y` of a camera as R, G, B rows in `0..=1`: the samples are loaded first, then
/// converted by straight loops over whole rows (which the compiler vectorises; each lane
/// rounds as `yuv_rgb` does, so the values are the same).
fn source_row(
    c: &CameraParams,
    planes: &[&[u8]; 3],
    y: usize,
    s: &mut Samples,
    rgb: &mut [Vec<f32>; 3],
) {
    let w = c.width as usize;
    let row = |i: usize, y: usize| &planes[i][y * c.pitch[i] as usize..];
    let (sa, sb, sc) = (&mut s.a[..w], &mut s.b[..w], &mut s.c[..w]);
    let load16 =
        |s: &[u8], i: usize| f32::from(u16::from_ne_bytes([s[2 * i], s[2 * i + 1]]) >> c.shift);
    let packed = c.kind == SourceKind::Rgba as u32 || c.kind == SourceKind::Bgra as u32;
    match c.kind {
        _ if packed => {
            let (ri, bi) = if c.kind == SourceKind::Rgba as u32 {
                (0, 2)
            } else {
                (2, 0)
            };
            for (x, px) in row(0, y)[..4 * w].chunks_exact(4).enumerate() {
                (sa[x], sb[x], sc[x]) = (f32::from(px[ri]), f32::from(px[1]), f32::from(px[bi]));
            }
        }
        k if k == SourceKind::SemiPlanar8 as u32 => {
            let (l, ch) = (&row(0, y)[..w], row(1, y >> 1));
            for (x, &luma) in l.iter().enumerate() {
                let cx = 2 * (x >> 1);
                (sa[x], sb[x], sc[x]) = (f32::from(luma), f32::from(ch[cx]), f32::from(ch[cx + 1]));
            }
        }
        k if k == SourceKind::SemiPlanar16 as u32 => {
            let (l, ch) = (row(0, y), row(1, y >> 1));
            for x in 0..w {
                let cx = 2 * (x >> 1);
                (sa[x], sb[x], sc[x]) = (load16(l, x), load16(ch, cx), load16(ch, cx + 1));
            }
        }
        k => {
            let sub = k == SourceKind::Planar420 as u32;
            let cy = if sub { y >> 1 } else { y };
            let (l, cu, cv) = (&row(0, y)[..w], row(1, cy), row(2, cy));
            for (x, &luma) in l.iter().enumerate() {
                let cx = if sub { x >> 1 } else { x };
                (sa[x], sb[x], sc[x]) = (f32::from(luma), f32::from(cu[cx]), f32::from(cv[cx]));
            }
        }
    }
    convert_samples(c, s, rgb, packed);
}

/// R, G, B of a row of samples, on the widest vector unit the CPU has.
fn convert_samples(c: &CameraParams, s: &Samples, rgb: &mut [Vec<f32>; 3], packed: bool) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above), all `convert_samples_avx2` requires.
        return unsafe { convert_samples_avx2(c, s, rgb, packed) };
    }
    convert_samples_impl(c, s, rgb, packed)
}

/// `convert_samples_impl` compiled for AVX2 (8 lanes; FMA stays off, so every lane rounds as
/// scalar code does).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn convert_samples_avx2(
    c: &CameraParams,
    s: &Samples,
    rgb: &mut [Vec<f32>; 3],
    packed: bool,
) {
    convert_samples_impl(c, s, rgb, packed)
}

#[inline(always)]
fn convert_samples_impl(c: &CameraParams, s: &Samples, rgb: &mut [Vec<f32>; 3], packed: bool) {
    let w = c.width as usize;
    let (sa, sb, sc) = (&s.a[..w], &s.b[..w], &s.c[..w]);
    let [r, g, b] = rgb;
    let (r, g, b) = (&mut r[..w], &mut g[..w], &mut b[..w]);
    if packed {
        for x in 0..w {
            r[x] = clamp01(sa[x] / 255.0);
            g[x] = clamp01(sb[x] / 255.0);
            b[x] = clamp01(sc[x] / 255.0);
        }
    } else {
        for x in 0..w {
            [r[x], g[x], b[x]] = yuv_rgb(c, sa[x], sb[x], sc[x]);
        }
    }
}

/// Two converted source rows, reused while consecutive output rows read them.
struct RowCache {
    index: [usize; 2],
    rows: [[Vec<f32>; 3]; 2],
    samples: Samples,
}

impl RowCache {
    fn new(w: usize) -> RowCache {
        let row = || [vec![0f32; w], vec![0f32; w], vec![0f32; w]];
        RowCache {
            index: [usize::MAX; 2],
            rows: [row(), row()],
            samples: Samples {
                a: vec![0f32; w],
                b: vec![0f32; w],
                c: vec![0f32; w],
            },
        }
    }

    /// Rows `a` and `b` (converted if not held): `(row a, row b)`.
    fn get(
        &mut self,
        c: &CameraParams,
        planes: &[&[u8]; 3],
        a: usize,
        b: usize,
    ) -> (&[Vec<f32>; 3], &[Vec<f32>; 3]) {
        for want in [a, b] {
            if !self.index.contains(&want) {
                // The slot that holds neither row needed now.
                let slot = if self.index[0] == a || self.index[0] == b {
                    1
                } else {
                    0
                };
                source_row(c, planes, want, &mut self.samples, &mut self.rows[slot]);
                self.index[slot] = want;
            }
        }
        let slot = |i: usize| if self.index[0] == i { 0 } else { 1 };
        (&self.rows[slot(a)], &self.rows[slot(b)])
    }
}

/// One camera's image (`image`: its `3·H·W` elements).
fn convert_camera(
    c: &CameraParams,
    planes: &[&[u8]; 3],
    spec: &BatchSpec,
    f: &Finish,
    image: &mut [u8],
) {
    let (w_out, h_out) = (spec.width as usize, spec.height as usize);
    let mut vals = [vec![0f32; w_out], vec![0f32; w_out], vec![0f32; w_out]];
    let mut packed = vec![0u8; 3 * w_out * f.dtype.size()];
    let pad = |vals: &mut [Vec<f32>; 3], xs: std::ops::Range<usize>| {
        for (row, &p) in vals.iter_mut().zip(&f.pad) {
            row[xs.clone()].fill(p);
        }
    };
    if c.valid == 0 {
        for y in 0..h_out {
            pad(&mut vals, 0..w_out);
            store_row(f, &mut vals, y, spec, &mut packed, image);
        }
        return;
    }
    let (bx, by) = (c.box_x as usize, c.box_y as usize);
    let (bw, bh) = (c.box_w as usize, c.box_h as usize);
    let taps_x: Vec<Tap> = (0..c.box_w).map(|d| tap(d, c.box_w, c.width)).collect();
    let mut cache = RowCache::new(c.width as usize);
    for y in 0..h_out {
        if y < by || y >= by + bh {
            pad(&mut vals, 0..w_out);
        } else {
            pad(&mut vals, 0..bx);
            pad(&mut vals, bx + bw..w_out);
            let ty = tap((y - by) as u32, c.box_h, c.height);
            let (r0, r1) = cache.get(c, planes, ty.i0 as usize, ty.i1 as usize);
            for (ch, row) in vals.iter_mut().enumerate() {
                let (a, b) = (&r0[ch], &r1[ch]);
                for (v, tx) in row[bx..bx + bw].iter_mut().zip(&taps_x) {
                    let (x0, x1) = (tx.i0 as usize, tx.i1 as usize);
                    *v = ty.l0 * (tx.l0 * a[x0] + tx.l1 * a[x1])
                        + ty.l1 * (tx.l0 * b[x0] + tx.l1 * b[x1]);
                }
            }
        }
        store_row(f, &mut vals, y, spec, &mut packed, image);
    }
}
