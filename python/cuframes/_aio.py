"""The asyncio side of ``Subscriber`` and ``PacketSubscriber`` (``await sub.anext()``,
``async for``), called by the extension.

The blocking wait runs in the event loop's default executor and leaves the item it read in
the subscriber's pending slot; the coroutine takes it from there once it resumes. A task
cancelled meanwhile therefore loses nothing: the item stays pending for the next read, and the
wait itself stops within 0.1 s of the cancellation.
"""

import asyncio
import threading
import time


async def next_item(sub, timeout, iterating):
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        cancel = threading.Event()
        try:
            ready = await loop.run_in_executor(None, sub._wait_pending, left, iterating, cancel)
        except BaseException:
            # Cancelled (or the loop is going away): the wait stops at its next slice; what
            # it read by then stays pending.
            cancel.set()
            raise
        if not ready:
            return None
        item = sub._take_pending()
        # None: a concurrent reader took it; wait for the next one.
        if item is not None:
            return item
