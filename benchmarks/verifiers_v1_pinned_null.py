"""Evidence for docs/environments.md ("The chat loop, in vf-train's process"): a verifiers 0.4 package whose roles
pin verifiers' `null` harness, sampled with those roles in vf-train's process (vfrl's default) and in verifiers'
process per turn (`V1Environment(..., harness="null")`), on the same vLLM server.

    PYTHONPATH=<folder holding the package> .venv/bin/python benchmarks/verifiers_v1_pinned_null.py ENV_ID \\
        [--model models/tiny-reverse] [--batch 16] [--per-example 2] [--max-tokens 16] [--rounds 3] \\
        [--max-model-len 1024]

Starts one vf-vllm (scale-out on) and samples `--batch` episodes (`--per-example` of each example) with the
trainer's Orchestrator, the two ways taking turns for `--rounds` rounds after a warm-up. Prints JSON: each way's
seconds a batch (values, median), the model turns of its rollouts and its dropped rollouts, so that the two are seen
to sample the same kind of episodes.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parents[1]


async def batch(env, client, model: str, size: int, per_example: int, max_tokens: int) -> tuple[float, dict]:
    from vfrl.config import TrainerArgs
    from vfrl.rollouts.orchestrator import Orchestrator

    args = TrainerArgs(batch_size=size, rollouts_per_example=per_example, max_tokens=max_tokens, temperature=1.0,
                       eval_strategy="no", max_concurrent=max(size, 8), rollout_timeout=600)
    t0 = time.perf_counter()
    out = await Orchestrator(env, client, args.generation).generate(0, model, 0)
    seconds = time.perf_counter() - t0
    turns = Counter(sum(m.get("role") == "assistant" for m in r.completion) for r in out.rollouts)
    return seconds, {"rollouts": len(out.rollouts), "turns": dict(sorted(turns.items())),
                     "dropped": out.metrics.get("rollouts_dropped", 0)}


def main() -> None:
    import argparse

    from openai import AsyncOpenAI

    from vfrl.envs.verifiers_v1 import CHAT_HARNESS, V1Environment
    from vfrl.testing import free_port, vf_vllm

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("env_id")
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-reverse")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--per-example", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-model-len", type=int, default=1024)
    args = parser.parse_args()
    model = str(args.model.resolve())
    envs = {"in_process": V1Environment(args.env_id, harness=CHAT_HARNESS),
            "null_process_per_turn": V1Environment(args.env_id, harness="null")}
    for env in envs.values():
        env.limit_tasks(args.batch)
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        config = Path(tmp) / "config.toml"
        config.write_text(tomli_w.dumps({"model": model, "env": {"id": args.env_id}, "inference": {
            "port": port, "args": {"dtype": "float32", "max_model_len": args.max_model_len, "enforce_eager": True}}}))
        with vf_vllm(config, port, "bench-key", Path(tmp) / "server.log") as base_url:
            async def run() -> dict:
                client = AsyncOpenAI(base_url=base_url, api_key="bench-key")
                for env in envs.values():  # warm-up: the serving resources, uv's first sync of the program
                    await batch(env, client, model, args.per_example, args.per_example, args.max_tokens)
                seen: dict = {name: {"seconds": [], "episodes": []} for name in envs}
                for _ in range(args.rounds):
                    for name, env in envs.items():
                        seconds, episodes = await batch(env, client, model, args.batch, args.per_example,
                                                        args.max_tokens)
                        seen[name]["seconds"].append(round(seconds, 2))
                        seen[name]["episodes"].append(episodes)
                for env in envs.values():
                    await env.aclose()
                for by in seen.values():
                    by["median_s"] = statistics.median(by["seconds"])
                return seen

            print(json.dumps(asyncio.run(run())))


if __name__ == "__main__":
    main()
