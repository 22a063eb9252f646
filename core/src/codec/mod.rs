//! Codec helpers for the packet ring (§10.3, R30): the ring carries H.264/HEVC as Annex B
//! (start codes) and AV1 as low-overhead OBUs, and its extradata is the Annex B parameter sets
//! (SPS/PPS, VPS/SPS/PPS) or the AV1 sequence header OBU. Producers often hold something else
//! (`avcC`/`hvcC`/`av1C` from MP4 or Matroska), and consumers want the picture size; this
//! module converts and parses, bounds-checked, never panicking on hostile input
//! (`fuzz/fuzz_targets/codec_extradata.rs`).

mod annexb;
mod av1;
mod bits;
mod h264;
mod hevc;

pub use annexb::{avcc_to_annexb, hvcc_to_annexb, is_annexb, nal_units};
pub use av1::{
    av1c_to_sequence_header, leb128, obus, sequence_header_obu, Obu, OBU_SEQUENCE_HEADER,
    OBU_TEMPORAL_DELIMITER,
};

use crate::error::{Error, ErrorCode, Result};
use crate::wire::{CODEC_ID_AV1, CODEC_ID_H264, CODEC_ID_HEVC, MAX_EXTRADATA_SIZE};

/// The codecs the packet ring carries, by their `AV_CODEC_ID_*` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    H264,
    Hevc,
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
    fn checked(
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

/// Parameter-set NAL units of `data` (Annex B) as Annex B with 4-byte start codes.
fn annexb_parameter_sets(codec: Codec, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for nal in nal_units(data) {
        let keep = match codec {
            Codec::H264 => h264::nal_type(nal).is_some_and(h264::is_parameter_set),
            Codec::Hevc => hevc::nal_type(nal).is_some_and(hevc::is_parameter_set),
            Codec::Av1 => false,
        };
        if keep {
            annexb::push_nal(&mut out, nal);
        }
    }
    out
}

fn check_size(codec: Codec, v: Vec<u8>) -> Result<Vec<u8>> {
    if v.len() > MAX_EXTRADATA_SIZE {
        return Err(Error::invalid(format!(
            "{} extradata is {} bytes in the ring's form; at most {MAX_EXTRADATA_SIZE} fit (§10.3)",
            codec.name(),
            v.len()
        )));
    }
    Ok(v)
}

/// Convert a producer's codec extradata into the ring's form (§10.3, R30):
/// - H.264: `avcC` or Annex B → Annex B SPS/PPS (other NAL units, e.g. SEI, are dropped);
/// - HEVC: `hvcC` or Annex B → Annex B VPS/SPS/PPS;
/// - AV1: `av1C` or low-overhead OBUs → the sequence header OBU.
///
/// Empty input gives empty output (the extradata then comes from the first keyframe, see
/// [`keyframe_extradata`]). Input holding no parameter set is an error.
pub fn ring_extradata(codec: Codec, data: &[u8]) -> Result<Vec<u8>> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let out = match codec {
        Codec::H264 | Codec::Hevc if is_annexb(data) => annexb_parameter_sets(codec, data),
        Codec::H264 => annexb_parameter_sets(codec, &avcc_to_annexb(data)?),
        Codec::Hevc => annexb_parameter_sets(codec, &hvcc_to_annexb(data)?),
        Codec::Av1 if av1::is_av1c(data) => av1c_to_sequence_header(data)?,
        Codec::Av1 => sequence_header_obu(data)?.unwrap_or_default(),
    };
    if out.is_empty() {
        return Err(Error::invalid(format!(
            "the {}-byte {} extradata holds no parameter set",
            data.len(),
            codec.name()
        )));
    }
    check_size(codec, out)
}

/// The in-band parameter sets of a packet (Annex B H.264/HEVC, or AV1 OBUs) in the ring's
/// extradata form; empty if it carries none (usual for non-key packets).
pub fn keyframe_extradata(codec: Codec, packet: &[u8]) -> Result<Vec<u8>> {
    let out = match codec {
        Codec::H264 | Codec::Hevc => annexb_parameter_sets(codec, packet),
        Codec::Av1 => sequence_header_obu(packet)?.unwrap_or_default(),
    };
    check_size(codec, out)
}

/// The picture size, profile, level, chroma format and bit depth from ring-form extradata
/// (the first SPS, or the sequence header OBU).
pub fn video_info(codec: Codec, extradata: &[u8]) -> Result<VideoInfo> {
    let none = || {
        Error::new(
            ErrorCode::NotFound,
            format!(
                "the {}-byte {} extradata holds no sequence header",
                extradata.len(),
                codec.name()
            ),
        )
    };
    match codec {
        Codec::H264 => {
            let sps = nal_units(extradata)
                .into_iter()
                .find(|n| h264::nal_type(n) == Some(h264::NAL_SPS))
                .ok_or_else(none)?;
            h264::parse_sps(sps)
        }
        Codec::Hevc => {
            let sps = nal_units(extradata)
                .into_iter()
                .find(|n| hevc::nal_type(n) == Some(hevc::NAL_SPS))
                .ok_or_else(none)?;
            hevc::parse_sps(sps)
        }
        Codec::Av1 => {
            let obus = obus(extradata)?;
            let sh = obus
                .iter()
                .find(|o| o.obu_type == av1::OBU_SEQUENCE_HEADER)
                .ok_or_else(none)?;
            av1::parse_sequence_header(sh.payload)
        }
    }
}

#[cfg(test)]
mod tests;
