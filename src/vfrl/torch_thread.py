"""TorchThread: the one thread the trainer's torch work runs in, and a join that a Ctrl-C cannot break.

One thread, always the same, for the steps, the adapter and checkpoint saves and the collectives: a new
thread per step (asyncio.to_thread) gave each step a glibc malloc arena of its own, which kept the GBs the
step freed, until a run of a 19M-parameter model at 128 rollouts a step was OOM-killed.

The join on the way out raises no stop signal (stop_signals.noted). On Python 3.11 a KeyboardInterrupt landing in
Thread.join marks the thread stopped while it still runs (threading._wait_for_tstate_lock, bpo-45274), so
the interpreter no longer waits for it and finalizes under a thread inside torch: the process aborts
(exit 134 instead of 130). Seen in CI when Ctrl-C was pressed twice in the trainer pane.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

from vfrl import stop_signals


class TorchThread:
    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="torch")

    async def run(self, fn, *args):
        """fn(*args) in the torch thread, awaited from the event loop (which goes on generating meanwhile)."""
        return await self.submit(fn, *args)

    def submit(self, fn, *args) -> asyncio.Future:
        """fn(*args) in the torch thread; its result as a future of the running loop. A future, not a task: a loop
        that shuts down (asyncio.Runner's close after a Ctrl-C) cancels its tasks, and an awaiter that must see the
        step end (RLTrainer.train_step) can still await this."""
        return asyncio.get_running_loop().run_in_executor(self.pool, functools.partial(fn, *args))

    def join(self) -> None:
        """Wait for the work in flight to end; a Ctrl-C or SIGTERM meanwhile is noted, never raised (we are
        stopping)."""
        with stop_signals.noted():
            self.pool.shutdown(wait=True)
