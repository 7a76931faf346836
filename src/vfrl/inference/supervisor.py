"""vf-vllm's watch over the vLLM server: run it as a child, pass signals on, leave nothing behind.

vLLM's API server starts an engine core process, which starts workers. When the API server dies
without its own shutdown (kill -9, a crash), those children can live on (GBs of memory, the port),
holding the pane's log pipe open: the inference pane never ends, its exit code is never recorded and
`vf-rl status` keeps saying "running". So the server runs in a process group of its own, signals sent
to vf-vllm are passed to that group, and however the server ends, every process still in its group
is ended too before vf-vllm exits with the server's exit code.

Two deaths the server does not handle itself:
- its engine core's (the process with the weights and the KV cache, the OOM killer's likeliest pick): the
  API server may then hang in its own shutdown with /health silent, so the trainer would wait out its
  whole inference_timeout. vf-vllm watches the engine core and ends the server as soon as it is gone.
- vf-vllm's own (kill -9, the OOM killer): nothing of it is left to end the group, so a reaper process
  (reaper.py), started beside the server, ends the group when vf-vllm is gone.

The trainer's pane stops the server when vf-train ends (its epilogue). When that pane dies with it (its shell
killed, the pane closed), nothing would: vf-vllm watches the trainer named in the run's trainer.pid and stops the
server itself once that trainer has been gone for a few seconds (TrainerGone).

A server that dies while it serves, not asked to (killed, the OOM killer, its engine core gone), is started
again, up to `max_restarts` times (inference.max_restarts), each time written as a line to `restarts_log`, which
the trainer reads to wait for it instead of stopping (trainer/inference_watch.py). One that dies before it ever answered
/health (a bad flag, a model that does not fit) would only die again: vf-vllm exits with its code, as before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Sequence

from vfrl.inference.served_port import ServedPort
from vfrl.proc_table import group_members, stat
from vfrl.run_dir import append_jsonl

ENGINE_CORE = "VLLM::EngineCore"  # the process title vLLM gives its engine core

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_GRACE_S = 10.0  # a server asked to stop gets this long, then SIGKILL: uvicorn waits for open connections
TRAINER_GRACE_S = 10.0  # a trainer gone this long without its pane's epilogue stopping the server: stop it here


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_empty(pgid: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def end_group(pgid: int, linger: float = 5.0, grace: float = 10.0) -> list[int]:
    """After the group's leader exited: give its children `linger` seconds to finish their own shutdown,
    then SIGTERM (with SIGCONT, so a stopped one sees it), then SIGKILL. Returns the pids that were left."""
    left = _wait_empty(pgid, linger)
    if left:
        _signal_group(pgid, signal.SIGTERM)
        _signal_group(pgid, signal.SIGCONT)
        if _wait_empty(pgid, grace):
            _signal_group(pgid, signal.SIGKILL)
            _wait_empty(pgid, 5)
    return left


def engine_cores(pgid: int) -> set[int]:
    """The processes of group `pgid` that vLLM titled as its engine core, less their own children: a process the
    engine core forks carries its title until it execs (or exits, short-lived), and its end is not the engine's."""
    titled = set()
    for pid in group_members(pgid):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith(ENGINE_CORE):
            titled.add(pid)
    return {pid for pid in titled if (st := stat(pid)) is not None and st.ppid not in titled}


class Serving:
    """Has the server answered its /health with 200 since it started? Asked each poll until it has (then cached).
    The URL comes from `port` (served_port.py), which may know it only once the server listens (port 0)."""

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through an http_proxy

    def __init__(self, port: ServedPort | None, pid: int):
        self.port, self.pid, self.since = port, pid, None

    def __call__(self) -> bool:
        if self.since is None and self.port is not None and (health := self.port.health_url(self.pid)):
            try:
                with self.direct.open(health, timeout=1) as reply:
                    if reply.status == 200:
                        self.since = time.monotonic()
            except OSError:
                pass
        return self.since is not None


class TrainerGone:
    """Has the vf-train of `pid_file` been gone for `grace` seconds? Asked each poll. Only a vf-train seen alive on
    this machine counts (a Slurm job's trainer runs on another node: its pid means nothing here); a pid taken by a
    later process is not it (its start time differs)."""

    def __init__(self, pid_file: Path | None, grace: float | None = None):
        self.pid_file, self.grace = pid_file, TRAINER_GRACE_S if grace is None else grace
        self.seen: tuple[int, int] | None = None  # (pid, start time)
        self.gone_at: float | None = None

    def __call__(self) -> int | None:
        """The trainer's pid once it has been gone for `grace` seconds, else None."""
        if self.seen is None:
            try:
                pid = int(self.pid_file.read_text()) if self.pid_file else None
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes() if pid else b""
            except (OSError, ValueError):
                return None
            if b"vf-train" in cmdline and (st := stat(pid)):
                self.seen = pid, st.start
            return None
        pid, start = self.seen
        if (st := stat(pid)) is not None and st.start == start:
            return None
        self.gone_at = self.gone_at or time.monotonic()
        return pid if time.monotonic() - self.gone_at >= self.grace else None


def wait_watching_engine(proc: subprocess.Popen, say, stopping, poll: float = 0.5, serving=None,
                         engines_file: Path | None = None) -> int:
    """proc.wait(), but once an engine core seen in the server's group is gone while the server still runs (and
    is not `stopping()`: asked to stop, when its engine ends first), end the group: the server without its engine
    cannot serve, and may not notice (a hang at shutdown). `serving()`, when given, is asked each poll. Each engine
    core seen is appended to `engines_file` as `pid start`, so `vf-rl stop` finds one that outlived every ancestor
    (vLLM's process title overwrites the environment that carries the run's marker)."""
    seen: set[int] = set()
    while True:
        try:
            return proc.wait(timeout=poll)
        except subprocess.TimeoutExpired:
            pass
        if stopping():  # asked to stop: its shutdown can wait on the trainer's open connections, with /health silent
            try:
                return proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                say(f"vf-vllm: the vLLM server did not stop within {STOP_GRACE_S:g}s of being asked; killing it",
                    flush=True)
                _signal_group(proc.pid, signal.SIGKILL)
                return proc.wait()
        if serving is not None:
            serving()
        now = engine_cores(proc.pid)
        if gone := seen - now:
            if proc.poll() is not None or stopping():  # ended, or ending as asked: the top of the loop waits
                continue
            say(f"vf-vllm: vLLM's engine core (pid {min(gone)}) exited while the server ran; ending the server",
                flush=True)
            end_group(proc.pid, linger=0, grace=3)
            return proc.wait()
        for pid in sorted(now - seen):  # named in the log: the pid an OOM-killer line in the kernel log will give
            say(f"vf-vllm: vLLM's engine core is pid {pid}", flush=True)
            if engines_file is not None and (st := stat(pid)):
                with open(engines_file, "a") as f:
                    f.write(f"{pid} {st.start}\n")
        seen |= now


def start_reaper(pgid: int) -> subprocess.Popen:
    """The process that ends group `pgid` if this one dies without doing it (reaper.py)."""
    return subprocess.Popen([sys.executable, "-m", "vfrl.inference.reaper", str(pgid), str(os.getpid())],
                            stdin=subprocess.DEVNULL, start_new_session=True)


def run_supervised(argv: list[str], env: dict[str, str], say=print, started=None, port: ServedPort | None = None,
                   max_restarts: int = 0, restarts_log: Path | None = None, trainer_pids: Sequence[Path] = (),
                   engines_file: Path | None = None) -> int:
    """Run `argv` as the leader of a new process group; return its exit code (128 + N for signal N).
    `started(pid)`, when given, is called with the server's pid each time it starts. A server that exits unasked
    after it answered /health on `port` is started again, on the port it served on, up to `max_restarts` times; the
    server is stopped once the vf-train of each of `trainer_pids` is gone (module docstring; several: the runs of a
    sweep share the server); its engine cores are recorded in `engines_file`."""
    asked: list[int] = []
    running: list[subprocess.Popen] = []  # the server now

    def forward(signum, _frame):
        asked.append(signum)
        for proc in running:
            _signal_group(proc.pid, signum)
            if signum == signal.SIGTERM:
                _signal_group(proc.pid, signal.SIGCONT)  # a stopped (hung) server would never see the TERM

    for sig in FORWARDED:
        signal.signal(sig, forward)
    trainers = [TrainerGone(f) for f in trainer_pids]

    def stopping() -> bool:
        if not asked and trainers and all(gone := [trainer() for trainer in trainers]):
            if len(gone) == 1:
                say(f"vf-vllm: the trainer (pid {gone[0]}) is gone and nothing stopped the server (its pane closed "
                    "with it?); stopping the server", flush=True)
            else:
                say(f"vf-vllm: every run's trainer is gone (pids {', '.join(map(str, gone))}); stopping the server",
                    flush=True)
            forward(signal.SIGTERM, None)
        return bool(asked)

    restarts = 0
    while True:
        proc = subprocess.Popen(port.argv(argv) if port else argv, env=env, process_group=0)
        running[:] = [proc]
        if asked:  # a stop that came while the server was being started again
            forward(asked[-1], None)
        reaper = start_reaper(proc.pid)
        if started is not None:
            started(proc.pid)
        serving = Serving(port, proc.pid)
        code = wait_watching_engine(proc, say, stopping=stopping, serving=serving, engines_file=engines_file)
        code = code if code >= 0 else 128 - code
        again = not asked and restarts < max_restarts and serving.since is not None
        if again:  # said before the clean-up below, so the trainer waits for the new server from the start
            restarts += 1
            served_s = time.monotonic() - serving.since
            say(f"vf-vllm: the vLLM server exited ({code}) after serving for {served_s:.0f}s; starting it again "
                f"({restarts} of {max_restarts}, inference.max_restarts)", flush=True)
            if restarts_log is not None:
                append_jsonl(restarts_log, {"restart": restarts, "max_restarts": max_restarts, "exit_code": code,
                                            "served_s": round(served_s, 1), "time": time.time()})
        elif not asked and max_restarts and serving.since is None:
            say(f"vf-vllm: the vLLM server exited ({code}) before it served; not starting it again", flush=True)
        elif not asked and max_restarts:
            say(f"vf-vllm: the vLLM server exited ({code}) again after {restarts} restart(s) "
                f"(inference.max_restarts = {max_restarts}); giving up", flush=True)
        left = end_group(proc.pid)
        if left:
            say(f"vf-vllm: the vLLM server exited ({code}); ended {len(left)} process(es) it left behind: "
                + ", ".join(map(str, left)), flush=True)
        if not again or asked:
            return code
        reaper.kill()  # its group is empty; the next server gets a reaper of its own
        reaper.wait()
