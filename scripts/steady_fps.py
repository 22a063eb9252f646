#!/usr/bin/env python3
"""Steady-state frame rate of an ffmpeg run, from its `-progress pipe:1` output on stdin.

    ffmpeg ... -progress pipe:1 -stats_period 0.2 -nostats | python3 steady_fps.py

Each progress block ends with `progress=continue` (or `progress=end`) and carries `frame=N`;
the blocks are timestamped as they arrive. The rate is counted from the first block that has
frames out to the first block that has them all (the last block's count), so neither
start-up (device and decoder set-up, and a filter's wait for its subscribers, during which
no frame comes out) nor teardown (closing the decoder and the filters: a publisher's ring
and its readers' contexts, after the last frame, before the final block) is counted.
Prints the fps, or `nan` when fewer than two blocks had frames. With STEADY_FPS_WINDOW=FILE
it also writes "t0 t1 fps_to_last_block fps_middle q1 q2 q3 q4" into FILE: the window
counted, in CLOCK_MONOTONIC seconds (scripts/proc_sched.py --window profiles that window
only), the rate counted up to the last block instead, teardown included (how this script
counted before 2026-12-06), the rate from the block with 10 % of the frames to the one with
90 %, and the rate of each quarter of the frames (where in the clip a slow run loses time).
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
    done = next(p for p in points if p[1] == final)
    steady = rate(points[0], done)
    print(f"{steady:.1f}")
    if os.environ.get("STEADY_FPS_WINDOW"):
        # Where in the clip the time goes: the rate over the middle of the frames (10 % to
        # 90 %: neither the first nor the last frames), and per quarter of the frames.
        def at(share):
            return next(p for p in points if p[1] >= share * final)

        middle = rate(at(0.1), at(0.9))
        quarters = [rate(at(q / 4) if q else points[0], at((q + 1) / 4)) for q in range(4)]
        with open(os.environ["STEADY_FPS_WINDOW"], "w") as f:
            print(
                f"{points[0][0]:.6f} {done[0]:.6f} {rate(points[0], points[-1]):.1f} {middle:.1f} "
                + " ".join(f"{r:.1f}" for r in quarters),
                file=f,
            )
else:
    print("nan")
