"""Zero-copy host planes with every NumPy the package supports.

NumPy before 2.1 asks for the legacy DLPack capsule, which has no read-only flag; torch
ignores that flag. Zero-copy host planes are therefore exported through a private
copy-on-write view of their slot: no copy is made, and a write through the export (by a
consumer that writes where it was told not to) lands in the writer's own pages. It never
reaches what other subscribers read, and never faults on the read-only shared mapping.
"""

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import cuframes

W, H = 64, 48


def nv12(n):
    y = ((np.arange(H * W, dtype=np.uint32).reshape(H, W) * 7 + n * 13) % 251).astype(np.uint8)
    uv = ((np.arange(H // 2 * W, dtype=np.uint32).reshape(H // 2, W) * 3 + n) % 253).astype(
        np.uint8
    )
    return [y, uv]


def p010(n):
    y = ((np.arange(H * W, dtype=np.uint32).reshape(H, W) * 64 + n * 64) & 0xFFC0).astype(np.uint16)
    uv = np.full((H // 2, W), 0x1230 + 64 * n, np.uint16)
    return [y, uv]


class LegacyOnly:
    """A producer wrapper handing out the legacy capsule whatever the consumer asks for."""

    def __init__(self, plane):
        self.plane = plane

    def __dlpack__(self, **kwargs):
        return self.plane.__dlpack__()

    def __dlpack_device__(self):
        return self.plane.__dlpack_device__()


@pytest.mark.parametrize("fmt,make", [("nv12", nv12), ("p010", p010)])
def test_from_dlpack_of_zero_copy_host_planes(runtime_dir, key, fmt, make):
    with cuframes.Publisher(key, format=fmt, width=W, height=H, policy="strict_wait") as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            assert sub.zero_copy
            planes = make(2)
            pub.publish(planes)
            with sub.next(timeout=5) as f:
                assert f.zero_copy
                for i, expected in enumerate(planes):
                    # What this NumPy asks for (legacy before 2.1), and both kinds explicitly.
                    for source in (f.plane(i), LegacyOnly(f.plane(i))):
                        a = np.from_dlpack(source)
                        assert a.dtype == expected.dtype
                        np.testing.assert_array_equal(a.reshape(expected.shape), expected)
                        # Read-only where NumPy can tell (NumPy < 2.1 makes every DLPack
                        # import read-only; 2.1+ honours the versioned flag).
                        if not isinstance(source, LegacyOnly):
                            assert not a.flags.writeable
                        del a
                    a = np.asarray(f.plane(i))
                    assert not a.flags.writeable
                    np.testing.assert_array_equal(a.reshape(expected.shape), expected)
                    del a


def _private_views():
    """Private writable mappings of frame slot memfds in this process (the views)."""
    with open("/proc/self/maps") as m:
        return sum(1 for line in m if "memfd:cuframes-slot" in line and " rw-p " in line)


def test_a_capsule_holds_its_view_and_the_slot_exactly_as_long_as_it_lives(runtime_dir, key):
    with cuframes.Publisher(
        key, format="nv12", width=W, height=H, policy="strict_wait", ring_size=1, ack_timeout=10
    ) as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            pub.publish(nv12(0))
            f = sub.next(timeout=5)
            before = _private_views()
            caps = [f.plane(0).__dlpack__()]
            f.release()
            # The unconsumed capsule still holds the slot: the next publish (one slot,
            # strict_wait) waits for it.
            done = threading.Event()
            t = threading.Thread(target=lambda: (pub.publish(nv12(1)), done.set()))
            t.start()
            try:
                views_held = _private_views()
                waited = not done.wait(0.5)
                caps.clear()
                gc.collect()
                # Its view is unmapped and the slot handed back with it.
                views_after = _private_views()
                published = done.wait(5)
            finally:
                caps.clear()
                t.join(15)
            assert (views_held, waited) == (before + 1, True)
            assert (views_after, published) == (before, True)
            with sub.next(timeout=5) as g:
                assert g.seq == 2
                np.testing.assert_array_equal(np.from_dlpack(g.plane(0)), nv12(1)[0])
            assert _private_views() == before


# A DLPack consumer that writes through what it imports, as torch does (it ignores the
# read-only flag): run in a child process, so that a write that faults (SIGSEGV) fails the
# test instead of killing pytest.
_WRITER = textwrap.dedent(
    """
    import ctypes, sys
    import numpy as np
    import cuframes

    key, kind = sys.argv[1], sys.argv[2]
    W, H = 64, 48
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                    ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                    ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)),
                    ("byte_offset", ctypes.c_uint64)]

    Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

    class Legacy(ctypes.Structure):
        _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                    ("deleter", Deleter)]

    class Versioned(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                    ("manager_ctx", ctypes.c_void_p), ("deleter", Deleter),
                    ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]

    # The capsule keeps the name's pointer: these live as long as the process.
    USED = {b"dltensor": ctypes.c_char_p(b"used_dltensor"),
            b"dltensor_versioned": ctypes.c_char_p(b"used_dltensor_versioned")}

    def write_through(plane, versioned):
        name = b"dltensor_versioned" if versioned else b"dltensor"
        cap = plane.__dlpack__(max_version=(1, 0)) if versioned else plane.__dlpack__()
        ptr = api.PyCapsule_GetPointer(cap, name)
        api.PyCapsule_SetName(cap, USED[name])
        m = (Versioned if versioned else Legacy).from_address(ptr)
        if versioned:
            assert m.flags & 1, "a zero-copy host plane is flagged read-only"
        rows, pitch = m.dl_tensor.shape[0], m.dl_tensor.strides[0]
        for r in range(rows):
            ctypes.memset(m.dl_tensor.data + r * pitch, 0xEE, 8)  # the consumer writes
        seen = ctypes.string_at(m.dl_tensor.data, 8)
        m.deleter(ptr)
        return seen

    y = ((np.arange(H * W, dtype=np.uint32).reshape(H, W) * 7) % 251).astype(np.uint8)
    uv = np.full((H // 2, W), 77, np.uint8)
    with cuframes.Publisher(key, format="nv12", width=W, height=H, policy="strict_wait") as pub:
        a = cuframes.Subscriber(key, mode="zero_copy")
        b = cuframes.Subscriber(key, mode="zero_copy")
        assert a.zero_copy and b.zero_copy
        assert pub.wait_for_subscribers(2, timeout=5)
        pub.publish([y, uv])
        fa, fb = a.next(timeout=5), b.next(timeout=5)
        if kind == "numpy":
            arr = np.from_dlpack(fa.plane(0))
            if arr.flags.writeable:
                arr[:, :8] = 0xEE
                seen = arr[0, :8].tobytes()
            else:
                # Read-only as NumPy made it: write as a consumer that ignores it would.
                seen = write_through(fa.plane(0), versioned=False)
            del arr
        else:
            seen = write_through(fa.plane(0), versioned=(kind == "versioned"))
        assert seen == b"\\xee" * 8, seen  # the writer sees its own write
        # Nobody else does: the other subscriber, the writer's later exports (the written
        # export is gone, and its view with it: live exports of a plane share one), the
        # publisher's next reader of the slot.
        np.testing.assert_array_equal(np.asarray(fb.plane(0)), y)
        np.testing.assert_array_equal(np.from_dlpack(fb.plane(0)), y)
        np.testing.assert_array_equal(np.asarray(fa.plane(0)), y)
        np.testing.assert_array_equal(np.from_dlpack(fa.plane(0)), y)
        fa.release()
        fb.release()
        a.close()
        b.close()
    print("PASS", kind, np.__version__)
    """
)


@pytest.mark.parametrize("kind", ["numpy", "legacy", "versioned"])
def test_writes_through_an_export_stay_private(runtime_dir, key, kind):
    r = subprocess.run(
        [sys.executable, "-c", _WRITER, key, kind],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert r.returncode == 0, (
        f"writer exited with {r.returncode} (-11: SIGSEGV)\n{r.stdout}\n{r.stderr}"
    )
    assert f"PASS {kind}" in r.stdout


def _maps():
    with open("/proc/self/maps") as m:
        return sum(1 for _ in m)


def test_exports_of_a_plane_share_one_private_view(runtime_dir, key):
    """Issue 30 F8: every export of a zero-copy host plane mapped a view of its own; 65,000
    capsules of one frame exhausted vm.max_map_count, and then NumPy allocations and thread
    starts failed in the whole process. The live exports of a plane share one view now."""
    with cuframes.Publisher(
        key, format="nv12", width=W, height=H, policy="strict_wait", ring_size=1, ack_timeout=10
    ) as pub:
        with cuframes.Subscriber(key, mode="zero_copy") as sub:
            y, uv = nv12(3)
            pub.publish([y, uv])
            f = sub.next(timeout=5)
            views, maps = _private_views(), _maps()
            caps = []
            for i in range(10_000):
                if i % 3 == 0:
                    caps.append(f.plane(0).__dlpack__(max_version=(1, 0)))
                elif i % 3 == 1:
                    caps.append(f.plane(0).__dlpack__())
                else:
                    caps.append(np.asarray(f.plane(0)))
            # One view for the plane, whatever the kind of export; a second plane has its own.
            assert _private_views() == views + 1
            uv_a, uv_b = np.from_dlpack(f.plane(1)), np.asarray(f.plane(1))
            assert _private_views() == views + 2
            # A couple of mappings, not 10,000 (slack for the allocator's own arenas).
            assert _maps() - maps < 50, (_maps(), maps)
            np.testing.assert_array_equal(caps[2].reshape(y.shape), y)
            np.testing.assert_array_equal(np.from_dlpack(f.plane(0)).reshape(y.shape), y)
            np.testing.assert_array_equal(uv_a.reshape(uv.shape), uv)
            np.testing.assert_array_equal(uv_b.reshape(uv.shape), uv)
            # The exports of a plane share their view, writes included (all this process's
            # own); the slot, which the publisher and the other subscribers read, never sees
            # them. (A consumer writing through a read-only export, as torch does.)
            ctypes.memset(caps[2].ctypes.data, 0xEE, 4)
            assert np.from_dlpack(f.plane(0)).reshape(-1)[:4].tobytes() == b"\xee" * 4
            assert f.plane(0).tobytes() == y.tobytes()
            ctypes.memmove(caps[2].ctypes.data, y.tobytes(), 4)
            # The view lives as long as any export of it: the last one unmaps it.
            del uv_a
            assert _private_views() == views + 2
            del uv_b
            assert _private_views() == views + 1
            f.release()
            caps[:] = [caps[2]]  # one NumPy array of the 10,000 exports
            gc.collect()
            assert _private_views() == views + 1
            # ... and still holds the frame (one slot, strict_wait: the next publish waits).
            done = threading.Event()
            t = threading.Thread(target=lambda: (pub.publish(nv12(4)), done.set()))
            t.start()
            try:
                waited = not done.wait(0.5)
                np.testing.assert_array_equal(caps[0].reshape(y.shape), y)
                caps.clear()
                gc.collect()
                published = done.wait(10)
            finally:
                caps.clear()
                t.join(15)
            assert (waited, published, _private_views()) == (True, True, views)
            with sub.next(timeout=5) as g:
                np.testing.assert_array_equal(np.asarray(g.plane(0)), nv12(4)[0])
            assert _private_views() == views
