"""A merged-LoRA push of the quick start, as one call (vf-vllm's /vfrl/reload_weights, what the trainer does)
against vLLM's own four dev endpoints (/pause?mode=wait, /collective_rpc, /reset_prefix_cache, /resume), and
against one call with the merged weights written by save_pretrained (before 2026-11-26; now safetensors'
save_file), on one real vf-vllm, in turn, so all see the same server and the same machine.

    .venv/bin/python benchmarks/push_calls.py [--pushes 20]

The server is started from configs/rl/quickstart.toml (LoRA served merged: full-weight mode) and pins itself
to vLLM's cores; this process pins itself to the others, as vf-train does. Each push first moves the
adapter (B, A += 1e-3 noise), so every push is a new policy. Prints, and writes to
--out (docs/benchmarks/push_calls.json), the medians over pushes 3..N of: the save (merge, write the base weights,
write the adapter), each HTTP call (for /vfrl/reload_weights, also the worker's own reload and repack of the
CPU build's packed layers), and the whole push.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w
import torch

ROOT = Path(__file__).resolve().parents[1]

from vfrl.cpu_cores import pin  # noqa: E402
from vfrl.testing import free_port, vf_vllm  # noqa: E402
from vfrl.rollouts.push_files import merged_state_dict  # noqa: E402
from vfrl.rollouts.weight_sync import MergedLoraSync  # noqa: E402

API_KEY = "bench"


def lora_model(model_dir: Path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))


def moved(model, seed: int):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 1e-3)
    return model


def timed(calls: dict, name: str, fn):
    t0 = time.perf_counter()
    out = fn()
    calls[name] = time.perf_counter() - t0
    return out


class SavePretrainedSync(MergedLoraSync):
    """The merged weights as the trainer wrote them before: save_pretrained (config, generation config, shards)."""

    def write(self, model, directory: Path) -> None:
        model.get_base_model().save_pretrained(directory, state_dict=merged_state_dict(model), safe_serialization=True)


KINDS = ("one call", "one call, save_pretrained", "four calls")


def four_calls(sync: MergedLoraSync, path: Path, version: int, calls: dict) -> None:
    """What the trainer did before /vfrl/reload_weights (vLLM's own endpoints, dev mode)."""
    timed(calls, "/pause?mode=wait", lambda: sync._post("/pause", params={"mode": "wait", "clear_cache": "false"}))
    r = timed(calls, "/collective_rpc", lambda: sync._post(
        "/collective_rpc", json={"method": "vfrl_reload_weights", "args": [str(path.resolve()), str(version)]}))
    assert r.json()["results"][0]["version"] == version
    timed(calls, "/reset_prefix_cache", lambda: sync._post("/reset_prefix_cache"))
    timed(calls, "/resume", lambda: sync._post("/resume"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pushes", type=int, default=20, help="pushes of each kind")
    parser.add_argument("--out", default="docs/benchmarks/push_calls.json",
                        help="where the JSON goes, from the repo root")
    args = parser.parse_args()
    load_before = os.getloadavg()

    quickstart = tomllib.loads((ROOT / "configs/rl/quickstart.toml").read_text())
    model_dir = (ROOT / quickstart["model"]).resolve()
    tmp = Path(tempfile.mkdtemp(prefix="push-calls-"))
    port = free_port()
    config = {"model": str(model_dir), "env": quickstart["env"],
              "inference": {**quickstart["inference"], "port": port},
              "trainer": {"args": {"use_lora": True, "lora_sync": "merged"}}}
    (tmp / "config.toml").write_text(tomli_w.dumps(config))
    rows = {kind: [] for kind in KINDS}
    with vf_vllm(tmp / "config.toml", port, API_KEY, tmp / "server.log") as base_url:
        vllm_cores = {int(c) for c in os.sched_getaffinity(int((tmp / "server.pid").read_text()))}
        pin(",".join(str(c) for c in sorted(set(os.sched_getaffinity(0)) - vllm_cores) or sorted(vllm_cores)))
        torch.set_num_threads(1)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # as vf-train does
        model = lora_model(model_dir)
        now = MergedLoraSync(base_url, API_KEY, tmp / "weights", tmp / "adapters", served_name=str(model_dir))
        before = SavePretrainedSync(base_url, API_KEY, tmp / "weights-pretrained", tmp / "adapters",
                                    served_name=str(model_dir))
        for i in range(len(KINDS) * args.pushes):
            kind = KINDS[i % len(KINDS)]
            sync = before if kind == "one call, save_pretrained" else now
            calls: dict[str, float] = {}
            moved(model, i)
            t0 = time.perf_counter()
            path = timed(calls, "save", lambda: sync.save(model, i + 1))
            if kind != "four calls":
                timed(calls, "/vfrl/reload_weights", lambda: sync.load(path, i + 1))
                calls |= {"of it, the worker's reload": sync.last["load_s"], "and repack": sync.last["repack_s"]}
            else:
                four_calls(sync, path, i + 1, calls)
            timed(calls, "save_aside", lambda: sync.save_aside(model, i + 1))  # vf-train writes it during the load
            calls["push"] = time.perf_counter() - t0
            rows[kind].append(calls)
    medians = {kind: {name: statistics.median(r[name] for r in rs[2:]) * 1000 for name in rs[0]}
               for kind, rs in rows.items()}
    for kind, m in medians.items():
        print(f"{kind}: " + ", ".join(f"{name} {ms:.1f} ms" for name, ms in m.items()))
    out = ROOT / args.out
    out.write_text(json.dumps({"command": f"benchmarks/push_calls.py --pushes {args.pushes} --out {args.out}",
                               "load_before": load_before, "medians_ms": medians, "pushes": rows}, indent=1))
    print("written", out)


if __name__ == "__main__":
    main()
