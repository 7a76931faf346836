"""vf-train's long-lived objects kept out of the garbage collector's full passes.

After start-up vf-train holds about half a million Python objects that live as long as the run: torch's and
transformers' modules, the model, the tokenizer, the environment and its dataset. Every full (generation 2)
collection walks all of them, and a run makes enough new container objects (rollouts, messages, JSON replies) to
start one every few steps: on the quick start (2-core EPYC) 23 in 150 steps, 0.24-0.36 s each, stalling the step
they land in. `gc.freeze()` moves every object alive into a permanent generation that collections skip; what is
made later is collected as before. vf-train does it once, when the trainer is built and before its loop, after a
collection, so that nothing already garbage is kept (docs/benchmarks.md, lever 24). The Python API leaves the
user's process as it is.

At exit the heap is unfrozen, so that Python's last collection frees it as before: a frozen object is never
collected, and extension modules that count their objects at teardown (triton's nanobind bindings, which torch
loads) would print a "nanobind: leaked ..." report under the run's summary.
"""

from __future__ import annotations

import atexit
import functools
import gc


@functools.cache  # once per process
def freeze_long_lived() -> None:
    gc.collect()
    gc.freeze()
    atexit.register(gc.unfreeze)
