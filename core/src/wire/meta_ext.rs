//! Extension (compatible) in the 32 reserved bytes of the frame meta (§2.1): the stream's
//! colour description and sample aspect ratio, and the UUID of the GPU that holds a CUDA
//! ring. The meta travels in HELLO_RESP (§3.4) and sits in the frame SHM header (0x0040), so
//! both carry it; a subscriber takes it from HELLO_RESP (the publisher's own message, which
//! no other subscriber can write).
//!
//! Peers that do not know the extension write zeros there and ignore what they read (§7.3):
//! a zero `flags` byte means "nothing recorded", and each part has its own flag bit.
//!
//! Offsets inside `FrameMeta::reserved` (the meta's 0x20; the header's 0x60):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0x00 | u8 | flags: [`EXT_COLOUR`], [`EXT_GPU_UUID`]; other bits 0 |
//! | 0x01 | u8 | colour range (`AVColorRange`: 0 unspecified, 1 limited, 2 full) |
//! | 0x02 | u8 | colour primaries (ITU-T H.273 ColourPrimaries) |
//! | 0x03 | u8 | transfer characteristics (H.273 TransferCharacteristics) |
//! | 0x04 | u8 | matrix coefficients (H.273 MatrixCoefficients) |
//! | 0x05 | u8 | chroma location (`AVChromaLocation`: 0 unspecified, 1 left, 2 center, 3 top-left, 4 top, 5 bottom-left, 6 bottom) |
//! | 0x06 | 2 | 0 |
//! | 0x08 | u32 | sample aspect ratio numerator (0 = unknown) |
//! | 0x0C | u32 | sample aspect ratio denominator |
//! | 0x10 | 16 | GPU UUID (`cuDeviceGetUuid`), when [`EXT_GPU_UUID`] is set |

use super::frame::FrameMeta;
use crate::colour::ColourInfo;

/// Flag bit: the colour fields (0x01..0x10) are recorded.
pub const EXT_COLOUR: u8 = 1 << 0;
/// Flag bit: the GPU UUID (0x10..0x20) is recorded (CUDA rings only).
pub const EXT_GPU_UUID: u8 = 1 << 1;

const FLAGS: usize = 0x00;
const RANGE: usize = 0x01;
const PRIMARIES: usize = 0x02;
const TRANSFER: usize = 0x03;
const MATRIX: usize = 0x04;
const CHROMA_LOCATION: usize = 0x05;
const SAR_NUM: usize = 0x08;
const SAR_DEN: usize = 0x0C;
const GPU_UUID: usize = 0x10;
/// Offset of the extension inside the frame meta, and so inside the SHM header.
pub const META_EXT_OFFSET: usize = core::mem::offset_of!(FrameMeta, reserved);

const _: () = assert!(GPU_UUID + 16 == 32 && META_EXT_OFFSET == 0x20);

/// What the extension of one meta says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetaExt {
    /// The stream's colour description; None when the publisher records none.
    pub colour: Option<ColourInfo>,
    /// The UUID of the publisher's GPU (CUDA rings); None when not announced.
    pub gpu_uuid: Option<[u8; 16]>,
}

impl MetaExt {
    /// Read the extension of a meta a peer sent. Fixed offsets inside a fixed 32-byte array:
    /// nothing to bounds-check beyond the type; every byte pattern gives a value (unknown
    /// flag bits are ignored, enum values are kept as numbers for the consumer to judge).
    pub fn read(meta: &FrameMeta) -> MetaExt {
        let r = &meta.reserved;
        let flags = r[FLAGS];
        let u32_at = |o: usize| u32::from_le_bytes([r[o], r[o + 1], r[o + 2], r[o + 3]]);
        let colour = (flags & EXT_COLOUR != 0).then(|| ColourInfo {
            range: r[RANGE],
            primaries: r[PRIMARIES],
            transfer: r[TRANSFER],
            matrix: r[MATRIX],
            chroma_location: r[CHROMA_LOCATION],
            sar: (u32_at(SAR_NUM), u32_at(SAR_DEN)),
        });
        let gpu_uuid = (flags & EXT_GPU_UUID != 0).then(|| {
            let mut u = [0u8; 16];
            u.copy_from_slice(&r[GPU_UUID..GPU_UUID + 16]);
            u
        });
        MetaExt { colour, gpu_uuid }
    }

    /// Write the extension into `meta.reserved` (all 32 bytes: what is not recorded is 0).
    pub fn write(&self, meta: &mut FrameMeta) {
        let r = &mut meta.reserved;
        *r = [0; 32];
        if let Some(c) = &self.colour {
            r[FLAGS] |= EXT_COLOUR;
            r[RANGE] = c.range;
            r[PRIMARIES] = c.primaries;
            r[TRANSFER] = c.transfer;
            r[MATRIX] = c.matrix;
            r[CHROMA_LOCATION] = c.chroma_location;
            r[SAR_NUM..SAR_NUM + 4].copy_from_slice(&c.sar.0.to_le_bytes());
            r[SAR_DEN..SAR_DEN + 4].copy_from_slice(&c.sar.1.to_le_bytes());
        }
        if let Some(u) = &self.gpu_uuid {
            r[FLAGS] |= EXT_GPU_UUID;
            r[GPU_UUID..GPU_UUID + 16].copy_from_slice(u);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_old_peers() {
        let mut meta = FrameMeta::default();
        assert_eq!(MetaExt::read(&meta), MetaExt::default(), "zeros = nothing");
        let ext = MetaExt {
            colour: Some(ColourInfo {
                range: 1,
                primaries: 1,
                transfer: 1,
                matrix: 1,
                chroma_location: 1,
                sar: (16, 11),
            }),
            gpu_uuid: Some([0xAB; 16]),
        };
        ext.write(&mut meta);
        assert_eq!(MetaExt::read(&meta), ext);
        assert_eq!(meta.reserved[0], EXT_COLOUR | EXT_GPU_UUID);
        assert_eq!(&meta.reserved[8..12], &16u32.to_le_bytes());
        // Only the GPU part: the colour bytes stay zero and read as absent.
        let only_gpu = MetaExt {
            colour: None,
            gpu_uuid: Some([7; 16]),
        };
        only_gpu.write(&mut meta);
        assert_eq!(MetaExt::read(&meta), only_gpu);
        assert_eq!(&meta.reserved[1..16], &[0u8; 15]);
        // Unknown flag bits from a newer peer are ignored, not an error.
        meta.reserved[0] |= 0x80;
        assert_eq!(MetaExt::read(&meta), only_gpu);
    }
}
