//! Annex B byte streams (start codes) and the ISO-BMFF/Matroska decoder configuration records
//! of H.264 (`avcC`) and HEVC (`hvcC`), converted to the Annex B form the packet ring carries
//! (§10.3, R30).

use crate::error::{Error, Result};

/// The 4-byte start code used for every NAL unit this module writes.
pub const START_CODE: [u8; 4] = [0, 0, 0, 1];

/// Whether `data` begins with an Annex B start code (`00 00 01` or `00 00 00 01`).
pub fn is_annexb(data: &[u8]) -> bool {
    data.starts_with(&[0, 0, 1]) || data.starts_with(&[0, 0, 0, 1])
}

/// The NAL units of an Annex B stream, without their start codes and trailing zero bytes.
/// Bytes before the first start code are ignored; empty units are skipped.
pub fn nal_units(data: &[u8]) -> Vec<&[u8]> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i + 3 <= data.len() {
        if data[i] == 0 && data[i + 1] == 0 && data[i + 2] == 1 {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    let mut units = Vec::with_capacity(starts.len());
    for (n, &s) in starts.iter().enumerate() {
        // The next unit's start code begins 3 bytes before its payload.
        let end = starts.get(n + 1).map_or(data.len(), |&next| next - 3);
        let mut unit = &data[s..end.max(s)];
        while let [rest @ .., 0] = unit {
            unit = rest;
        }
        if !unit.is_empty() {
            units.push(unit);
        }
    }
    units
}

/// Append `nal` to `out` with a 4-byte start code.
pub fn push_nal(out: &mut Vec<u8>, nal: &[u8]) {
    out.extend_from_slice(&START_CODE);
    out.extend_from_slice(nal);
}

/// A cursor over a byte slice for configuration records; every read is bounds-checked.
struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Bytes<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(Error::invalid(format!(
                "{} is truncated: {} bytes wanted at offset {}, {} bytes in all",
                self.what,
                n,
                self.pos,
                self.data.len()
            )));
        };
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
}

/// `AVCDecoderConfigurationRecord` (ISO/IEC 14496-15 §5.3.3) → Annex B SPS + PPS.
pub fn avcc_to_annexb(data: &[u8]) -> Result<Vec<u8>> {
    let mut r = Bytes {
        data,
        pos: 0,
        what: "H.264 avcC record",
    };
    let version = r.u8()?;
    if version != 1 {
        return Err(Error::invalid(format!(
            "H.264 avcC record has configurationVersion {version}, expected 1"
        )));
    }
    r.take(3)?; // profile, compatibility, level
    r.u8()?; // lengthSizeMinusOne (packets are rewritten by h264_mp4toannexb)
    let mut out = Vec::new();
    let n_sps = r.u8()? & 0x1F;
    for _ in 0..n_sps {
        let len = r.u16()? as usize;
        push_nal(&mut out, r.take(len)?);
    }
    let n_pps = r.u8()?;
    for _ in 0..n_pps {
        let len = r.u16()? as usize;
        push_nal(&mut out, r.take(len)?);
    }
    if n_sps == 0 {
        return Err(Error::invalid("H.264 avcC record holds no SPS"));
    }
    Ok(out)
}

/// `HEVCDecoderConfigurationRecord` (ISO/IEC 14496-15 §8.3.3) → Annex B VPS + SPS + PPS
/// (and whatever else its arrays hold, e.g. SEI), in record order.
pub fn hvcc_to_annexb(data: &[u8]) -> Result<Vec<u8>> {
    let mut r = Bytes {
        data,
        pos: 0,
        what: "HEVC hvcC record",
    };
    r.take(22)?; // version, profile/tier/level, ..., lengthSizeMinusOne
    let arrays = r.u8()?;
    let mut out = Vec::new();
    for _ in 0..arrays {
        r.u8()?; // array_completeness, reserved, NAL_unit_type
        let n = r.u16()?;
        for _ in 0..n {
            let len = r.u16()? as usize;
            let nal = r.take(len)?;
            if !nal.is_empty() {
                push_nal(&mut out, nal);
            }
        }
    }
    if out.is_empty() {
        return Err(Error::invalid("HEVC hvcC record holds no NAL units"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_annexb_with_both_start_code_lengths() {
        let s = [
            0, 0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x68, 3, 0, 0, 0, 0, 1, 0x65, 4, 0, 0,
        ];
        let u = nal_units(&s);
        assert_eq!(u, vec![&[0x67, 1, 2][..], &[0x68, 3][..], &[0x65, 4][..]]);
        assert!(is_annexb(&s));
        assert!(!is_annexb(&[1, 0x64]));
        assert!(nal_units(&[]).is_empty());
        assert!(nal_units(&[0, 0, 1]).is_empty());
        assert!(nal_units(&[0, 0, 1, 0, 0, 1]).is_empty());
    }

    #[test]
    fn avcc_round_trip() {
        let avcc = [
            1, 0x4D, 0x40, 0x1E, 0xFF, 0xE1, 0, 3, 0x67, 0x4D, 0x40, 1, 0, 2, 0x68, 0xEE,
        ];
        assert_eq!(
            avcc_to_annexb(&avcc).unwrap(),
            vec![0, 0, 0, 1, 0x67, 0x4D, 0x40, 0, 0, 0, 1, 0x68, 0xEE]
        );
        // Every truncation is an error, not a panic.
        for n in 0..avcc.len() {
            assert!(avcc_to_annexb(&avcc[..n]).is_err(), "{n}");
        }
        assert!(avcc_to_annexb(&[0, 0, 0, 1, 0x67]).is_err());
    }

    #[test]
    fn hvcc_round_trip() {
        let mut h = vec![1u8; 22];
        h.push(2); // arrays
        h.extend([0xA0, 0, 1, 0, 2, 0x40, 0x01]); // VPS
        h.extend([0xA1, 0, 2, 0, 2, 0x42, 0x01, 0, 1, 0x44]); // SPS, PPS(ish)
        assert_eq!(
            hvcc_to_annexb(&h).unwrap(),
            vec![0, 0, 0, 1, 0x40, 1, 0, 0, 0, 1, 0x42, 1, 0, 0, 0, 1, 0x44]
        );
        for n in 0..h.len() {
            assert!(hvcc_to_annexb(&h[..n]).is_err(), "{n}");
        }
    }
}
