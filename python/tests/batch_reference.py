"""A float64 NumPy reference of cuframes.Batch's fitting of a frame into its image (letterbox or
stretch, bilinear as torch.nn.functional.interpolate(mode="bilinear", align_corners=False),
pad colour, optional mean/std), written from the documented rules (core/src/rgb/batch/mod.rs,
placement.rs) and independent of cuframes' code. The input is rgb_reference.to_rgb's float64
image; the tests and the batch benchmark compare Batch's output with it."""

import numpy as np


def content_box(w, h, out_w, out_h, resize="letterbox"):
    """(x, y, width, height) of a w x h frame's pixels in an out_w x out_h image, in integers:
    the side that limits fills the image, the other is round(half up) of the scaled size,
    centred with the offsets rounded down."""
    if resize == "stretch":
        return 0, 0, out_w, out_h
    if out_w * h <= out_h * w:
        cw, ch = out_w, min(max((2 * h * out_w + w) // (2 * w), 1), out_h)
    else:
        cw, ch = min(max((2 * w * out_h + h) // (2 * h), 1), out_w), out_h
    return (out_w - cw) // 2, (out_h - ch) // 2, cw, ch


def _axis(n_out, n_in):
    """Bilinear taps along one axis: source indices i0, i1 and weights l0, l1 per output index."""
    if n_out == n_in:
        i = np.arange(n_in)
        return i, i, np.ones(n_in), np.zeros(n_in)
    s = np.maximum((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0.0)
    i0 = np.minimum(np.floor(s).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    l1 = s - i0
    return i0, i1, 1.0 - l1, l1


def fit(rgb, out_w, out_h, resize="letterbox", pad=(114 / 255,) * 3, mean=None, std=None):
    """rgb: (3, h, w) float64 in 0..1; returns (3, out_h, out_w) float64 (normalised when mean
    and std are given, else clamped to 0..1)."""
    _, h, w = rgb.shape
    x, y, cw, ch = content_box(w, h, out_w, out_h, resize)
    out = np.empty((3, out_h, out_w))
    out[:] = np.asarray(pad, np.float64).reshape(3, 1, 1)
    x0, x1, lx0, lx1 = _axis(cw, w)
    y0, y1, ly0, ly1 = _axis(ch, h)
    rows0, rows1 = rgb[:, y0, :], rgb[:, y1, :]
    top = rows0[:, :, x0] * lx0 + rows0[:, :, x1] * lx1
    bottom = rows1[:, :, x0] * lx0 + rows1[:, :, x1] * lx1
    out[:, y : y + ch, x : x + cw] = ly0[:, None] * top + ly1[:, None] * bottom
    if mean is not None:
        m = np.asarray(mean, np.float64).reshape(3, 1, 1)
        s = np.asarray(std, np.float64).reshape(3, 1, 1)
        return (out - m) / s
    return np.clip(out, 0.0, 1.0)
