"""What the local sandbox adds to a python tool call: the same code run sandboxed and unsandboxed, one at a time and
32 at once.

    python benchmarks/sandbox_overhead.py [--calls 40] [--concurrent 32]

Unsandboxed is `python -I -c CODE` as a plain subprocess (what a tool without isolation runs; a cleared
environment and an empty working folder, as the sandbox gives it); sandboxed is
`vfrl.sandbox.run` of the same command (bubblewrap, prlimit, setpriv as root). Prints the median and p95 wall time of
a call both ways and their difference, and the wall time of a batch of `--concurrent` calls both ways.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time

from vfrl.sandbox import run

CODE = "import math; print(sum(math.sqrt(i) for i in range(20000)))"
ARGV = [sys.executable, "-I", "-c", CODE]
EMPTY = tempfile.mkdtemp(prefix="vfrl-plain-")


async def plain() -> None:
    # as the sandbox starts it: a cleared environment, an empty working folder
    proc = await asyncio.create_subprocess_exec(*ARGV, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
                                                cwd=EMPTY)
    await proc.communicate()


async def sandboxed() -> None:
    result = await run(ARGV)
    assert result.ok, result


async def timed(call) -> float:
    t0 = time.perf_counter()
    await call()
    return time.perf_counter() - t0


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, round(0.95 * len(xs)) - 1)]


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--concurrent", type=int, default=32)
    a = p.parse_args()
    await sandboxed()  # the one-time isolation check
    single = {"plain": [], "sandboxed": []}
    for _ in range(a.calls):  # interleaved, so both see the same load
        single["plain"].append(await timed(plain))
        single["sandboxed"].append(await timed(sandboxed))
    batch = {}
    for name, call in (("plain", plain), ("sandboxed", sandboxed)):
        t0 = time.perf_counter()
        await asyncio.gather(*(call() for _ in range(a.concurrent)))
        batch[name] = time.perf_counter() - t0
    out = {
        "single_ms": {k: {"median": round(1000 * statistics.median(v), 1), "p95": round(1000 * p95(v), 1)}
                      for k, v in single.items()},
        "overhead_ms": {"median": round(1000 * (statistics.median(single["sandboxed"])
                                                - statistics.median(single["plain"])), 1),
                        "p95": round(1000 * (p95(single["sandboxed"]) - p95(single["plain"])), 1)},
        f"batch_of_{a.concurrent}_s": {k: round(v, 3) for k, v in batch.items()},
        "batch_ratio": round(batch["sandboxed"] / batch["plain"], 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
