"""A camera-ring consumer: per-region mean luma and a motion score, on the GPU, per frame.

    python motion_stats.py cam1 [--grid 4x4] [--name motion] [--seconds 0]

Reads the frames of the cuframes ring `cam1` (published e.g. by
`ffmpeg -hwaccel cuda -hwaccel_output_format cuda -i rtsp://... -vf hwupload_cuframes=key=cam1 -f null -`)
without copying them: the luma plane is imported with torch.from_dlpack, reduced on a CUDA
stream of our own, and the frame is released behind that work (frame.release(stream)), so the
publisher may reuse the slot as soon as the GPU has read it. Once a second it prints the frame
rate, the mean luma, the motion score (mean absolute luma change between frames, 0..255) and
the busiest region. Works on host rings too (then torch runs on the CPU).

An FFmpeg recorder of the same camera runs beside it, on its own subscription:
    ffmpeg -f cuframes -i cam1 -vf hwdownload,format=nv12 -c:v libx264 cam1.mkv
"""

import argparse
import contextlib
import sys
import time

import torch

import cuframes


def parse_grid(text):
    cols, rows = (int(v) for v in text.lower().split("x"))
    if cols < 1 or rows < 1:
        raise argparse.ArgumentTypeError("grid must be COLSxROWS, both >= 1")
    return cols, rows


class MotionStats:
    """Per-frame statistics of a luma plane, computed where the plane lives."""

    def __init__(self, grid):
        self.cols, self.rows = grid
        self.previous = None

    def update(self, luma):
        """luma: uint8 [H, W] (any row pitch). Returns 0-d/1-d tensors, not yet synchronised."""
        h, w = luma.shape
        rh, rw = h // self.rows, w // self.cols
        y = luma[: rh * self.rows, : rw * self.cols].float()
        regions = y.reshape(self.rows, rh, self.cols, rw).mean(dim=(1, 3)).flatten()
        motion = torch.zeros((), device=y.device) if self.previous is None else (y - self.previous).abs().mean()
        self.previous = y  # a new tensor: the frame itself can be released
        return regions.mean(), motion, regions


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("key", help="the camera's cuframes key")
    ap.add_argument("--grid", type=parse_grid, default=(4, 4), help="regions, COLSxROWS (default 4x4)")
    ap.add_argument("--name", default="motion", help="subscriber name shown by `cuframes stat`")
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until the stream ends)")
    ap.add_argument("--wait-publisher", type=float, default=10.0,
                    help="seconds to wait for the camera's publisher to appear (default 10)")
    args = ap.parse_args()

    stats = MotionStats(args.grid)
    frames = total = 0
    started = last_report = time.monotonic()
    # mode "auto" (the default): zero copy where the publisher's policy allows it.
    with cuframes.Subscriber(args.key, name=args.name, wait_publisher=args.wait_publisher) as sub:
        cuda = None
        for frame in sub:
            if cuda is None:
                cuda = frame.memory == "cuda"
                stream = torch.cuda.Stream() if cuda else None
                print(f"{args.key}: {frame.width}x{frame.height} {frame.format} in {frame.memory} memory, "
                      f"zero copy {sub.zero_copy}", flush=True)
            with torch.cuda.stream(stream) if cuda else contextlib.nullcontext():
                luma = torch.from_dlpack(frame.plane(0))
                mean, motion, regions = stats.update(luma)
                del luma
            frame.release(stream)  # the ACK follows the reduction on `stream`
            frames += 1
            total += 1
            now = time.monotonic()
            if now - last_report >= 1.0:
                busiest = int(regions.argmax())  # .item()/int(): waits for this frame's work
                print(f"{frames / (now - last_report):6.1f} fps  mean luma {float(mean):6.1f}  "
                      f"motion {float(motion):5.2f}  busiest region {busiest % args.grid[0]},"
                      f"{busiest // args.grid[0]} ({float(regions[busiest]):.1f})", flush=True)
                frames, last_report = 0, now
            if args.seconds and now - started >= args.seconds:
                break
    print(f"total {total} frames in {time.monotonic() - started:.1f} s", flush=True)


if __name__ == "__main__":
    try:
        main()
    except cuframes.Error as e:
        sys.exit(f"motion_stats: {e} ({e.name})")
    except KeyboardInterrupt:
        pass
