"""`await in_daemon_thread(fn, ...)`: asyncio.to_thread for calls that may block on the vLLM server.

A weight push blocked on a hung server (an HTTP call waiting out its timeout) must not hold up the
trainer once the run is stopping: asyncio.to_thread's pool threads are joined when the event loop
closes and again at interpreter exit. A daemon thread is joined by neither; its result is dropped
if nobody waits for it any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, Callable


async def in_daemon_thread(fn: Callable[..., Any], *args: Any) -> Any:
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def settle(setter: Callable[[Any], None], value: Any) -> None:
        def apply() -> None:
            if not done.done():  # cancelled meanwhile
                setter(value)

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(apply)

    def run() -> None:
        try:
            result = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            settle(done.set_exception, e)
        else:
            settle(done.set_result, result)

    threading.Thread(target=run, name=getattr(fn, "__qualname__", "call"), daemon=True).start()
    return await done
