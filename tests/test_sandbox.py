"""The local sandbox against code that attacks it: each case is real code run in a real sandbox (bubblewrap).

Every case must end the call with an error or a refusal the model can read, leave no process of the call running,
and change no file outside the sandbox; the test process (the run) goes on. vfrl/sandbox/local.py says what holds.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import sandbox_processes

from vfrl import sandbox
from vfrl.sandbox import Limits, run
from vfrl.tools import python

pytestmark = pytest.mark.skipif(sandbox.isolation_problem() is not None and os.geteuid() != 0,
                                reason=f"this machine cannot isolate: {sandbox.isolation_problem()}")
FAST = Limits(wall_s=5.0, cpu_s=2, memory_mb=512, processes=32, file_mb=8, scratch_mb=32, output_bytes=20_000)
SECRET = "vfrl-test-secret-4711"


def sandboxed(code: str, limits: Limits = FAST) -> sandbox.Result:
    return asyncio.run(run([sys.executable, "-I", "-c", textwrap.dedent(code)], limits))


@pytest.fixture(autouse=True)
def nothing_left_and_nothing_changed(tmp_path, monkeypatch):
    """The run's secrets where an attack would look (its environment, its run directory, a home with keys), and,
    after the case, no process of the call left and those files as they were."""
    monkeypatch.setenv("VFRL_API_KEY", SECRET)
    run_dir = tmp_path / "outputs" / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / ".api_key").write_text(SECRET)
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text(SECRET)
    before = {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    yield tmp_path
    deadline = time.monotonic() + 10
    while (left := sandbox_processes()) and time.monotonic() < deadline:  # the kernel ends them as the call ends
        time.sleep(0.1)
    assert not left, left
    assert {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_the_code_runs_on_this_python_with_its_venvs_libraries():
    r = sandboxed("import sys, pydantic; print(sys.version); print(sys.prefix, pydantic.VERSION)")
    assert r.stdout.splitlines() == [sys.version, f"{sys.prefix} {__import__('pydantic').VERSION}"], r


# ---- the network ----

def test_the_runs_vllm_port_on_loopback_cannot_be_reached():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.5)
    port = server.getsockname()[1]
    r = sandboxed(f"""
        import socket
        socket.create_connection(("127.0.0.1", {port}), timeout=2)
        print("connected")
    """)
    assert "connected" not in r.stdout and "ConnectionRefusedError" in r.stderr
    with pytest.raises(socket.timeout):
        server.accept()  # nothing reached it
    server.close()


def test_an_outside_address_cannot_be_reached_and_no_name_resolves():
    # 192.0.2.1 is TEST-NET-1 (documentation only); the sandbox has no route, so nothing leaves the machine
    r = sandboxed("""
        import socket
        for target in (lambda: socket.create_connection(("192.0.2.1", 80), timeout=2),
                       lambda: socket.getaddrinfo("pypi.org", 443)):
            try:
                target()
                print("reached")
            except OSError as e:
                print(type(e).__name__)
    """)
    assert "reached" not in r.stdout and r.stdout.split() == ["OSError", "gaierror"], r


def test_only_a_loopback_of_its_own_exists():
    r = sandboxed("import socket; print(sorted(name for _, name in socket.if_nameindex()))")
    assert r.stdout.strip() == "['lo']", r


# ---- the user's things ----

def test_the_api_key_is_not_in_its_environment():
    r = sandboxed("import os; print(dict(os.environ))")
    assert SECRET not in r.stdout and "VFRL_API_KEY" not in r.stdout and r.ok


def test_other_processes_and_their_environment_are_not_in_its_proc():
    r = sandboxed(f"""
        import os
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        print(len(pids))
        try:
            print(open("/proc/{os.getpid()}/environ").read())
        except OSError as e:
            print(type(e).__name__)
    """)
    count, said = r.stdout.split()
    assert int(count) <= 3 and said == "FileNotFoundError" and SECRET not in r.stdout, r


def test_home_ssh_keys_and_the_run_directory_are_not_there(nothing_left_and_nothing_changed):
    home = nothing_left_and_nothing_changed
    r = sandboxed(f"""
        import os
        for path in ("{home}/.ssh/id_ed25519", "{home}/outputs/run/.api_key", os.path.expanduser("~/.ssh/id_rsa"),
                     "/root/.ssh/id_rsa", "{Path.cwd() / 'pyproject.toml'}"):
            print(os.path.exists(path))
        print(os.listdir("/"))
    """)
    lines = r.stdout.splitlines()
    assert lines[:5] == ["False"] * 5 and SECRET not in r.stdout, r
    pythons = {Path(p).resolve().parts[1] for p in (sys.prefix, sys.base_prefix)}  # mounted read-only, alone
    assert set(eval(lines[5])) <= {"sandbox", "tmp", "dev", "proc", "usr", "etc", "bin", "sbin", "lib", "lib64",
                                   "lib32", "root"} | pythons


def test_another_calls_working_folder_is_not_there():
    """Two calls at once: the first writes a file and waits; the second finds it nowhere."""

    async def both():
        first = asyncio.create_task(run([sys.executable, "-I", "-c", textwrap.dedent("""
            import time
            open("mine.txt", "w").write("first call's file")
            time.sleep(1.5)
        """)], FAST))
        await asyncio.sleep(0.5)
        second = await run([sys.executable, "-I", "-c", textwrap.dedent("""
            import glob, os
            print(glob.glob("/tmp/vfrl-*"), os.listdir("."))
            print([p for top in ("/tmp", "/sandbox", "/root", "/work", "/home", "/dev") for p in
                   glob.glob(f"{top}/**/mine.txt", recursive=True) if "site-packages" not in p])
        """)], FAST)
        return await first, second

    first, second = asyncio.run(both())
    assert first.ok and second.stdout.splitlines() == ["[] []", "[]"], second


# ---- writing ----

def test_writing_outside_the_working_folder_fails(nothing_left_and_nothing_changed):
    home = nothing_left_and_nothing_changed
    r = sandboxed(f"""
        for path in ("/usr/evil", "/etc/passwd", "/evil", "{home}/outputs/run/.api_key", "/root/evil"):
            try:
                open(path, "a").write("x")
                print("wrote", path)
            except OSError as e:
                print(type(e).__name__)
        open("fine.txt", "w").write("the working folder is writable")
        print(open("fine.txt").read())
    """)
    assert "wrote" not in r.stdout and r.stdout.splitlines()[-1] == "the working folder is writable", r


def test_a_symlink_out_of_the_working_folder_reaches_nothing_writable(nothing_left_and_nothing_changed):
    home = nothing_left_and_nothing_changed
    r = sandboxed(f"""
        import os
        os.symlink("/etc/hostname", "out")
        os.symlink("{home}/outputs/run/.api_key", "key")
        for link in ("out", "key"):
            try:
                open(link, "a").write("x")
                print("wrote", link)
            except OSError as e:
                print(type(e).__name__)
        print(os.path.exists("key"))
    """)
    assert r.stdout.split() in (["OSError", "FileNotFoundError", "False"], ["PermissionError", "FileNotFoundError",
                                                                            "False"]), r


def test_the_scratch_space_is_capped():
    r = sandboxed("""
        import os
        chunk = b"x" * (4 << 20)
        for folder in (".", "/tmp"):
            try:
                for i in range(64):
                    with open(f"{folder}/f{i}", "wb") as f:
                        f.write(chunk)
                print("filled", folder)
            except OSError as e:
                print(type(e).__name__, e.errno)
    """)
    assert r.stdout.split() == ["OSError", "28", "OSError", "28"], r  # ENOSPC at 32 MiB each


def test_a_file_larger_than_its_limit_cannot_be_written():
    r = sandboxed("""
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        try:
            open("big", "wb").write(b"x" * (9 << 20))
            print("wrote")
        except OSError as e:
            print(type(e).__name__, e.errno)
    """)
    assert r.stdout.split() == ["OSError", "27"], r  # EFBIG past 8 MiB


# ---- resources ----

def test_a_fork_bomb_stops_at_its_process_limit():
    r = sandboxed("""
        import os, time
        children = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                children += 1
        except OSError as e:
            print(children, type(e).__name__)
    """)
    if os.geteuid() == 0:  # RLIMIT_NPROC counts the call's own user id (see local.py)
        children, error = r.stdout.split()
        assert int(children) < FAST.processes and error == "BlockingIOError", r
    else:
        assert r.killed == "wall time" or r.stdout, r


def test_a_memory_bomb_gets_a_memory_error():
    r = sandboxed("x = bytearray(2 << 30)")
    assert "MemoryError" in r.stderr and r.exit_code == 1, r


def test_an_infinite_loop_is_stopped_by_its_cpu_limit():
    t0 = time.monotonic()
    r = sandboxed("while True: pass")
    assert r.exit_code != 0 and time.monotonic() - t0 < FAST.wall_s, r  # SIGXCPU/SIGKILL at 2 CPU seconds


def test_a_sleep_is_stopped_at_the_wall_time():
    t0 = time.monotonic()
    r = sandboxed("import time; time.sleep(60)", Limits(wall_s=1.0))
    assert r.killed == "wall time" and r.exit_code is None and time.monotonic() - t0 < 5, r


def test_a_child_left_sleeping_is_ended_with_the_call():
    r = sandboxed("""
        import subprocess
        subprocess.Popen(["sleep", "1000"], start_new_session=True)
        subprocess.Popen(["sh", "-c", "nohup sleep 1001 >/dev/null 2>&1 &"])
        print("left them")
    """)
    assert r.ok and r.stdout == "left them\n"
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    assert "sleep 1000" not in ps and "sleep 1001" not in ps


def test_a_gigabyte_print_is_cut_at_the_output_limit():
    t0 = time.monotonic()
    r = sandboxed("import sys\nwhile True: sys.stdout.write('x' * 65536)")
    assert r.killed == "output" and len(r.stdout) == FAST.output_bytes and time.monotonic() - t0 < FAST.wall_s, r


def test_too_many_open_files_are_refused():
    r = sandboxed("""
        files = []
        try:
            while True:
                files.append(open("/dev/null"))
        except OSError as e:
            print(len(files) < 300, e.errno)
    """)
    assert r.stdout.split() == ["True", "24"], r  # EMFILE


# ---- the parent, privileges ----

def test_killing_the_parent_reaches_nothing_outside():
    r = sandboxed(f"""
        import os, signal
        for pid in (os.getppid(), 1, {os.getpid()}):
            try:
                os.kill(pid, signal.SIGKILL)
                print("sent", pid)
            except OSError as e:
                print(type(e).__name__)
        print("still here")
    """)
    assert r.stdout.splitlines()[-1] == "still here" or r.exit_code is not None  # the call ended, the run did not
    assert "ProcessLookupError" in r.stdout  # this test's process is not in its namespace


def test_no_privilege_to_mount_or_become_root():
    r = sandboxed("""
        import os, subprocess
        print(os.getuid() != 0)
        for cmd in (["mount", "-t", "tmpfs", "none", "/usr"], ["su", "-c", "id"], ["/usr/sbin/chroot", "/", "true"]):
            done = subprocess.run(cmd, capture_output=True, text=True)
            print(done.returncode != 0)
        status = open("/proc/self/status").read()
        print([l.split()[1] for l in status.splitlines() if l.startswith(("CapEff", "NoNewPrivs"))])
    """)
    lines = r.stdout.splitlines()
    assert lines[:4] == ["True"] * 4, r
    if os.geteuid() == 0:
        assert lines[4] == "['0000000000000000', '1']", r


def test_a_unix_socket_of_the_host_is_not_there(nothing_left_and_nothing_changed):
    path = nothing_left_and_nothing_changed / "host.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    r = sandboxed(f"""
        import socket
        try:
            socket.socket(socket.AF_UNIX).connect("{path}")
            print("connected")
        except OSError as e:
            print(type(e).__name__)
    """)
    server.close()
    path.unlink()
    assert r.stdout.strip() == "FileNotFoundError", r


# ---- the python tool ----

def test_the_python_tool_returns_output_errors_and_limits_as_text(monkeypatch):
    import importlib

    tool = importlib.import_module("vfrl.tools.python")  # the module; `vfrl.tools.python` is the tool itself

    assert asyncio.run(python("print(6 * 7)")) == "42\n"
    assert asyncio.run(python("pass")) == "(no output)"
    said = asyncio.run(python("1 / 0"))
    assert said.startswith("Error: Traceback") and said.endswith("ZeroDivisionError: division by zero")
    assert asyncio.run(python("print('x' * 5000)")).endswith("... (cut to 1000 characters)")
    monkeypatch.setattr(tool, "LIMITS", Limits(wall_s=1.0))
    assert asyncio.run(python("import time; time.sleep(9)")).startswith("Error: the code ran past its 1 s limit")


def test_many_calls_at_once_each_get_their_own_sandbox():
    async def many():
        return await asyncio.gather(*(python(f"import os; open('n', 'w').write('{i}'); print(os.listdir('.'), "
                                             f"open('n').read())") for i in range(16)))

    assert asyncio.run(many()) == [f"['n'] {i}\n" for i in range(16)]


def test_the_run_goes_on_while_calls_are_killed():
    """The event loop of the caller (vf-train's) is never blocked by a call: a ticker keeps ticking."""
    ticks = []

    async def go():
        async def ticker():
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.05)

        t = asyncio.create_task(ticker())
        await run([sys.executable, "-I", "-c", "while True: pass"], Limits(wall_s=1.0, cpu_s=5))
        t.cancel()

    asyncio.run(go())
    assert len(ticks) >= 10 and max(b - a for a, b in zip(ticks, ticks[1:])) < 0.5


def test_a_machine_that_cannot_isolate_refuses_in_one_line_unless_the_config_consents(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox.local, "isolation_problem", lambda: "running model code needs bwrap ...")
    monkeypatch.delenv(sandbox.MODE_ENV, raising=False)
    with pytest.raises(sandbox.SandboxUnavailable, match='^running model code needs bwrap ...; or, to run model '
                                                         'code without isolation, set env.sandbox = "unsandboxed"$'):
        asyncio.run(python("print(1)"))
    monkeypatch.setenv(sandbox.MODE_ENV, "unsandboxed")  # the explicit consent: rlimits, a fresh folder, no env
    said = asyncio.run(python("import os; print(os.getcwd().startswith('/tmp/vfrl-unsandboxed-'), "
                              "'VFRL_API_KEY' in os.environ, os.listdir('.'))"))
    assert said == "True False []\n"
    r = asyncio.run(run([sys.executable, "-I", "-c", "x = bytearray(2 << 30)"], FAST))
    assert "MemoryError" in r.stderr  # its rlimits still hold


def test_threads_calling_at_once_get_distinct_user_ids():
    from vfrl.sandbox.local import call_uid

    got = []
    threads = [threading.Thread(target=lambda: got.append(call_uid())) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(set(got)) == 8 or os.geteuid() != 0


def test_a_tool_env_rollout_runs_the_models_python_in_the_sandbox():
    """The guide's `vf.ToolEnv(tools=[python])`: the model's calls run sandboxed and it reads what they printed,
    the run's key not among it; a call that attacks ends as text and the rollout goes on."""
    import json as _json

    from fake_openai import FakeOpenAI

    import vfrl as vf

    def call(code: str) -> str:
        return "<tool_call>" + _json.dumps({"name": "python", "arguments": {"code": code}}) + "</tool_call>"

    env = vf.ToolEnv(dataset=[{"question": "6 * 7?", "answer": "42"}], tools=[python], max_turns=4)
    replies = [call("print(6 * 7)"), call("import os; print(os.environ.get('VFRL_API_KEY'))"),
               call("import os\nwhile True: os.fork()"), "42"]
    r, state = asyncio.run(env.rollout_with_state(FakeOpenAI(replies), "m", env.dataset[0], 0, {"max_tokens": 400}))
    tools = [m["content"] for m in r.completion if m["role"] == "tool"]
    assert tools[:2] == ["42\n", "None\n"] and tools[2].startswith("Error:"), tools
    assert r.completion[-1]["content"] == "42" and state["tool_calls"] == 3 and SECRET not in str(r.completion)
