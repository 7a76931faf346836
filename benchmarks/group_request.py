"""One request per group (n samples) against one request per rollout, on the quick start's batch shape.

    .venv/bin/python benchmarks/group_request.py [ROUNDS]     (default 4; the first round is a warm-up)

Starts `vf-vllm @ configs/rl/quickstart.toml` (the tiny model on the CPU, as the quick start serves it),
then sends the quick start's batch (16 prompts x 8 samples, <= 16 tokens, logprobs and token ids) both
ways: 128 chat requests with seeds s .. s+127, and 16 requests with `n = 8` (src/vfrl/envs/group_request.py).
Prints the wall time and this client's CPU time per batch, and checks that both ways return the same
token ids (vLLM draws child j of a request with seed s and n samples with seed s + j).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

import openai

from vfrl.grpo import stop_server
from vfrl.trainer.inference_watch import wait_for_server

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MODEL = "./models/tiny-reverse"
PROMPTS, SAMPLES = 16, 8


def messages(i: int) -> list[dict]:
    return [{"role": "system", "content": "Reverse the text."}, {"role": "user", "content": f"abcdefg{i}hij"}]


async def batch(client, grouped: bool) -> tuple[float, float, list[list[int]]]:
    kw = dict(model=MODEL, max_tokens=16, temperature=1.0, logprobs=True, extra_body={"return_token_ids": True})
    if grouped:
        calls = [client.chat.completions.create(messages=messages(i), n=SAMPLES, seed=1000 * i, **kw)
                 for i in range(PROMPTS)]
    else:
        calls = [client.chat.completions.create(messages=messages(i), seed=1000 * i + j, **kw)
                 for i in range(PROMPTS) for j in range(SAMPLES)]
    limit = asyncio.Semaphore(64)  # the trainer's default max_concurrent

    async def bounded(call):
        async with limit:
            return await call

    wall, cpu = time.perf_counter(), time.process_time()
    replies = await asyncio.gather(*(bounded(c) for c in calls))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    ids = [list(ch.token_ids) for r in replies for ch in sorted(r.choices, key=lambda ch: ch.index)]
    return wall, cpu, ids


async def compare(base_url: str, api_key: str, rounds: int) -> None:
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    results = {False: [], True: []}
    same = True
    for _ in range(rounds):
        per_rollout, grouped = await batch(client, False), await batch(client, True)
        same &= per_rollout[2] == grouped[2]
        results[False].append(per_rollout[:2])
        results[True].append(grouped[:2])
    print(f"load average before: {LOAD:.1f}; after: {os.getloadavg()[0]:.1f}; rounds after warm-up: {rounds - 1}")
    print("| requests per batch | wall s (median) | client CPU s (median) |\n|---|---|---|")
    for grouped, label in ((False, f"{PROMPTS * SAMPLES} (one per rollout)"),
                           (True, f"{PROMPTS} (one per group, n = {SAMPLES})")):
        rows = results[grouped][1:]
        print(f"| {label} | {statistics.median(w for w, _ in rows):.2f} "
              f"| {statistics.median(c for _, c in rows):.2f} |")
    print(f"same token ids both ways: {same}")
    await client.close()


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    api_key, port = secrets.token_urlsafe(16), 8123
    log = Path("/tmp/group_request_vllm.log")
    env = {**os.environ, "VFRL_API_KEY": api_key, "CUDA_VISIBLE_DEVICES": "", "VLLM_CPU_OMP_THREADS_BIND": "0"}
    with open(log, "w") as out:
        server = subprocess.Popen([str(BIN / "vf-vllm"), "@", "configs/rl/quickstart.toml", "--port", str(port)],
                                  cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_server(f"http://127.0.0.1:{port}/v1", timeout=600)
        asyncio.run(compare(f"http://127.0.0.1:{port}/v1", api_key, rounds))
    finally:
        stop_server(server)


LOAD = os.getloadavg()[0]

if __name__ == "__main__":
    main()
