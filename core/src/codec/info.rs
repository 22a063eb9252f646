//! The types the codec helpers speak in: which codec ([`Codec`]) and what its sequence header
//! says about the pictures ([`VideoInfo`]).

use crate::error::{Error, ErrorCode, Result};
use crate::wire::{CODEC_ID_AV1, CODEC_ID_H264, CODEC_ID_HEVC};

/// The codecs the packet ring carries, by their `AV_CODEC_ID_*` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// H.264 / AVC.
    H264,
    /// H.265 / HEVC.
    Hevc,
    /// AV1.
    Av1,
}

impl Codec {
    /// The codec of a ring `codec_id`; `FORMAT` for any other.
    pub fn from_id(codec_id: u32) -> Result<Codec> {
        match codec_id {
            CODEC_ID_H264 => Ok(Codec::H264),
            CODEC_ID_HEVC => Ok(Codec::Hevc),
            CODEC_ID_AV1 => Ok(Codec::Av1),
            other => Err(Error::new(
                ErrorCode::Format,
                format!(
                    "codec id {other} is not one the packet ring carries \
                     (H.264 {CODEC_ID_H264}, HEVC {CODEC_ID_HEVC}, AV1 {CODEC_ID_AV1})"
                ),
            )),
        }
    }

    /// The codec's common name ("H.264", "HEVC", "AV1"), as messages print it.
    pub fn name(self) -> &'static str {
        match self {
            Codec::H264 => "H.264",
            Codec::Hevc => "HEVC",
            Codec::Av1 => "AV1",
        }
    }
}

/// What a sequence-level header says about the pictures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VideoInfo {
    /// Displayed size: the coded size less the cropping (H.264 frame cropping, HEVC
    /// conformance window); AV1: max_frame_width/height.
    pub width: u32,
    /// Displayed height (see `width`).
    pub height: u32,
    /// H.264 profile_idc, HEVC general_profile_idc, AV1 seq_profile (FFmpeg's numbering).
    pub profile: i32,
    /// H.264 level_idc, HEVC general_level_idc, AV1 seq_level_idx of operating point 0.
    pub level: i32,
    /// 0 = monochrome, 1 = 4:2:0, 2 = 4:2:2, 3 = 4:4:4.
    pub chroma_format: u32,
    /// Luma bit depth.
    pub bit_depth: u32,
}

/// Largest width or height accepted from a header.
pub const MAX_DIMENSION: u64 = 65_536;

impl VideoInfo {
    pub(super) fn checked(
        what: &str,
        width: u64,
        height: u64,
        profile: i32,
        level: i32,
        chroma_format: u32,
        bit_depth: u32,
    ) -> Result<VideoInfo> {
        if width == 0 || height == 0 || width > MAX_DIMENSION || height > MAX_DIMENSION {
            return Err(Error::invalid(format!(
                "{what} gives a picture of {width}x{height} (at most {MAX_DIMENSION} each way)"
            )));
        }
        Ok(VideoInfo {
            width: width as u32,
            height: height as u32,
            profile,
            level,
            chroma_format,
            bit_depth,
        })
    }
}
