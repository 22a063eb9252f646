"""cuframes: share decoded video frames (CUDA VMM or host memory) and encoded packets between
processes on one machine.

Frame ownership: a Frame holds its ring slot (zero-copy) or its private copy until it is
released (``frame.release()``, ``with frame:``, or when the Frame and all its Planes are
garbage). After ``release()`` no new export of its planes is allowed (``cuframes.Error``).
Exports made before it (DLPack capsules and the tensors imported from them, NumPy / CuPy
arrays made through ``__array_interface__`` / ``__cuda_array_interface__``) keep the memory
mapped, and the frame is ACKed to the publisher only when the last of them is gone: a held
NumPy view therefore holds the slot (under ``strict_wait`` the publisher waits for it).
"""

from fractions import Fraction
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Dict,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Union,
)

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

#: The package's version (the cuframes workspace's), e.g. ``"0.4.0"``.
__version__: str
PROTOCOL_VERSION: int
#: C names of the cuframes error codes, e.g. ``ERROR_CODES["CUFRAMES_ERR_NOT_FOUND"] == -5``.
ERROR_CODES: Dict[str, int]

class Error(Exception):
    """A cuframes error. ``str(e)`` is the message."""

    #: The cuframes error code (negative int, see ``ERROR_CODES``).
    code: int
    #: Its C name, e.g. ``"CUFRAMES_ERR_NOT_FOUND"``.
    name: str

class Plane:
    """One plane of a frame, exportable without a copy.

    Shape (elements): ``(rows, columns)``, or ``(rows, columns, channels)`` for interleaved
    planes (NV12/P010/P016 plane 1: ``(H/2, W/2, 2)``; RGBA/BGRA: ``(H, W, 4)``). dtype
    uint8, uint16 for P010/P016. Rows are ``pitch`` bytes apart.

    - ``__dlpack__`` / ``__dlpack_device__``: kDLCPU (1) for host rings, kDLCUDA (2, device)
      for CUDA rings. A legacy ``"dltensor"`` capsule, or ``"dltensor_versioned"`` when the
      consumer passes ``max_version >= (1, 0)``; ``numpy.from_dlpack(plane)`` works with
      every NumPy from 1.22. A zero-copy host plane is exported through a private
      copy-on-write view of its slot (no copy is made): a versioned capsule flags it
      read-only, and a consumer that writes anyway (a legacy import, torch) changes only its
      own copy of the pages it writes, never what other subscribers read. The live exports
      of one plane share that view (one mapping, however many exports): such a write shows
      in the plane's other exports alive at the time, all of this process.
    - ``__array_interface__`` (host planes): ``numpy.asarray(plane)`` is a read-only view.
    - ``__cuda_array_interface__`` v3 (CUDA planes), with strides.

    Do not write into zero-copy CUDA planes: the memory is the publisher's, shared with every
    subscriber (CUDA VMM has no read-only export).
    """

    #: The plane's number in its frame (0 = luma or packed RGB).
    index: int
    #: Bytes from one row to the next.
    pitch: int
    #: Bytes of samples in one row (without the pitch's padding).
    row_bytes: int
    rows: int
    #: Bytes per sample: 1, or 2 for P010/P016.
    itemsize: int
    @property
    def shape(self) -> Tuple[int, ...]:
        """In elements: (rows, columns), or (rows, columns, channels) for interleaved planes."""
    @property
    def strides(self) -> Tuple[int, ...]:
        """In bytes (as NumPy's; the first is ``pitch``)."""
    @property
    def dtype(self) -> str:
        """"uint8" or "uint16"."""
    def tobytes(self) -> bytes:
        """The rows copied densely (host frames; ``cuframes.Error`` for CUDA frames)."""
    def __dlpack__(
        self,
        *,
        stream: Optional[Any] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """A DLPack capsule. ``stream`` is not waited on (the bytes are complete when the frame
        is delivered); ``dl_device`` must be the plane's own; ``copy=True`` raises
        BufferError. ``cuframes.Error`` once released."""
    def __dlpack_device__(self) -> Tuple[int, int]:
        """(1, 0) for host planes, (2, device) for CUDA planes."""
    @property
    def __array_interface__(self) -> Dict[str, Any]:
        """Host planes only (AttributeError for CUDA). Pins the frame while this Plane lives."""
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """CUDA planes only (AttributeError for host). Pins the frame while this Plane lives."""

class Frame:
    """One delivered frame; a context manager that releases it on exit.

    Its pixels: ``plane(i)`` / ``planes`` (exported without a copy), ``to_ndarray()`` and
    ``numpy.asarray(frame)`` (host frames: one dense copy), ``to_rgb()``.

    A frame inherited by a forked child is the parent's: releasing or dropping it there does
    not release it (no ACK, no CUDA call).
    """

    #: The frame's sequence number in its stream (1 for the first frame published).
    seq: int
    #: Presentation time in ns (the publisher's clock when it gave none); None if unknown.
    pts_ns: Optional[int]
    #: True when the bytes are the ring's own slot (no copy was made).
    zero_copy: bool
    #: CUDA device ordinal of a "cuda" frame (0 for host frames).
    device: int
    @property
    def format(self) -> str:
        """"nv12", "p010", "p016", "yuv420p", "yuv444p", "rgba" or "bgra"."""
    @property
    def width(self) -> int: ...
    @property
    def height(self) -> int: ...
    @property
    def pitches(self) -> Tuple[int, ...]:
        """Bytes between rows, per plane."""
    @property
    def num_planes(self) -> int: ...
    @property
    def memory(self) -> str:
        """"cuda" or "host"."""
    @property
    def released(self) -> bool: ...
    @property
    def time(self) -> Optional[float]:
        """Presentation time in seconds (``pts_ns * time_base``), or None without a pts."""
    @property
    def time_base(self) -> Fraction:
        """The unit of ``pts_ns``: ``Fraction(1, 1_000_000_000)``."""
    def to_ndarray(self) -> Any:
        """A dense copy as a ``numpy.ndarray``, in PyAV's ``VideoFrame.to_ndarray`` layout:
        nv12 / yuv420p (H*3/2, W) uint8, p010 / p016 (H*3/2, W) uint16, yuv444p (3, H, W),
        rgba / bgra (H, W, 4). Host frames; TypeError for CUDA frames (import their planes
        with DLPack, or use ``to_rgb``); ValueError for 4:2:0 frames of odd size.
        ``cuframes.Error`` once released."""
    def __array__(self, dtype: Optional[Any] = None, copy: Optional[bool] = None) -> Any:
        """``numpy.asarray(frame)``: ``to_ndarray()``, cast to ``dtype``; ``copy=False``
        raises ValueError (the frame is one array only as a copy)."""
    @property
    def planes(self) -> List[Plane]: ...
    def plane(self, i: int) -> Plane:
        """Plane ``i`` (IndexError past the last). ``cuframes.Error`` once released or once the
        subscriber is closed."""
    def release(self, stream: Optional[Any] = None) -> None:
        """Release the frame (idempotent).

        ``stream``: for CUDA frames, an int CUstream or a stream object (torch ``.cuda_stream``,
        CuPy ``.ptr``, or ``__cuda_stream__``): the ACK waits for the work queued on it. It
        must be a live stream of the frame's device (not checked). 0 and 1 are the legacy
        default stream (torch's and CuPy's default stream is 0), 2 the calling thread's
        per-thread default stream. None: released now; a zero-copy CUDA frame then waits for
        the device's primary context (``cuCtxSynchronize``), without the GIL.
        With exports alive the release happens when the last one is gone (without the stream).
        """
    @property
    def colour(self) -> Optional[Dict[str, Any]]:
        """The ring's colour description by FFmpeg's names, or None when the publisher gave
        none: ``range`` ("limited" / "full"), ``matrix`` (``av_color_space_name``: "bt709",
        "smpte170m", "bt2020nc", ...), ``primaries``, ``transfer``, ``chroma_location``
        ("left", ...), ``sar`` ((num, den)). Unspecified fields are None; a code point FFmpeg
        has no name for is its int. ``Publisher(colour=...)`` takes the same dict."""
    def to_rgb(
        self,
        dtype: str = "uint8",
        layout: str = "chw",
        matrix: Optional[str] = None,
        range: Optional[str] = None,
        stream: Optional[Any] = None,
    ) -> "Tensor":
        """The frame as an RGB image, ready for inference (``torch.from_dlpack`` takes it
        without a copy).

        ``dtype``: "uint8" (0..255), "float16" or "float32" (0..1). ``layout``: "chw"
        (3, H, W) or "hwc" (H, W, 3). ``matrix``: "bt709", "bt601" or "bt2020"; ``range``:
        "limited" or "full" (None: the ring's colour description, else BT.709 limited). Chroma is taken from the nearest sample.
        CUDA frames are converted on the GPU into a pooled device buffer, queued on ``stream``
        (int CUstream or a torch/CuPy stream of the frame's device; None, 0 and 1: the legacy
        default stream; 2: the calling thread's per-thread default stream); host frames on the
        host (a NumPy-importable tensor). The frame stays usable;
        its release waits for the conversion. Agrees with a float64 reference to 1 (uint8),
        2.5e-7 (float32) and 5e-4 (float16).
        """
    def __enter__(self) -> "Frame": ...
    def __exit__(self, *args: Any) -> bool: ...

class Tensor:
    """An RGB image made by ``Frame.to_rgb``: DLPack (``__dlpack__``/``__dlpack_device__``)
    and ``__cuda_array_interface__`` (CUDA, with its stream) or ``__array_interface__`` (host).

    Its memory lives while the Tensor or any import of it does, then returns to the pool.
    """

    @property
    def shape(self) -> Tuple[int, ...]:
        """(3, height, width) for "chw", (height, width, 3) for "hwc"; a ``Batch`` tensor has
        the number of cameras in front: (N, 3, height, width) or (N, height, width, 3)."""
    @property
    def dtype(self) -> str:
        """"uint8", "float16" or "float32"."""
    @property
    def nbytes(self) -> int:
        """The image's size in bytes."""
    @property
    def stream(self) -> Optional[int]:
        """The stream the conversion was queued on (CUDA; 1 = the legacy default stream)."""
    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """A DLPack capsule. ``stream`` (CUDA): the importer's stream, made to wait for the
        conversion (None: the legacy default stream; -1: no wait)."""
    def __dlpack_device__(self) -> Tuple[int, int]:
        """(1, 0) for host tensors, (2, device) for CUDA tensors."""
    @property
    def __array_interface__(self) -> Dict[str, Any]:
        """Host tensors only (AttributeError on CUDA)."""
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]:
        """CUDA tensors only (AttributeError on the host); version 3, with ``stream``."""

class BatchResult:
    """One batch made by ``Batch.next()``: ``tensor`` and, per camera in the order of the keys,
    ``key``, ``valid``, ``seq``, ``pts``, ``placement``."""

    @property
    def tensor(self) -> Any:
        """The images, (N, 3, H, W) or (N, H, W, 3): a ``Tensor`` on the GPU (DLPack,
        ``__cuda_array_interface__``), a NumPy array for host batches (a ``Tensor`` without
        NumPy). The buffer returns to the reader's pool when it and every import are gone."""
    @property
    def key(self) -> List[str]: ...
    @property
    def valid(self) -> List[bool]:
        """False: the camera's image is the pad colour (lost, no frame yet, or none the
        policy accepted)."""
    @property
    def seq(self) -> List[Optional[int]]:
        """The frame's seq in its ring (None when invalid)."""
    @property
    def pts(self) -> List[Optional[int]]:
        """The frame's pts in nanoseconds (None when invalid or unstamped)."""
    @property
    def placement(self) -> List[Optional[Dict[str, float]]]:
        """Where each frame is in its image: ``scale_x``, ``scale_y``, ``offset_x``,
        ``offset_y`` (image = source * scale + offset, pixel-edge coordinates),
        ``content_width``, ``content_height``, ``source_width``, ``source_height``; None when
        the source size is unknown."""
    def to_source(
        self, camera: int, boxes: Sequence[Sequence[float]], clip: bool = True
    ) -> List[Tuple[float, float, float, float]]:
        """Boxes ``(x0, y0, x1, y1)`` of camera ``camera``'s image in its source frame's pixels
        (clipped to the frame unless ``clip=False``)."""
    @property
    def index(self) -> int:
        """How many batches the reader made before this one."""
    @property
    def kernel_launches(self) -> int:
        """The reader's GPU kernel launches when this batch was made (one per CUDA batch)."""
    def __len__(self) -> int: ...

class Batch:
    """Read many cameras into one inference batch per ``next()``: each camera's frame
    converted to RGB (its own matrix and range), resized (bilinear; letterboxed with ``pad``
    or stretched), optionally normalised, into (N, 3, H, W) ("nchw") or (N, H, W, 3)
    ("nhwc"). CUDA rings: one kernel launch per batch reading the zero-copy slots, frames
    released on the stream behind it. Host rings: converted by the CPU into a NumPy array.

    ``policy``: "latest" (each camera's newest frame, never waiting), "all" (wait up to
    ``timeout`` s for a new frame of every connected camera) or "aligned" (frames within
    ``window`` s of the newest camera's newest pts, waiting up to ``timeout``). Cameras keep
    their index through disconnections; lost or missing cameras are looked for again in the
    background every ``retry_interval`` s and never hold a batch up. The subscriber options
    are ``Subscriber``'s, for every camera.
    """

    def __init__(
        self,
        keys: Sequence[str],
        width: int = 640,
        height: int = 640,
        dtype: str = "float16",
        layout: str = "nchw",
        resize: str = "letterbox",
        pad: Union[None, float, Tuple[float, float, float]] = None,
        mean: Union[None, float, Tuple[float, float, float]] = None,
        std: Union[None, float, Tuple[float, float, float]] = None,
        policy: str = "latest",
        timeout: float = 1.0,
        window: Optional[float] = None,
        *,
        name: str = "python",
        mode: str = "auto",
        runtime_dir: Optional[str] = None,
        wait_publisher: float = 0.0,
        handshake_timeout: float = 5.0,
        reconnect: Optional[float] = None,
        spin: float = 0.0,
        accept_zero_copy_overwrite: bool = False,
        device: int = -1,
        publisher_uid: Optional[int] = None,
        retry_interval: float = 0.25,
    ) -> None: ...
    def next(self, stream: Optional[Any] = None) -> BatchResult:
        """The next batch, assembled per the policy and converted; ``stream`` (CUDA) as
        ``Frame.to_rgb``'s, alive while the tensor is used. The policy's wait releases the
        GIL; Ctrl-C interrupts it, and ``close()`` from another thread ends it (raising
        ``cuframes.Error``: closed)."""
    def __iter__(self) -> Iterator[BatchResult]: ...
    def __next__(self) -> BatchResult: ...
    @property
    def keys(self) -> List[str]: ...
    @property
    def policy(self) -> str: ...
    @property
    def shape(self) -> Tuple[int, int, int, int]: ...
    @property
    def connected(self) -> List[bool]: ...
    @property
    def errors(self) -> List[Optional[str]]:
        """Per camera: its last connection error or end, as text."""
    @property
    def reconnections(self) -> List[int]: ...
    @property
    def kernel_launches(self) -> int: ...
    @property
    def pooled_buffers(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Batch": ...
    def __exit__(self, *args: Any) -> bool: ...

class ZeroCopyRefusedWarning(UserWarning):
    """``Subscriber(mode="zero_copy")`` was given copies: the publisher's policy is
    ``drop_oldest``, under which a held frame can be rewritten. Pass
    ``accept_zero_copy_overwrite=True`` to take that risk, or ``mode="auto"`` to copy quietly."""

class Subscriber:
    """Subscribe to the frames of the publisher of ``key``.

    Iterating (``for frame in sub``, ``async for frame in sub``) yields frames until the
    publisher shuts down. An abnormal end (dropped by the publisher for a missed ACK, a
    publisher that crashed, a protocol error) raises ``cuframes.Error`` saying why, and
    ``end_reason`` names it. ``next(timeout)`` and ``await anext(timeout)`` return None after
    ``timeout`` seconds and raise ``cuframes.Error`` (DISCONNECTED) at any end. Waiting
    releases the GIL; Ctrl-C interrupts it.

    - ``mode``: "auto" (zero copy where the publisher's policy allows it: ``strict_wait``, or
      with ``accept_zero_copy_overwrite``; copies otherwise), "zero_copy" (the same, with a
      ``ZeroCopyRefusedWarning`` when frames are copied) or "copy". ``frame.zero_copy`` and
      ``sub.zero_copy`` say what was granted.
    - ``runtime_dir``: the socket directory (default ``$CUFRAMES_RUNTIME_DIR`` or /run/cuframes).
    - ``wait_publisher``: seconds to wait for a missing publisher (and its ring) to appear;
      0 fails at once (``cuframes.Error``, NOT_FOUND).
    - ``handshake_timeout``: seconds the handshake with the publisher may take.
    - ``read_timeout``: iteration, and ``next()``/``anext()`` without a timeout, raise
      ``cuframes.Error`` (TIMEOUT) when nothing arrives for this many seconds; None or 0 waits
      forever.
    - ``reconnect``: seconds to wait for a restarted publisher of the key and go on with it
      (None: the stream ends when the publisher goes); a publisher of another uid than the
      first one's is refused meanwhile.
    - ``spin``: seconds to poll the ring for a frame before each sleep (lower latency at the
      cost of a busy CPU meanwhile; 0: sleep at once).
    - ``device``: -1 (default) = the publisher's GPU, found by its UUID; an explicit ordinal
      that is another GPU is refused naming both UUIDs.
    - ``publisher_uid``: accept only a publisher running as this uid, on every connection
      (``cuframes.Error``, PERMISSION, naming both uids); None: any uid at first.
    - ``connect_timeout``: deprecated name of ``handshake_timeout`` (DeprecationWarning).

    After ``os.fork()`` (or multiprocessing's "fork" start method) the child inherits this
    object, but the subscription stays the parent's: in the child, ``close()``, garbage
    collection and the exit only let go of the child's copy (no UNSUBSCRIBE, no ACK: the
    parent goes on reading, and frames it holds stay held). Do not read through it in the
    child (it would take the parent's messages): connect a new subscriber there.
    """

    def __init__(
        self,
        key: str,
        name: str = "python",
        mode: str = "auto",
        runtime_dir: Optional[str] = None,
        *,
        wait_publisher: float = 0.0,
        handshake_timeout: float = 5.0,
        read_timeout: Optional[float] = None,
        reconnect: Optional[float] = None,
        spin: float = 0.0,
        accept_zero_copy_overwrite: bool = False,
        device: int = -1,
        publisher_uid: Optional[int] = None,
        connect_timeout: Optional[float] = None,
    ) -> None: ...
    def next(self, timeout: Optional[float] = None) -> Optional[Frame]:
        """The next frame, or None after ``timeout`` seconds. Without a timeout: waits
        ``read_timeout`` (then ``cuframes.Error`` TIMEOUT), or forever. At the end of the
        stream, whatever the reason: ``cuframes.Error`` with code DISCONNECTED."""
    def __iter__(self) -> Iterator[Frame]:
        """Frames until the publisher shuts down; an abnormal end raises ``cuframes.Error``."""
    def __next__(self) -> Frame: ...
    def __aiter__(self) -> AsyncIterator[Frame]:
        """``async for``: as iteration, without blocking the event loop."""
    def __anext__(self) -> Awaitable[Frame]: ...
    def anext(self, timeout: Optional[float] = None) -> Awaitable[Optional[Frame]]:
        """Awaitable ``next()``: the wait runs on a thread of cuframes' own. A frame
        that arrives for a task cancelled meanwhile is kept for the next read."""
    @property
    def zero_copy(self) -> bool: ...
    @property
    def mode(self) -> str:
        """The mode asked for: "auto", "zero_copy" or "copy"."""
    @property
    def key(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def end_reason(self) -> Optional[str]:
        """Why the stream ended: None while it goes on; "shutdown", "kicked" (dropped by the
        publisher, e.g. for a missed ACK), "publisher_lost" (gone without a shutdown, and not
        back within ``reconnect``), "protocol_error", or "closed" (closed by this process)."""
    def close(self) -> None:
        """Unsubscribe. Held frames can no longer be exported afterwards."""
    def __enter__(self) -> "Subscriber": ...
    def __exit__(self, *args: Any) -> bool: ...

class Publisher:
    """Publish frames of one format and size under ``key``, copied from host buffers or, into
    CUDA rings, from CUDA arrays.

    ``memory``: "host" (memfd slots) or "cuda" (VMM on ``device``; host sources are uploaded).
    ``policy``: "drop_oldest" or "strict_wait" (a publish waits up to ``ack_timeout`` seconds
    for every subscriber to release the slot it reuses). ``ring_size``: 1..16 slots.

    After ``os.fork()`` (or multiprocessing's "fork" start method) the child inherits this
    object, but the publisher stays the parent's: in the child, ``close()``, leaving a
    ``with`` block, garbage collection and the exit only let go of the child's copy (no
    shutdown, nothing removed, the parent goes on publishing). Do not publish through it in
    the child: create a publisher there (another key), or start children with "spawn".
    """

    def __init__(
        self,
        key: str,
        format: str = "nv12",
        width: Optional[int] = None,
        height: Optional[int] = None,
        memory: str = "host",
        policy: str = "drop_oldest",
        ring_size: int = 4,
        runtime_dir: Optional[str] = None,
        device: int = 0,
        ack_timeout: float = 1.0,
        colour: Optional[Dict[str, Any]] = None,
    ) -> None:
        """``colour``: the ring's colour description, as ``Frame.colour`` gives it back."""
    def publish(
        self,
        planes: Sequence[Any],
        pts_ns: Optional[int] = None,
        strides: Optional[Sequence[int]] = None,
        stream: Optional[Any] = None,
    ) -> int:
        """Copy one frame (one object per plane) into a slot and publish it; returns its seq.

        Host planes: bytes, bytearray, memoryview, NumPy arrays or any object with the buffer
        protocol or ``__array_interface__`` (torch CPU tensors through ``__array__``), read at
        memcpy speed in C order whatever the strides (views, negative strides; uint8, or
        uint16 for P010/P016), with the plane's rows densely, or ``strides[i]`` bytes apart;
        a source of more bytes than the plane's rows at that stride (padding of the last row
        included) is refused from its shape before it is read (ValueError), and only the
        plane's bytes are gathered. An ``__array_interface__`` that lies (null pointer, shape past its data buffer,
        overflowing strides): ValueError. Device planes (``memory="cuda"`` rings only):
        objects with ``__cuda_array_interface__`` or a CUDA ``__dlpack__`` (torch, CuPy
        tensors), rows first and dense within a row (NV12 chroma ``[H/2, W/2, 2]`` or
        ``[H/2, W]``), any row stride; copied device to device on ``stream`` (int CUstream or
        a torch/CuPy stream; None, 0 and 1: the legacy default stream, which torch's and CuPy's
        default streams are; 2: the calling thread's per-thread default stream; a bool:
        TypeError; an int outside 0..2**64-1: ValueError) after the producer's work, and
        published when the copy is complete. All planes host or all device. Wrong sizes:
        ValueError; wrong types, a mix, or device planes into a host ring: TypeError.
        ``pts_ns`` None: the publisher's clock.
        """
    @property
    def subscriber_count(self) -> int: ...
    def wait_for_subscribers(self, count: int = 1, timeout: float = 5.0) -> bool: ...
    @property
    def pitches(self) -> Tuple[int, ...]: ...
    @property
    def key(self) -> str: ...
    @property
    def closed(self) -> bool:
        """True once ``close()`` ran (or the ``with`` block was left)."""
    def close(self) -> None:
        """Shut down: subscribers read what was published, then their iteration ends."""
    def __enter__(self) -> "Publisher": ...
    def __exit__(self, *args: Any) -> bool: ...

class Packet:
    """One encoded packet: ``data`` (Annex B H.264/HEVC, or AV1 OBUs), timestamps, flags."""

    data: bytes
    #: The packet's sequence number in its stream (1 for the first packet published).
    seq: int
    #: Presentation time in ns; None if unknown.
    pts_ns: Optional[int]
    #: Decoding time in ns; None if unknown.
    dts_ns: Optional[int]
    #: The wire flags (``keyframe``, ``discontinuity`` and ``corrupt`` read them).
    flags: int
    @property
    def keyframe(self) -> bool: ...
    @property
    def discontinuity(self) -> bool:
        """First packet after lost packets (an overrun): decoding restarts here."""
    @property
    def corrupt(self) -> bool: ...
    @property
    def time(self) -> Optional[float]:
        """Presentation time in seconds (``pts_ns * time_base``), or None without a pts."""
    @property
    def time_base(self) -> Fraction:
        """The unit of ``pts_ns`` and ``dts_ns``: ``Fraction(1, 1_000_000_000)``."""
    def __len__(self) -> int: ...

class PacketPublisher:
    """Publish encoded packets: Annex B H.264/HEVC or AV1 OBUs. ``codec``: "h264", "hevc",
    "av1" or an ``AV_CODEC_ID_*`` int. ``extradata``: Annex B parameter sets or the AV1
    sequence header (may be empty, then ``set_extradata`` once before the first packet).

    After ``os.fork()`` (or multiprocessing's "fork" start method) the child inherits this
    object, but the publisher stays the parent's: in the child, ``close()``, leaving a
    ``with`` block, garbage collection and the exit only let go of the child's copy (no
    shutdown, nothing removed, the parent goes on publishing). Do not publish through it in
    the child: create a publisher there (another key), or start children with "spawn".
    """

    codec_id: int
    def __init__(
        self,
        key: str,
        codec: Union[str, int] = "h264",
        extradata: Any = b"",
        ring_slots: int = 64,
        data_size: int = 8 << 20,
        runtime_dir: Optional[str] = None,
    ) -> None: ...
    @property
    def codec(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def closed(self) -> bool:
        """True once ``close()`` ran (or the ``with`` block was left)."""
    def set_extradata(self, extradata: Any) -> None:
        """Set the extradata (any buffer) once, before the first packet."""
    def publish(
        self,
        data: Any,
        pts_ns: Optional[int] = None,
        dts_ns: Optional[int] = None,
        keyframe: bool = False,
    ) -> int:
        """Publish one packet; returns its seq. ``data``: bytes, bytearray, memoryview, a NumPy
        array or any buffer-protocol / ``__array_interface__`` object (its bytes in C order);
        more bytes than the ring's ``data_size``: ValueError, before the source is read."""
    @property
    def subscriber_count(self) -> int: ...
    def wait_for_subscribers(self, count: int = 1, timeout: float = 5.0) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self) -> "PacketPublisher": ...
    def __exit__(self, *args: Any) -> bool: ...

class PacketSubscriber:
    """Subscribe to the packets of the publisher of ``key``.

    Iterating (``for packet in sub``, ``async for packet in sub``) yields packets until the
    publisher shuts down; an abnormal end raises ``cuframes.Error`` saying why, and
    ``end_reason`` names it. ``next(timeout)`` and ``await anext(timeout)`` return None after
    ``timeout`` seconds and raise ``cuframes.Error`` (DISCONNECTED) at any end.

    ``wait_publisher``, ``handshake_timeout``, ``read_timeout``, ``spin``, ``publisher_uid``
    and the deprecated ``connect_timeout``: as for ``Subscriber``. ``reconnect``: seconds to
    wait for a restarted publisher of the key and go on at its newest keyframe (flagged as a
    discontinuity); None: the stream ends when the publisher goes.
    ``max_packet_ring_size``: the largest data ring (bytes) to map; a larger one is refused
    (``cuframes.Error``, NO_MEMORY). None: 256 MiB. ``max_packet_size``: the largest packet
    (bytes) to read; a larger one is skipped and the stream resumes at the next keyframe,
    flagged as a discontinuity. None: 64 MiB.

    After ``os.fork()`` (or multiprocessing's "fork" start method) the child inherits this
    object, but the subscription stays the parent's: in the child, ``close()``, garbage
    collection and the exit only let go of the child's copy (no UNSUBSCRIBE: the parent goes
    on reading). Do not read through it in the child (it would take the parent's messages):
    connect a new subscriber there.
    """

    codec_id: int
    def __init__(
        self,
        key: str,
        name: str = "python",
        runtime_dir: Optional[str] = None,
        *,
        wait_publisher: float = 0.0,
        handshake_timeout: float = 5.0,
        read_timeout: Optional[float] = None,
        reconnect: Optional[float] = None,
        spin: float = 0.0,
        max_packet_ring_size: Optional[int] = None,
        max_packet_size: Optional[int] = None,
        publisher_uid: Optional[int] = None,
        connect_timeout: Optional[float] = None,
    ) -> None: ...
    @property
    def codec(self) -> str:
        """"h264", "hevc", "av1" (or "codec-N")."""
    @property
    def extradata(self) -> bytes: ...
    def next(self, timeout: Optional[float] = None) -> Optional[Packet]:
        """The next packet, or None after ``timeout`` seconds. Without a timeout: waits
        ``read_timeout`` (then ``cuframes.Error`` TIMEOUT), or forever. At the end of the
        stream, whatever the reason: ``cuframes.Error`` with code DISCONNECTED."""
    def __iter__(self) -> Iterator[Packet]: ...
    def __next__(self) -> Packet: ...
    def __aiter__(self) -> AsyncIterator[Packet]: ...
    def __anext__(self) -> Awaitable[Packet]: ...
    def anext(self, timeout: Optional[float] = None) -> Awaitable[Optional[Packet]]:
        """Awaitable ``next()``; a packet that arrives for a task cancelled meanwhile is kept
        for the next read."""
    @property
    def key(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def end_reason(self) -> Optional[str]:
        """As ``Subscriber.end_reason``."""
    def close(self) -> None: ...
    def __enter__(self) -> "PacketSubscriber": ...
    def __exit__(self, *args: Any) -> bool: ...

def host_copy_count() -> int:
    """Host<->device copies this process's cuframes has made (0 on a zero-copy CUDA path)."""
    ...
