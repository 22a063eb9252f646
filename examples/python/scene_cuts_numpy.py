"""Scene cuts and luma statistics of a host-memory cuframes ring, with NumPy only (no GPU).

    python examples/python/scene_cuts_numpy.py cam1 [--threshold 0.5] [--seconds 0] [--frames 0]

Reads the frames of the ring `cam1` from host memory, published for instance by FFmpeg:
    ffmpeg -re -i input.mp4 -vf format=nv12,hwupload_cuframes=key=cam1:memory=host:policy=strict_wait -f null -
(STRICT_WAIT: every frame reaches us, in the ring's own memory; under DROP_OLDEST frames may
be skipped and are copied out of the ring first.) NumPy is all it needs: no GPU, no torch.

For every frame it views the luma plane as a NumPy array without a copy (np.asarray on the
plane's __array_interface__, row pitch included), takes its 32-bin histogram, and compares it
with the previous frame's: half the L1 distance of the two normalised histograms is 0 for the
same picture and 1 for pictures with no luma level in common. A frame whose distance is at
least --threshold starts a new scene, printed as it is found:

    cut at frame 25 (t=1.000 s): distance 1.00, mean luma 16.0 -> 235.0

Once a second, and at the end, it prints the frame rate and the mean luma. The frame is
released as soon as its histogram is taken, so a STRICT_WAIT publisher is never held up by
the printing. The last line sums up: `frames N, cuts [25, ...]`.
"""

import argparse
import sys
import time

import numpy as np

import cuframes

BINS = 32


def luma_histogram(frame):
    """The normalised BINS-bin histogram and the mean of the frame's luma plane."""
    y = np.asarray(frame.plane(0))  # uint8 [H, W], a view of the ring's memory
    if y.dtype != np.uint8:
        y = (y >> 8).astype(np.uint8)  # P010/P016: the 8 most significant bits
    counts = np.bincount((y >> 3).ravel(), minlength=BINS)
    return counts / counts.sum(), float(y.mean())


class CutDetector:
    """Compares each frame's luma histogram with the previous one's."""

    def __init__(self, threshold):
        self.threshold = threshold
        self.previous = None
        self.previous_mean = None

    def update(self, hist, mean):
        """(distance 0..1, the previous frame's mean luma) when this frame is a cut, else None."""
        cut = None
        if self.previous is not None:
            distance = 0.5 * float(np.abs(hist - self.previous).sum())
            if distance >= self.threshold:
                cut = (distance, self.previous_mean)
        self.previous, self.previous_mean = hist, mean
        return cut


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("key", help="the ring's cuframes key")
    ap.add_argument("--threshold", type=float, default=0.5, help="histogram distance of a cut, 0..1 (default 0.5)")
    ap.add_argument("--name", default="scene-cuts", help="subscriber name shown by `cuframes stat`")
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until the stream ends)")
    ap.add_argument("--frames", type=int, default=0, help="stop after this many frames (0: until the stream ends)")
    ap.add_argument("--wait", type=float, default=10.0, help="seconds to wait for the publisher to appear")
    args = ap.parse_args(argv)

    detector = CutDetector(args.threshold)
    frames, cuts = 0, []
    luma_sum, window_frames = 0.0, 0
    start = window_start = time.monotonic()
    with cuframes.Subscriber(args.key, name=args.name, wait_publisher=args.wait) as sub:
        for frame in sub:
            if frame.memory != "host":
                sys.exit(f"{args.key} is a {frame.memory} ring; this example reads host rings")
            with frame:  # released at the end of the block: the histogram is our own copy
                hist, mean = luma_histogram(frame)
                pts_ns = frame.pts_ns
            cut = detector.update(hist, mean)
            if cut is not None:
                distance, before = cut
                t = "" if pts_ns is None else f" (t={pts_ns / 1e9:.3f} s)"
                print(f"cut at frame {frames}{t}: distance {distance:.2f}, mean luma {before:.1f} -> {mean:.1f}",
                      flush=True)
                cuts.append(frames)
            frames += 1
            luma_sum += mean
            window_frames += 1
            now = time.monotonic()
            if now - window_start >= 1.0:
                print(f"{window_frames / (now - window_start):6.1f} fps, mean luma {luma_sum / window_frames:6.1f}",
                      flush=True)
                luma_sum, window_frames, window_start = 0.0, 0, now
            if (args.frames and frames >= args.frames) or (args.seconds and now - start >= args.seconds):
                break
    if window_frames:
        print(f"mean luma {luma_sum / window_frames:.1f} over the last {window_frames} frames")
    print(f"frames {frames}, cuts {cuts}")


if __name__ == "__main__":
    main()
