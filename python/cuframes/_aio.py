"""The asyncio side of ``Subscriber`` and ``PacketSubscriber`` (``await sub.anext()``,
``async for``), called by the extension.

The blocking wait runs on a daemon thread of cuframes' own (one per pending ``anext()``), not in
the event loop's default executor: idle subscribers would otherwise hold the executor's few
threads for as long as nothing arrives, and starve every other stream and every other user of
the executor (``asyncio.to_thread``, ``loop.getaddrinfo``). The wait leaves the item it read in
the subscriber's pending slot; the coroutine takes it from there once it resumes. A task
cancelled meanwhile therefore loses nothing: the item stays pending for the next read, and the
wait itself stops within 0.1 s of the cancellation.

A wait nobody will ever take the result of (its loop closed while it was pending) must not keep
the process alive nor be cut off by the interpreter's teardown in the middle of native code:
at exit, every wait still running is cancelled and joined (each stops within 0.1 s).
"""

import asyncio
import atexit
import threading
import time

# The waits now running: thread -> its cancel event.
_live = {}
_live_lock = threading.Lock()
# How long the exit waits for one wait to stop (each stops within a 0.1 s slice).
_EXIT_JOIN = 2.0


def _settle(fut, ok, value):
    # The awaiting task may have been cancelled meanwhile (then its item stays pending).
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def _wait(loop, fut, sub, left, iterating, cancel):
    try:
        value, ok = sub._wait_pending(left, iterating, cancel), True
    except BaseException as e:  # handed to the awaiting task, which raises it
        value, ok = e, False
    finally:
        with _live_lock:
            _live.pop(threading.current_thread(), None)
    try:
        loop.call_soon_threadsafe(_settle, fut, ok, value)
    except RuntimeError:
        # The loop is closed: nobody awaits this any more; an item read stays pending.
        pass


def _start(loop, fut, sub, left, iterating, cancel):
    t = threading.Thread(
        target=_wait,
        args=(loop, fut, sub, left, iterating, cancel),
        name="cuframes-anext",
        daemon=True,
    )
    with _live_lock:
        _live[t] = cancel
    try:
        t.start()
    except BaseException:
        with _live_lock:
            _live.pop(t, None)
        raise


@atexit.register
def _stop_waits():
    with _live_lock:
        live = list(_live.items())
    for _, cancel in live:
        cancel.set()
    for t, _ in live:
        t.join(_EXIT_JOIN)


async def next_item(sub, timeout, iterating):
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        cancel = threading.Event()
        fut = loop.create_future()
        _start(loop, fut, sub, left, iterating, cancel)
        try:
            ready = await fut
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
