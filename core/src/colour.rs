//! How a stream's samples are to be interpreted: colour range, primaries, transfer
//! characteristics, YCbCr matrix, chroma siting and sample aspect ratio, as the publisher
//! announces them (the frame meta extension, `wire::meta_ext`).
//!
//! The numbers are the code points of ITU-T H.273 / ISO/IEC 23091-2 for primaries, transfer
//! and matrix (the values of FFmpeg's `AVColorPrimaries`, `AVColorTransferCharacteristic` and
//! `AVColorSpace`), and FFmpeg's own `AVColorRange` and `AVChromaLocation` numbering for range
//! and chroma location (H.273 has no range enum, and its chroma location type is numbered
//! differently). They are fixed wire values, like the codec ids (R31), so that peers built
//! against different FFmpeg versions agree. 0 means "unspecified" for every field except
//! the matrix, where 2 does (0 is H.273's "identity", i.e. RGB/GBR).

/// Colour range (FFmpeg `AVColorRange`).
pub const RANGE_UNSPECIFIED: u8 = 0;
/// Limited ("studio", "tv", "mpeg") range.
pub const RANGE_LIMITED: u8 = 1;
/// Full ("pc", "jpeg") range.
pub const RANGE_FULL: u8 = 2;

/// H.273 ColourPrimaries (subset named here; every value travels).
pub const PRIMARIES_BT709: u8 = 1;
/// Primaries unspecified.
pub const PRIMARIES_UNSPECIFIED: u8 = 2;
/// BT.470 System B/G primaries (PAL, BT.601 625 lines).
pub const PRIMARIES_BT470BG: u8 = 5;
/// SMPTE 170M primaries (NTSC, BT.601 525 lines).
pub const PRIMARIES_SMPTE170M: u8 = 6;
/// BT.2020 / BT.2100 primaries.
pub const PRIMARIES_BT2020: u8 = 9;

/// H.273 TransferCharacteristics (subset).
pub const TRANSFER_BT709: u8 = 1;
/// Transfer unspecified.
pub const TRANSFER_UNSPECIFIED: u8 = 2;
/// SMPTE 170M (BT.601) transfer.
pub const TRANSFER_SMPTE170M: u8 = 6;
/// SMPTE ST 2084 (PQ) transfer.
pub const TRANSFER_PQ: u8 = 16;
/// ARIB STD-B67 (HLG) transfer.
pub const TRANSFER_HLG: u8 = 18;

/// H.273 MatrixCoefficients (subset).
pub const MATRIX_RGB: u8 = 0;
/// BT.709 matrix.
pub const MATRIX_BT709: u8 = 1;
/// Matrix unspecified.
pub const MATRIX_UNSPECIFIED: u8 = 2;
/// BT.470 System B/G matrix (the BT.601 coefficients).
pub const MATRIX_BT470BG: u8 = 5;
/// SMPTE 170M matrix (the BT.601 coefficients).
pub const MATRIX_SMPTE170M: u8 = 6;
/// BT.2020 non-constant-luminance matrix.
pub const MATRIX_BT2020_NCL: u8 = 9;

/// The colour description of a stream (all fields as announced; unknown values are kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ColourInfo {
    /// [`RANGE_LIMITED`], [`RANGE_FULL`] or [`RANGE_UNSPECIFIED`].
    pub range: u8,
    /// Colour primaries (H.273 ColourPrimaries).
    pub primaries: u8,
    /// Transfer characteristics (H.273 TransferCharacteristics).
    pub transfer: u8,
    /// YCbCr matrix coefficients.
    pub matrix: u8,
    /// `AVChromaLocation` numbering.
    pub chroma_location: u8,
    /// Sample (pixel) aspect ratio, numerator and denominator; (0, 1) or (0, 0) = unknown.
    pub sar: (u32, u32),
}

impl Default for ColourInfo {
    /// Everything unspecified.
    fn default() -> Self {
        ColourInfo {
            range: RANGE_UNSPECIFIED,
            primaries: PRIMARIES_UNSPECIFIED,
            transfer: TRANSFER_UNSPECIFIED,
            matrix: MATRIX_UNSPECIFIED,
            chroma_location: 0,
            sar: (0, 1),
        }
    }
}

impl ColourInfo {
    /// The sample aspect ratio when it is a real ratio (both terms non-zero).
    pub fn sample_aspect_ratio(&self) -> Option<(u32, u32)> {
        (self.sar.0 != 0 && self.sar.1 != 0).then_some(self.sar)
    }
}
