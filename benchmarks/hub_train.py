"""Train one community package unchanged with `vf-rl` and the real model, as a new user would, and check what is left.

    python benchmarks/hub_train.py PKG_DIR [--env-args JSON] [--steps 5] [--max-tokens 48] [--sandbox local] [--out DIR]

PKG_DIR is a package folder of the hub (e.g. prime-environments' environments/mastermind; nothing of it is kept
here). It is installed with `vf-install --path PKG_DIR` into a venv of its own layered on vfrl's .venv (a .pth file
reads .venv's site-packages after the layer's own), so its dependencies come from PyPI into the layer and .venv
never changes. Then `vf-rl @ OUT/config.toml --no-attach`, run by the layer's python, trains it with
SmolLM2-135M-Instruct (fp32, LoRA r16, 4 examples x 4 rollouts a step). Prints one JSON line: the exit code, the
wall time, each step's reward and the processes of the run left afterwards (none expected).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"
SITE = Path("lib") / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def layered_venv(path: Path) -> Path:
    """A venv whose own site-packages come first and .venv's after them, with vfrl's console scripts run by its
    own python (vf-rl starts the panes' vf-train and vf-vllm from beside the python it runs on); returns its bin."""
    from importlib.metadata import entry_points

    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
        (path / SITE / "zz_vfrl.pth").write_text(f"import site; site.addsitedir({str(VENV / SITE)!r})\n")
        for ep in entry_points(group="console_scripts"):
            if ep.dist is not None and ep.dist.name == "vfrl":
                module, func = ep.value.split(":")
                script = path / "bin" / ep.name
                script.write_text(f"#!{python}\nfrom {module} import {func}\n{func}()\n")
                script.chmod(0o755)
    return path / "bin"


def config(module: str, env_args: dict, steps: int, max_tokens: int, run_name: str, sandbox: str) -> dict:
    return {
        "model": str(ROOT / "models" / "smollm2-135m-instruct"),
        "env": {"id": module, "args": env_args, "sandbox": sandbox},
        "inference": {"args": {"dtype": "float32", "max_model_len": 2048, "enforce_eager": True,
                               "disable_log_stats": True, "disable_uvicorn_access_log": True}},
        "trainer": {"args": {
            "run_name": run_name, "use_lora": True, "lora_rank": 16, "lora_alpha": 32, "lora_sync": "merged",
            "learning_rate": 3e-4, "lr_scheduler_type": "constant", "rollouts_per_example": 4, "batch_size": 16,
            "micro_batch_size": 8, "max_steps": steps, "max_tokens": max_tokens, "max_seq_len": 1536,
            "temperature": 1.0, "eval_strategy": "no"}},
    }


def leftovers(run_dir: Path) -> list[str]:
    """Processes that still name the run's directory or config on their command line."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()[1:]
    return [line.strip() for line in out if str(run_dir) in line and "ps -eo" not in line]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("package", type=Path)
    p.add_argument("--env-args", default="{}")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--sandbox", choices=["hosted", "local"], default="hosted", help="env.sandbox (SandboxEnv packages)")
    a = p.parse_args()
    pkg = a.package.resolve()
    module = pkg.name
    out = (a.out or Path("/tmp/hub_train") / module).resolve()
    out.mkdir(parents=True, exist_ok=True)
    bin_dir = layered_venv(out / "venv")
    t0 = time.time()
    install = subprocess.run([str(bin_dir / "vf-install"), "--path", str(pkg)], capture_output=True, text=True, cwd=out)
    (out / "install.log").write_text(install.stdout + install.stderr)
    if install.returncode != 0:
        print(json.dumps({"package": module, "step": "install", "exit": install.returncode,
                          "said": (install.stderr or install.stdout).strip().splitlines()[-1:]}))
        sys.exit(1)
    (out / "config.toml").write_text(tomli_w.dumps(config(module, json.loads(a.env_args), a.steps, a.max_tokens,
                                                          run_name=f"hub-{module}", sandbox=a.sandbox)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    t1 = time.time()
    run = subprocess.run([str(bin_dir / "vf-rl"), "@", str(out / "config.toml"), "--no-attach"], cwd=out, env=env,
                         capture_output=True, text=True)
    (out / "vf-rl.log").write_text(run.stdout + run.stderr)
    run_dir = out / "outputs" / f"hub-{module}"
    metrics = run_dir / "metrics.jsonl"
    steps = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    rewards = [round(s["reward_mean"], 3) for s in steps if "reward_mean" in s]
    time.sleep(2)  # the panes' epilogues end the server; give them the moment they take
    print(json.dumps({
        "package": module, "exit": run.returncode, "install_s": round(t1 - t0, 1), "train_s": round(time.time() - t1),
        "steps": len(rewards), "rewards": rewards, "last_line": (run.stdout + run.stderr).strip().splitlines()[-1:],
        "left_running": leftovers(run_dir)}))
    sys.exit(run.returncode)


if __name__ == "__main__":
    main()
