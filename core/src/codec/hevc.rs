//! HEVC sequence parameter set (ITU-T H.265 §7.3.2.2.1) up to the bit depth: picture size,
//! conformance window, profile, level, chroma format.

use super::bits::{unescape_rbsp, BitReader};
use super::info::VideoInfo;
use crate::error::{Error, Result};

pub const NAL_VPS: u8 = 32;
pub const NAL_SPS: u8 = 33;
pub const NAL_PPS: u8 = 34;

/// The NAL unit type of an HEVC NAL unit (bits 1..6 of its 2-byte header).
pub fn nal_type(nal: &[u8]) -> Option<u8> {
    nal.first().map(|b| (b >> 1) & 0x3F)
}

/// Whether a NAL unit of this type belongs in the ring's extradata.
pub fn is_parameter_set(t: u8) -> bool {
    matches!(t, NAL_VPS | NAL_SPS | NAL_PPS)
}

/// Parse an SPS NAL unit (with its 2-byte header, emulation prevention still in place).
pub fn parse_sps(nal: &[u8]) -> Result<VideoInfo> {
    if nal.len() < 2 || nal_type(nal) != Some(NAL_SPS) {
        return Err(Error::invalid("not an HEVC SPS NAL unit"));
    }
    let rbsp = unescape_rbsp(&nal[2..]);
    let mut r = BitReader::new(&rbsp, "HEVC SPS");
    r.bits(4)?; // sps_video_parameter_set_id
    let max_sub_layers_minus1 = r.bits(3)? as usize;
    r.flag()?; // sps_temporal_id_nesting_flag
               // profile_tier_level(1, sps_max_sub_layers_minus1)
    r.bits(2)?; // general_profile_space
    r.flag()?; // general_tier_flag
    let profile_idc = r.bits(5)?;
    r.skip(32 + 4 + 43 + 1)?; // compatibility flags, source flags, constraint flags
    let level_idc = r.bits(8)?;
    let mut sub_profile = [false; 8];
    let mut sub_level = [false; 8];
    for i in 0..max_sub_layers_minus1 {
        sub_profile[i] = r.flag()?;
        sub_level[i] = r.flag()?;
    }
    if max_sub_layers_minus1 > 0 {
        r.skip(2 * (8 - max_sub_layers_minus1))?; // reserved_zero_2bits
    }
    for i in 0..max_sub_layers_minus1 {
        if sub_profile[i] {
            r.skip(88)?;
        }
        if sub_level[i] {
            r.skip(8)?;
        }
    }
    let sps_id = r.ue()?;
    if sps_id > 15 {
        return Err(Error::invalid(format!(
            "HEVC SPS id {sps_id} is out of range"
        )));
    }
    let chroma_format_idc = r.ue()?;
    if chroma_format_idc > 3 {
        return Err(Error::invalid(format!(
            "HEVC SPS chroma_format_idc {chroma_format_idc} is out of range"
        )));
    }
    let separate_colour_plane = chroma_format_idc == 3 && r.flag()?;
    let coded_w = u64::from(r.ue()?);
    let coded_h = u64::from(r.ue()?);
    let (mut crop_x, mut crop_y) = (0u64, 0u64);
    if r.flag()? {
        let (l, rt, t, b) = (
            u64::from(r.ue()?),
            u64::from(r.ue()?),
            u64::from(r.ue()?),
            u64::from(r.ue()?),
        );
        let (sub_w, sub_h) = match (chroma_format_idc, separate_colour_plane) {
            (1, _) => (2, 2),
            (2, _) => (2, 1),
            _ => (1, 1),
        };
        crop_x = (l + rt) * sub_w;
        crop_y = (t + b) * sub_h;
    }
    let luma_minus8 = r.ue()?;
    if luma_minus8 > 8 {
        return Err(Error::invalid(format!(
            "HEVC SPS bit depth {} is out of range",
            u64::from(luma_minus8) + 8
        )));
    }
    let width = coded_w.checked_sub(crop_x).filter(|&w| w > 0);
    let height = coded_h.checked_sub(crop_y).filter(|&h| h > 0);
    let (Some(width), Some(height)) = (width, height) else {
        return Err(Error::invalid(format!(
            "HEVC SPS conformance window ({crop_x}x{crop_y}) leaves no picture of {coded_w}x{coded_h}"
        )));
    };
    VideoInfo::checked(
        "HEVC SPS",
        width,
        height,
        profile_idc as i32,
        level_idc as i32,
        chroma_format_idc,
        8 + luma_minus8,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPS of fate-samples/test-25fps.h265: Main, level 2 (60), 320x240.
    const SPS_320X240: &str =
        "42010101600000030090000003000003003ca00a080f165959a4932b9a020000030002000003003210";
    /// SPS of the cros-codecs sample bear.h265: Main, 320x180 (coded 320x184, cropped).
    const SPS_BEAR: &str =
        "42010101600000030080000003000003003ca00a080b9f79657924cae010000006400000bb5080";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn parses_sps() {
        let i = parse_sps(&hex(SPS_320X240)).unwrap();
        assert_eq!((i.width, i.height), (320, 240));
        assert_eq!((i.profile, i.level), (1, 60));
        assert_eq!((i.chroma_format, i.bit_depth), (1, 8));
        let i = parse_sps(&hex(SPS_BEAR)).unwrap();
        assert_eq!((i.width, i.height), (320, 180));
    }

    #[test]
    fn truncated_sps_is_an_error() {
        let s = hex(SPS_320X240);
        for n in 0..20 {
            assert!(parse_sps(&s[..n]).is_err(), "{n}");
        }
        assert!(parse_sps(&hex("4001")).is_err());
    }
}
