"""cuframes: share decoded video frames and encoded packets between processes.

The classes are implemented in Rust (``cuframes._cuframes``, over ``cuframes-core``);
see ``__init__.pyi`` for the typed API.
"""

import atexit as _atexit
import os as _os
import weakref as _weakref

from . import _cuframes
from ._cuframes import (  # noqa: F401
    ERROR_CODES,
    PROTOCOL_VERSION,
    Error,
    Frame,
    Packet,
    PacketSubscriber,
    Plane,
    Subscriber,
    Tensor,
    host_copy_count,
)

# Publishers own SHM objects and a socket, removed when they are closed or collected. Objects
# still alive at interpreter exit are not always collected, so they are closed here, by the
# process that created them: a child forked from it (os.fork(), multiprocessing's "fork")
# inherits them and this handler, but they are its parent's, which goes on publishing.
_live_publishers: "_weakref.WeakKeyDictionary" = _weakref.WeakKeyDictionary()


class Publisher(_cuframes.Publisher):
    __doc__ = _cuframes.Publisher.__doc__

    def __init__(self, *args, **kwargs):
        _live_publishers[self] = _os.getpid()


class PacketPublisher(_cuframes.PacketPublisher):
    __doc__ = _cuframes.PacketPublisher.__doc__

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
    "Error",
    "Frame",
    "Packet",
    "PacketPublisher",
    "PacketSubscriber",
    "Plane",
    "Publisher",
    "Subscriber",
]
