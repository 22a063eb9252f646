#!/usr/bin/env python3
"""Steady-state frame rate of an ffmpeg run, from its `-progress pipe:1` output on stdin.

    ffmpeg ... -progress pipe:1 -stats_period 0.05 -nostats | python3 steady_fps.py

Each progress block ends with `progress=continue` (or `progress=end`) and carries `frame=N`
(packets written by the muxer); the blocks are timestamped as they arrive. The rate is counted
over the middle of the frames: from the first block with at least 10 % of the final count to
the first with at least 90 %. Neither start-up (device and decoder set-up, a filter's wait for
its subscribers) nor the end is counted. The end cannot be cut off at "the first block with
every frame": fftools stops printing progress once the muxer is done and prints its final
block only after sch_stop has joined every thread, i.e. after the decoder was closed and the
filter graph freed (a publisher's teardown, while its readers close their CUDA contexts); on
an H100 that takes 0.16 s for a plain decode and 0.74 s with 8 readers
(docs/investigations/eight-readers-decode-speed.md).
Prints the fps, or `nan` when fewer than two blocks had frames.

With STEADY_FPS_WINDOW=FILE it also writes "t0 t1 fps_whole fps_middle q1 q2 q3 q4" into FILE:
the window counted (CLOCK_MONOTONIC seconds; tools/diag/proc_sched.py --window profiles that
window only), the rate from the first block with frames to the final block (start-up after
the first frame and the end included: what a user waits for), the middle rate again, and the
rate of each quarter of the frames, the last one up to the final block (where a slow run loses
its time).
"""

import os
import time

# os.read, not `for line in sys.stdin`: the text layer reads ahead and would hand over blocks
# in bursts, with the wrong arrival times.
points = []
frame = 0
pending = b""
while True:
    chunk = os.read(0, 65536)
    if not chunk:
        break
    now = time.monotonic()
    pending += chunk
    *lines, pending = pending.split(b"\n")
    for line in lines:
        key, _, value = line.strip().partition(b"=")
        if key == b"frame":
            frame = int(value or 0)
        elif key == b"progress" and frame > 0:
            points.append((now, frame))


def rate(a, b):
    (t0, f0), (t1, f1) = a, b
    return (f1 - f0) / (t1 - t0) if t1 > t0 else float("nan")


if len(points) >= 2:
    final = points[-1][1]

    def at(share):
        """The first block with at least `share` of the final count."""
        return next(p for p in points if p[1] >= share * final)

    lo, hi = at(0.1), at(0.9)
    if hi[0] <= lo[0]:
        lo, hi = points[0], points[-1]  # too few blocks to leave the ends out
    middle = rate(lo, hi)
    print(f"{middle:.1f}")
    if os.environ.get("STEADY_FPS_WINDOW"):
        quarters = [
            rate(at(q / 4) if q else points[0], at((q + 1) / 4) if q < 3 else points[-1])
            for q in range(4)
        ]
        with open(os.environ["STEADY_FPS_WINDOW"], "w") as f:
            print(
                f"{lo[0]:.6f} {hi[0]:.6f} {rate(points[0], points[-1]):.1f} {middle:.1f} "
                + " ".join(f"{r:.1f}" for r in quarters),
                file=f,
            )
else:
    print("nan")
