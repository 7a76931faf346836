"""A step that may take long says so when it does: a line once it has run `AFTER_S`, and one when it ends.

Building a dataset can take a while (a verifiers taskset that generates its 1,000 tasks, reasoning_gym_v1 with its
defaults: 24 s on the 2-core machine; a builder that downloads) and runs before the first step's line: without a
word, vf-rl's console looks hung. A fast step prints nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

AFTER_S = 3.0


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextmanager
def said_if_slow(doing: str, done: str = "done") -> Iterator[dict]:
    """`doing` (e.g. "my-env: building its dataset") is said once the block has run AFTER_S seconds, and then, when
    it ends, "<doing>: <done> in N s" ("failed" when it raised); the block may put `done` in the dict it gets
    (e.g. "1000 rows")."""
    said, start, outcome = threading.Event(), time.monotonic(), {"done": done}

    def still_running() -> None:
        say(f"{doing} (taking a while)")
        said.set()

    timer = threading.Timer(AFTER_S, still_running)
    timer.daemon = True
    timer.start()
    try:
        yield outcome
    except BaseException:
        outcome["done"] = "failed"
        raise
    finally:
        timer.cancel()
        timer.join()  # a line being said now is out before the last one
        if said.is_set():
            say(f"{doing}: {outcome['done']} in {time.monotonic() - start:.1f}s")
