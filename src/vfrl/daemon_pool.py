"""Run sync code off the event loop so that a call that never returns can be given up on.

An event loop cannot interrupt a function it is running, so a sync reward function that hangs would
stall every rollout. Run in a thread, the loop can stop waiting for it at a time limit; the thread
itself cannot be stopped and is left to finish. The threads are daemons, so an abandoned one never
keeps the process alive at exit (a `ThreadPoolExecutor` joins its threads at exit, and would hang
there), and a new one starts whenever none is idle, so hung threads never hold up other calls.
Threads are reused: starting one per call costs several times a call on a pooled thread. At most
`size` calls per event loop run at once; one given up on no longer counts, so the threads number
`size` plus the hung ones.

A thread still inside native code (torch, a tokenizer) when the interpreter shuts down aborts the
process ("terminate called without an active exception", exit 134). `exit_process` gives busy threads
a moment, then leaves without interpreter shutdown if some still run.
"""

from __future__ import annotations

import asyncio
import os
import queue
import sys
import threading
import time
import weakref
from typing import Any, Callable, ClassVar


class DaemonPool:
    pools: ClassVar[weakref.WeakSet[DaemonPool]] = weakref.WeakSet()

    def __init__(self, name: str, size: int):
        self.name = name
        self.size = size
        self.slots: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its Semaphore(size)
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.idle = 0  # threads waiting for a job that no submitted job has claimed yet
        self.threads = 0
        self.lock = threading.Lock()
        DaemonPool.pools.add(self)

    def busy(self) -> int:
        """Threads running a job or about to take one."""
        with self.lock:
            return self.threads - self.idle

    def submit(self, job: Callable[[], None]) -> None:
        with self.lock:
            if self.idle:
                self.idle -= 1
            else:
                self.threads += 1
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


def wait_for_daemon_threads(timeout: float) -> bool:
    """Wait up to `timeout` s for every pool's threads to be idle; False if some are still running."""
    deadline = time.monotonic() + timeout
    while any(pool.busy() for pool in list(DaemonPool.pools)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def exit_process(code: int, grace: float = 5.0, hard: bool = False) -> None:
    """sys.exit(code), or os._exit(code) (no atexit hooks, no abort) when a pool thread is still running or
    the caller asks (`hard`: objects whose teardown must not run)."""
    if not wait_for_daemon_threads(grace) or hard:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
