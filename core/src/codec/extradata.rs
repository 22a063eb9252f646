//! Conversions of a producer's extradata into the ring's form (§10.3, R30), and the picture
//! description read back from it.

use super::annexb::{self, avcc_to_annexb, hvcc_to_annexb, is_annexb, nal_units};
use super::av1::{self, av1c_to_sequence_header, obus, sequence_header_obu};
use super::info::{Codec, VideoInfo};
use super::{h264, hevc};
use crate::error::{Error, ErrorCode, Result};
use crate::wire::MAX_EXTRADATA_SIZE;

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
            "{} extradata is {} bytes in the ring's form; at most {MAX_EXTRADATA_SIZE} fit in the packet ring's header",
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
