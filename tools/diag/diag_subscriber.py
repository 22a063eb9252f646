#!/usr/bin/env python3
"""A Python subscriber for the decode-pipeline diagnostics (ff-readers-diag.sh,
ff-readers-ioctl.sh), with the cuframes package on PYTHONPATH.

    python3 diag_subscriber.py KEY NAME MODE

Subscribes zero copy, waiting up to 30 s for the publisher (like -wait_publisher), then:
  read     reads every frame and releases it without a stream (the release waits for the
           device's primary context, cuCtxSynchronize, then ACKs), one thread; prints the
           count on stderr at the end of the stream;
  mapped   maps the ring's slots and never reads: what the mere presence of mapped readers
           costs (with drop_oldest, nothing waits for it); sleeps until killed (120 s at most);
  mapsync  maps the slots, never reads, and calls cuCtxSynchronize on its context ~700 times
           a second for 8 s: driver calls at the frame rate in an importing process.
"""

import ctypes
import sys
import time

import cuframes


def subscribe(key, name):
    deadline = time.monotonic() + 30
    while True:
        try:
            return cuframes.Subscriber(key, name=name, mode="zero_copy", handshake_timeout=30)
        except cuframes.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def main():
    key, name, mode = sys.argv[1:4]
    s = subscribe(key, name)
    if mode == "read":
        n = 0
        for f in s:
            f.release()
            n += 1
        print(n, "frames", file=sys.stderr)
    elif mode == "mapped":
        time.sleep(120)
    elif mode == "mapsync":
        cu = ctypes.CDLL("libcuda.so.1")
        ctx, dev = ctypes.c_void_p(), ctypes.c_int()
        assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
        assert cu.cuCtxSetCurrent(ctx) == 0
        end = time.monotonic() + 8
        while time.monotonic() < end:
            cu.cuCtxSynchronize()
            time.sleep(0.0014)
    else:
        sys.exit(f"unknown mode {mode!r}: read, mapped or mapsync")


if __name__ == "__main__":
    main()
