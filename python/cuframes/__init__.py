"""cuframes: share decoded video frames and encoded packets between processes.

The classes are implemented in Rust (``cuframes._cuframes``, over ``cuframes-core``);
see ``__init__.pyi`` for the typed API.
"""

import atexit as _atexit
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
# still alive at interpreter exit are not always collected, so they are closed here.
_live_publishers: "_weakref.WeakSet" = _weakref.WeakSet()


class Publisher(_cuframes.Publisher):
    __doc__ = _cuframes.Publisher.__doc__

    def __init__(self, *args, **kwargs):
        _live_publishers.add(self)


class PacketPublisher(_cuframes.PacketPublisher):
    __doc__ = _cuframes.PacketPublisher.__doc__

    def __init__(self, *args, **kwargs):
        _live_publishers.add(self)


@_atexit.register
def _close_publishers():
    for p in list(_live_publishers):
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
