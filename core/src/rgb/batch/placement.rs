//! Where a camera's frame lands in its output image ([`Placement`]), in integers so that the
//! host, the kernel and the caller who maps detections back agree exactly.
//!
//! Letterbox, for a `w` x `h` frame in a `W` x `H` image: when `W/w <= H/h` (compared as
//! `W·h <= H·w`, exactly) the frame fills the width, `content_width = W` and
//! `content_height = round(h·W/w)` (halves up, computed in integers, at least 1); otherwise
//! it fills the height the same way. The content is centred with the offsets rounded down:
//! `offset_x = floor((W - content_width) / 2)`, so an odd border puts its extra pixel on the
//! right (bottom). Stretch: the content is the whole image, offsets 0.
//!
//! The content box is resized from the whole frame, as `torch.nn.functional.interpolate(
//! frame, size=(content_height, content_width), mode="bilinear", align_corners=False)` does:
//! output pixel `X` of the box reads source coordinate `(X + 0.5) · (w / content_width) -
//! 0.5`, which is the linear map `x = (X + 0.5 - 0.5) / scale_x` between pixel *edges*
//! (`scale_x = content_width / w`). A box `[x0, x1)` in output pixels is therefore
//! `[(x0 - offset_x) / scale_x, (x1 - offset_x) / scale_x)` in source pixels
//! ([`Placement::to_source`]).

use super::spec::{BatchSpec, Resize};

/// How a camera's source pixels map into its output image: `dst = src · scale + offset` per
/// axis, in edge coordinates (pixel `i` spans `[i, i + 1)`), inside the content box
/// `[offset, offset + content)`; outside it the image holds the pad colour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    /// Output pixels per source pixel, horizontally (`content_width / source width`).
    pub scale_x: f32,
    /// Output pixels per source pixel, vertically (`content_height / source height`).
    pub scale_y: f32,
    /// Left edge of the content box in the output image (a whole number of pixels).
    pub offset_x: f32,
    /// Top edge of the content box in the output image (a whole number of pixels).
    pub offset_y: f32,
    /// Width of the content box, in output pixels.
    pub content_width: u32,
    /// Height of the content box, in output pixels.
    pub content_height: u32,
}

impl Placement {
    /// The source-frame point (edge coordinates) of output point `(x, y)`: where a detection
    /// at `(x, y)` in the batch image lies in the camera's frame.
    pub fn to_source(&self, x: f32, y: f32) -> (f32, f32) {
        (
            (x - self.offset_x) / self.scale_x,
            (y - self.offset_y) / self.scale_y,
        )
    }
}

/// The content box of a `src_width` x `src_height` frame in `spec`'s image: `(x, y, width,
/// height)` in output pixels. Both source sizes must be at least 1, the spec validated.
pub(super) fn content_box(
    src_width: u32,
    src_height: u32,
    spec: &BatchSpec,
) -> (u32, u32, u32, u32) {
    let (big_w, big_h) = (u64::from(spec.width), u64::from(spec.height));
    let (w, h) = (u64::from(src_width.max(1)), u64::from(src_height.max(1)));
    let (cw, ch) = match spec.resize {
        Resize::Stretch => (big_w, big_h),
        // round(a·B/b) with halves up: floor((2·a·B + b) / (2·b)); at most 16384^2·2: no
        // overflow in u64.
        Resize::Letterbox if big_w * h <= big_h * w => {
            (big_w, ((2 * h * big_w + w) / (2 * w)).clamp(1, big_h))
        }
        Resize::Letterbox => (((2 * w * big_h + h) / (2 * h)).clamp(1, big_w), big_h),
    };
    (
        ((big_w - cw) / 2) as u32,
        ((big_h - ch) / 2) as u32,
        cw as u32,
        ch as u32,
    )
}

/// Where a `src_width` x `src_height` frame lands in `spec`'s image (module documentation).
/// A zero source size counts as 1.
pub fn placement(src_width: u32, src_height: u32, spec: &BatchSpec) -> Placement {
    let (x, y, cw, ch) = content_box(src_width, src_height, spec);
    Placement {
        scale_x: (f64::from(cw) / f64::from(src_width.max(1))) as f32,
        scale_y: (f64::from(ch) / f64::from(src_height.max(1))) as f32,
        offset_x: x as f32,
        offset_y: y as f32,
        content_width: cw,
        content_height: ch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rgb::spec::{RgbDtype, RgbLayout};

    fn spec(width: u32, height: u32, resize: Resize) -> BatchSpec {
        BatchSpec {
            width,
            height,
            dtype: RgbDtype::F32,
            layout: RgbLayout::Chw,
            resize,
            pad: [0.0; 3],
            normalize: None,
        }
    }

    #[test]
    fn letterbox_keeps_the_aspect_and_centres() {
        let sq = spec(640, 640, Resize::Letterbox);
        // (source, content box): landscape, portrait, odd sizes, a single pixel, a frame
        // smaller than the image (scaled up), a border of odd width (extra pixel right/bottom),
        // a sliver that rounds to 0 rows (kept at 1), the same aspect (no border).
        for ((w, h), want) in [
            ((1920, 1080), (0, 140, 640, 360)),
            ((1080, 1920), (140, 0, 360, 640)),
            ((1279, 719), (0, 140, 640, 360)),
            ((1, 1), (0, 0, 640, 640)),
            ((320, 240), (0, 80, 640, 480)),
            ((100, 30), (0, 224, 640, 192)),
            ((16384, 1), (0, 319, 640, 1)),
            ((1, 16384), (319, 0, 1, 640)),
            ((333, 333), (0, 0, 640, 640)),
        ] {
            assert_eq!(content_box(w, h, &sq), want, "{w}x{h}");
        }
        // Odd image sizes and a non-square image: 100x30 into 64x63: 19.2 rows -> 19,
        // border 44 -> 22 above, 22 below; 7x5 into 9x9: 6.43 -> 6, (9-6)/2 = 1.
        assert_eq!(
            content_box(100, 30, &spec(64, 63, Resize::Letterbox)),
            (0, 22, 64, 19)
        );
        assert_eq!(
            content_box(7, 5, &spec(9, 9, Resize::Letterbox)),
            (0, 1, 9, 6)
        );
        // 2x1 into 3x3: 1.5 rows round half up to 2; (3-2)/2 = 0: the extra row at the bottom.
        assert_eq!(
            content_box(2, 1, &spec(3, 3, Resize::Letterbox)),
            (0, 0, 3, 2)
        );
        // Output larger than the input on both axes, tall image: 4x2 into 10x100 fills width.
        assert_eq!(
            content_box(4, 2, &spec(10, 100, Resize::Letterbox)),
            (0, 47, 10, 5)
        );
    }

    #[test]
    fn stretch_fills_the_image() {
        for (w, h) in [(1920, 1080), (1, 1), (7, 3000)] {
            assert_eq!(
                content_box(w, h, &spec(640, 384, Resize::Stretch)),
                (0, 0, 640, 384)
            );
        }
    }

    #[test]
    fn placement_maps_boxes_back_to_source_pixels() {
        let p = placement(1920, 1080, &spec(640, 640, Resize::Letterbox));
        assert_eq!((p.offset_x, p.offset_y), (0.0, 140.0));
        assert_eq!((p.content_width, p.content_height), (640, 360));
        assert_eq!((p.scale_x, p.scale_y), (1.0 / 3.0, 1.0 / 3.0));
        // The content box's corners are the frame's corners; its centre the frame's centre.
        assert_eq!(p.to_source(0.0, 140.0), (0.0, 0.0));
        let (x, y) = p.to_source(640.0, 500.0);
        assert!(
            (x - 1920.0).abs() < 1e-3 && (y - 1080.0).abs() < 1e-3,
            "{x} {y}"
        );
        let (x, y) = p.to_source(320.0, 320.0);
        assert!(
            (x - 960.0).abs() < 1e-3 && (y - 540.0).abs() < 1e-3,
            "{x} {y}"
        );
        // Stretch: per-axis scales.
        let p = placement(1280, 720, &spec(640, 640, Resize::Stretch));
        assert_eq!((p.scale_x, p.scale_y), (0.5, 640.0 / 720.0));
        let (x, y) = p.to_source(640.0, 640.0);
        assert!(x == 1280.0 && (y - 720.0).abs() < 1e-3, "{x} {y}");
    }
}
