"""cuframes: share decoded video frames and encoded packets between processes.

The classes are implemented in Rust (``cuframes._cuframes``, over ``cuframes-core``);
see ``__init__.pyi`` for the typed API.
"""

import atexit as _atexit
import inspect as _inspect
import os as _os
import weakref as _weakref

from . import _cuframes
from ._cuframes import (  # noqa: F401
    ERROR_CODES,
    PROTOCOL_VERSION,
    Batch,
    BatchResult,
    Error,
    Frame,
    Packet,
    PacketSubscriber,
    Plane,
    Subscriber,
    Tensor,
    ZeroCopyRefusedWarning,
    host_copy_count,
)

__version__: str = _cuframes.__version__

# Publishers own SHM objects and a socket, removed when they are closed or collected. Objects
# still alive at interpreter exit are not always collected, so they are closed here, by the
# process that created them: a child forked from it (os.fork(), multiprocessing's "fork")
# inherits them and this handler, but they are its parent's, which goes on publishing.
_live_publishers: "_weakref.WeakKeyDictionary" = _weakref.WeakKeyDictionary()


def _shows_base(cls):
    """``cls``, a Python subclass that only adds the exit-time close, shown as its base is:
    the constructor's real signature (``help()``, ``inspect.signature()``) and docs."""
    base = cls.__bases__[0]
    cls.__doc__ = base.__doc__
    try:
        sig = _inspect.signature(base)
    except ValueError:
        # CPython < 3.10: PyO3's abi3 classes carry no text signature there, so neither
        # class shows one.
        return cls
    cls.__signature__ = sig
    self_param = _inspect.Parameter("self", _inspect.Parameter.POSITIONAL_ONLY)
    cls.__init__.__signature__ = sig.replace(parameters=[self_param, *sig.parameters.values()])
    cls.__init__.__doc__ = "Initialize self; see help(type(self)) for the parameters."
    return cls


@_shows_base
class Publisher(_cuframes.Publisher):
    def __init__(self, *args, **kwargs):
        _live_publishers[self] = _os.getpid()


@_shows_base
class PacketPublisher(_cuframes.PacketPublisher):
    def __init__(self, *args, **kwargs):
        _live_publishers[self] = _os.getpid()


@_atexit.register
def _close_publishers():
    me = _os.getpid()
    for p, creator in list(_live_publishers.items()):
        if creator != me:
            continue
        try:
            p.close()
        except Exception:
            pass

__all__ = [
    "ERROR_CODES",
    "PROTOCOL_VERSION",
    "Batch",
    "BatchResult",
    "Error",
    "Frame",
    "Packet",
    "PacketPublisher",
    "PacketSubscriber",
    "Plane",
    "Publisher",
    "Subscriber",
    "Tensor",
    "ZeroCopyRefusedWarning",
    "host_copy_count",
]
