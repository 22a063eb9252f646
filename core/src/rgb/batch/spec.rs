//! What a batched conversion produces ([`BatchSpec`]): the size, element type and order of
//! the output images, how each camera's frame is fitted into them ([`Resize`]) and the
//! optional per-channel normalisation ([`Normalize`]).

use crate::error::{Error, Result};
use crate::format::MAX_DIMENSION;
use crate::rgb::spec::{RgbDtype, RgbLayout};

/// The most cameras one batch holds (the kernel's grid spans them in its third dimension;
/// the per-camera parameters of a batch stay a few hundred KiB).
pub const MAX_BATCH_CAMERAS: usize = 1024;

/// How a camera's frame is fitted into the output image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// Keep the aspect ratio: the frame is scaled by `min(W/w, H/h)`, centred, and the rest
    /// of the image is filled with [`BatchSpec::pad`] (`placement` gives the exact rounding).
    Letterbox,
    /// Scale each axis on its own to fill the whole image (the aspect ratio changes).
    Stretch,
}

/// Per-channel normalisation after the resize: `v' = (v - mean) / std`, with `v` in `0..=1`
/// (ImageNet: mean `[0.485, 0.456, 0.406]`, std `[0.229, 0.224, 0.225]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    /// Subtracted from R, G, B.
    pub mean: [f32; 3],
    /// R, G, B are divided by it (finite, above zero).
    pub std: [f32; 3],
}

/// What a batched conversion produces: `N` images of `width` x `height` (one per camera),
/// dense, `[N][3][H][W]` ([`RgbLayout::Chw`]) or `[N][H][W][3]` ([`RgbLayout::Hwc`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchSpec {
    /// Width of each output image, in pixels.
    pub width: u32,
    /// Height of each output image, in pixels.
    pub height: u32,
    /// Element type of the output. `uint8` holds `0..=255` and cannot be normalised.
    pub dtype: RgbDtype,
    /// Channel order of each image.
    pub layout: RgbLayout,
    /// How each frame is fitted into its image.
    pub resize: Resize,
    /// The fill colour of the letterbox borders and of cameras without a frame: R, G, B in
    /// `0..=1`, in the units of the converted pixels *before* normalisation, so it is
    /// normalised and stored exactly like a pixel of that colour (YOLO's grey is
    /// `[114.0 / 255.0; 3]`).
    pub pad: [f32; 3],
    /// Per-channel normalisation, if any (floating-point outputs only).
    pub normalize: Option<Normalize>,
}

impl BatchSpec {
    /// The spec, or why no batch can be made with it: an image size outside
    /// `1..=16384`, a pad colour outside `0..=1`, a mean that is not finite, a std that is not
    /// finite and above zero, or normalisation into `uint8` (normalised values leave `0..=1`).
    pub fn validate(&self) -> Result<()> {
        if self.width == 0
            || self.height == 0
            || self.width > MAX_DIMENSION
            || self.height > MAX_DIMENSION
        {
            return Err(Error::invalid(format!(
                "batch image size {}x{} is outside 1..={MAX_DIMENSION}",
                self.width, self.height
            )));
        }
        let pad = self.pad;
        if !pad.iter().all(|v| (0.0..=1.0).contains(v)) {
            return Err(Error::invalid(format!(
                "pad colour {pad:?} is outside 0..=1 (give it in the units of the converted \
                 pixels, before normalisation: 114 of 255 is 0.447)"
            )));
        }
        if let Some(n) = &self.normalize {
            if self.dtype == RgbDtype::U8 {
                return Err(Error::invalid(
                    "normalised values leave 0..=1, which uint8 cannot hold: use float16 or \
                     float32 with mean/std",
                ));
            }
            if !n.mean.iter().all(|v| v.is_finite()) {
                return Err(Error::invalid(format!(
                    "normalisation mean {:?} is not finite",
                    n.mean
                )));
            }
            if !n.std.iter().all(|v| v.is_finite() && *v > 0.0) {
                return Err(Error::invalid(format!(
                    "normalisation std {:?} must be finite and above zero",
                    n.std
                )));
            }
        }
        Ok(())
    }

    /// Elements of one camera's image (`3 * width * height`).
    pub fn image_elements(&self) -> usize {
        3 * self.width as usize * self.height as usize
    }

    /// Bytes of one camera's image.
    pub fn image_bytes(&self) -> usize {
        self.image_elements() * self.dtype.size()
    }
}

/// Bytes of the output of a batch of `cameras` images: `cameras * 3 * height * width *`
/// the element size. Saturates rather than overflows (a batch that large is refused by
/// the conversions anyway).
pub fn batch_bytes(cameras: usize, spec: &BatchSpec) -> usize {
    cameras.saturating_mul(spec.image_bytes())
}

/// Checks the number of cameras of a batch: at least one, at most [`MAX_BATCH_CAMERAS`].
pub(super) fn check_cameras(cameras: usize) -> Result<()> {
    if cameras == 0 || cameras > MAX_BATCH_CAMERAS {
        return Err(Error::invalid(format!(
            "a batch of {cameras} cameras (1..={MAX_BATCH_CAMERAS} are possible)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> BatchSpec {
        BatchSpec {
            width: 640,
            height: 640,
            dtype: RgbDtype::F16,
            layout: RgbLayout::Chw,
            resize: Resize::Letterbox,
            pad: [0.5; 3],
            normalize: None,
        }
    }

    #[test]
    fn sizes_follow_the_dtype() {
        assert_eq!(batch_bytes(16, &spec()), 16 * 3 * 640 * 640 * 2);
        let u8 = BatchSpec {
            dtype: RgbDtype::U8,
            width: 3,
            height: 5,
            ..spec()
        };
        assert_eq!(batch_bytes(2, &u8), 2 * 3 * 15);
        assert_eq!(batch_bytes(usize::MAX, &spec()), usize::MAX);
    }

    #[test]
    fn invalid_specs_are_refused_with_the_reason() {
        spec().validate().unwrap();
        let bad = |s: BatchSpec, words: &str| {
            let e = s.validate().unwrap_err();
            assert!(e.to_string().contains(words), "{e} lacks {words:?}");
        };
        bad(BatchSpec { width: 0, ..spec() }, "outside 1..=16384");
        bad(
            BatchSpec {
                height: 16385,
                ..spec()
            },
            "outside 1..=16384",
        );
        bad(
            BatchSpec {
                resize: Resize::Stretch,
                pad: [0.0, 114.0, 0.0],
                ..spec()
            },
            "pad colour",
        );
        bad(
            BatchSpec {
                pad: [f32::NAN, 0.0, 0.0],
                ..spec()
            },
            "pad colour",
        );
        let n = Normalize {
            mean: [0.485, 0.456, 0.406],
            std: [0.229, 0.224, 0.225],
        };
        BatchSpec {
            normalize: Some(n),
            ..spec()
        }
        .validate()
        .unwrap();
        bad(
            BatchSpec {
                normalize: Some(n),
                dtype: RgbDtype::U8,
                ..spec()
            },
            "uint8 cannot hold",
        );
        for std in [[0.0, 1.0, 1.0], [1.0, -1.0, 1.0], [1.0, 1.0, f32::INFINITY]] {
            bad(
                BatchSpec {
                    normalize: Some(Normalize { std, ..n }),
                    ..spec()
                },
                "std",
            );
        }
        bad(
            BatchSpec {
                normalize: Some(Normalize {
                    mean: [f32::NAN; 3],
                    ..n
                }),
                ..spec()
            },
            "mean",
        );
        assert!(check_cameras(0).is_err());
        assert!(check_cameras(MAX_BATCH_CAMERAS + 1).is_err());
        check_cameras(MAX_BATCH_CAMERAS).unwrap();
    }
}
