"""Run sync code off the event loop so that a call that never returns can be given up on.

An event loop cannot interrupt a function it is running, so a sync reward function that hangs would
stall every rollout. Run in a thread, the loop can stop waiting for it at a time limit; the thread
itself cannot be stopped and is left to finish. The threads are daemons, so an abandoned one never
keeps the process alive at exit (a `ThreadPoolExecutor` joins its threads at exit, and would hang
there), and a new one starts whenever none is idle, so hung threads never hold up other calls.
Threads are reused: starting one per call cost ~0.5 ms here, three times a pooled call. At most
`size` calls per event loop run at once; one given up on no longer counts, so the threads number
`size` plus the hung ones.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import weakref
from typing import Any, Callable


class DaemonPool:
    def __init__(self, name: str, size: int):
        self.name = name
        self.size = size
        self.slots: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its Semaphore(size)
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.idle = 0  # threads waiting for a job that no submitted job has claimed yet
        self.lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self.lock:
            if self.idle:
                self.idle -= 1
            else:
                threading.Thread(target=self._work, daemon=True, name=self.name).start()
        self.jobs.put(job)

    def _work(self) -> None:
        while True:
            self.jobs.get()()
            with self.lock:
                self.idle += 1

    async def run(self, fn: Callable[[], Any]) -> Any:
        """`fn()` in one of the threads; awaiting it can be cancelled (the call runs on regardless)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if not future.done():  # given up on already
                (future.set_result if ok else future.set_exception)(value)

        def job() -> None:
            try:
                outcome = (True, fn())
            except BaseException as e:
                outcome = (False, e)
            try:
                loop.call_soon_threadsafe(settle, *outcome)
            except RuntimeError:  # the loop closed while fn ran
                pass

        async with self.slots.setdefault(loop, asyncio.Semaphore(self.size)):  # left when given up on
            self.submit(job)
            return await future
