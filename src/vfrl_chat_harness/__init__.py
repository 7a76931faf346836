"""verifiers' plain chat harness (`null`) run in this process: the same chat program, no Python started per rollout.

verifiers' `null` harness runs its chat loop (verifiers/v1/harnesses/utils/core.py, bundled with mcp.py and
compaction.py into one uv script) as a fresh Python process for every rollout, which spends about a second
importing openai before its first request: far more than a small model's sampling. `InProcessChatHarness` runs
that same program text here: it is executed once as a module, and each rollout awaits its `main()` with the
arguments verifiers' `launch_chat_program` builds for the subprocess. verifiers allows it (`Harness.launch`: "a
harness may run its loop in-process instead of launching a program, as long as every model call goes through
`endpoint` + `secret`"): the model's calls still go through the rollout's interception server and its tools
through MCP and the `/tool` gate, so the trace is recorded as for the subprocess.

What differs from the subprocess:
- the loop uses this process's openai, mcp and httpx (vfrl's verifiers extra pins them as verifiers does), not the
  newest ones the uv script resolves;
- it shares this process: a rollout's loop is cancelled (verifiers' timeouts), never killed, and its working
  directory is the trainer's (the chat loop has no file or shell tools);
- program variables (`harness.env`, `forward_env`) cannot be given to it: a config that sets them is refused;
- its HTTP clients share one TLS context (httpx reads the CA bundle for each one otherwise, on every rollout) and one
  aiohttp pool of connections per event loop (a process connected anew for every rollout; the interception server
  tells rollouts apart by the secret each request carries, not by its connection), and are closed when its run
  ends, as the process's exit closed them, leaving the pool open;
- what the program builds the same on every run is built once: its argument parser (kept, RunParser), and openai's
  walk of its plain JSON request bodies is skipped (plain_body);
- its messages file goes to one folder of this process's, removed at its run's end;
- the program's exit code and stderr, which verifiers reads to say why a rollout failed, are its `SystemExit`
  and the traceback of what it raised.

Its harness id is this package's name, `vfrl_chat_harness`: verifiers imports a top-level package as a harness and
takes the one Harness subclass its `__all__` exports.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextvars
import functools
import hashlib
import io
import linecache
import os
import shutil
import ssl
import sys
import tempfile
import traceback
import types
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from openai.resources.chat.completions import completions as chat_completions
from verifiers.v1.errors import HarnessError
from verifiers.v1.harnesses.null.harness import NullHarness
from verifiers.v1.runtimes import ProgramResult, Runtime

from vfrl_chat_harness import plain_body

__all__ = ["InProcessChatHarness"]

MESSAGES_FILE_ARG = "--initial-messages-file="  # a path relative to the program's working directory


@dataclass
class ProgramRun:
    """One rollout's run of the program: what its own process would have had to itself."""

    argv: list[str]
    stderr: io.StringIO = field(default_factory=io.StringIO)
    clients: list[httpx.AsyncClient] = field(default_factory=list)  # closed when it ends, as a process exit would


# Each rollout runs in an asyncio task of its own, with its own copy of the context: concurrent runs never see
# each other's.
RUN: contextvars.ContextVar[ProgramRun] = contextvars.ContextVar("vfrl_chat_harness_run")


def call_key(args: tuple, kwargs: dict) -> str:
    """A call's arguments as one hashable text: two calls with the same arguments have the same key."""
    return repr((args, sorted(kwargs.items())))


class RunParser(argparse.ArgumentParser):
    """The program's own parser, reading the run's argv instead of sys.argv and writing its errors to the run's
    stderr. The program builds the same parser on every run (half a millisecond of `add_argument`s), so it is
    kept across runs: a later run's `add_argument` with the arguments of one it has taken returns that action.
    A parser given groups or subcommands (verifiers' program uses none) is built anew each run."""

    def __init__(self, *args, **kwargs):
        self.actions_by_call: dict[str, argparse.Action] = {}  # before argparse's own init adds its --help
        super().__init__(*args, **kwargs)
        self.reusable = True  # after argparse's own init adds its groups

    def add_argument(self, *args, **kwargs):
        call = call_key(args, kwargs)
        if call not in self.actions_by_call:
            self.actions_by_call[call] = super().add_argument(*args, **kwargs)
        return self.actions_by_call[call]

    def add_argument_group(self, *args, **kwargs):
        self.reusable = False
        return super().add_argument_group(*args, **kwargs)

    def add_mutually_exclusive_group(self, *args, **kwargs):
        self.reusable = False
        return super().add_mutually_exclusive_group(*args, **kwargs)

    def add_subparsers(self, *args, **kwargs):
        self.reusable = False
        return super().add_subparsers(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):
        return super().parse_args(RUN.get().argv if args is None else args, namespace)

    def _print_message(self, message, file=None):
        if message:
            RUN.get().stderr.write(message)


def kept_parsers():
    """An `ArgumentParser` for one program: the parser its last run built with these arguments, when reusable."""
    kept: dict[str, RunParser] = {}

    def parser(*args, **kwargs) -> RunParser:
        key = call_key(args, kwargs)
        if key not in kept or not kept[key].reusable:
            kept[key] = RunParser(*args, **kwargs)
        return kept[key]

    return parser


@functools.cache
def tls_context(verify: str | bool, trust_env: bool) -> ssl.SSLContext:
    """The TLS context httpx builds for a client from `verify`, built once for every run: it reads the CA bundle
    each time, 24 ms, as much as a small model's whole rollout."""
    return httpx.create_ssl_context(verify=verify, trust_env=trust_env)


class SharedConnections(httpx.AsyncBaseTransport):
    """One pool of connections for the runs' clients of one event loop and TLS context: a client closing at its
    run's end leaves it open. The pool is aiohttp's (httpx-aiohttp, as verifiers' train client's: httpcore's pool
    walks every request in flight against every connection whenever one starts or ends, a tenth of the program's
    cost at 32 rollouts). No cap on connections: every rollout in flight holds one while it streams its reply, so
    a cap would cap the rollouts in flight. The pool closes when the loop's tasks are cancelled at its end
    (asyncio.run's), by a task that holds it."""

    def __init__(self, verify: ssl.SSLContext):
        import aiohttp
        from httpx_aiohttp.transport import AiohttpTransport

        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=verify))
        self.pool = AiohttpTransport(client=self.session)
        self.holder = asyncio.get_running_loop().create_task(self.close_at_the_loops_end())

    async def close_at_the_loops_end(self) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await self.session.close()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.pool.handle_async_request(request)

    async def aclose(self) -> None:
        pass  # the loop's pool outlives each run's client


POOLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> {TLS context: SharedConnections}


def shared_connections(verify: ssl.SSLContext) -> SharedConnections:
    """This event loop's pool for `verify` (a connection belongs to the loop that opened it)."""
    pools = POOLS.setdefault(asyncio.get_running_loop(), {})
    if verify not in pools:
        pools[verify] = SharedConnections(verify)
    return pools[verify]


def run_client(make):
    """`make` (an httpx client class) whose clients share one TLS context and this loop's connections, and are
    closed when their run ends."""

    def opened(*args, **kwargs):
        if isinstance(verify := kwargs.get("verify", True), str | bool):
            kwargs["verify"] = tls_context(verify, kwargs.get("trust_env", True))
        if "transport" not in kwargs and isinstance(kwargs["verify"], ssl.SSLContext):
            kwargs["transport"] = shared_connections(kwargs["verify"])
        client = make(*args, **kwargs)
        RUN.get().clients.append(client)
        return client

    return opened


def with_names(module: types.ModuleType, **names) -> types.ModuleType:
    """A copy of `module` with `names` replaced, seen only by the program."""
    copy = types.ModuleType(module.__name__)
    copy.__dict__.update(vars(module), **names)
    return copy


@functools.cache
def chat_program(source: str) -> types.ModuleType:
    """The program as a module named other than `__main__` (its entry point stays inert), reading the run's argv
    and writing to the run's stderr."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    program = types.ModuleType(f"{__name__}.program_{digest}")
    filename = f"<verifiers chat program {digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # its tracebacks show lines
    sys.modules[program.__name__] = program  # where dataclasses and typing look a class's module up
    exec(compile(source, filename, "exec"), program.__dict__)
    program.argparse = with_names(argparse, ArgumentParser=kept_parsers())
    program.traceback = with_names(traceback, print_exc=lambda: RUN.get().stderr.write(traceback.format_exc()))
    program.httpx = with_names(httpx, AsyncClient=run_client(httpx.AsyncClient))
    program.DefaultAsyncHttpxClient = run_client(program.DefaultAsyncHttpxClient)
    plain_body.install(chat_completions, RUN)
    return program


@functools.cache
def files_folder(pid: int) -> Path:
    """This process's folder for the runs' files, removed when it exits (a folder a run is 0.3 ms of mkdir and rmtree:
    a tenth of the chat program's cost). `pid`: a forked child makes its own and never removes its parent's."""
    folder = Path(tempfile.mkdtemp(prefix="vfrl-chat-"))
    atexit.register(lambda: os.getpid() == pid and shutil.rmtree(folder, ignore_errors=True))
    return folder


class InProcess:
    """The runtime that `launch_chat_program` asks for, answered in this process: the program's files go to
    `folder` (verifiers names them for the rollout's trace) and are removed when the run ends, preparing the script
    loads it as a module, and running it awaits its `main()`."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.program: types.ModuleType | None = None
        self.written: list[Path] = []

    async def write(self, path: str, data: bytes) -> None:
        self.written.append(self.folder / path)
        self.written[-1].write_bytes(data)

    async def prepare_uv_script(self, source: str, env: dict[str, str] | None = None, *, activate: bool = True):
        self.program = chat_program(source)
        return []

    async def run_program(self, argv: list[str], env: dict[str, str]) -> ProgramResult:
        assert self.program is not None, "launch_chat_program prepares the script before it runs it"
        run = ProgramRun([f"{MESSAGES_FILE_ARG}{self.folder / a[len(MESSAGES_FILE_ARG):]}"
                          if a.startswith(MESSAGES_FILE_ARG) else a for a in argv])
        token = RUN.set(run)
        try:
            await self.program.main()
            code = 0
        except SystemExit as e:  # as Python exits: None is 0, a number is the code, anything else is said, 1
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
            if not isinstance(e.code, int | None):
                run.stderr.write(f"{e.code}\n")
        except Exception:
            run.stderr.write(traceback.format_exc())
            code = 1
        finally:
            RUN.reset(token)
            for client in run.clients:
                await client.aclose()
            for path in self.written:  # the program removes its messages file once read, unless it failed first
                path.unlink(missing_ok=True)
        return ProgramResult(exit_code=code, stdout="", stderr=run.stderr.getvalue())


class InProcessChatHarness(NullHarness):
    """verifiers' `null` harness with its chat program run in this process."""

    async def setup(self, runtime: Runtime) -> None:
        if self.config.resolved_env:
            raise HarnessError(
                f"harness {self.config.id!r} runs in the trainer's process and cannot give its program the variables "
                f"{', '.join(sorted(self.config.resolved_env))}; use harness 'null' (a process per rollout) for them")

    async def launch(self, ctx, trace, runtime, *args, **kwargs) -> ProgramResult:
        return await super().launch(ctx, trace, InProcess(files_folder(os.getpid())), *args, **kwargs)
