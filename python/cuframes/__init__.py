"""cuframes: share decoded video frames and encoded packets between processes.

The classes are implemented in Rust (``cuframes._cuframes``, over ``cuframes-core``);
see ``__init__.pyi`` for the typed API.
"""

from ._cuframes import (  # noqa: F401
    ERROR_CODES,
    PROTOCOL_VERSION,
    Error,
    Frame,
    Packet,
    PacketPublisher,
    PacketSubscriber,
    Plane,
    Publisher,
    Subscriber,
)

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
