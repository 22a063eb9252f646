//! AV1 low-overhead OBUs (AV1 spec §5.3), the sequence header (§5.5) and the `av1C`
//! configuration record (AV1-ISOBMFF §2.3). The packet ring's AV1 extradata is the sequence
//! header OBU itself (R30).

use super::bits::BitReader;
use super::info::VideoInfo;
use crate::error::{Error, Result};

/// `obu_type` of a sequence header OBU.
pub const OBU_SEQUENCE_HEADER: u8 = 1;
/// `obu_type` of a temporal delimiter OBU.
pub const OBU_TEMPORAL_DELIMITER: u8 = 2;

/// One OBU of a low-overhead stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Obu<'a> {
    /// The OBU's type (`OBU_SEQUENCE_HEADER`, ...).
    pub obu_type: u8,
    /// The whole OBU: header, optional extension, size field and payload.
    pub raw: &'a [u8],
    /// The payload alone.
    pub payload: &'a [u8],
    /// Whether `raw` carries an `obu_size` field.
    pub has_size: bool,
}

/// `leb128()` at `data[0..]`: (value, bytes used). At most 8 bytes, value < 2^32 (§4.10.5).
pub fn leb128(data: &[u8]) -> Result<(u64, usize)> {
    let mut v: u64 = 0;
    for i in 0..8 {
        let b = *data
            .get(i)
            .ok_or_else(|| Error::invalid("AV1 leb128 value is truncated"))?;
        v |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            if v > u64::from(u32::MAX) {
                return Err(Error::invalid("AV1 leb128 value exceeds 2^32 - 1"));
            }
            return Ok((v, i + 1));
        }
    }
    Err(Error::invalid("AV1 leb128 value is longer than 8 bytes"))
}

/// Append `v` as leb128 (as few bytes as possible).
pub fn push_leb128(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Split a low-overhead bitstream into OBUs. An OBU without a size field runs to the end.
pub fn obus(data: &[u8]) -> Result<Vec<Obu<'_>>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        let h = rest[0];
        if h & 0x80 != 0 {
            return Err(Error::invalid(format!(
                "AV1 OBU header at byte {pos} has the forbidden bit set"
            )));
        }
        let obu_type = (h >> 3) & 0x0F;
        let has_ext = h & 0x04 != 0;
        let has_size = h & 0x02 != 0;
        let mut hdr = 1 + usize::from(has_ext);
        if rest.len() < hdr {
            return Err(Error::invalid("AV1 OBU extension header is truncated"));
        }
        let size = if has_size {
            let (v, n) = leb128(&rest[hdr..])?;
            hdr += n;
            v as usize
        } else {
            rest.len() - hdr
        };
        let end = hdr
            .checked_add(size)
            .filter(|&e| e <= rest.len())
            .ok_or_else(|| {
                Error::invalid(format!(
                    "AV1 OBU at byte {pos} declares {size} payload bytes; {} remain",
                    rest.len() - hdr
                ))
            })?;
        out.push(Obu {
            obu_type,
            raw: &rest[..end],
            payload: &rest[hdr..end],
            has_size,
        });
        pos += end;
    }
    Ok(out)
}

/// The sequence header OBU of a low-overhead stream, rewritten with an `obu_size` field if it
/// had none (so that it can be followed by other OBUs). `None` if the stream has none.
pub fn sequence_header_obu(data: &[u8]) -> Result<Option<Vec<u8>>> {
    for o in obus(data)? {
        if o.obu_type == OBU_SEQUENCE_HEADER {
            if o.has_size {
                return Ok(Some(o.raw.to_vec()));
            }
            let hdr_len = o.raw.len() - o.payload.len();
            let mut v = Vec::with_capacity(o.raw.len() + 4);
            v.push(o.raw[0] | 0x02);
            v.extend_from_slice(&o.raw[1..hdr_len]);
            push_leb128(&mut v, o.payload.len() as u64);
            v.extend_from_slice(o.payload);
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// Whether `data` is an `av1C` record: marker bit 1 and version 1 (byte 0x81). A bare OBU
/// stream can never start so, as the OBU forbidden bit would be set.
pub fn is_av1c(data: &[u8]) -> bool {
    data.first() == Some(&0x81)
}

/// `av1C` → the sequence header OBU among its `configOBUs`.
pub fn av1c_to_sequence_header(data: &[u8]) -> Result<Vec<u8>> {
    if !is_av1c(data) || data.len() < 4 {
        return Err(Error::invalid(
            "AV1 av1C record is truncated or has an unknown version",
        ));
    }
    sequence_header_obu(&data[4..])?.ok_or_else(|| {
        Error::invalid("AV1 av1C record carries no sequence header OBU in configOBUs")
    })
}

/// Parse a sequence header OBU payload (§5.5) up to `color_config()` (the AV1 syntax).
pub fn parse_sequence_header(payload: &[u8]) -> Result<VideoInfo> {
    let mut r = BitReader::new(payload, "AV1 sequence header");
    let seq_profile = r.bits(3)?;
    r.flag()?; // still_picture
    let reduced = r.flag()?;
    let level;
    if reduced {
        level = r.bits(5)?;
    } else {
        let mut decoder_model_info = false;
        let mut buffer_delay_len = 0;
        if r.flag()? {
            // timing_info()
            r.bits(32)?;
            r.bits(32)?;
            if r.flag()? {
                r.uvlc()?;
            }
            decoder_model_info = r.flag()?;
            if decoder_model_info {
                buffer_delay_len = r.bits(5)? + 1;
                r.bits(32)?;
                r.bits(5)?;
                r.bits(5)?;
            }
        }
        let initial_display_delay = r.flag()?;
        let points = r.bits(5)? + 1;
        let mut first_level = 0;
        for i in 0..points {
            r.bits(12)?; // operating_point_idc
            let l = r.bits(5)?;
            if i == 0 {
                first_level = l;
            }
            if l > 7 {
                r.flag()?; // seq_tier
            }
            if decoder_model_info && r.flag()? {
                r.bits(buffer_delay_len)?;
                r.bits(buffer_delay_len)?;
                r.flag()?;
            }
            if initial_display_delay && r.flag()? {
                r.bits(4)?;
            }
        }
        level = first_level;
    }
    let w_bits = r.bits(4)? + 1;
    let h_bits = r.bits(4)? + 1;
    let width = u64::from(r.bits(w_bits)?) + 1;
    let height = u64::from(r.bits(h_bits)?) + 1;
    if !reduced && r.flag()? {
        r.bits(4)?;
        r.bits(3)?;
    }
    r.bits(3)?; // use_128x128_superblock, enable_filter_intra, enable_intra_edge_filter
    if !reduced {
        r.bits(4)?; // interintra, masked compound, warped motion, dual filter
        let order_hint = r.flag()?;
        if order_hint {
            r.bits(2)?; // jnt_comp, ref_frame_mvs
        }
        let force_sct = if r.flag()? { 2 } else { r.bits(1)? };
        if force_sct > 0 && !r.flag()? {
            r.bits(1)?; // seq_force_integer_mv
        }
        if order_hint {
            r.bits(3)?;
        }
    }
    r.bits(3)?; // superres, cdef, restoration
                // color_config()
    let high_bitdepth = r.flag()?;
    let bit_depth = if seq_profile == 2 && high_bitdepth {
        if r.flag()? {
            12
        } else {
            10
        }
    } else if high_bitdepth {
        10
    } else {
        8
    };
    let mono = seq_profile != 1 && r.flag()?;
    let (mut cp, mut tc, mut mc) = (2, 2, 2);
    if r.flag()? {
        cp = r.bits(8)?;
        tc = r.bits(8)?;
        mc = r.bits(8)?;
    }
    let chroma_format = if mono {
        0
    } else if cp == 1 && tc == 13 && mc == 0 {
        3
    } else {
        r.flag()?; // color_range
        match seq_profile {
            0 => 1,
            1 => 3,
            _ if bit_depth == 12 => {
                let ss_x = r.flag()?;
                let ss_y = ss_x && r.flag()?;
                match (ss_x, ss_y) {
                    (true, true) => 1,
                    (true, false) => 2,
                    _ => 3,
                }
            }
            _ => 2,
        }
    };
    VideoInfo::checked(
        "AV1 sequence header",
        width,
        height,
        seq_profile as i32,
        level as i32,
        chroma_format,
        bit_depth,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start of the first frame of fate-samples/test-25fps.av1.ivf: a temporal delimiter,
    /// then the sequence header OBU (Main, 320x240, 8-bit 4:2:0).
    const TU: [u8; 15] = [
        0x12, 0x00, 0x0A, 0x0B, 0x00, 0x00, 0x00, 0x04, 0x3C, 0xFF, 0xBD, 0xFF, 0xF9, 0x80, 0x40,
    ];

    #[test]
    fn finds_and_parses_the_sequence_header() {
        let o = obus(&TU).unwrap();
        assert_eq!(o.len(), 2);
        assert_eq!(o[0].obu_type, OBU_TEMPORAL_DELIMITER);
        let sh = sequence_header_obu(&TU).unwrap().unwrap();
        assert_eq!(sh, TU[2..].to_vec());
        let i = parse_sequence_header(&sh[2..]).unwrap();
        assert_eq!((i.width, i.height), (320, 240));
        assert_eq!((i.profile, i.level), (0, 0));
        assert_eq!((i.chroma_format, i.bit_depth), (1, 8));
    }

    #[test]
    fn av1c_and_sizeless_obus() {
        // av1C header + the sequence header without its size field.
        let mut c = vec![0x81, 0x00, 0x0C, 0x00, 0x08];
        c.extend_from_slice(&TU[4..]);
        assert_eq!(av1c_to_sequence_header(&c).unwrap(), TU[2..].to_vec());
        assert!(av1c_to_sequence_header(&c[..3]).is_err());
        assert!(av1c_to_sequence_header(&[0x81, 0, 0, 0]).is_err());
    }

    #[test]
    fn malformed_streams_are_errors() {
        for n in 3..TU.len() {
            // Truncating inside the declared size is an error.
            assert!(obus(&TU[..n]).is_err(), "{n}");
        }
        assert!(obus(&[0x80]).is_err());
        assert!(leb128(&[0xFF; 9]).is_err());
        assert!(leb128(&[0xFF, 0xFF, 0xFF, 0xFF, 0x7F]).is_err());
        assert_eq!(leb128(&[0xE5, 0x8E, 0x26]).unwrap(), (624_485, 3));
        let mut v = Vec::new();
        push_leb128(&mut v, 624_485);
        assert_eq!(v, vec![0xE5, 0x8E, 0x26]);
        for n in 0..8 {
            assert!(parse_sequence_header(&TU[4..4 + n]).is_err(), "{n}");
        }
    }
}
