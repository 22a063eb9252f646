//! What an RGB conversion produces ([`RgbSpec`]) and how it reads the source's colour: the
//! matrix and range, named by a stream's colour description ([`ColourInfo`]) when it has one.

use crate::colour::{
    ColourInfo, MATRIX_BT2020_NCL, MATRIX_BT470BG, MATRIX_BT709, MATRIX_SMPTE170M, RANGE_FULL,
    RANGE_LIMITED,
};

/// The YCbCr matrix of the source (ISO/IEC 23091-2 MatrixCoefficients 5/6, 1 and 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColourMatrix {
    /// ITU-R BT.601 (SD): Kr 0.299, Kb 0.114.
    Bt601,
    /// ITU-R BT.709 (HD): Kr 0.2126, Kb 0.0722.
    Bt709,
    /// ITU-R BT.2020 non-constant luminance: Kr 0.2627, Kb 0.0593.
    Bt2020,
}

/// Whether the samples use the whole code range or the "studio" (limited, video) range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColourRange {
    /// Studio range: luma 16..=235, chroma 16..=240 (8-bit; scaled for more bits).
    Limited,
    /// The whole code range.
    Full,
}

/// Element type of the RGB output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RgbDtype {
    /// `uint8`, 0..=255.
    U8,
    /// IEEE binary16, 0..=1.
    F16,
    /// IEEE binary32, 0..=1.
    F32,
}

impl RgbDtype {
    /// Bytes of one element.
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
    /// Planar: `[3][height][width]`.
    Chw,
    /// Interleaved: `[height][width][3]`.
    Hwc,
}

/// What to convert to, and how to read the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RgbSpec {
    /// The YCbCr matrix of the source.
    pub matrix: ColourMatrix,
    /// The code range of the source's samples.
    pub range: ColourRange,
    /// The element type of the output.
    pub dtype: RgbDtype,
    /// The channel order of the output.
    pub layout: RgbLayout,
}

impl Default for RgbSpec {
    /// BT.709, limited range (what an HD camera sends), `uint8`, CHW.
    fn default() -> RgbSpec {
        RgbSpec {
            matrix: ColourMatrix::Bt709,
            range: ColourRange::Limited,
            dtype: RgbDtype::U8,
            layout: RgbLayout::Chw,
        }
    }
}

/// Bytes of the RGB image of a `width` x `height` frame.
pub fn rgb_size(width: u32, height: u32, dtype: RgbDtype) -> usize {
    3 * width as usize * height as usize * dtype.size()
}

// The typed views of a colour description live with the conversion that uses them, so that
// the protocol layer's `colour` knows nothing of this feature.
impl ColourInfo {
    /// The matrix an RGB conversion should use, when the stream names one it implements
    /// (BT.601 is announced as BT.470BG or SMPTE 170M, which share the coefficients).
    pub fn rgb_matrix(&self) -> Option<ColourMatrix> {
        match self.matrix {
            MATRIX_BT709 => Some(ColourMatrix::Bt709),
            MATRIX_BT470BG | MATRIX_SMPTE170M => Some(ColourMatrix::Bt601),
            MATRIX_BT2020_NCL => Some(ColourMatrix::Bt2020),
            _ => None,
        }
    }

    /// The range an RGB conversion should use, when the stream says.
    pub fn rgb_range(&self) -> Option<ColourRange> {
        match self.range {
            RANGE_LIMITED => Some(ColourRange::Limited),
            RANGE_FULL => Some(ColourRange::Full),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::colour::MATRIX_RGB;

    #[test]
    fn typed_views_follow_the_code_points() {
        let mut c = ColourInfo::default();
        assert_eq!((c.rgb_matrix(), c.rgb_range()), (None, None));
        assert_eq!(c.sample_aspect_ratio(), None);
        c.matrix = MATRIX_BT709;
        c.range = RANGE_FULL;
        c.sar = (4, 3);
        assert_eq!(c.rgb_matrix(), Some(ColourMatrix::Bt709));
        assert_eq!(c.rgb_range(), Some(ColourRange::Full));
        assert_eq!(c.sample_aspect_ratio(), Some((4, 3)));
        for m in [MATRIX_BT470BG, MATRIX_SMPTE170M] {
            c.matrix = m;
            assert_eq!(c.rgb_matrix(), Some(ColourMatrix::Bt601));
        }
        c.matrix = MATRIX_BT2020_NCL;
        c.range = RANGE_LIMITED;
        assert_eq!(c.rgb_matrix(), Some(ColourMatrix::Bt2020));
        assert_eq!(c.rgb_range(), Some(ColourRange::Limited));
        c.matrix = MATRIX_RGB;
        c.sar = (1, 0);
        assert_eq!((c.rgb_matrix(), c.sample_aspect_ratio()), (None, None));
    }
}
