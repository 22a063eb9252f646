//! Plane geometry of a frame inside one slot allocation (R17).
//!
//! The publisher chooses pitches; subscribers recompute the geometry from the `FrameMeta`
//! they receive and refuse any meta whose pitches or sizes do not add up, so a hostile
//! HELLO_RESP can never make a reader index past a slot.

use crate::error::{Error, Result};
use crate::wire::frame::FrameMeta;
use crate::wire::Format;

/// Rows of every plane start on this boundary: what GPU copies and texture reads prefer
/// (the plane rule, R17, recommends multiples of 256; cudaMallocPitch uses 512 on current
/// GPUs, 256 divides it).
pub const PITCH_ALIGNMENT: u32 = 256;

/// Largest width or height accepted (beyond 16K there is no video hardware to feed).
pub const MAX_DIMENSION: u32 = 16384;
/// How much longer than a row a pitch may be. Pitches are alignment, not storage: a peer's
/// pitch far beyond its row (2^21 bytes for a 16384-row frame is a 32 GiB "frame") can only
/// be an attack or a bug, and would make a COPY reader allocate without bound.
pub const MAX_PITCH_SLACK: u32 = 4096;

/// One plane of a frame: where it starts in the slot and how it is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plane {
    /// Byte offset from the start of the slot.
    pub offset: usize,
    /// Bytes between the starts of two rows.
    pub pitch: usize,
    /// Bytes of image data in one row (<= pitch).
    pub row_bytes: usize,
    /// Number of rows.
    pub rows: usize,
}

impl Plane {
    /// The bytes a buffer spans that holds this plane's rows `stride` bytes apart (the last
    /// row only `row_bytes` long), or why no buffer can: a stride below `row_bytes`, or a
    /// span past what the address space holds (a caller's stride is not trusted).
    pub fn span_at(&self, stride: usize) -> Result<usize> {
        if stride < self.row_bytes {
            return Err(Error::invalid(format!(
                "stride {stride} is below the plane's {} bytes of a row",
                self.row_bytes
            )));
        }
        self.rows
            .saturating_sub(1)
            .checked_mul(stride)
            .and_then(|n| n.checked_add(self.row_bytes))
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "stride {stride}: {} rows at this stride do not fit in memory",
                    self.rows
                ))
            })
    }

    /// The row pitch (bytes) of a strided array (torch, CuPy, NumPy, DLPack) that holds this
    /// plane: `shape` with the rows first, `byte_strides` per axis (`None`: C-contiguous),
    /// elements of `itemsize` bytes. The array must have this plane's rows, each of
    /// `row_bytes` bytes, dense within a row (an NV12 chroma plane may be `[rows, pairs, 2]`);
    /// the row stride is free. `Err` says what does not fit.
    pub fn pitch_of_array(
        &self,
        shape: &[i64],
        byte_strides: Option<&[i64]>,
        itemsize: usize,
    ) -> std::result::Result<usize, String> {
        if shape.is_empty() || shape.iter().any(|&d| d < 0) {
            return Err(format!("shape {shape:?} is not an array of rows"));
        }
        let rows = shape[0] as usize;
        let row_bytes = shape[1..].iter().product::<i64>() as usize * itemsize;
        if rows != self.rows || row_bytes != self.row_bytes {
            return Err(format!(
                "shape {shape:?} of {itemsize}-byte elements is {rows} rows of {row_bytes} \
                 bytes; the plane has {} rows of {} bytes",
                self.rows, self.row_bytes
            ));
        }
        let Some(strides) = byte_strides else {
            return Ok(row_bytes);
        };
        if strides.len() != shape.len() {
            return Err(format!(
                "{} strides for {} axes",
                strides.len(),
                shape.len()
            ));
        }
        // Within a row, each axis of more than one element steps by the bytes of the later
        // axes (C order, dense); an axis of one element has no step to check.
        let mut dense = itemsize as i64;
        for axis in (1..shape.len()).rev() {
            if shape[axis] > 1 && strides[axis] != dense {
                return Err(format!(
                    "byte strides {strides:?} are not dense within a row (contiguous rows \
                     needed, e.g. .contiguous())"
                ));
            }
            dense *= shape[axis];
        }
        let pitch = if rows <= 1 {
            row_bytes as i64
        } else {
            strides[0]
        };
        if pitch < row_bytes as i64 {
            return Err(format!(
                "row stride {pitch} is below the row's {row_bytes} bytes"
            ));
        }
        Ok(pitch as usize)
    }
}

/// The geometry of one frame: up to three planes, contiguous in one allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameGeometry {
    /// Pixel format.
    pub format: Format,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Bytes between rows of the luma (or only) plane.
    pub pitch_y: u32,
    /// Bytes between rows of the chroma planes (0 when there are none).
    pub pitch_uv: u32,
    planes: [Plane; 3],
    plane_count: usize,
    /// Bytes of all planes together (the end of the last plane's last row).
    pub frame_size: usize,
}

/// How a format splits into planes: bytes per sample group and chroma subsampling.
struct FormatShape {
    /// Bytes per pixel of plane 0.
    luma_bytes: usize,
    /// Number of chroma planes after plane 0 (0, 1 interleaved, or 2 separate).
    chroma_planes: usize,
    /// Bytes of a chroma row per chroma sample position.
    chroma_bytes: usize,
    sub_x: bool,
    sub_y: bool,
    bits_per_pixel: u32,
}

fn shape(format: Format) -> Option<FormatShape> {
    let s = |luma_bytes, chroma_planes, chroma_bytes, sub, bits_per_pixel| FormatShape {
        luma_bytes,
        chroma_planes,
        chroma_bytes,
        sub_x: sub,
        sub_y: sub,
        bits_per_pixel,
    };
    Some(match format {
        Format::None => return None,
        // Interleaved UV: one chroma plane with 2 samples per chroma position.
        Format::Nv12 => s(1, 1, 2, true, 12),
        Format::P010 | Format::P016 => s(2, 1, 4, true, 24),
        Format::Yuv420p => s(1, 2, 1, true, 12),
        Format::Yuv444p => s(1, 2, 1, false, 24),
        Format::Rgba | Format::Bgra => s(4, 0, 0, false, 32),
    })
}

fn align_up(value: usize, alignment: usize) -> usize {
    value.div_ceil(alignment) * alignment
}

impl FrameGeometry {
    /// The geometry the publisher uses: pitches rounded up to [`PITCH_ALIGNMENT`].
    pub fn new(format: Format, width: u32, height: u32) -> Result<FrameGeometry> {
        let sh = shape(format).ok_or_else(|| Error::invalid("frame format NONE has no layout"))?;
        check_dimensions(width, height)?;
        let (luma_row, chroma_row) = row_bytes(&sh, width);
        let pitch_y = align_up(luma_row, PITCH_ALIGNMENT as usize) as u32;
        let pitch_uv = if sh.chroma_planes == 0 {
            0
        } else {
            align_up(chroma_row, PITCH_ALIGNMENT as usize) as u32
        };
        FrameGeometry::with_pitches(format, width, height, pitch_y, pitch_uv)
    }

    /// The geometry for given pitches, refused when a pitch is shorter than a row.
    pub fn with_pitches(
        format: Format,
        width: u32,
        height: u32,
        pitch_y: u32,
        pitch_uv: u32,
    ) -> Result<FrameGeometry> {
        let sh = shape(format).ok_or_else(|| Error::invalid("frame format NONE has no layout"))?;
        check_dimensions(width, height)?;
        let (luma_row, chroma_row) = row_bytes(&sh, width);
        if (pitch_y as usize) < luma_row {
            return Err(Error::new(
                crate::ErrorCode::Format,
                format!("pitch_y {pitch_y} is shorter than a {} row of width {width} ({luma_row} bytes)", format.name()),
            ));
        }
        if pitch_y as usize > luma_row + MAX_PITCH_SLACK as usize
            || (sh.chroma_planes > 0 && pitch_uv as usize > chroma_row + MAX_PITCH_SLACK as usize)
        {
            return Err(Error::new(
                crate::ErrorCode::Format,
                format!(
                    "pitches {pitch_y}/{pitch_uv} exceed the rows of a {width}-wide {} frame \
                     ({luma_row}/{chroma_row} bytes) by more than {MAX_PITCH_SLACK}",
                    format.name()
                ),
            ));
        }
        if sh.chroma_planes == 0 && pitch_uv != 0 {
            return Err(Error::new(
                crate::ErrorCode::Format,
                format!("pitch_uv must be 0 for packed format {}", format.name()),
            ));
        }
        if sh.chroma_planes > 0 && (pitch_uv as usize) < chroma_row {
            return Err(Error::new(
                crate::ErrorCode::Format,
                format!("pitch_uv {pitch_uv} is shorter than a chroma row ({chroma_row} bytes)"),
            ));
        }
        let height_us = height as usize;
        let chroma_rows = if sh.sub_y {
            height_us.div_ceil(2)
        } else {
            height_us
        };
        let mut planes = [Plane {
            offset: 0,
            pitch: 0,
            row_bytes: 0,
            rows: 0,
        }; 3];
        planes[0] = Plane {
            offset: 0,
            pitch: pitch_y as usize,
            row_bytes: luma_row,
            rows: height_us,
        };
        let mut offset = pitch_y as usize * height_us;
        for plane in planes.iter_mut().skip(1).take(sh.chroma_planes) {
            *plane = Plane {
                offset,
                pitch: pitch_uv as usize,
                row_bytes: chroma_row,
                rows: chroma_rows,
            };
            offset += pitch_uv as usize * chroma_rows;
        }
        Ok(FrameGeometry {
            format,
            width,
            height,
            pitch_y,
            pitch_uv,
            planes,
            plane_count: 1 + sh.chroma_planes,
            frame_size: offset,
        })
    }

    /// Rebuild and verify the geometry a peer announced in its frame meta.
    pub fn from_meta(meta: &FrameMeta) -> Result<FrameGeometry> {
        let format = Format::from_u32(meta.format).ok_or_else(|| {
            Error::new(
                crate::ErrorCode::Format,
                format!("unknown frame format {}", meta.format),
            )
        })?;
        let geometry = FrameGeometry::with_pitches(
            format,
            meta.width,
            meta.height,
            meta.pitch_y,
            meta.pitch_uv,
        )?;
        if geometry.frame_size as u64 != meta.frame_size_bytes {
            return Err(Error::new(
                crate::ErrorCode::Format,
                format!(
                    "frame_size_bytes {} does not match the planes of a {}x{} {} frame ({} bytes)",
                    meta.frame_size_bytes,
                    meta.width,
                    meta.height,
                    format.name(),
                    geometry.frame_size
                ),
            ));
        }
        Ok(geometry)
    }

    /// The frame meta that describes this geometry (§2.1).
    pub fn to_meta(&self) -> FrameMeta {
        FrameMeta {
            format: self.format as u32,
            width: self.width,
            height: self.height,
            pitch_y: self.pitch_y,
            pitch_uv: self.pitch_uv,
            bits_per_pixel: shape(self.format).map_or(0, |s| s.bits_per_pixel),
            frame_size_bytes: self.frame_size as u64,
            reserved: [0; 32],
        }
    }

    /// The planes of the frame (one to three), in order.
    pub fn planes(&self) -> &[Plane] {
        &self.planes[..self.plane_count]
    }
}

fn check_dimensions(width: u32, height: u32) -> Result<()> {
    if width == 0 || height == 0 || width > MAX_DIMENSION || height > MAX_DIMENSION {
        return Err(Error::new(
            crate::ErrorCode::Format,
            format!("frame size {width}x{height} is outside 1..={MAX_DIMENSION}"),
        ));
    }
    Ok(())
}

fn row_bytes(sh: &FormatShape, width: u32) -> (usize, usize) {
    let w = width as usize;
    let chroma_w = if sh.sub_x { w.div_ceil(2) } else { w };
    (w * sh.luma_bytes, chroma_w * sh.chroma_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pitch_of_array_takes_any_row_stride_but_dense_rows_only() {
        let p = Plane {
            offset: 0,
            pitch: 256,
            row_bytes: 8,
            rows: 4,
        };
        assert_eq!(p.pitch_of_array(&[4, 8], None, 1), Ok(8));
        assert_eq!(p.pitch_of_array(&[4, 8], Some(&[64, 1]), 1), Ok(64));
        // NV12 chroma as [rows, pairs, 2]; uint16 rows
        assert_eq!(p.pitch_of_array(&[4, 4, 2], Some(&[32, 2, 1]), 1), Ok(32));
        assert_eq!(p.pitch_of_array(&[4, 4], Some(&[32, 2]), 2), Ok(32));
        // a single row: its stride is irrelevant
        let one = Plane { rows: 1, ..p };
        assert_eq!(one.pitch_of_array(&[1, 8], Some(&[0, 1]), 1), Ok(8));
        // a hole inside a row, overlapping rows, wrong geometry, no axes, bad stride count
        assert!(p.pitch_of_array(&[4, 8], Some(&[64, 2]), 1).is_err());
        assert!(p.pitch_of_array(&[4, 8], Some(&[4, 1]), 1).is_err());
        assert!(p.pitch_of_array(&[5, 8], None, 1).is_err());
        assert!(p.pitch_of_array(&[4, 4], None, 1).is_err());
        assert!(p.pitch_of_array(&[], None, 1).is_err());
        assert!(p.pitch_of_array(&[4, 8], Some(&[8]), 1).is_err());
        assert!(p.pitch_of_array(&[-4, 8], None, 1).is_err());
    }

    /// Finding (trust boundary): a hostile publisher announced pitch 2^21 with height 16384;
    /// every check passed and a COPY reader aborted allocating 51 539 607 552 bytes.
    #[test]
    fn pitches_far_beyond_a_row_are_refused() {
        let e = FrameGeometry::with_pitches(Format::Nv12, 64, 16384, 1 << 21, 1 << 21).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::Format);
        let e = FrameGeometry::with_pitches(Format::Nv12, 64, 16, 256, 1 << 21).unwrap_err();
        assert_eq!(e.code(), crate::ErrorCode::Format);
        // Generous alignment is fine; the largest frame stays bounded.
        FrameGeometry::with_pitches(Format::Nv12, 64, 16, 64 + 4096, 64 + 4096).unwrap();
        let big = FrameGeometry::with_pitches(
            Format::Rgba,
            MAX_DIMENSION,
            MAX_DIMENSION,
            MAX_DIMENSION * 4 + MAX_PITCH_SLACK,
            0,
        )
        .unwrap();
        assert!(big.frame_size <= 1_250 << 20, "{}", big.frame_size);
    }

    #[test]
    fn nv12_1080p_follows_r17() {
        let l = FrameGeometry::new(Format::Nv12, 1920, 1080).unwrap();
        assert_eq!(l.pitch_y, 2048);
        assert_eq!(l.pitch_uv, 2048);
        let p = l.planes();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].offset, 2048 * 1080);
        assert_eq!(p[1].rows, 540);
        assert_eq!(l.frame_size, 2048 * 1080 + 2048 * 540);
    }

    #[test]
    fn yuv420p_odd_size_rounds_chroma_up() {
        let l = FrameGeometry::new(Format::Yuv420p, 33, 17).unwrap();
        let p = l.planes();
        assert_eq!(p.len(), 3);
        assert_eq!(p[1].row_bytes, 17);
        assert_eq!(p[1].rows, 9);
        assert_eq!(p[2].offset, p[1].offset + 256 * 9);
    }

    #[test]
    fn every_format_round_trips_through_meta() {
        for f in Format::ALL.into_iter().skip(1) {
            let l = FrameGeometry::new(f, 640, 360).unwrap();
            assert_eq!(FrameGeometry::from_meta(&l.to_meta()).unwrap(), l);
        }
    }

    #[test]
    fn hostile_meta_is_refused() {
        let mut m = FrameGeometry::new(Format::Nv12, 64, 64).unwrap().to_meta();
        m.frame_size_bytes += 1;
        assert!(FrameGeometry::from_meta(&m).is_err());
        let mut m = FrameGeometry::new(Format::Nv12, 64, 64).unwrap().to_meta();
        m.pitch_y = 10;
        assert!(FrameGeometry::from_meta(&m).is_err());
        let mut m = FrameGeometry::new(Format::Rgba, 64, 64).unwrap().to_meta();
        m.pitch_uv = 4;
        assert!(FrameGeometry::from_meta(&m).is_err());
        m.format = 99;
        assert!(FrameGeometry::from_meta(&m).is_err());
        assert!(FrameGeometry::new(Format::Nv12, 0, 64).is_err());
        assert!(FrameGeometry::new(Format::Nv12, 64, 100_000).is_err());
    }
}
