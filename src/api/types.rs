//! The value types that several handles of the C API share: a ring's plane geometry
//! (`cuframes_frame_layout_t`) and a stream's colour description (`cuframes_colour_t`).

use cuframes_core::colour::ColourInfo;
use cuframes_core::format::FrameGeometry;

/// Mirrors `cuframes_frame_layout_t` in cuframes.h: the plane geometry of the frames of a
/// ring. Plane i starts at `offset[i]` bytes into a slot and has `rows[i]` rows of
/// `row_bytes[i]` image bytes, `pitch[i]` bytes apart.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CFrameLayout {
    /// The pixel format (`cuframes_format_t`).
    pub format: u32,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Planes in use: 1..3.
    pub plane_count: u32,
    /// Byte offset of each plane in a slot.
    pub offset: [u64; 3],
    /// Bytes from one row of a plane to the next (a multiple of 256).
    pub pitch: [u32; 3],
    /// Image bytes of one row of each plane.
    pub row_bytes: [u32; 3],
    /// Rows of each plane.
    pub rows: [u32; 3],
    /// Bytes of one frame: the sum of the planes.
    pub frame_size: u64,
}

impl From<&FrameGeometry> for CFrameLayout {
    fn from(l: &FrameGeometry) -> Self {
        let mut c = CFrameLayout {
            format: l.format as u32,
            width: l.width,
            height: l.height,
            plane_count: l.planes().len() as u32,
            frame_size: l.frame_size as u64,
            ..Default::default()
        };
        for (i, p) in l.planes().iter().enumerate() {
            c.offset[i] = p.offset as u64;
            c.pitch[i] = p.pitch as u32;
            c.row_bytes[i] = p.row_bytes as u32;
            c.rows[i] = p.rows as u32;
        }
        c
    }
}

/// Mirrors `cuframes_colour_t` in cuframes.h: a stream's colour description and sample aspect
/// ratio (the frame meta extension of docs/protocol.md). Primaries, transfer and matrix are
/// ITU-T H.273 code points; range and chroma location use FFmpeg's numbering.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CColour {
    /// 1: a description is recorded; 0: nothing is known (the other fields are 0).
    pub present: u32,
    /// Numerator of the sample aspect ratio; 0 = unknown.
    pub sar_num: u32,
    /// Denominator of the sample aspect ratio; 0 = unknown.
    pub sar_den: u32,
    /// Colour range (FFmpeg's AVColorRange: 0 unspecified, 1 limited, 2 full).
    pub range: u8,
    /// Colour primaries (H.273).
    pub primaries: u8,
    /// Transfer characteristics (H.273).
    pub transfer: u8,
    /// Matrix coefficients (H.273).
    pub matrix: u8,
    /// Chroma sample location (FFmpeg's AVChromaLocation).
    pub chroma_location: u8,
    /// Zero.
    pub reserved: [u8; 3],
}

impl CColour {
    /// The description to announce, if the caller filled one in (`present` != 0).
    pub(crate) fn to_core(self) -> Option<ColourInfo> {
        (self.present != 0).then_some(ColourInfo {
            range: self.range,
            primaries: self.primaries,
            transfer: self.transfer,
            matrix: self.matrix,
            chroma_location: self.chroma_location,
            sar: (self.sar_num, self.sar_den),
        })
    }
}

impl From<Option<ColourInfo>> for CColour {
    fn from(c: Option<ColourInfo>) -> Self {
        match c {
            None => CColour::default(),
            Some(c) => CColour {
                present: 1,
                sar_num: c.sar.0,
                sar_den: c.sar.1,
                range: c.range,
                primaries: c.primaries,
                transfer: c.transfer,
                matrix: c.matrix,
                chroma_location: c.chroma_location,
                reserved: [0; 3],
            },
        }
    }
}
