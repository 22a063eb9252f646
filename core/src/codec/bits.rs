//! Bit-level reading of codec headers: fixed-width fields, Exp-Golomb codes (H.264/HEVC) and
//! AV1's `uvlc`, over a byte slice, with every read bounds-checked.

use crate::error::{Error, Result};

/// A big-endian bit reader over `data`. Every read past the end is an error, never a panic.
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    /// Position in bits from the start of `data`.
    pos: usize,
    what: &'static str,
}

impl<'a> BitReader<'a> {
    /// `what` names the structure being read, for error messages ("H.264 SPS").
    pub(crate) fn new(data: &'a [u8], what: &'static str) -> BitReader<'a> {
        BitReader { data, pos: 0, what }
    }

    fn truncated(&self) -> Error {
        Error::invalid(format!(
            "{} is truncated ({} bytes; a field at bit {} runs past the end)",
            self.what,
            self.data.len(),
            self.pos
        ))
    }

    /// Bits left to read.
    pub(crate) fn remaining(&self) -> usize {
        (self.data.len() * 8).saturating_sub(self.pos)
    }

    /// One bit.
    pub(crate) fn bit(&mut self) -> Result<u32> {
        let byte = *self
            .data
            .get(self.pos / 8)
            .ok_or_else(|| self.truncated())?;
        let v = (byte >> (7 - (self.pos % 8))) & 1;
        self.pos += 1;
        Ok(u32::from(v))
    }

    pub(crate) fn flag(&mut self) -> Result<bool> {
        Ok(self.bit()? == 1)
    }

    /// `n` bits (0..=32) as an unsigned value, most significant first.
    pub(crate) fn bits(&mut self, n: u32) -> Result<u32> {
        debug_assert!(n <= 32);
        if self.remaining() < n as usize {
            return Err(self.truncated());
        }
        let mut v: u64 = 0;
        for _ in 0..n {
            v = (v << 1) | u64::from(self.bit()?);
        }
        Ok(v as u32)
    }

    /// Skip `n` bits.
    pub(crate) fn skip(&mut self, n: usize) -> Result<()> {
        if self.remaining() < n {
            return Err(self.truncated());
        }
        self.pos += n;
        Ok(())
    }

    /// `ue(v)`: unsigned Exp-Golomb. Values needing more than 32 leading zeros are refused.
    pub(crate) fn ue(&mut self) -> Result<u32> {
        let mut zeros = 0u32;
        while self.bit()? == 0 {
            zeros += 1;
            if zeros > 31 {
                return Err(Error::invalid(format!(
                    "{} has an Exp-Golomb code longer than 32 bits at bit {}",
                    self.what, self.pos
                )));
            }
        }
        let rest = self.bits(zeros)?;
        Ok(((1u64 << zeros) - 1 + u64::from(rest)).min(u64::from(u32::MAX)) as u32)
    }

    /// `se(v)`: signed Exp-Golomb.
    pub(crate) fn se(&mut self) -> Result<i32> {
        let k = i64::from(self.ue()?);
        let v = if k % 2 == 1 { (k + 1) / 2 } else { -(k / 2) };
        Ok(v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)
    }

    /// AV1 `uvlc()`; at least 32 leading zeros decode as `u32::MAX` (spec 4.10.3).
    pub(crate) fn uvlc(&mut self) -> Result<u32> {
        let mut zeros = 0u32;
        while self.bit()? == 0 {
            zeros += 1;
            if zeros >= 32 {
                return Ok(u32::MAX);
            }
        }
        let rest = self.bits(zeros)?;
        Ok(((1u64 << zeros) - 1 + u64::from(rest)).min(u64::from(u32::MAX)) as u32)
    }
}

/// The RBSP of a NAL unit payload: every `00 00 03` emulation-prevention byte removed.
pub(crate) fn unescape_rbsp(nal: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(nal.len());
    let mut zeros = 0usize;
    for &b in nal {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_width_fields() {
        let mut r = BitReader::new(&[0b1010_0000, 0xFF], "t");
        assert_eq!(r.bit().unwrap(), 1);
        assert_eq!(r.bits(3).unwrap(), 0b010);
        assert_eq!(r.bits(8).unwrap(), 0b0000_1111);
        assert_eq!(r.remaining(), 4);
        assert!(r.bits(5).is_err());
        assert_eq!(r.bits(4).unwrap(), 0xF);
        assert!(r.bit().is_err());
    }

    #[test]
    fn exp_golomb() {
        // 1 -> 0, 010 -> 1, 011 -> 2, 00100 -> 3, 00111 -> 6
        let mut r = BitReader::new(&[0b1010_0110, 0b0100_0011, 0b1000_0000], "t");
        assert_eq!(r.ue().unwrap(), 0);
        assert_eq!(r.ue().unwrap(), 1);
        assert_eq!(r.ue().unwrap(), 2);
        assert_eq!(r.ue().unwrap(), 3);
        assert_eq!(r.ue().unwrap(), 6);
        // se: 010 -> +1, 011 -> -1
        let mut r = BitReader::new(&[0b0100_1100], "t");
        assert_eq!(r.se().unwrap(), 1);
        assert_eq!(r.se().unwrap(), -1);
    }

    #[test]
    fn long_codes_are_refused_not_panicking() {
        let zeros = [0u8; 8];
        assert!(BitReader::new(&zeros, "t").ue().is_err());
        assert_eq!(BitReader::new(&zeros, "t").uvlc().unwrap(), u32::MAX);
        assert!(BitReader::new(&[], "t").ue().is_err());
        // 31 zeros, a one, then 31 ones: the largest accepted code.
        let mut v = vec![0u8, 0, 0, 1];
        v.extend([0xFF; 4]);
        assert_eq!(BitReader::new(&v, "t").ue().unwrap(), u32::MAX - 1);
    }

    #[test]
    fn emulation_prevention_is_removed() {
        assert_eq!(
            unescape_rbsp(&[0, 0, 3, 1, 0, 0, 3, 0, 3]),
            vec![0, 0, 1, 0, 0, 0, 3]
        );
        assert_eq!(unescape_rbsp(&[0, 3, 0, 0, 3]), vec![0, 3, 0, 0]);
    }
}
