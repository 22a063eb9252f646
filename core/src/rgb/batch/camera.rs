//! The numbers of one camera in one batch ([`CameraParams`]), validated once on the host and
//! then used as they are by the host conversion and, byte for byte, by the kernel (`struct
//! BatchCamera` of `kernel.cu`): the kernel trusts only what was checked here.

use super::placement::content_box;
use super::spec::BatchSpec;
use crate::error::{Error, Result};
use crate::format::FrameGeometry;
use crate::rgb::coefficients::Coefficients;
use crate::rgb::spec::{ColourMatrix, ColourRange, RgbDtype, RgbLayout, RgbSpec};

/// One camera of a batch, byte for byte `struct BatchCamera` of `kernel.cu`.
///
/// `valid == 0` marks a camera without a frame (its image is the pad colour; nothing else
/// is read). Otherwise every field was derived from a geometry that [`CameraParams::new`]
/// rebuilt and compared, so the planes' rows, the content box and the scales agree.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct CameraParams {
    /// Device address of each plane's first row (0 on the host, and for unused planes).
    pub plane: [u64; 3],
    /// Bytes between rows of each plane.
    pub pitch: [u32; 3],
    /// `SourceKind` of the format.
    pub kind: u32,
    /// Right shift of 16-bit samples.
    pub shift: u32,
    /// Source frame size in pixels.
    pub width: u32,
    pub height: u32,
    /// Content box in the output image (placement.rs).
    pub box_x: u32,
    pub box_y: u32,
    pub box_w: u32,
    pub box_h: u32,
    /// 1: a frame to convert; 0: pad only.
    pub valid: u32,
    pub y_offset: f32,
    pub y_range: f32,
    pub c_offset: f32,
    pub c_range: f32,
    pub r_v: f32,
    pub g_u: f32,
    pub g_v: f32,
    pub b_u: f32,
}

// The kernel reads the record at these offsets (kernel.cu `struct BatchCamera`).
const _: () = assert!(std::mem::size_of::<CameraParams>() == 104);
const _: () = assert!(std::mem::align_of::<CameraParams>() == 8);
const _: () = assert!(std::mem::offset_of!(CameraParams, pitch) == 24);
const _: () = assert!(std::mem::offset_of!(CameraParams, kind) == 36);
const _: () = assert!(std::mem::offset_of!(CameraParams, box_x) == 52);
const _: () = assert!(std::mem::offset_of!(CameraParams, valid) == 68);
const _: () = assert!(std::mem::offset_of!(CameraParams, y_offset) == 72);
const _: () = assert!(std::mem::offset_of!(CameraParams, b_u) == 100);

impl CameraParams {
    /// A camera without a frame: its image is the pad colour.
    pub fn absent() -> CameraParams {
        CameraParams {
            plane: [0; 3],
            pitch: [0; 3],
            kind: 0,
            shift: 0,
            width: 0,
            height: 0,
            box_x: 0,
            box_y: 0,
            box_w: 0,
            box_h: 0,
            valid: 0,
            y_offset: 0.0,
            y_range: 1.0,
            c_offset: 0.0,
            c_range: 1.0,
            r_v: 0.0,
            g_u: 0.0,
            g_v: 0.0,
            b_u: 0.0,
        }
    }

    /// The numbers of a camera whose frame has `geometry`, read with `matrix` and `range`,
    /// in a batch of `spec` (validated by the caller). The geometry's public fields are
    /// rebuilt into a geometry and compared, so a geometry whose fields were changed after
    /// it was made (a width that its planes do not hold) is refused; plane addresses are
    /// the caller's to fill.
    pub fn new(
        geometry: &FrameGeometry,
        matrix: ColourMatrix,
        range: ColourRange,
        spec: &BatchSpec,
    ) -> Result<CameraParams> {
        let rebuilt = FrameGeometry::with_pitches(
            geometry.format,
            geometry.width,
            geometry.height,
            geometry.pitch_y,
            geometry.pitch_uv,
        )?;
        if rebuilt != *geometry {
            return Err(Error::invalid(format!(
                "the geometry of a {}x{} {} frame does not match its own planes (its fields \
                 were changed after it was made)",
                geometry.width,
                geometry.height,
                geometry.format.name()
            )));
        }
        // The source's values in 0..=1 as f32 (the output scale is applied at the store).
        let rgb = RgbSpec {
            matrix,
            range,
            dtype: RgbDtype::F32,
            layout: RgbLayout::Chw,
        };
        let k = Coefficients::new(geometry.format, &rgb)?;
        let (box_x, box_y, box_w, box_h) = content_box(geometry.width, geometry.height, spec);
        let mut pitch = [0u32; 3];
        for (p, plane) in pitch.iter_mut().zip(geometry.planes()) {
            // A pitch of a rebuilt geometry: at most a row of 16384 4-byte pixels plus slack.
            *p = u32::try_from(plane.pitch).map_err(|_| Error::invalid("plane pitch too large"))?;
        }
        Ok(CameraParams {
            plane: [0; 3],
            pitch,
            kind: k.kind as u32,
            shift: k.shift,
            width: geometry.width,
            height: geometry.height,
            box_x,
            box_y,
            box_w,
            box_h,
            valid: 1,
            y_offset: k.y_offset,
            y_range: k.y_range,
            c_offset: k.c_offset,
            c_range: k.c_range,
            r_v: k.r_v,
            g_u: k.g_u,
            g_v: k.g_v,
            b_u: k.b_u,
        })
    }
}
