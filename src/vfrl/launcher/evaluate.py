"""`vf-rl eval RUN_DIR [--step N]`: a run's policy on the run's eval split, as eval during training ran it.

The run's own config (its environment and args, its sampling, its seeds: the same `num_eval_examples` rows x
`eval_rollouts_per_example` with the same request seeds), a vf-vllm of its own (the base model with the adapter
loaded, or a full fine-tune's weights folder), the trainer's own eval code (Orchestrator.evaluate). Results go to
RUN_DIR/evals/step-N/: results.json, rollouts.jsonl and the server's log.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from vfrl.config import load_config, write_config
from vfrl.launcher.run_policy import Policy
from vfrl.run_dir import RunDir


def evaluate_policy(run_dir: Path, policy: Policy, say=print) -> dict[str, float]:
    """Serve `policy` of `run_dir`, run the run's eval on it, stop the server; returns the eval's stats."""
    from vfrl.grpo import start_server, stop_server
    from vfrl.launcher.machine import detect_machine
    from vfrl.launcher.plan import make_plan
    from vfrl.trainer.inference_watch import own_server_url, wait_for_server

    cfg = load_config(RunDir(run_dir).config)
    out = run_dir / "evals" / f"step-{policy.step}"
    RunDir(out).logs.mkdir(parents=True, exist_ok=True)
    cfg.inference.base_url = None  # its own server, whatever the run trained against
    if not policy.adapter:  # a full fine-tune: its weights folder is the model served, with the base's tokenizer
        cfg.inference.args.setdefault("tokenizer", cfg.model)
        cfg.model = str(policy.path)
    plan = make_plan(cfg, out, f"eval-{policy.step}", detect_machine())
    plan.config.inference.port = 0  # a free port vLLM binds itself (inference/served_port.py)
    write_config(plan.config, RunDir(out).config)
    say(f"vf-rl eval: serving step {policy.step} of {run_dir} ({policy.path}); the server's log: "
        f"{RunDir(out).log('inference')}")
    server, url, api_key = start_server(plan, RunDir(out))
    try:
        url = own_server_url(plan.config.inference, RunDir(out), 900)
        wait_for_server(url, 900, RunDir(out).inference_pid, api_key)
        model = served_policy(url, api_key, policy, out) if policy.adapter else plan.config.model
        stats, rollouts = asyncio.run(run_eval(plan.config, url, api_key, model))
    finally:
        stop_server(server)
    (out / "results.json").write_text(json.dumps({"step": policy.step, "policy": str(policy.path), **stats},
                                                  indent=1))
    from vfrl.trainer.run_log import write_rollouts

    write_rollouts(out / "rollouts.jsonl", rollouts)
    return stats


def served_policy(url: str, api_key: str, policy: Policy, out: Path) -> str:
    """Load the adapter into the server under the name training gave it; returns that name."""
    from vfrl.rollouts.weight_sync import AdapterSync

    return AdapterSync(url, api_key, out / "adapters").load(policy.path, policy.step)


async def run_eval(cfg, url: str, api_key: str, model: str):
    from openai import AsyncOpenAI

    from vfrl.envs.loader import load_configured_environment
    from vfrl.rollouts.evaluation import examples_to_evaluate
    from vfrl.rollouts.orchestrator import Orchestrator

    env = load_configured_environment(cfg.env.id, cfg.env.args, cfg.env.renderer, cfg.env.workers, cfg.env.sandbox)
    examples = examples_to_evaluate(env, cfg.args.evaluation)
    client = AsyncOpenAI(base_url=url, api_key=api_key, timeout=cfg.args.generation_timeout)
    try:
        return await Orchestrator(env, client, cfg.args.generation).evaluate(model, examples)
    finally:
        await client.close()
        await env.aclose()
