"""Chaos run (issue 42, item 2): the quick start while a seeded script kills a random process of the run at a
random moment, N times, and checks after each fault that nothing was lost, left behind or trained twice.

    .venv/bin/python benchmarks/chaos.py [--rounds 20] [--seed 0] [--steps 300] [--out chaos.json]
                                         [--dir /tmp/vfrl-chaos] [--reference RUN_DIR] [--keep]
                                         [--config CFG] [--victims A,B] [--save-steps 10] [--eval-steps 20]
                                         [--pause-scale 1]

First an uninterrupted reference run (same config and seed; `--reference` reuses one), then the chaos run:
`vf-rl @ configs/rl/quickstart.toml --detach --inference.port 0 --tmux-socket chaos-<pid>` with checkpoints every
10 steps, eval every 20 (64 examples) and `inference.max_restarts 1000` (vf-vllm heals every death of vLLM
while it serves). A `--config` with `inference.base_url` trains against that server instead (no inference
overrides; its API key from the config's api_key_var; the victims are then the run's own processes): the
suite's test_chaos.py runs three rounds so. Each round, drawn from random.Random(seed):
- a victim (of `--victims`, default all): vf-train (trainer.pid), vf-vllm (inference.pid), the vLLM API server
  (vf-vllm's child that is not the reaper), vLLM's engine core (recorded in inference.engines), the trainer pane's
  shell, the inference pane's shell, the tmux server of this script's own socket; SIGKILL, or SIGTERM one time
  in five;
- a phase to aim at, polled for from outside before the kill: `checkpoint` (a checkpoints/.step-N.tmp dir),
  `push` (weights/.step-N.tmp or adapters/.policy-N.tmp), `eval` (a step N % eval_steps == 0 logged, its eval
  line not yet), `generation` (any other moment; the trainer trains step n while vLLM samples batch n+1).
  The phase recorded is the one seen right before the kill (the aim gives up after 90 s).
Then it waits for the run to react: `healed` (vf-vllm started vLLM again, the trainer logged 2 steps after
it), `went on` (no restart, no stop: 5 steps logged), or `stopped` (vf-train gone). A stopped run must leave
no process (every process with the run's VFRL_RUN_DIR marker but `vf-rl watch` gone within 60 s; after
`vf-rl stop`, none at all), and is continued with the command vf-train printed ("continue with: ..."), else
with `--resume latest` (vf-train killed -9, nothing printed), else started afresh (no checkpoint yet).
A run that reached max_steps is started afresh (a new run dir) too; a round whose victim is not there (the run
ended while it waited) injects nothing, is kept under "skipped" and drawn again.

Checks after each round: metrics.jsonl has each training step 1..n once (and each eval step at most once);
every checkpoint on disk loads (its adapter's safetensors, trainer_state.pt with torch.load, trainer_state.json,
the pending batch through checkpoint.batch_from_json); losses equal the reference's for the steps before the
run's first heal (a heal samples its batches from a newer policy than the uninterrupted run did, so from there
on every step differs: excluded), and the steps a resume redid equal the same steps before the fault (both
sides heal-free since the checkpoint). Writes every round to --out (JSON) and prints the markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from vfrl.launcher import procs, tmux  # noqa: E402
from vfrl.proc_table import stat  # noqa: E402
from vfrl.run_dir import RunDir, read_jsonl  # noqa: E402

VF_RL = str(Path(sys.executable).parent / "vf-rl")
CONFIG = "configs/rl/quickstart.toml"
VICTIMS = ["vf-train", "vf-vllm", "vLLM API server", "vLLM engine core", "trainer pane shell",
           "inference pane shell", "tmux server"]
# what a run with inference.base_url does not have
OWN_SERVER = {"vf-vllm", "vLLM API server", "vLLM engine core", "inference pane shell"}
PHASES = ["generation", "push", "checkpoint", "eval"]


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def overrides(args, out: Path) -> list[str]:
    """The chaos settings on top of the config; a run against a server of its own heals every death of vLLM."""
    inference = [] if args.remote else ["--inference.port", "0", "--inference.max_restarts", "1000"]
    return [*inference, "--trainer.args.output_dir", str(out), "--trainer.args.max_steps", str(args.steps),
            "--trainer.args.save_strategy", "steps", "--trainer.args.save_steps", str(args.save_steps),
            "--trainer.args.eval_strategy", "steps", "--trainer.args.eval_steps", str(args.eval_steps)]


def fresh_command(args, socket: str, *extra: str) -> list[str]:
    return ["vf-rl", "@", args.config, *overrides(args, args.dir / "outputs"), "--tmux-socket", socket, *extra]


def train_rows(run_dir: Path) -> list[dict]:
    path = RunDir(run_dir).metrics
    return [r for r in read_jsonl(path) if "loss" in r] if path.exists() else []


def last_step(run_dir: Path) -> int:
    rows = train_rows(run_dir)
    return rows[-1]["step"] if rows else 0


def read_pid(path: Path) -> procs.Proc | None:
    try:
        pid = int(path.read_text())
    except (OSError, ValueError):
        return None
    st = stat(pid)
    return procs.Proc(pid, st.start) if st else None


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def victim_pid(victim: str, run_dir: Path, socket: str, session: str) -> int | None:
    paths = RunDir(run_dir)
    if victim == "vf-train":
        p = read_pid(paths.trainer_pid)
        return p.pid if p else None
    if victim == "vf-vllm":
        p = read_pid(paths.inference_pid)
        return p.pid if p else None
    if victim == "vLLM API server":
        sup = read_pid(paths.inference_pid)
        if sup is None:
            return None
        kids = subprocess.run(["pgrep", "-P", str(sup.pid)], capture_output=True, text=True).stdout.split()
        kids = [int(k) for k in kids if "vfrl.inference.reaper" not in cmdline(int(k))]
        return kids[0] if len(kids) == 1 else None
    if victim == "vLLM engine core":  # the newest live one vf-vllm recorded (a restart records another)
        live = procs.alive(procs.recorded_engines(run_dir))
        return max(live, key=lambda p: p.start).pid if live else None
    if victim in ("trainer pane shell", "inference pane shell"):
        state = tmux.pane_state(tmux.server(socket), session, victim.split()[0])
        return state.pid if state and not state.dead else None
    if victim == "tmux server":
        return tmux.server_pid(tmux.server(socket))
    raise ValueError(victim)


# ---------- phases, seen from outside ----------
def tmp_dirs(run_dir: Path, sub: str, prefix: str) -> list[str]:
    try:
        return [e.name for e in os.scandir(run_dir / sub) if e.name.startswith(prefix) and e.name.endswith(".tmp")]
    except OSError:
        return []


def eval_in_flight(run_dir: Path, every: int) -> bool:
    """A step N % every == 0 is logged (its eval runs while step N+1 trains) and its eval line is not."""
    path = RunDir(run_dir).metrics
    rows = read_jsonl(path) if path.exists() else []
    trained = [r["step"] for r in rows if "loss" in r]
    evals = {r["step"] for r in rows if "eval/reward_mean" in r}
    if not trained:
        return False
    n = trained[-1] - (trained[-1] % every)
    return n > 0 and trained[-1] - n <= 1 and n not in evals


def phase_now(run_dir: Path, every: int) -> str:
    if tmp_dirs(run_dir, "checkpoints", ".step-"):
        return "checkpoint"
    if tmp_dirs(run_dir, "weights", ".step-") or tmp_dirs(run_dir, "adapters", ".policy-"):
        return "push"
    if eval_in_flight(run_dir, every):
        return "eval"
    return "generation"


def aim(run_dir: Path, phase: str, rng: random.Random, every: int, give_up: float = 90) -> bool:
    """Return at a moment of `phase` (True), or after `give_up` s (False)."""
    deadline = time.monotonic() + give_up
    ended = RunDir(run_dir).exit_code("trainer")
    if phase == "generation":
        time.sleep(rng.uniform(0, 2))
        while time.monotonic() < deadline and not ended.exists():
            if phase_now(run_dir, every) == "generation":
                return True
            time.sleep(0.05)
        return False
    if phase == "eval":
        while time.monotonic() < deadline and not ended.exists():
            if eval_in_flight(run_dir, every):
                return True
            time.sleep(0.05)
        return False
    sub, prefix = ("checkpoints", ".step-") if phase == "checkpoint" else ("weights", ".step-")
    while time.monotonic() < deadline and not ended.exists():
        if tmp_dirs(run_dir, sub, prefix) or (phase == "push" and tmp_dirs(run_dir, "adapters", ".policy-")):
            return True
        time.sleep(0.002)
    return False


# ---------- the run's processes ----------
def run_procs(run_dir: Path) -> set[procs.Proc]:
    return procs.pane_processes([], run_dir)


def core(run_dir: Path) -> set[procs.Proc]:
    """The run's processes but the metrics pane's `vf-rl watch` (it lives until the session is closed)."""
    return {p for p in procs.alive(run_procs(run_dir)) if " watch " not in cmdline(p.pid)}


def resume_step(cmd: list[str], run_base: Path) -> int | None:
    """The checkpoint step a `--resume` command continues from (None: not a resume)."""
    if "--resume" not in cmd:
        return None
    from vfrl.launcher.resume import find_checkpoint
    from vfrl.learner.checkpoint import step_of

    value = cmd[cmd.index("--resume") + 1]
    return step_of(find_checkpoint(run_base, value if value == "latest" else str(ROOT / value))[1])


def launch(cmd: list[str], run_base: Path, timeout: float = 300) -> tuple[Path, float]:
    """Run `vf-rl ... --detach`, wait for its first training step; returns (run dir, seconds)."""
    t0 = time.monotonic()
    c = resume_step(cmd, run_base)
    before = set(run_base.parent.glob(f"{run_base.name}*")) if run_base.parent.exists() else set()
    res = subprocess.run([VF_RL, *cmd[1:], "--detach"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)}: {res.returncode}: {res.stdout[-2000:]} {res.stderr[-2000:]}")
    dirs = [p for p in run_base.parent.glob(f"{run_base.name}*") if c is not None or p not in before]
    run_dir = max(dirs, key=lambda p: (RunDir(p).config.stat().st_mtime if RunDir(p).config.exists() else 0))
    deadline = time.monotonic() + timeout
    while not [r for r in train_rows(run_dir) if c is None or r.get("resumed_from") == c]:
        if RunDir(run_dir).exit_code("trainer").exists() or time.monotonic() > deadline:
            raise RuntimeError(f"{run_dir}: no step within {timeout:.0f}s of {shlex.join(cmd)}: "
                               + RunDir(run_dir).log("trainer").read_text(errors="replace")[-2000:])
        time.sleep(0.5)
    return run_dir, time.monotonic() - t0


def stop_session(socket: str, session: str) -> str:
    res = subprocess.run([VF_RL, "stop", session, "--tmux-socket", socket], cwd=ROOT, capture_output=True,
                         text=True, timeout=180)
    return res.stdout + res.stderr


# ---------- checks ----------
class Checks:
    def __init__(self, reference: dict[int, float]):
        self.reference = reference
        self.loaded: dict[str, float] = {}  # checkpoint path -> COMPLETE's mtime, checked
        self.redo: list[dict] = []  # resumes whose redone steps are to compare with the steps before the fault
        self.pending: dict[tuple[str, int], bool] = {}  # (run dir, checkpoint step): did it hold the next batch

    def metrics(self, run_dir: Path) -> list[str]:
        rows = read_jsonl(RunDir(run_dir).metrics)
        steps = [r["step"] for r in rows if "loss" in r]
        evals = [r["step"] for r in rows if "eval/reward_mean" in r]
        fails = []
        if steps != list(range(1, len(steps) + 1)):
            dup = sorted({s for s in steps if steps.count(s) > 1})
            gaps = sorted(set(range(1, max(steps, default=0) + 1)) - set(steps))
            fails.append(f"metrics steps not contiguous: duplicates {dup[:10]}, missing {gaps[:10]}")
        if len(evals) != len(set(evals)):
            fails.append(f"eval lines duplicated: {sorted(s for s in set(evals) if evals.count(s) > 1)}")
        return fails

    def checkpoints(self, run_dir: Path) -> tuple[int, list[str]]:
        import torch
        from safetensors.torch import load_file

        from vfrl.learner.checkpoint import TrainingState, batch_from_json, list_checkpoints, step_of

        fails, n = [], 0
        for ckpt in list_checkpoints(RunDir(run_dir).checkpoints):
            key, mtime = str(ckpt), (ckpt / "COMPLETE").stat().st_mtime
            if self.loaded.get(key) == mtime:
                continue
            try:
                weights = load_file(ckpt / "model" / "adapter_model.safetensors")
                assert weights and all(torch.isfinite(t).all() for t in weights.values()), "non-finite weights"
                saved = torch.load(ckpt / "trainer_state.pt", weights_only=False)
                assert {"optimizer", "scheduler", "rng"} <= set(saved), sorted(saved)
                state = TrainingState.from_json((ckpt / "trainer_state.json").read_text())
                assert state.step == step_of(ckpt), (state.step, ckpt.name)
                for f in sorted(ckpt.glob("pending_batch*.json")):
                    batch_from_json(json.loads(f.read_text()))
                n += 1
                self.loaded[key] = mtime
            except Exception as e:  # noqa: BLE001 - any failure to load is the finding
                fails.append(f"{ckpt} does not load: {type(e).__name__}: {e}")
        return n, fails

    def divergences(self, run_dir: Path, rows: list[dict]) -> list[int]:
        """Steps from which this lineage was sampled otherwise than the uninterrupted run: a heal (its batches
        sampled again, from a newer policy) and a resume from a checkpoint without the batch in flight (an
        emergency checkpoint: the next batch is sampled from the checkpoint's policy, one version fresher)."""
        out = [r["step"] for r in rows if "inference_restarts" in r]
        out += [r["step"] for r in rows if "resumed_from" in r
                and not self.pending.get((str(run_dir), r["resumed_from"]), False)]
        return out

    def losses(self, run_dir: Path) -> dict:
        """Steps before the lineage's first divergence against the reference; steps a resume from a checkpoint
        with its pending batch redid against the same steps before the fault (no divergence on either side)."""
        rows = train_rows(run_dir)
        first = min(self.divergences(run_dir, rows), default=10**9)
        vs_ref = [(r["step"], r["loss"], self.reference[r["step"]]) for r in rows
                  if r["step"] < first and r["step"] in self.reference]
        by_step = {r["step"]: r for r in rows}
        after_fault = self.divergences(run_dir, rows)
        vs_before = []
        for redo in self.redo:
            if redo["run_dir"] != str(run_dir) or not redo["pending"]:
                continue
            c = redo["from"]
            limit = min([s for s in after_fault if s > c + 1] + [redo["before_divergence"]], default=10**9)
            vs_before += [(s, by_step[s]["loss"], before) for s, before in redo["before"].items()
                          if c < s < limit and s in by_step]
        diff = [abs(a - b) for _, a, b in vs_ref + vs_before]
        return {"vs_reference": len(vs_ref), "vs_before_fault": len(vs_before),
                "exact": sum(a == b for _, a, b in vs_ref + vs_before),
                "max_abs_diff": max(diff, default=0.0),
                "over_1e-6": [(s, a, b) for s, a, b in vs_ref + vs_before if abs(a - b) > 1e-6][:5],
                "first_divergence": None if first == 10**9 else first}


# ---------- one round ----------
def react(run_dir: Path, trainer: procs.Proc, kill_step: int, restarts_before: int, timeout: float = 300) -> str:
    t0 = time.monotonic()
    paths = RunDir(run_dir)
    while time.monotonic() - t0 < timeout:
        if not procs.alive({trainer}):
            code = paths.exit_code("trainer")
            return "finished" if code.exists() and code.read_text().strip() == "0" else "stopped"
        rows = train_rows(run_dir)
        after = [r for r in rows if r["step"] > kill_step]
        if len(paths.server_restarts()) > restarts_before:
            healed = [r for r in after if "inference_restarts" in r]
            if healed and after[-1]["step"] >= healed[0]["step"] + 2:
                return "healed"
        elif len(after) >= 5 and time.monotonic() - t0 > 20:
            return "went on"
        time.sleep(0.3)
    return "stuck"


def continue_command(run_dir: Path, offset: int) -> list[str] | None:
    text = RunDir(run_dir).log("trainer").read_text(errors="replace")
    text = text[offset:] if len(text) >= offset else text
    found = re.findall(r"continue with: (.+)$", text, flags=re.M)
    return shlex.split(found[-1].strip()) if found else None


def one_round(k: int, rng: random.Random, run_dir: Path, socket: str, args, checks: Checks, run_base: Path) -> tuple[
        dict, Path]:
    victim, phase = rng.choice(args.victims), rng.choice(PHASES)
    sig = signal.SIGTERM if rng.random() < 0.2 else signal.SIGKILL
    time.sleep(rng.uniform(1, 6) * args.pause_scale)  # drawn whatever the scale: a seed draws the same victims
    paths = RunDir(run_dir)
    trainer = read_pid(paths.trainer_pid)
    log_offset = paths.log("trainer").stat().st_size
    restarts_before = len(paths.server_restarts())
    # looked up before the aim: the kill follows the phase at once
    pid = victim_pid(victim, run_dir, socket, args.session)
    victim_proc = procs.Proc(pid, stat(pid).start) if pid is not None and stat(pid) else None
    kill_step = last_step(run_dir)
    seen = phase if aim(run_dir, phase, rng, args.eval_steps) else None
    for _ in range(20):  # gone meanwhile (vLLM started again: a new API server, engine core), or not there yet
        if victim_proc is not None and procs.alive({victim_proc}) or RunDir(run_dir).exit_code("trainer").exists():
            break
        time.sleep(1)
        pid = victim_pid(victim, run_dir, socket, args.session)
        victim_proc = procs.Proc(pid, stat(pid).start) if pid is not None and stat(pid) else None
        seen = phase if aim(run_dir, phase, rng, args.eval_steps, give_up=30) else None
    if victim_proc is None or trainer is None or not procs.alive({victim_proc}):
        rec = {"round": k, "victim": victim, "signal": sig.name, "aimed": phase,
               "phase": phase_now(run_dir, args.eval_steps), "step": last_step(run_dir), "pid": pid,
               "run_dir": str(run_dir), "outcome": "no victim",
               "checks": [f"{victim} not found"]}
        log(f"round {k}: {victim} not found")
        return rec, run_dir
    t_kill = time.monotonic()
    os.kill(victim_proc.pid, sig)  # at once: a push or checkpoint write lasts milliseconds
    seen = seen or phase_now(run_dir, args.eval_steps)
    kill_step = max(kill_step, last_step(run_dir))
    rec = {"round": k, "victim": victim, "signal": sig.name, "aimed": phase, "phase": seen, "step": kill_step,
           "pid": pid, "run_dir": str(run_dir), "checks": []}
    rec["still_in_phase_after_kill"] = phase_now(run_dir, args.eval_steps) == seen
    log(f"round {k}: {sig.name} {victim} (pid {pid}) at step {kill_step}, phase {seen} (aimed {phase})")
    outcome = react(run_dir, trainer, kill_step, restarts_before)
    rec["outcome"] = outcome
    rec["react_s"] = round(time.monotonic() - t_kill, 1)
    if outcome == "stuck":
        rec["checks"].append("the run neither healed, went on nor stopped within 300 s")
    if outcome in ("stopped", "finished", "stuck"):
        left = procs.wait_gone(core(run_dir), 60)
        if left and outcome != "stuck":
            rec["checks"].append(f"left 60 s after the trainer exited: {procs.describe(left)}")
        rec["trainer_exitcode"] = (paths.exit_code("trainer").read_text().strip()
                                   if paths.exit_code("trainer").exists() else None)
        said = stop_session(socket, args.session)
        leftover = re.search(r"leftover process\(es\) of the run: (.*)", said)
        if leftover and all(name.strip().endswith("(vf-rl)") for name in leftover.group(1).split(",")):
            # the metrics pane's `vf-rl watch` waits for trainer.exitcode, which a killed trainer pane never writes
            rec["notes"] = f"vf-rl stop ended the metrics pane's vf-rl watch: {leftover.group(1)}"
        elif leftover:
            rec["checks"].append(f"vf-rl stop: {said.strip()[-300:]}")
        left = procs.wait_gone(run_procs(run_dir), 15)
        if left:
            rec["checks"].append(f"left after vf-rl stop: {procs.describe(left)}")
            procs.terminate(left, grace=5)
        if tmux.session_exists(tmux.server(socket), args.session):
            rec["checks"].append("the tmux session is still there after vf-rl stop")
        before = train_rows(run_dir)
        done = before[-1]["step"] if before else 0
        if outcome == "finished":
            cmd, how = fresh_command(args, socket), "afresh (max_steps reached)"
        elif (cmd := continue_command(run_dir, log_offset)) is not None:
            how = "printed command"
        else:
            from vfrl.learner.checkpoint import latest_checkpoint
            if latest_checkpoint(paths.checkpoints) is not None:
                cmd, how = fresh_command(args, socket, "--resume", "latest"), "--resume latest"
            else:
                cmd, how = fresh_command(args, socket), "afresh (no checkpoint)"
        rec["continued"] = how
        rec["command"] = shlex.join(cmd)
        c = resume_step(cmd, run_base)
        pending = c is not None and (paths.checkpoints / f"step-{c}" / "pending_batch.json").exists()
        new_dir, took = launch(cmd, run_base)
        rec["restart_s"] = round(took, 1)
        if c is not None:
            rec["resumed_from"] = c
            rec["steps_lost"] = done - c if c is not None else None
            rec["pending_batch"] = pending
            checks.pending[(str(new_dir), c)] = pending
            diverged = [s for s in checks.divergences(run_dir, before) if s > c]
            checks.redo.append({"run_dir": str(new_dir), "from": c, "pending": pending,
                                "before_divergence": min(diverged, default=10**9),
                                "before": {r["step"]: r["loss"] for r in before if r["step"] > c}})
        run_dir = new_dir
    else:
        rec["steps_lost"] = 0
    # let the run go on a little, then check it
    target = last_step(run_dir) + 2
    deadline = time.monotonic() + 60
    while last_step(run_dir) < target and time.monotonic() < deadline and not RunDir(run_dir).exit_code(
            "trainer").exists():
        time.sleep(0.3)
    rec["checks"] += checks.metrics(run_dir)
    n, fails = checks.checkpoints(run_dir)
    rec["checkpoints_loaded"] = n
    rec["checks"] += fails
    rec["losses"] = checks.losses(run_dir)
    rec["checked_dir"] = str(run_dir)
    if rec["losses"]["over_1e-6"]:
        rec["checks"].append(f"losses differ: {rec['losses']['over_1e-6']}")
    rec["wall_s"] = round(time.monotonic() - t_kill, 1)
    log(f"round {k}: {outcome}{' via ' + rec.get('continued', '') if 'continued' in rec else ''}, "
        f"steps lost {rec.get('steps_lost')}, checks {rec['checks'] or 'ok'}, losses {rec['losses']}")
    return rec, run_dir


# ---------- the whole ----------
def reference_run(args) -> Path:
    out = args.dir / "reference"
    socket = f"chaosref-{os.getpid()}"
    cmd = [VF_RL, "@", args.config, *overrides(args, out), "--tmux-socket", socket, "--no-attach"]
    log(f"reference run: {shlex.join(cmd)}")
    try:
        with open(args.dir / "reference.console", "w") as f:
            res = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=1800)
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
    if res.returncode != 0:
        raise SystemExit(f"the reference run exited {res.returncode}; see {args.dir / 'reference.console'}")
    return out / args.session


def loss_totals(rounds: list[dict]) -> dict:
    """Steps compared over the whole chaos run: per run dir, its last round's counts (they are cumulative)."""
    last = {r["checked_dir"]: r["losses"] for r in rounds if "losses" in r}
    return {"run_dirs": len(last), "vs_reference": sum(v["vs_reference"] for v in last.values()),
            "vs_before_fault": sum(v["vs_before_fault"] for v in last.values()),
            "exact": sum(v["exact"] for v in last.values()),
            "max_abs_diff": max((v["max_abs_diff"] for v in last.values()), default=0.0)}


def table(rounds: list[dict]) -> str:
    cells: dict[tuple[str, str], dict] = defaultdict(lambda: defaultdict(int))
    for r in rounds:
        for key in ((r["victim"], r["phase"]), (r["victim"], "all"), ("all", "all")):
            c = cells[key]
            c["injected"] += 1
            c[r.get("outcome", "?")] += 1
            c["lost"] += r.get("steps_lost") or 0
            c["fail"] += bool(r["checks"])
    lines = ["| victim | phase | injected | healed | went on | stopped, resumed | steps redone | check failures |",
             "|---|---|---|---|---|---|---|---|"]
    for (victim, phase), c in sorted(cells.items(), key=lambda kv: (kv[0][0] == "all", kv[0][0], kv[0][1] == "all",
                                                                     kv[0][1])):
        lines.append(f"| {victim} | {phase} | {c['injected']} | {c['healed']} | {c['went on']} | "
                     f"{c['stopped'] + c['finished']} | {c['lost']} | {c['fail']} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    import tomllib

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=300, help="max_steps of the runs")
    ap.add_argument("--config", default=CONFIG, help="the run's config; one with inference.base_url trains "
                    "against that server (vLLM's processes are then not the run's)")
    ap.add_argument("--victims", default=None, help="comma-separated, of: " + ", ".join(VICTIMS) + " (default: all "
                    "the run has)")
    ap.add_argument("--save-steps", type=int, default=10)
    ap.add_argument("--eval-steps", type=int, default=20)
    ap.add_argument("--pause-scale", type=float, default=1.0, help="times the 1-6 s pause before each round's aim")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/vfrl-chaos"), help="where the runs go")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every round (default DIR/chaos.json)")
    ap.add_argument("--reference", type=Path, default=None, help="an uninterrupted run dir to reuse")
    ap.add_argument("--keep", action="store_true", help="keep the chaos run's directories")
    args = ap.parse_args(argv)
    args.dir = args.dir.resolve()
    config = tomllib.loads((ROOT / args.config).read_text())
    args.remote = "base_url" in config.get("inference", {})
    if args.victims is None:
        args.victims = [v for v in VICTIMS if not (args.remote and v in OWN_SERVER)]
    else:
        args.victims = [v.strip() for v in args.victims.split(",")]
    if unknown := sorted(set(args.victims) - set(VICTIMS)):
        ap.error(f"unknown victims {unknown}; choose from {VICTIMS}")
    args.session = config.get("trainer", {}).get("args", {}).get("run_name", "vfrl")
    return args


def chaos(args: argparse.Namespace) -> dict:
    """The reference run, then the rounds; returns {"summary", "rounds", "skipped"} (also written to --out)."""
    import shutil

    out_json = args.out or args.dir / "chaos.json"
    t_start = time.monotonic()
    load_before = os.getloadavg()
    if args.reference is None:
        args.dir.mkdir(parents=True, exist_ok=True)
        ref_dir = reference_run(args)
    else:
        ref_dir = args.reference.resolve()
    reference = {r["step"]: r["loss"] for r in train_rows(ref_dir)}
    ref_s = time.monotonic() - t_start
    log(f"reference: {len(reference)} steps in {ref_s:.0f}s ({ref_dir})")

    shutil.rmtree(args.dir / "outputs", ignore_errors=True)
    socket = f"chaos-{os.getpid()}"
    rng = random.Random(args.seed)
    checks = Checks(reference)
    rounds: list[dict] = []
    skipped: list[dict] = []
    run_base = args.dir / "outputs" / args.session
    t_chaos = time.monotonic()
    try:
        run_dir, _ = launch(fresh_command(args, socket), run_base)
        while len(rounds) < args.rounds and len(skipped) < args.rounds:
            if RunDir(run_dir).exit_code("trainer").exists():  # reached max_steps (or stopped on its own)
                log(f"{run_dir} ended ({RunDir(run_dir).exit_code('trainer').read_text().strip()}): a fresh run")
                stop_session(socket, args.session)
                run_dir, _ = launch(fresh_command(args, socket), run_base)
            rec, run_dir = one_round(len(rounds) + 1, rng, run_dir, socket, args, checks, run_base)
            # no fault injected (the run reached max_steps while the round waited): drawn again, not counted
            (skipped if rec["outcome"] == "no victim" else rounds).append(rec)
            out_json.write_text(json.dumps({"rounds": rounds, "skipped": skipped}, indent=1))
    finally:
        stop_session(socket, args.session)
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
        for d in run_base.parent.glob(f"{args.session}*"):
            left = run_procs(d.resolve())
            if left:
                log(f"left behind in {d}: {procs.describe(left)}; terminating")
                procs.terminate(left, grace=5)
    summary = {"seed": args.seed, "rounds_run": len(rounds), "steps": args.steps,
               "reference_s": round(ref_s), "chaos_s": round(time.monotonic() - t_chaos),
               "load_before": load_before, "load_after": os.getloadavg(),
               "skipped": len(skipped), "loss_checks": loss_totals(rounds),
               "failures": [(r["round"], c) for r in rounds for c in r["checks"]]}
    result = {"summary": summary, "rounds": rounds, "skipped": skipped}
    out_json.write_text(json.dumps(result, indent=1))
    if not args.keep:
        shutil.rmtree(args.dir / "outputs", ignore_errors=True)
    return result


def main() -> None:
    result = chaos(parse_args())
    rounds = result["rounds"]
    print()
    print(table(rounds))
    print()
    print("| round | victim | signal | phase (aimed) | step | outcome | continued | steps redone | react s | "
          "back s | loss checks (ref / redo, exact, max diff) | checks |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rounds:
        ls = r.get("losses", {})
        print(f"| {r['round']} | {r['victim']} | {r['signal']} | {r['phase']} ({r['aimed']}) | {r['step']} | "
              f"{r.get('outcome')} | {r.get('continued', '-')} | {r.get('steps_lost')} | {r.get('react_s')} | "
              f"{r.get('restart_s', '-')} | {ls.get('vs_reference')} / {ls.get('vs_before_fault')}, "
              f"{ls.get('exact')}, {ls.get('max_abs_diff', 0):.1e} | {'; '.join(r['checks']) or 'ok'} |")
    print()
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
