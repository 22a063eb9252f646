//! Output elements, stored exactly as the kernel (`kernel.cu`) stores them: `uint8` rounded
//! to nearest, IEEE binary16 rounded to nearest even.

/// A `uint8` output element from an unclamped value, as the kernel's `cf_store`:
/// `floor(clamp(v, 0, 1) · 255 + 0.5)`. `max`/`min` instead of `clamp` turn NaN into 0 (what
/// `clamp` then `as u8` give it too); the sum is at least 0.5, so truncating it (one vector
/// instruction) is the floor.
#[inline(always)]
#[allow(clippy::manual_clamp)] // clamp keeps NaN, which the SAFETY argument below excludes
pub(super) fn store_u8(value: f32) -> u8 {
    let v = value.max(0.0).min(1.0) * 255.0 + 0.5;
    // SAFETY: `v` is finite and in 0.5..=255.5 (max/min never return NaN): it fits an i32.
    unsafe { v.to_int_unchecked::<i32>() as u8 }
}

/// IEEE 754 binary16 of `v`, rounded to nearest even (PTX `cvt.rn.f16.f32`). Only values in
/// [0, 1] reach it, but it is exact for every finite input (subnormals, overflow to infinity).
pub(super) fn f32_to_f16(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    if exp == 0xff {
        // Infinity or NaN (a quiet NaN keeps a mantissa bit).
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    // The significand with its implicit bit (24 bits), and how far to shift it down to the
    // 11 bits of a normal half (or fewer for a subnormal).
    let (sig, shift) = if e <= 0 {
        if e < -10 {
            return sign; // below half the smallest subnormal: rounds to zero
        }
        (mant | 0x80_0000, (14 - e) as u32)
    } else {
        (mant | 0x80_0000, 13)
    };
    let mut half = sig >> shift;
    let rest = sig & ((1 << shift) - 1);
    let halfway = 1 << (shift - 1);
    if rest > halfway || (rest == halfway && half & 1 == 1) {
        half += 1;
    }
    // For normals `half` holds the implicit bit at bit 10: adding the biased exponent above
    // it carries a rounding overflow into the exponent, as IEEE wants.
    let value = if e <= 0 {
        half
    } else {
        ((e as u32 - 1) << 10) + half
    };
    sign | value as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_conversion_matches_known_values() {
        for (v, h) in [
            (0.0f32, 0x0000u16),
            (1.0, 0x3c00),
            (0.5, 0x3800),
            (-2.0, 0xc000),
            (65504.0, 0x7bff),
            (65520.0, 0x7c00), // rounds up to infinity
            (1.0 / 3.0, 0x3555),
            (6.103_515_6e-5, 0x0400),     // smallest normal
            (5.960_464_5e-8, 0x0001),     // smallest subnormal
            (2.980_232_2e-8, 0x0000),     // exactly half of it: ties to even (0)
            (1.0 + 1.0 / 2048.0, 0x3c00), // halfway between 1 and the next half: even
            (1.0 + 3.0 / 2048.0, 0x3c02), // halfway, odd below: up
            (f32::INFINITY, 0x7c00),
        ] {
            assert_eq!(f32_to_f16(v), h, "{v}");
        }
        assert_eq!(f32_to_f16(f32::NAN) & 0x7e00, 0x7e00);
    }
}
