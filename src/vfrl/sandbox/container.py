"""A sandbox that lives for a whole rollout, as a hosted container does: commands run in it one after another and
what they leave (files, background processes) stays until it is closed. verifiers' SandboxEnv runs its packages'
`bash` calls and file uploads in one (envs/sandbox_env.py, with `env.sandbox = "local"`).

The isolation is local.py's (no network, nothing of the user's, the system read-only, rlimits, a PID namespace whose
processes all end with it), with what a container image's code expects: it runs as root inside (a user namespace;
outside it is the call's own user id, as in local.py, or the user running vfrl), with writable folders where such
code writes (`/root`, `/app`, `/workspace`, `/home`, `/tmp`, the working folder `/sandbox`), each in memory and
capped. The system is this machine's, read-only: a package's docker image is not used, its `python3` is
/usr/bin/python3, and `pip install` inside has no network to fetch from.

Inside runs a small agent (AGENT, on /usr/bin/python3) that takes one JSON request a line on stdin (run a command,
write a file) and answers one JSON line on stdout; each command runs in a process group of its own, killed at its
timeout, its output cut at a limit.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from dataclasses import dataclass

from vfrl.sandbox.local import (
    INSIDE, Limits, SandboxUnavailable, call_uid, end, isolation_problem, rlimit_args, system_binds,
)

WRITABLE = ("/root", "/app", "/workspace", "/home", "/tmp", INSIDE)
PYTHON = "/usr/bin/python3"

# a persistent Python session (PythonEnv's REPL): one JSON request a line on its stdin, one JSON reply on a copy of
# its stdout; what the code prints goes to the reply, and a last expression's value as `result`, as a REPL shows it
REPL = r"""
import ast, contextlib, io, json, os, sys, traceback
requests, replies = os.fdopen(os.dup(0)), os.fdopen(os.dup(1), "w")
sys.stdin = open(os.devnull)
namespace, count = {"__name__": "__main__"}, 0
for line in requests:
    code, limit = json.loads(line)["code"], 16000
    count += 1
    out, err, status, result = io.StringIO(), io.StringIO(), "ok", None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            tree = ast.parse(code, "<cell>", "exec")
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, "<cell>", "exec"), namespace)
            if last is not None and (value := eval(compile(ast.Expression(last.value), "<cell>", "eval"),
                                                   namespace)) is not None:
                result = repr(value)
        except BaseException:
            status, result = "error", traceback.format_exc()
    replies.write(json.dumps({"status": status, "stdout": out.getvalue()[:limit], "stderr": err.getvalue()[:limit],
                              "result": result if result is None else result[:limit], "execution_count": count}) + "\n")
    replies.flush()
"""

AGENT = r"""
import base64, json, os, select, signal, subprocess, sys, tempfile
repl = None
for line in sys.stdin:
    req = json.loads(line)
    try:
        if req["op"] == "python":
            if repl is None or repl.poll() is not None:
                repl = subprocess.Popen([sys.executable, "-I", "-u", "-c", sys.argv[1]], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                        start_new_session=True, cwd=req.get("cwd") or None)
            repl.stdin.write(json.dumps({"code": req["code"]}) + "\n")
            repl.stdin.flush()
            answer = repl.stdout.readline() if select.select([repl.stdout], [], [], req["timeout"])[0] else None
            try:
                reply = json.loads(answer) if answer else None
            except ValueError:
                reply = None
            if not isinstance(reply, dict) or "execution_count" not in reply:  # a new session next time
                if answer is None:
                    reply = {"status": "timeout"}
                elif answer:  # the code wrote to the session's own stdout: its reply cannot be read
                    reply = {"status": "error", "result": "the Python session's output could not be read (the code "
                                                          "wrote to its file descriptor 1); a new session was started"}
                else:
                    reply = {"status": "error", "result": "the Python session ended (the code exited it); a new "
                                                          "session was started"}
                try:
                    os.killpg(repl.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                repl.wait()
                repl = None
        elif req["op"] == "write":
            os.makedirs(os.path.dirname(req["path"]) or ".", exist_ok=True)
            with open(req["path"], "wb") as f:
                f.write(base64.b64decode(req["data"]))
            reply = {"exit_code": 0, "stdout": "", "stderr": ""}
        else:
            with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                proc = subprocess.Popen(["/bin/bash", "-c", req["command"]], cwd=req.get("cwd") or None,
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)
                timed_out = False
                try:
                    proc.wait(timeout=req.get("timeout"))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                texts = []
                for f in (out, err):
                    f.seek(0)
                    texts.append(f.read(req["max_output"]).decode(errors="replace"))
            reply = {"exit_code": None if timed_out else proc.returncode, "stdout": texts[0], "stderr": texts[1],
                     "timed_out": timed_out}
    except Exception as e:
        reply = {"exit_code": 1, "stdout": "", "stderr": f"{type(e).__name__}: {e}"}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
"""


@dataclass
class CommandResult:
    """What a command did, in prime_sandboxes' names (packages read `.stdout`, `.stderr`, `.exit_code`)."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool = False


def command(limits: Limits, uid: int | None) -> list[str]:
    # as root: the code's own user id outside (RLIMIT_NPROC counts the container alone); a user namespace makes it
    # root inside, so code written for a container image writes where it expects to
    rlimits = rlimit_args(limits, nproc=uid is not None)
    become = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"] if uid is not None else []
    scratch = [arg for folder in WRITABLE
               for arg in ("--size", str(limits.scratch_mb * 2**20), "--tmpfs", folder)]
    return [
        *become, "prlimit", *rlimits, "--",
        "bwrap", "--unshare-all", "--uid", "0", "--gid", "0", "--die-with-parent", "--new-session",
        *system_binds(python_too=False), "--proc", "/proc", "--dev", "/dev", *scratch, "--chdir", INSIDE,
        "--remount-ro", "/",
        "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "--setenv", "HOME", "/root",
        "--setenv", "LANG", "C.UTF-8", "--",
        PYTHON, "-I", "-c", AGENT, REPL,
    ]


class LocalContainer:
    """One rollout's sandbox: `start()`, then `run(command)` and `write(path, data)` any number of times, `close()`."""

    def __init__(self, limits: Limits = Limits(wall_s=60.0, cpu_s=60, scratch_mb=512)):
        self.limits = limits
        self.id = f"local-{uuid.uuid4().hex[:12]}"
        self.proc: asyncio.subprocess.Process | None = None
        self.lock = asyncio.Lock()  # one request at a time: the agent answers in order

    async def start(self) -> "LocalContainer":
        if problem := isolation_problem():
            raise SandboxUnavailable(problem)
        self.proc = await asyncio.create_subprocess_exec(
            *command(self.limits, call_uid()), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, start_new_session=True, limit=2**26)
        return self

    async def request(self, req: dict, timeout: float) -> dict:
        async with self.lock:
            if self.proc is None or self.proc.returncode is not None:
                raise SandboxUnavailable(f"the local sandbox {self.id} is not running (closed, or its agent died)")
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            await self.proc.stdin.drain()
            try:
                line = await asyncio.wait_for(self.proc.stdout.readline(), timeout + 10)
            except TimeoutError:
                await self.close()
                raise
            if not line:
                raise SandboxUnavailable(f"the local sandbox {self.id} ended (its agent was killed: a limit hit?)")
            return json.loads(line)

    async def run(self, command: str, cwd: str | None = None, timeout: float | None = None) -> CommandResult:
        timeout = timeout or self.limits.wall_s
        reply = await self.request({"op": "exec", "command": command, "cwd": cwd, "timeout": timeout,
                                    "max_output": self.limits.output_bytes}, timeout)
        return CommandResult(reply["stdout"], reply["stderr"], reply["exit_code"], reply.get("timed_out", False))

    async def python(self, code: str, timeout: float | None = None) -> dict:
        """Run `code` in the sandbox's persistent Python session (started on first use, with the session's
        variables kept between calls; a call past its timeout ends the session, and the next starts a new one).
        Returns status ("ok", "error", "timeout"), stdout, stderr, result (a last expression's repr, or the
        traceback) and execution_count."""
        timeout = timeout or self.limits.wall_s
        return await self.request({"op": "python", "code": code, "timeout": timeout, "cwd": INSIDE}, timeout)

    async def write(self, path: str, data: bytes) -> None:
        reply = await self.request({"op": "write", "path": path, "data": base64.b64encode(data).decode()}, 60)
        if reply["exit_code"] != 0:
            raise OSError(f"writing {path} in the local sandbox failed: {reply['stderr']}")

    async def close(self) -> None:
        """End it, every process it started with it (its PID namespace)."""
        if self.proc is not None and self.proc.returncode is None:
            await end(self.proc)
