"""A NumPy reference of Frame.to_rgb, written from the formulas (BT.601/709/2020 YCbCr to R'G'B'),
in float64 and independent of cuframes' own code: the tests compare to_rgb with it."""

import numpy as np

KR_KB = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722), "bt2020": (0.2627, 0.0593)}


def _chroma_full(c, h, w, sub):
    """Chroma plane (rows, cols) brought to (h, w) by repeating each sample (nearest)."""
    if sub:
        c = np.repeat(np.repeat(c, 2, axis=0), 2, axis=1)
    return c[:h, :w]


def yuv_of(fmt, planes, w, h):
    """(Y, U, V) sample arrays (float64, full resolution) and the bit depth of one frame's planes
    (plane arrays as the ring's Plane objects give them: NV12 chroma (h/2, w/2, 2))."""
    if fmt in ("nv12", "p010", "p016"):
        y = planes[0].astype(np.float64)
        uv = planes[1].astype(np.float64)
        u, v = uv[..., 0], uv[..., 1]
        bits = 8
        if fmt == "p010":
            y, u, v, bits = np.floor(y / 64), np.floor(u / 64), np.floor(v / 64), 10
        elif fmt == "p016":
            bits = 16
        return y, _chroma_full(u, h, w, True), _chroma_full(v, h, w, True), bits
    sub = fmt == "yuv420p"
    y, u, v = (p.astype(np.float64) for p in planes)
    return y, _chroma_full(u, h, w, sub), _chroma_full(v, h, w, sub), 8


def to_rgb(fmt, planes, w, h, matrix="bt709", rng="limited"):
    """R, G, B in [0, 1] as an (3, h, w) float64 array."""
    if fmt in ("rgba", "bgra"):
        px = planes[0].reshape(h, w, 4).astype(np.float64) / 255.0
        order = (0, 1, 2) if fmt == "rgba" else (2, 1, 0)
        return np.stack([px[..., i] for i in order])
    y, u, v, bits = yuv_of(fmt, planes, w, h)
    step = 2.0 ** (bits - 8)
    if rng == "limited":
        Y = (y - 16 * step) / (219 * step)
        U = (u - 128 * step) / (224 * step)
        V = (v - 128 * step) / (224 * step)
    else:
        mx = 2.0**bits - 1
        Y, U, V = y / mx, (u - 2.0 ** (bits - 1)) / mx, (v - 2.0 ** (bits - 1)) / mx
    kr, kb = KR_KB[matrix]
    kg = 1 - kr - kb
    r = Y + 2 * (1 - kr) * V
    g = Y - 2 * kb * (1 - kb) / kg * U - 2 * kr * (1 - kr) / kg * V
    b = Y + 2 * (1 - kb) * U
    return np.clip(np.stack([r, g, b]), 0.0, 1.0)


def quantise(rgb, dtype):
    """The reference in to_rgb's output type (uint8: rounded to nearest)."""
    if dtype == "uint8":
        return np.floor(rgb * 255 + 0.5).astype(np.uint8)
    return rgb.astype(dtype)


def max_abs_diff(got, want):
    return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))


def random_planes(fmt, w, h, seed):
    """Random samples for every plane of a `fmt` frame of w x h, in the shapes publish() takes
    (P010: random padding in the low 6 bits of luma, which must not matter)."""
    rng = np.random.default_rng(seed)
    cw, ch = (w + 1) // 2, (h + 1) // 2
    if fmt == "nv12":
        return [rng.integers(0, 256, (h, w), np.uint8), rng.integers(0, 256, (ch, 2 * cw), np.uint8)]
    if fmt in ("p010", "p016"):
        hi = 1024 if fmt == "p010" else 65536
        shift = 6 if fmt == "p010" else 0
        y = (rng.integers(0, hi, (h, w)) << shift).astype(np.uint16)
        uv = (rng.integers(0, hi, (ch, 2 * cw)) << shift).astype(np.uint16)
        if fmt == "p010":
            y |= rng.integers(0, 64, (h, w)).astype(np.uint16)
        return [y, uv]
    if fmt == "yuv420p":
        return [rng.integers(0, 256, (h, w), np.uint8)] + [
            rng.integers(0, 256, (ch, cw), np.uint8) for _ in range(2)
        ]
    if fmt == "yuv444p":
        return [rng.integers(0, 256, (h, w), np.uint8) for _ in range(3)]
    return [rng.integers(0, 256, (h, 4 * w), np.uint8)]
