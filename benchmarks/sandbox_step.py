"""A batch of 32 tool rollouts, each with one python call, with the sandboxed tool and with an unsandboxed one.

    python benchmarks/sandbox_step.py [--rollouts 32] [--rounds 5]

The rollouts are `vf.ToolEnv(tools=[python])`'s, sampled from tests/fake_openai.py's scripted server (a call, then
the answer), so the batch's time is the environment's: the tool calls and the loop around them, without the model's
generation, which in a real step comes on top of both sides alike. The ratio is therefore the most the sandbox can
add to a step. Prints each side's median batch time over the rounds (alternated) and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_openai import FakeOpenAI  # noqa: E402

import vfrl as vf  # noqa: E402
from vfrl.tools import python  # noqa: E402

CALL = "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": "print(sum(range(10**5)))"}}) + \
    "</tool_call>"


async def unsandboxed_python(code: str) -> str:
    """The same tool without isolation: a plain subprocess of this Python."""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-I", "-c", code, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return (out + err).decode()[:1000]


unsandboxed_python.__name__ = "python"


def policy(prompt: str) -> str:
    return "4999950000" if "<|im_start|>tool" in prompt else CALL


async def batch(tool, n: int) -> float:
    env = vf.ToolEnv(dataset=[{"question": "sum?", "answer": "4999950000"}], tools=[tool], max_turns=3)
    t0 = time.perf_counter()
    rollouts = await env.run_group(FakeOpenAI(policy), "m", 0, n, {"max_tokens": 400}, asyncio.Semaphore(n))
    elapsed = time.perf_counter() - t0
    tools = [m["content"] for r in rollouts for m in r.completion if m["role"] == "tool"]
    assert tools == ["4999950000\n"] * n, tools[:3]
    return elapsed


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rollouts", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    await batch(python, 2)  # the one-time isolation check
    times = {"sandboxed": [], "unsandboxed": []}
    for _ in range(a.rounds):
        times["unsandboxed"].append(await batch(unsandboxed_python, a.rollouts))
        times["sandboxed"].append(await batch(python, a.rollouts))
    medians = {k: round(statistics.median(v), 3) for k, v in times.items()}
    print(json.dumps({"batch_s": medians, "ratio": round(medians["sandboxed"] / medians["unsandboxed"], 2)}))


if __name__ == "__main__":
    asyncio.run(main())
