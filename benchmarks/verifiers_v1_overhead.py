"""Evidence for docs/environments.md ("verifiers 0.4 environments"): what a rollout costs through a
verifiers 0.4 package against the same task written with vfrl's own API, on the same vLLM server.

    .venv/bin/python benchmarks/verifiers_v1_overhead.py [--model models/smollm2-135m-instruct] [--rounds 3] [--bounds]
                                                            # needs vfrl's verifiers extra and uv

Starts one vf-vllm on the embedded tiny model (or --model: the real one makes sampling, not the harness, the larger
part) with `--enable-scale-out`, then samples with the trainer's Orchestrator: the same six words, system prompt
and exact-match reward as a vfrl SingleTurnEnv (chat completions), and tests/v1_pkgs/v1_reverse, a verifiers 0.4
package (its interception server, client-side rendering, /inference/v1/generate), whose chat loop runs in this
process (vfrl_chat_harness, vfrl's default; a group's first turns as one request with `n`), the same with a request
per episode (verifiers' own train client alone), in a uv-script process per rollout (verifiers' `null` harness),
and in verifiers' env server with two worker processes (`env.workers = 2`); with `--bounds`, also through the two
harnesses of benchmarks/v1_harness_bounds (what is left with a chat loop of one POST, and with no model call at all:
those episodes are timed through verifiers' `run_slot`, as they give nothing to train). For each, after a warm-up:
one rollout alone (latency), a batch of 8 (4 examples x 2) at max_concurrent 8, and a batch of 32 (4 examples x 8) at
max_concurrent 32, in `--rounds` rounds (3) that take each environment in turn (a neighbour's load falls on all of
them). The start-up heap is frozen first, as vf-train freezes its own (heap.py), with the model loaded as vf-train
has it by then. Prints JSON: each measure's values
and their median, and for the batch of 32 the CPU seconds it cost this process (the trainer's side), vLLM's
processes and the env server's.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "v1_pkgs"))  # the workload: the tests' verifiers 0.4 package
BOUNDS = ROOT / "benchmarks" / "v1_harness_bounds"  # harnesses that bound what a chat harness could save

from vfrl.testing import free_port, vf_vllm  # noqa: E402


def vfrl_twin():
    """The v1_reverse task written with vfrl's API."""
    import vfrl
    from v1_reverse import WORDS

    def exact(completion, answer) -> float:
        return float(completion[-1]["content"].strip() == answer)

    return vfrl.SingleTurnEnv(dataset=[{"question": w, "answer": w[::-1]} for w in WORDS],
                              system_prompt="Reverse the text.", rubric=vfrl.Rubric(funcs=[exact], weights=[1.0]))


def cpu_seconds(processes) -> float:
    """User + system CPU seconds of `processes` so far (one that has ended counts 0)."""
    from cpu_time import cpu_by_name  # beside this script

    return sum(cpu_by_name(processes).values())


async def episodes_only(env, client, model: str, batch: int, per_example: int) -> float:
    """Seconds for `batch` verifiers episodes (`per_example` of each example), run by verifiers' `run_slot` alone:
    for a harness whose episodes give the Orchestrator nothing to train."""
    await env._open(client)
    env.rows(False)  # the dataset is read when first needed: env.tasks with it
    context = env.context(client, model, {"temperature": 1.0, "max_tokens": 12})
    slots = [env.v1_env.slots(env.tasks[i // per_example % len(env.tasks)])[0] for i in range(batch)]
    t0 = time.perf_counter()
    await asyncio.gather(*(env.v1_env.run_slot(slot, context) for slot in slots))
    return time.perf_counter() - t0


async def timed(env, client, model: str, batch: int, per_example: int = 2) -> float:
    if getattr(env, "episodes_only", False):
        return await episodes_only(env, client, model, batch, min(batch, per_example))
    from vfrl.config import TrainerArgs
    from vfrl.rollouts.orchestrator import Orchestrator

    args = TrainerArgs(batch_size=batch, rollouts_per_example=min(batch, per_example), max_tokens=12,
                       eval_strategy="no", max_concurrent=max(batch, 8), rollout_timeout=600)
    t0 = time.perf_counter()
    out = await Orchestrator(env, client, args.generation).generate(0, model, 0)
    assert len(out.rollouts) == batch, out.warning
    return time.perf_counter() - t0


def main() -> None:
    import argparse

    from openai import AsyncOpenAI

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-reverse")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bounds", action="store_true", help="also the harnesses of benchmarks/v1_harness_bounds")
    args = parser.parse_args()
    model = args.model.resolve()

    import os

    from vfrl.envs.loader import load_environment
    from vfrl.envs.verifiers_v1 import V1Environment
    from vfrl.trainer.heap import freeze_long_lived

    key = "bench-key"
    sys.path.insert(0, str(BOUNDS))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "v1_pkgs"), str(BOUNDS)])
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        config = Path(tmp) / "config.toml"
        config.write_text(tomli_w.dumps({"model": str(model), "env": {"id": "v1-reverse"}, "inference": {
            "port": port, "args": {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True}}}))
        t0 = time.perf_counter()
        v1 = load_environment("v1-reverse")  # the chat loop in this process
        load_v1 = time.perf_counter() - t0
        v1_per_episode = load_environment("v1-reverse")  # verifiers' train client: a request per episode
        v1_per_episode.group_first_turns = False
        v1_null = V1Environment("v1-reverse", harness="null")  # a uv-script process per rollout
        v1_workers = load_environment("v1-reverse")  # verifiers' env server, two worker processes
        v1_workers.use_workers(2)
        bounds = {}
        if args.bounds:
            bounds = {"bound_one_post": V1Environment("v1-reverse", harness="bound_one_post"),
                      "bound_no_model_call": V1Environment("v1-reverse", harness="bound_no_model_call")}
            bounds["bound_no_model_call"].episodes_only = True
        # vf-train has torch, transformers and the model loaded when it freezes its heap; here the renderer's first
        # rollout would import them after the freeze, and every full collection of the batches would walk them
        from transformers import AutoModelForCausalLM, AutoTokenizer

        AutoTokenizer.from_pretrained(model), AutoModelForCausalLM.from_pretrained(model)
        freeze_long_lived()  # as vf-train does before its loop (heap.py): no full collection walks the start-up
        with vf_vllm(config, port, key, Path(tmp) / "server.log") as base_url:
            async def run():
                import psutil

                client = AsyncOpenAI(base_url=base_url, api_key=key)
                here = psutil.Process()
                vllm = [p for c in here.children() for p in [c, *c.children(recursive=True)]]  # vf-vllm's tree
                envs = {"vfrl": vfrl_twin(), "verifiers_v1_in_process": v1,
                        "verifiers_v1_in_process_per_episode": v1_per_episode, "verifiers_v1_null": v1_null,
                        "verifiers_v1_env_server_2_workers": v1_workers, **bounds}
                measures = {"single_rollout_s": (1, 2), "batch_of_8_s": (8, 2), "batch_of_32_s": (32, 8)}
                times = {name: {m: [] for m in [*measures, "batch_of_32_cpu_here_s", "batch_of_32_cpu_vllm_s",
                                                "batch_of_32_cpu_env_server_s"]} for name in envs}
                for env in envs.values():
                    await timed(env, client, str(model), 1)  # warm-up: first harness sync, first requests
                server = [p for c in here.children() if c.pid not in {v.pid for v in vllm}
                          for p in [c, *c.children(recursive=True)]]  # the env server: its broker and workers
                for _ in range(args.rounds):
                    for name, env in envs.items():
                        for m, (batch, per_example) in measures.items():
                            cpu = cpu_seconds([here]), cpu_seconds(vllm), cpu_seconds(server)
                            times[name][m].append(round(await timed(env, client, str(model), batch, per_example), 2))
                        times[name]["batch_of_32_cpu_here_s"].append(round(cpu_seconds([here]) - cpu[0], 2))
                        times[name]["batch_of_32_cpu_vllm_s"].append(round(cpu_seconds(vllm) - cpu[1], 2))
                        times[name]["batch_of_32_cpu_env_server_s"].append(round(cpu_seconds(server) - cpu[2], 2))
                for env in (v1, v1_per_episode, v1_null, v1_workers, *bounds.values()):
                    await env.aclose()
                return {"load_v1_s": round(load_v1, 2)} | {
                    name: {m: {"runs": t, "median": statistics.median(t)} for m, t in by.items()}
                    for name, by in times.items()}

            print(json.dumps(asyncio.run(run())))


if __name__ == "__main__":
    main()
