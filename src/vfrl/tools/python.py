"""`python`: the tool of verifiers' tool-training guide, run in vfrl's local sandbox (vfrl/sandbox/local.py).

The code runs as `python -c CODE` with this Python (its installed libraries: numpy, sympy, ... where installed),
in a new sandbox per call: no network, nothing of the user's, a fresh working folder, 10 s of wall time. What it
prints comes back (stdout, then stderr), or its error, cut to MAX_CHARS; the model reads every failure as text.
"""

from __future__ import annotations

import sys

from vfrl.sandbox.local import Limits, run

MAX_CHARS = 1000
LIMITS = Limits(wall_s=10.0, cpu_s=10, memory_mb=1024, output_bytes=64_000)


def cut(text: str, limit: int = MAX_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"... (cut to {limit} characters)"


async def python(code: str) -> str:
    """Runs a block of Python code and returns what it printed, or its error.

    Args:
        code: A block of Python code; print() what you want to see.

    Returns:
        What the code printed (stdout, then stderr), or the error, cut to 1000 characters.
    """
    result = await run([sys.executable, "-I", "-c", code], LIMITS)
    if result.killed == "wall time":
        return cut(f"Error: the code ran past its {LIMITS.wall_s:g} s limit and was stopped\n{result.stdout}")
    if result.killed == "output":
        return cut(f"{result.stdout}{result.stderr}") + " (output stopped at its limit)"
    if result.exit_code != 0:
        error = result.stderr.strip() or f"exit code {result.exit_code}"
        return cut(f"Error: {error}" if not result.stdout else f"{result.stdout}\nError: {error}")
    return cut(result.stdout + result.stderr) or "(no output)"
