//! H.264 sequence parameter set (ITU-T H.264 §7.3.2.1.1): the fields that give the coded
//! picture size, profile, level, chroma format and bit depth.

use super::bits::{unescape_rbsp, BitReader};
use super::info::VideoInfo;
use crate::error::{Error, Result};

/// NAL unit types of parameter sets: SPS, PPS, SPS extension.
pub const NAL_SPS: u8 = 7;
pub const NAL_PPS: u8 = 8;
pub const NAL_SPS_EXT: u8 = 13;

/// The NAL unit type of an H.264 NAL unit (first byte's low 5 bits).
pub fn nal_type(nal: &[u8]) -> Option<u8> {
    nal.first().map(|b| b & 0x1F)
}

/// Whether a NAL unit of this type belongs in the ring's extradata.
pub fn is_parameter_set(t: u8) -> bool {
    matches!(t, NAL_SPS | NAL_PPS | NAL_SPS_EXT)
}

fn scaling_list(r: &mut BitReader, size: usize) -> Result<()> {
    let (mut last, mut next) = (8i32, 8i32);
    for _ in 0..size {
        if next != 0 {
            let delta = r.se()?;
            if !(-128..=127).contains(&delta) {
                return Err(Error::invalid(format!(
                    "H.264 SPS scaling list delta {delta} is out of range"
                )));
            }
            next = (last + delta).rem_euclid(256);
        }
        if next != 0 {
            last = next;
        }
    }
    Ok(())
}

/// Parse an SPS NAL unit (with its 1-byte header, emulation prevention still in place).
pub fn parse_sps(nal: &[u8]) -> Result<VideoInfo> {
    if nal_type(nal) != Some(NAL_SPS) {
        return Err(Error::invalid("not an H.264 SPS NAL unit"));
    }
    let rbsp = unescape_rbsp(&nal[1..]);
    let mut r = BitReader::new(&rbsp, "H.264 SPS");
    let profile_idc = r.bits(8)?;
    r.bits(8)?; // constraint_set flags, reserved
    let level_idc = r.bits(8)?;
    let sps_id = r.ue()?;
    if sps_id > 31 {
        return Err(Error::invalid(format!(
            "H.264 SPS id {sps_id} is out of range"
        )));
    }
    let mut chroma_format_idc = 1;
    let mut separate_colour_plane = false;
    let mut bit_depth = 8;
    if matches!(
        profile_idc,
        100 | 110 | 122 | 244 | 44 | 83 | 86 | 118 | 128 | 138 | 139 | 134 | 135
    ) {
        chroma_format_idc = r.ue()?;
        if chroma_format_idc > 3 {
            return Err(Error::invalid(format!(
                "H.264 SPS chroma_format_idc {chroma_format_idc} is out of range"
            )));
        }
        if chroma_format_idc == 3 {
            separate_colour_plane = r.flag()?;
        }
        let luma_minus8 = r.ue()?;
        r.ue()?; // bit_depth_chroma_minus8
        if luma_minus8 > 6 {
            return Err(Error::invalid(format!(
                "H.264 SPS bit depth {} is out of range",
                u64::from(luma_minus8) + 8
            )));
        }
        bit_depth = 8 + luma_minus8;
        r.flag()?; // qpprime_y_zero_transform_bypass_flag
        if r.flag()? {
            let lists = if chroma_format_idc == 3 { 12 } else { 8 };
            for i in 0..lists {
                if r.flag()? {
                    scaling_list(&mut r, if i < 6 { 16 } else { 64 })?;
                }
            }
        }
    }
    r.ue()?; // log2_max_frame_num_minus4
    match r.ue()? {
        0 => {
            r.ue()?; // log2_max_pic_order_cnt_lsb_minus4
        }
        1 => {
            r.flag()?; // delta_pic_order_always_zero_flag
            r.se()?; // offset_for_non_ref_pic
            r.se()?; // offset_for_top_to_bottom_field
            let n = r.ue()?;
            if n > 255 {
                return Err(Error::invalid(format!(
                    "H.264 SPS num_ref_frames_in_pic_order_cnt_cycle {n} is out of range"
                )));
            }
            for _ in 0..n {
                r.se()?;
            }
        }
        2 => {}
        t => {
            return Err(Error::invalid(format!(
                "H.264 SPS pic_order_cnt_type {t} is out of range"
            )))
        }
    }
    r.ue()?; // max_num_ref_frames
    r.flag()?; // gaps_in_frame_num_value_allowed_flag
    let width_mbs = u64::from(r.ue()?) + 1;
    let height_map_units = u64::from(r.ue()?) + 1;
    let frame_mbs_only = r.flag()?;
    if !frame_mbs_only {
        r.flag()?; // mb_adaptive_frame_field_flag
    }
    r.flag()?; // direct_8x8_inference_flag
    let field_factor = if frame_mbs_only { 1 } else { 2 };
    let coded_w = width_mbs * 16;
    let coded_h = height_map_units * 16 * field_factor;
    let (mut crop_x, mut crop_y) = (0u64, 0u64);
    if r.flag()? {
        let (l, rt, t, b) = (
            u64::from(r.ue()?),
            u64::from(r.ue()?),
            u64::from(r.ue()?),
            u64::from(r.ue()?),
        );
        let chroma_array_type = if separate_colour_plane {
            0
        } else {
            chroma_format_idc
        };
        let (sub_w, sub_h) = match chroma_array_type {
            1 => (2, 2),
            2 => (2, 1),
            _ => (1, 1),
        };
        let unit_x = if chroma_array_type == 0 { 1 } else { sub_w };
        let unit_y = if chroma_array_type == 0 {
            field_factor
        } else {
            sub_h * field_factor
        };
        crop_x = (l + rt) * unit_x;
        crop_y = (t + b) * unit_y;
    }
    let width = coded_w.checked_sub(crop_x).filter(|&w| w > 0);
    let height = coded_h.checked_sub(crop_y).filter(|&h| h > 0);
    let (Some(width), Some(height)) = (width, height) else {
        return Err(Error::invalid(format!(
            "H.264 SPS cropping ({crop_x}x{crop_y}) leaves no picture of {coded_w}x{coded_h}"
        )));
    };
    VideoInfo::checked(
        "H.264 SPS",
        width,
        height,
        profile_idc as i32,
        level_idc as i32,
        if separate_colour_plane {
            3
        } else {
            chroma_format_idc
        },
        bit_depth,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPS of fate-samples/test-25fps.h264: Main, level 1.3, 320x240.
    const SPS_MAIN: [u8; 19] = [
        0x27, 0x4D, 0x40, 0x0D, 0xA9, 0x18, 0x28, 0x3E, 0x60, 0x0D, 0x41, 0x80, 0x41, 0xAD, 0xB0,
        0xAD, 0x7B, 0xDF, 0x01,
    ];
    /// SPS of the cros-codecs sample 64x64-I-P-B-P-high.h264: High, level 2.0, 64x64.
    const SPS_HIGH: [u8; 28] = [
        0x67, 0x64, 0x00, 0x14, 0xAC, 0xE4, 0x10, 0x9B, 0x01, 0x6A, 0x0C, 0x0C, 0x0D, 0x4A, 0x00,
        0x00, 0x03, 0x00, 0x02, 0x00, 0x00, 0x03, 0x00, 0x79, 0x1E, 0x28, 0x52, 0x24,
    ];

    #[test]
    fn parses_main_and_high_profile_sps() {
        let i = parse_sps(&SPS_MAIN).unwrap();
        assert_eq!((i.width, i.height), (320, 240));
        assert_eq!((i.profile, i.level), (77, 13));
        assert_eq!((i.chroma_format, i.bit_depth), (1, 8));
        let i = parse_sps(&SPS_HIGH).unwrap();
        assert_eq!((i.width, i.height), (64, 64));
        assert_eq!((i.profile, i.level), (100, 20));
        assert_eq!((i.chroma_format, i.bit_depth), (1, 8));
    }

    #[test]
    fn truncated_sps_is_an_error() {
        // Cut before the frame size fields: always an error.
        for n in 0..8 {
            assert!(parse_sps(&SPS_MAIN[..n]).is_err(), "{n}");
            assert!(parse_sps(&SPS_HIGH[..n]).is_err(), "{n}");
        }
        assert!(parse_sps(&[0x68, 0xEE]).is_err());
    }

    #[test]
    fn out_of_range_scaling_delta_is_an_error() {
        // High profile; sps_id 0, chroma 1, depths 8, no bypass, scaling matrix present, list 0
        // present, then delta_scale = se(ue 300) = -150, beyond -128..127 (the fuzzer found
        // deltas large enough to overflow).
        let mut sps = vec![0x67, 100, 0, 30];
        sps.extend([0xAD, 0x80, 0x4B, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF]);
        let e = parse_sps(&sps).unwrap_err();
        assert!(e.to_string().contains("scaling list delta -150"), "{e}");
    }
}
