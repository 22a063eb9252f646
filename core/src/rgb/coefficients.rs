//! The numbers of one conversion: the formulas of the module documentation of [`crate::rgb`],
//! evaluated once, in f64 and rounded once to the f32 values both the host code and the kernel
//! compute with.

use super::spec::{ColourMatrix, ColourRange, RgbDtype, RgbSpec};
use crate::error::{Error, Result};
use crate::wire::Format;

/// How the source's planes are read (the kernel's `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum SourceKind {
    SemiPlanar8 = 0,
    SemiPlanar16 = 1,
    Planar420 = 2,
    Planar444 = 3,
    Rgba = 4,
    Bgra = 5,
}

/// The numbers of one conversion: the formulas of the module documentation, evaluated once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Coefficients {
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
            ColourRange::Limited => (16.0 * step, 219.0 * step, 128.0 * step, 224.0 * step),
            ColourRange::Full => (0.0, max, f64::from(1u32 << (bits - 1)), max),
        };
        let (kr, kb) = match spec.matrix {
            ColourMatrix::Bt601 => (0.299, 0.114),
            ColourMatrix::Bt709 => (0.2126, 0.0722),
            ColourMatrix::Bt2020 => (0.2627, 0.0593),
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
