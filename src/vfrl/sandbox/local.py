"""Run code the policy wrote on this machine, isolated: bubblewrap's namespaces, rlimits, a fresh folder, a hard end.

One call, `await run(argv)`, is one sandbox, gone when the call returns:

- **Nothing of the user's**: a new mount namespace holds only the system, read-only (`/usr`, `/etc`, this Python's
  installation and its venv), its own `/dev` and `/proc`, and two empty folders in memory, capped, the only places
  it can write: the working folder `/sandbox` and `/tmp`. Home, the run directory, other calls' folders are not
  there. The environment is cleared (no API key, no token): PATH, HOME=/sandbox, LANG.
- **No network**: its own network namespace, with nothing but a loopback of its own (vLLM's port on this machine's
  loopback is not reachable from it).
- **No other process**: its own PID namespace; when the call ends its first process is killed and the kernel ends
  every process left in the namespace (a daemon it forked, a sleeping child).
- **Limits** (`Limits`): wall time (the call is killed), CPU seconds, address space, file size and open files
  (rlimits, set by `prlimit` on bubblewrap, which the sandbox inherits), output (the call is killed once its stdout
  and stderr pass the limit), and processes: run as root, each call's code runs as a user id of its own (setpriv,
  every capability dropped), so RLIMIT_NPROC counts its processes alone (root itself is exempt from that limit);
  run as another user, it would count that user's processes, so it is not set, and the PID namespace and the wall
  time bound a fork bomb.

`isolation_problem()` says in one line why this machine cannot isolate (no bubblewrap, user namespaces refused);
`run` then raises SandboxUnavailable rather than run model code unsandboxed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

INSIDE = "/sandbox"  # the working folder, as the code sees it


class SandboxUnavailable(RuntimeError):
    """This machine cannot isolate model code; the message is one line saying why and what to do."""

    worded_for_users = True


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0  # the call is killed then
    cpu_s: int = 10  # CPU seconds of each process (RLIMIT_CPU)
    memory_mb: int = 1024  # address space of each process (RLIMIT_AS)
    processes: int = 64  # processes of the call at once (RLIMIT_NPROC, where it can count them: see above)
    file_mb: int = 64  # largest file it may write (RLIMIT_FSIZE)
    scratch_mb: int = 256  # each of its two writable folders, the working folder and /tmp (tmpfs in memory)
    open_files: int = 256
    output_bytes: int = 64_000  # stdout and stderr together; past it the call is killed


@dataclass
class Result:
    stdout: str
    stderr: str
    exit_code: int | None  # None: it was killed (see `killed`)
    killed: str | None = None  # why: "wall time", "output"

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed is None


def system_binds(python_too: bool = True) -> list[str]:
    """bubblewrap's arguments for the read-only system: /usr and /etc, the merged-/usr links, and (`python_too`)
    this Python's installation and venv where they live elsewhere (pyenv under /root, a venv in the project)."""
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for top in ("bin", "sbin", "lib", "lib64", "lib32"):
        path = Path("/") / top
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for prefix in dict.fromkeys(Path(p).resolve() for p in (sys.base_prefix, sys.prefix) if python_too):
        if not str(prefix).startswith("/usr/"):
            # its parents as empty folders anyone may pass (/root is 0700 on the host: the call's user could not
            # reach a pyenv Python under it)
            for parent in reversed(prefix.parents[:-1]):
                args += ["--perms", "0755", "--dir", str(parent)]
            args += ["--ro-bind", str(prefix), str(prefix)]
    return args


_slots = itertools.count()
_slot_lock = threading.Lock()


def call_uid() -> int | None:
    """A user id for one call, its own among this process's calls and other processes' (pid-based), when this
    process may switch to it (root); None otherwise."""
    if os.geteuid() != 0:
        return None
    with _slot_lock:
        slot = next(_slots) % 512
    return 2_000_000 + (os.getpid() % 4_000_000) * 512 + slot


def rlimit_args(limits: Limits, nproc: bool) -> list[str]:
    """prlimit's options for `limits` (RLIMIT_NPROC only where it counts the call's own processes: see above)."""
    args = [f"--cpu={limits.cpu_s}", f"--as={limits.memory_mb * 2**20}", f"--fsize={limits.file_mb * 2**20}",
            f"--nofile={limits.open_files}", "--core=0"]
    return args + [f"--nproc={limits.processes}"] if nproc else args


def command(argv: list[str], limits: Limits, uid: int | None) -> list[str]:
    """The command line of one call. As root, bubblewrap mounts as root (no user namespace: the mounts need no
    reading of /root's pyenv by another user) and the code runs as `uid`, switched to inside by setpriv with every
    capability dropped; as another user, bubblewrap's user namespace maps that user."""
    rlimits = rlimit_args(limits, nproc=uid is not None)  # RLIMIT_NPROC counts uid's processes: this call's alone
    if uid is None:
        namespaces, become = ["--unshare-all"], []
    else:
        namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                      "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        become = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                  "--bounding-set=-all", "--no-new-privs", "--"]
    return [
        "prlimit", *rlimits, "--",
        "bwrap", *namespaces, "--die-with-parent", "--new-session",
        # the only writable places, in memory and capped (a folder of the host would let it fill the disk); mounted
        # before the system, so a Python or venv that lives under /tmp (a clone there) is bound inside, not hidden
        "--perms", "1777", "--size", str(limits.scratch_mb * 2**20), "--tmpfs", "/tmp",
        "--perms", "1777", "--size", str(limits.scratch_mb * 2**20), "--tmpfs", INSIDE,
        *system_binds(), "--proc", "/proc", "--dev", "/dev", "--chdir", INSIDE,
        "--remount-ro", "/",  # the root bubblewrap built: no new top-level folders (the working folder stays rw)
        "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", INSIDE,
        "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--",
        *become, *argv,
    ]


@functools.lru_cache(maxsize=1)
def isolation_problem() -> str | None:
    """Why model code cannot be isolated here (one line), or None. Asked once: a real sandbox runs `true`."""
    missing = [tool for tool in ("bwrap", "prlimit", "setpriv") if shutil.which(tool) is None]
    if missing:
        return (f"running model code needs {', '.join(missing)} to isolate it, which this machine lacks: "
                "apt-get install bubblewrap util-linux (scripts/install.sh does it)")
    done = subprocess.run(command(["true"], Limits(), call_uid()), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return (f"this kernel refuses the namespaces that isolate model code (bwrap: {said}); enable unprivileged "
                "user namespaces (sysctl kernel.unprivileged_userns_clone=1) or run where they are allowed")
    return None


UNSANDBOXED = "unsandboxed"  # env.sandbox's explicit consent to run model code without isolation


async def run(argv: list[str], limits: Limits = Limits(), stdin: bytes | None = None) -> Result:
    """Run `argv` in a new sandbox, in its empty working folder; what it printed and how it ended.

    Where this machine cannot isolate, it refuses (SandboxUnavailable), unless env.sandbox = "unsandboxed" says to
    run the code without isolation: then only the rlimits, the wall time and output bounds, a cleared environment
    and a fresh working folder hold (nothing of the network, the filesystem or other processes is kept from it)."""
    from vfrl.sandbox import mode

    if problem := isolation_problem():
        if mode() != UNSANDBOXED:
            raise SandboxUnavailable(f"{problem}; or, to run model code without isolation, set env.sandbox = "
                                     f"\"{UNSANDBOXED}\"")
        with tempfile.TemporaryDirectory(prefix="vfrl-unsandboxed-") as folder:
            return await _run(["prlimit", *rlimit_args(limits, nproc=False), "--", *argv], limits, stdin,
                              cwd=folder, env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": folder,
                                               "LANG": "C.UTF-8"})
    return await _run(command(argv, limits, call_uid()), limits, stdin)


async def _run(cmd: list[str], limits: Limits, stdin: bytes | None, cwd: str | None = None,
               env: dict[str, str] | None = None) -> Result:
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True, cwd=cwd, env=env)
    out, err = bytearray(), bytearray()
    killed = None
    over = asyncio.Event()

    async def drain(stream: asyncio.StreamReader, into: bytearray) -> None:
        """Keep what fits the output bound; read on past it and drop the rest, so that the pipe, never left full,
        ends when the process does (asyncio's wait() waits for its pipes too)."""
        while chunk := await stream.read(65536):
            room = limits.output_bytes - len(out) - len(err)
            into += chunk[:max(room, 0)]
            if len(chunk) > room:
                over.set()

    async def feed() -> None:
        if stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()

    work = asyncio.gather(drain(proc.stdout, out), drain(proc.stderr, err), feed(), proc.wait())
    flood = asyncio.ensure_future(over.wait())
    try:
        done, _ = await asyncio.wait({work, flood}, timeout=limits.wall_s, return_when=asyncio.FIRST_COMPLETED)
        if work not in done:
            killed = "output" if flood in done else "wall time"
    finally:
        flood.cancel()
        if proc.returncode is None:
            await end(proc)
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
        await proc.wait()
    if killed is None and over.is_set():  # it ended by itself, but said more than it may: cut
        killed = "output"
    return Result(out.decode(errors="replace"), err.decode(errors="replace"),
                  None if killed else proc.returncode, killed)


async def end(proc: asyncio.subprocess.Process) -> None:
    """End a sandbox now: SIGKILL bubblewrap's child inside the namespaces (the PID namespace's first process: the
    kernel then ends every other process in it), which bubblewrap outside reaps before it exits; then reap that.
    Killing bubblewrap first would leave its child to die of the parent-death signal, reaped by no one here (a
    zombie under the machine's init, which in a container may never reap)."""
    from vfrl.proc_table import table

    inside = [pid for pid, st in table().items() if st.ppid == proc.pid]
    for pid in inside:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    try:
        await asyncio.wait_for(proc.wait(), 5 if inside else 0.01)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
