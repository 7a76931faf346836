"""TorchThread: the one thread the trainer's torch work runs in, and a join that a Ctrl-C cannot break.

One thread, always the same, for the steps, the adapter and checkpoint saves and the collectives: a new
thread per step (asyncio.to_thread) gave each step a glibc malloc arena of its own, which kept the GBs the
step freed (the 19M benchmark model at 128 rollouts a step grew to 20 GiB and was OOM-killed).

The join on the way out ignores SIGINT, SIGTERM and SIGUSR2 (stop_signals.py). On Python 3.11 a KeyboardInterrupt landing in
Thread.join marks the thread stopped while it still runs (threading._wait_for_tstate_lock, bpo-45274), so
the interpreter no longer waits for it and finalizes under a thread inside torch: the process aborts
(exit 134 instead of 130). Seen in CI when Ctrl-C was pressed twice in the trainer pane.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

from vfrl.trainer.stop_signals import STOPS as STOP_SIGNALS



class TorchThread:
    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="torch")

    async def run(self, fn, *args):
        """fn(*args) in the torch thread, awaited from the event loop (which goes on generating meanwhile)."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, functools.partial(fn, *args))

    def join(self) -> None:
        """Wait for the work in flight to end; a Ctrl-C or SIGTERM meanwhile is ignored (we are stopping)."""
        with stop_signals_ignored():
            self.pool.shutdown(wait=True)


@contextlib.contextmanager
def stop_signals_ignored():
    """SIGINT, SIGTERM and SIGUSR2 ignored inside, then their handlers restored. Only the main thread receives signals
    and may set handlers; elsewhere (the Python API run from a thread) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, signal.SIG_IGN) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
