"""Evidence for docs/full_finetuning.md: vLLM's stock in-place reload vs vfrl's, on the CPU build.

    .venv/bin/python benchmarks/cpu_reload_root_cause.py

Starts vf-vllm in full-weight mode on tiny-reverse (tied embeddings, fp32), moves every parameter
(N(0, 0.05) noise), then: (1) vLLM's own `reload_weights(weights_path=...)` through /collective_rpc,
(2) vfrl's `vfrl_reload_weights` (the same reload, then the packed layers re-dispatched). After each
it resets the prefix cache, reports the largest |vLLM - HF| sampled-token logprob and asks the
workers which packed GEMM handles disagree with `F.linear` on their layer's current weight.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from full_weight_sync import serve  # noqa: E402
from test_full_ft_parity import API_KEY, load, max_logprob_gap, perturbed, sample  # noqa: E402


def main() -> None:
    tiny = ROOT / "models" / "tiny-reverse"
    with tempfile.TemporaryDirectory() as d, serve(tiny, Path(d)) as (url, _):
        root = url.removesuffix("/v1")
        headers = {"Authorization": f"Bearer {API_KEY}"}

        def rpc(method, *args, **kwargs):
            r = httpx.post(root + "/collective_rpc", json={"method": method, "args": list(args), "kwargs": kwargs},
                           headers=headers, timeout=120)
            r.raise_for_status()
            return r.json()["results"][0] if r.content else None

        def report(label, model):
            httpx.post(root + "/reset_prefix_cache", headers=headers).raise_for_status()
            gap = max_logprob_gap(model, sample(url, str(tiny)))
            print(json.dumps({"after": label, "max_logprob_gap_vs_hf": gap,
                              "stale_packed_layers": rpc("vfrl_stale_packed_layers")["stale"]}), flush=True)

        report("nothing (base model)", load(tiny))
        new = perturbed(load(tiny), seed=1)
        new.save_pretrained(Path(d) / "new")
        rpc("reload_weights", weights_path=str(Path(d) / "new"))
        report("vLLM reload_weights", new)
        rpc("vfrl_reload_weights", str(Path(d) / "new"), "1")
        report("vfrl_reload_weights", new)


if __name__ == "__main__":
    main()
