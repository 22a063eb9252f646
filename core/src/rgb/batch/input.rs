//! One camera's frame as a batch reads it: on the GPU ([`BatchInput`]: plane addresses) or in
//! host memory ([`HostBatchInput`]: plane slices), with the camera's own colour description.

use super::camera::CameraParams;
use super::spec::BatchSpec;
use crate::error::{Error, Result};
use crate::format::FrameGeometry;
use crate::rgb::spec::{ColourMatrix, ColourRange};

/// A camera's frame in device memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchInput {
    /// Format, size and plane pitches (a geometry made by [`FrameGeometry::new`],
    /// [`FrameGeometry::with_pitches`] or [`FrameGeometry::from_meta`]).
    pub geometry: FrameGeometry,
    /// Device address of each plane's first row, in the kernel's context (planes the
    /// format lacks: 0). A frame ring slot at `base` has its planes at `base +` the
    /// geometry's plane offsets ([`BatchInput::from_slot`]).
    pub planes: [u64; 3],
    /// The camera's YCbCr matrix (ignored for RGBA/BGRA).
    pub matrix: ColourMatrix,
    /// The camera's sample range (ignored for RGBA/BGRA).
    pub range: ColourRange,
}

impl BatchInput {
    /// The frame of one allocation at device address `base`, its planes at `geometry`'s
    /// offsets (a frame ring slot, a subscriber's COPY buffer).
    pub fn from_slot(
        base: u64,
        geometry: FrameGeometry,
        matrix: ColourMatrix,
        range: ColourRange,
    ) -> BatchInput {
        let mut planes = [0u64; 3];
        for (a, p) in planes.iter_mut().zip(geometry.planes()) {
            *a = base.wrapping_add(p.offset as u64);
        }
        BatchInput {
            geometry,
            planes,
            matrix,
            range,
        }
    }

    /// The camera's numbers for the kernel, or why this input cannot be read: a geometry
    /// that does not hold together, a format without pixels, a null address for a plane
    /// the format has.
    pub(super) fn params(&self, spec: &BatchSpec) -> Result<CameraParams> {
        let mut p = CameraParams::new(&self.geometry, self.matrix, self.range, spec)?;
        let used = self.geometry.planes().len();
        for (i, (&addr, slot)) in self.planes.iter().zip(p.plane.iter_mut()).enumerate() {
            if i < used && addr == 0 {
                return Err(Error::invalid(format!(
                    "plane {i} of a {} frame is at device address 0",
                    self.geometry.format.name()
                )));
            }
            // Unused planes are never read: 0 in the record whatever the caller passed.
            *slot = if i < used { addr } else { 0 };
        }
        Ok(p)
    }
}

/// A camera's frame in host memory: plane `i` is `planes[i]`, its rows `pitch` bytes apart
/// as the geometry says (slices of planes the format lacks are ignored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBatchInput<'a> {
    /// Format, size and plane pitches.
    pub geometry: FrameGeometry,
    /// Each plane from its first row: at least `(rows - 1) * pitch + row_bytes` bytes.
    pub planes: [&'a [u8]; 3],
    /// The camera's YCbCr matrix (ignored for RGBA/BGRA).
    pub matrix: ColourMatrix,
    /// The camera's sample range (ignored for RGBA/BGRA).
    pub range: ColourRange,
}

impl<'a> HostBatchInput<'a> {
    /// The frame laid out in `data` as `geometry` says (planes at their offsets: a host ring
    /// slot, or what [`crate::subscriber::Frame::copy_to`] writes), or why `data` cannot hold
    /// it.
    pub fn from_frame(
        data: &'a [u8],
        geometry: FrameGeometry,
        matrix: ColourMatrix,
        range: ColourRange,
    ) -> Result<HostBatchInput<'a>> {
        if data.len() < geometry.frame_size {
            return Err(Error::invalid(format!(
                "a {}x{} {} frame needs {} bytes, the buffer has {}",
                geometry.width,
                geometry.height,
                geometry.format.name(),
                geometry.frame_size,
                data.len()
            )));
        }
        let mut planes: [&'a [u8]; 3] = [&[]; 3];
        for (s, p) in planes.iter_mut().zip(geometry.planes()) {
            *s = &data[p.offset.min(data.len())..];
        }
        Ok(HostBatchInput {
            geometry,
            planes,
            matrix,
            range,
        })
    }

    /// The camera's numbers, or why this input cannot be read: what [`BatchInput`] refuses,
    /// and a plane slice too short for the plane's rows.
    pub(super) fn params(&self, spec: &BatchSpec) -> Result<CameraParams> {
        let p = CameraParams::new(&self.geometry, self.matrix, self.range, spec)?;
        for (i, (plane, data)) in self.geometry.planes().iter().zip(self.planes).enumerate() {
            let need = plane.span_at(plane.pitch)?;
            if data.len() < need {
                return Err(Error::invalid(format!(
                    "plane {i} of a {}x{} {} frame needs {need} bytes ({} rows of {} bytes, \
                     {} apart), its slice has {}",
                    self.geometry.width,
                    self.geometry.height,
                    self.geometry.format.name(),
                    plane.rows,
                    plane.row_bytes,
                    plane.pitch,
                    data.len()
                )));
            }
        }
        Ok(p)
    }
}
