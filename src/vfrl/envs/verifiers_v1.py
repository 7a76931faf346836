"""A verifiers 0.4 (`verifiers.v1`) taskset trained as is: `V1Environment` wraps it as a vfrl Environment.

The trainer's Orchestrator sees the same interface as for a vfrl environment (`dataset`,
`eval_dataset`, `run_group`); underneath, its rollouts come from verifiers episodes:

- the environment is `vf.load_environment(vf.resolve_env_config(...))` on the taskset with `[env.args]`,
  run by the package's own `vf.Env` when it exports one (a multi-turn conversation, several agents) and
  else by verifiers' single-agent env; every role's agent runs here (verifiers' subprocess runtime), never in a
  remote sandbox, and a role that pins no harness, or pins verifiers' `null`, plays verifiers' chat loop in this
  process (`vfrl_chat_harness`) instead of a uv-script process per rollout;
- the two per-rollout costs that are not verifiers' own work (pydantic's default-factory check, httpx's connection
  pool under the train client) are taken off the hot path (verifiers_hot_path);
- its serving resources (`env.serving()`) open on the first rollout and stay open for the event loop;
- with `env.workers` (use_workers) the episodes run in verifiers' env server instead, worker processes beside the
  trainer (verifiers_env_server), and come back as verifiers' wire episodes, made into rollouts the same way;
- `env.run_slot` samples through verifiers' train client, which renders the prompt with the base
  model's tokenizer and posts token ids to vLLM's `/inference/v1/generate` (vLLM started with
  `--enable-scale-out`; the adapter is chosen by the model name, as for vfrl's own requests); the first
  turns of a group's episodes go out as one request with `n`, as vfrl's own groups do
  (verifiers_group_request);
- each trace of a trainable agent becomes a `Rollout` with the trace's reward (`@vf.reward` functions,
  weighted) and metrics (each reward's score and every `@vf.metric`); traces of agents marked
  `trainable = False`, such as judges, are left out. An episode with several such traces (an Env that
  plays the agent more than once, several trainable agents) gives the group one rollout per trace, and
  the group's baseline is the mean over them all;
- a trace's branches (its message graph forks where a history was rewritten: compaction, a subagent, a
  turn verifiers had to re-render) are token sequences of that one rollout: the first is its own
  (`prompt_ids`, `completion_ids`), the others `more_branches`, each a training row with the trace's
  advantage. A message the branches share trains once, in the first branch holding it;
- every sequence is its branch's own token ids, never re-tokenized: the prompt is the ids before the
  first sampled token, `completion_mask` is verifiers' `sampled_mask` after it (0 on tool/environment
  tokens between turns), the logprobs are the sampling logprobs vLLM returned.

A taskset that yields tasks without end (verifiers' `Taskset.INFINITE`, a generator in `load()`) is read only as
far as the run can use: the trainer limits it to `max_steps x examples per step + num_eval_examples` rows
(`limit_tasks`), vf-eval to the examples it asks for, anything else to its first UNBOUNDED_TASKS; the tasks are
read when the dataset is first needed, and the read says what it is doing on stderr.

A failed episode, or one with no sampled token, is dropped and counted like any faulty rollout
(`rollouts_dropped`, the reason on the step's warning line); when a whole batch is dropped the run stops
with that line. One that failed in the taskset's scoring (a `@vf.reward` or `@vf.metric` raised: verifiers
then records no reward at all) is counted apart, `rollouts_scoring_failed`, and held to
`max_reward_error_fraction` as a failing vfrl reward function is (rollouts/step_faults.py).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import sys
from pathlib import Path
from typing import Any

from vfrl.envs.environment import Environment
from vfrl.rollout_types import Rollout, TokenBranch
from vfrl.envs.faults import RolloutFaults, one_line, seconds_left, start_clock
from vfrl.envs.messages import message_dict
from vfrl.envs.verifiers_group_request import TAG as GROUP_TAG
from vfrl.envs.verifiers_group_request import open_group, tag
from vfrl.inference.scale_out import find_uv

API_KEY_VAR = "VFRL_V1_API_KEY"  # verifiers' client reads the key from an environment variable
# sampling keys vLLM's SamplingParams takes, as the Orchestrator names them
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "presence_penalty", "frequency_penalty",
                 "repetition_penalty", "seed")
SLOW_SERVING_S = 15  # opening env.serving() for longer than this is said on stderr
UNBOUNDED_TASKS = 1000  # rows read from a taskset without end when nothing says how many a run can use
CHAT_HARNESS = "vfrl_chat_harness"  # verifiers' `null` chat loop, run in this process (src/vfrl_chat_harness)


class V1EnvironmentError(RuntimeError):
    """A verifiers 0.4 environment cannot run here; the message is one line for the user."""

    worded_for_users = True  # vf-train prints the message alone (trainer/failure.py: describe)


class DroppedEpisode(Exception):
    """An episode with nothing vfrl trains on; `kind` is its fault kind, the message the reason."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


def v1_exports(module, kind: str) -> list[str]:
    """The names of the subclasses of verifiers 0.4's `kind` ("Taskset", "Harness") that this imported module exports
    (its `__all__`, as verifiers' loader reads it)."""
    v1 = sys.modules.get("verifiers.v1")  # never import verifiers for a module that did not
    if v1 is None:
        return []
    base = getattr(v1, kind)
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    return [n for n in names if isinstance(obj := getattr(module, n, None), type) and issubclass(obj, base)
            and obj is not base]


def is_v1_module(module) -> bool:
    """Does this imported module export a verifiers 0.4 Taskset?"""
    return bool(v1_exports(module, "Taskset"))


def v1_only(env_id: str, renderer: str | dict | None, workers: int) -> str:
    """The line for `env.renderer` or `env.workers` given for an environment that is not a verifiers 0.4 package."""
    if renderer is not None:
        return (f"env.renderer = {renderer!r} is for verifiers 0.4 packages, and '{env_id}' is not one (vLLM renders "
                f"its prompts with the model's chat template): remove env.renderer")
    return (f"env.workers = {workers} is for verifiers 0.4 packages (verifiers' env server runs their episodes), "
            f"and '{env_id}' is not one: remove env.workers")


def ensure_uv(env_id: str) -> None:
    """verifiers runs its own harnesses (`null`, `bash`, ...) as uv scripts: uv must be on PATH, and the script's
    environment is compiled to bytecode."""
    uv = find_uv()
    if uv is None:
        raise V1EnvironmentError(
            f"environment '{env_id}' is a verifiers 0.4 package with a seat that runs one of verifiers' harnesses as "
            f"a uv script, and uv is not installed; `pip install uv` (vfrl's verifiers extra includes it) or put uv "
            f"on PATH")
    folder = str(Path(uv).parent)
    if folder not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
    # Every rollout's agent is a fresh Python importing openai and mcp from the script's uv environment. uv
    # writes no bytecode by default, and where PYTHONDONTWRITEBYTECODE is set (a common container setting)
    # Python writes none either: each rollout compiled those packages again (2.7 s of a 3-4 s rollout here).
    # verifiers' one `uv sync` per process compiles them once instead; a user's own setting wins.
    os.environ.setdefault("UV_COMPILE_BYTECODE", "1")


def absolute_pythonpath() -> None:
    """PYTHONPATH's relative folders made absolute: verifiers starts a taskset's tool servers (`python -m
    <module>`) and pinned harnesses in folders of their own, where `tests/pkgs` no longer names the folder it did
    here (and the server waits 180 s for a port that never comes)."""
    if entries := os.environ.get("PYTHONPATH"):
        os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(e) if e else e for e in entries.split(os.pathsep))


def trained_once_masks(trace) -> list[tuple[Any, list[int]]]:
    """(branch, its sampled mask) for each trainable branch of `trace` with a token left to train.

    Branches of a forked trace share their common beginning (the same message nodes, a prefix of each
    path): a sampled node trains in the first branch that holds it and is context (mask 0) in the
    later ones, so no token trains twice. `sampled_mask` and `logprobs` are verifiers' own spread of
    the nodes' masks and logprobs over `token_ids`."""
    trained: set[int] = set()
    out = []
    for branch in (b for b in trace.branches if b.trainable):
        mask = [int(m) for m in branch.sampled_mask]
        start = 0
        for node in branch.nodes:
            end = start + len(node.token_ids)
            if any(node.mask):
                if id(node) in trained:
                    mask[start:end] = [0] * (end - start)
                trained.add(id(node))
            start = end
        if 1 in mask:
            out.append((branch, mask))
    return out


def branch_tokens(branch, mask: list[int]) -> TokenBranch:
    """A branch's own token ids and sampling logprobs, cut before its first token to train."""
    ids, logprobs = list(branch.token_ids), list(branch.logprobs)
    if not (len(ids) == len(mask) == len(logprobs)):
        raise DroppedEpisode("failed", f"branch with {len(ids)} tokens, {len(mask)} mask and {len(logprobs)} logprobs")
    cut = mask.index(1)
    return TokenBranch(prompt_ids=ids[:cut], completion_ids=ids[cut:], completion_logprobs=logprobs[cut:],
                       completion_mask=mask[cut:])


def turn_spans(completion_mask: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each run of sampled tokens (a model turn)."""
    spans, start = [], None
    for i, m in enumerate(completion_mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def first_sampled_message(branch, msgs: list[dict[str, Any]]) -> int:
    """Where the model's part of a branch begins: its first message with a sampled token (a prompt may hold
    assistant and tool messages of its own, a worked example), else its first assistant message."""
    nodes = list(getattr(branch, "nodes", []))
    if len(nodes) == len(msgs):
        for i, n in enumerate(nodes):
            if getattr(n, "sampled", False) or any(n.mask):
                return i
    return next((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), len(msgs))


def trace_rollout(trace, example_id: int, answer: Any, policy: str) -> Rollout | None:
    """One trace as a Rollout with its reward and metrics: its first branch with a token to train is the
    rollout's sequence, any later ones its `more_branches`. None when no branch has a token to train."""
    found = trained_once_masks(trace)
    if not found:
        return None
    first, *more = [branch_tokens(b, mask) for b, mask in found]
    msgs = [message_dict(m) for m in found[0][0].messages]
    first_reply = first_sampled_message(found[0][0], msgs)
    rollout = Rollout(example_id=example_id, prompt=msgs[:first_reply], completion=msgs[first_reply:], answer=answer,
                      prompt_ids=first.prompt_ids, completion_ids=first.completion_ids,
                      completion_logprobs=first.completion_logprobs, completion_mask=first.completion_mask,
                      policy=policy, turn_spans=turn_spans(first.completion_mask), sequence_mode="tokens",
                      more_branches=more)
    rollout.reward = float(trace.reward)
    rollout.metrics = {name: float(r.score) for name, r in trace.rewards.items()}
    rollout.metrics |= {name: float(v) for name, v in trace.metrics.items() if v is not None}
    rollout.truncated = bool(trace.is_truncated)
    return rollout


def scoring_failed(episode, errors) -> bool:
    """Did the episode fail in its taskset's `@vf.reward`/`@vf.metric` code? verifiers marks every signal it is
    about to score as unscored (None) first, so a scoring that raised leaves Nones behind, and calls the task's
    own code's error a TaskError (its `setup` and `finalize` too, which leave no such mark)."""
    unscored = any(v is None for t in episode.traces for v in [*t.rewards.values(), *t.metrics.values()])
    return unscored and any(e.type == "TaskError" for e in errors)


def failing_signal(episode, errors) -> str | None:
    """Which `@vf.reward`/`@vf.metric` raised, as "@vf.reward exact (pkg/__init__.py:22)": the innermost frame
    of the error's traceback that is one of the signals left unscored (verifiers names the taskset only)."""
    unscored = {name: kind for t in episode.traces for kind, signals in (("reward", t.rewards), ("metric", t.metrics))
                for name, v in signals.items() if v is None}
    for e in errors:
        frames = re.findall(r'File "([^"]+)", line (\d+), in (\w+)', getattr(e, "traceback", None) or "")
        for path, line, name in reversed(frames):
            if name in unscored:
                return f"@vf.{unscored[name]} {name} ({'/'.join(Path(path).parts[-2:])}:{line})"
    return None


TRACEBACK = "Traceback (most recent call last):"
# the line a traceback ends on, `module.Name: message`, also inside an exception group's `| ` frame
EXCEPTION_LINE = re.compile(r"^[\s|]*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*: \S.*)$")
HINTS = {  # renderers' DefaultRenderer (a model with no template of its own for these) refusing a request
    "does not support tools": "the model's chat template has no tool syntax: set env.renderer to a renderer with a "
                              "tool_parser, docs/environments.md, 'Tools on a model whose template has no tool syntax'",
    "does not support process_multimodal": "the task sends images: it needs a vision-language model",
    # vLLM's 403 on /inference/v1/generate when started without --enable-scale-out (a vLLM vf-vllm did not start,
    # or vf-vllm with inference.enable_scale_out = false)
    "Scale-out endpoints are disabled": "verifiers 0.4 packages sample through vLLM's scale-out routes: serve "
                                        "the model with vf-vllm (its inference.enable_scale_out, auto or true, "
                                        "serves them)",
}


def error_text(error) -> str:
    """A verifiers error as one line's worth: its type and message, where a message carrying a program's traceback
    (verifiers gives a harness's stderr, its tail when long) keeps its opening and the exception the traceback ends
    on; a refusal with a known remedy gets it."""
    message = error.message
    lines = message.splitlines()
    if any(line.lstrip(" |").startswith('File "') for line in lines):
        head = message.partition(TRACEBACK)[0] if TRACEBACK in message else (
            m[0] if (m := re.match(r".*? exited -?\d+:", message)) else "")
        last = next((m[1] for line in reversed(lines) if (m := EXCEPTION_LINE.match(line))), "")
        message = f"{head.strip()} {last}".strip()
    hints = [hint for known, hint in HINTS.items() if known in message]
    return f"{error.type}: {message}" + (f" ({'; '.join(hints)})" if hints else "")


def episode_rollouts(episode, example_id: int, answer: Any, policy: str) -> list[Rollout]:
    """A Rollout per trace of a trainable agent (judges' traces are left out); DroppedEpisode for a
    failed episode or one with no sampled token to train."""
    if not episode.ok:
        errors = [e for t in episode.traces for e in t.errors] + list(episode.errors)
        why = error_text(errors[0]) if errors else "it did not complete"
        if scoring_failed(episode, errors):
            where = failing_signal(episode, errors)
            raise DroppedEpisode("scoring_failed",
                                 one_line(f"verifiers scoring failed{f' in {where}' if where else ''}, {why}", 480))
        raise DroppedEpisode("failed", one_line(f"verifiers episode failed, {why}", 480))
    rollouts = [trace_rollout(t, example_id, answer, policy) for t in episode.traces
                if getattr(t.agent, "trainable", True)]
    rollouts = [r for r in rollouts if r is not None]
    if not rollouts:
        raise DroppedEpisode("failed", "the episode has no sampled token to train")
    return rollouts


def renderer_config(env_id: str, spec: str | dict[str, Any]):
    """`env.renderer` as the `renderers` config verifiers' train client takes; one line when it is not one."""
    import typing

    from pydantic import TypeAdapter, ValidationError
    from renderers.configs import RendererConfig

    from renderers.parsers import TOOL_PARSERS

    from vfrl.envs import text_tool_calls

    text_tool_calls.register()
    raw = {"name": spec} if isinstance(spec, str) else dict(spec)
    template = raw.get("chat_template")
    if isinstance(template, str) and "{" not in template:  # a file, as vLLM's --chat-template takes one
        try:
            raw["chat_template"] = Path(template).expanduser().read_text()
        except OSError as e:
            raise V1EnvironmentError(f"env.renderer.chat_template: cannot read {template} for environment "
                                     f"'{env_id}' ({e.strerror or e})") from None
    parser = raw.get("tool_parser")
    if parser is not None and parser not in TOOL_PARSERS:
        raise V1EnvironmentError(f"env.renderer.tool_parser = {parser!r} is invalid for environment '{env_id}': "
                                 f"renderers has {', '.join(sorted(TOOL_PARSERS))}")
    try:
        return TypeAdapter(RendererConfig).validate_python(raw)
    except ValidationError as e:
        kinds = typing.get_args(typing.get_args(RendererConfig)[0])
        names = sorted(k.model_fields["name"].default for k in kinds)
        if raw.get("name") not in names:
            why = f"no renderer is named {raw.get('name')!r} (renderers has: {', '.join(names)})"
        else:
            err = e.errors()[0]
            why = f"{'.'.join(str(p) for p in err['loc'][1:]) or 'it'}: {err['msg']}"
        raise V1EnvironmentError(f"env.renderer = {spec!r} is invalid for environment '{env_id}': {why}") from None


def env_config(vf, env_id: str, env_args: dict[str, Any], harness: str) -> dict[str, Any]:
    """The raw verifiers config of the package's environment: its taskset with `env_args`, and every role (seat)
    of its `vf.Env` (the package's own, found by verifiers through `__all__`; else the single `agent`) run here
    (the subprocess runtime), with `harness` unless the role pins its own. A role pinning verifiers' `null` (its
    plain chat loop: verifiers' kuhn_poker seats both players so) plays that same program in this process when
    `harness` is the in-process one and the pin gives the program no variables (which only a process can take)."""
    from verifiers.v1.utils.loaders import env_config_type

    raw: dict[str, Any] = {"taskset": {"id": env_id, **env_args}}
    for role, field in env_config_type(env_id).model_fields.items():
        if isinstance(field.default, vf.AgentConfig):
            raw[role] = {"runtime": {"type": "subprocess"}}
            pinned = field.default.harness
            if pinned is None:
                raw[role]["harness"] = {"id": harness}
            elif pinned.id == "null" and harness == CHAT_HARNESS and not pinned.resolved_env:
                raw[role]["harness"] = {**pinned.model_dump(exclude_unset=True), "id": CHAT_HARNESS}
    return raw


def task_row(task, i: int) -> dict[str, Any]:
    """A vfrl dataset row for a verifiers Task: its prompt as chat messages, its answer when it has one."""
    data = task.data
    prompt = data.prompt
    messages = [] if data.system_prompt is None else [{"role": "system", "content": data.system_prompt}]
    if isinstance(prompt, str):
        messages.append({"role": "user", "content": prompt})
    elif prompt:
        messages += [message_dict(m) for m in prompt]
    return {"prompt": messages, "answer": getattr(data, "answer", ""), "example_id": i}


class V1Environment(Environment):
    """A verifiers 0.4 environment, run by vfrl's trainer and vf-eval."""

    def __init__(self, env_id: str, env_args: dict[str, Any] | None = None, harness: str = CHAT_HARNESS):
        """`harness`: what plays a role that pins none; "null" is verifiers' own chat loop, a process per rollout
        (and then a role pinning `null` gets one too)."""
        import verifiers.v1 as vf

        from vfrl.envs import text_tool_calls, verifiers_group_request, verifiers_hot_path

        verifiers_hot_path.apply()
        verifiers_group_request.install()
        text_tool_calls.register()
        absolute_pythonpath()
        raw = env_config(vf, env_id, env_args or {}, harness)
        if any(seat.get("harness") != {"id": CHAT_HARNESS} for role, seat in raw.items() if role != "taskset"):
            ensure_uv(env_id)
        self.vf = vf
        self.v1_env = vf.load_environment(vf.resolve_env_config(raw))
        self.tasks: list = []  # the verifiers Task of each dataset row, read with the dataset (read_tasks)
        self.max_tasks = None if self.v1_env.taskset.bounded else UNBOUNDED_TASKS
        super().__init__(dataset=self.read_tasks, env_id=env_id)
        self.renderer_model_name: str | None = None  # the base model (its tokenizer); found on /v1/models
        self.renderer = None  # renderers' config (env.renderer); None: verifiers picks it from the model's name
        self._serving: tuple[asyncio.Task, asyncio.Event] | None = None
        self._loop = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop = None
        self.group_first_turns = True  # a group's first turns as one request (benchmarks compare with it off)
        self.workers = 0  # env.workers: episodes in verifiers' env server with this many processes (use_workers)
        self.server = None  # its EnvServerProcess, started with the first rollout

    def limit_tasks(self, n: int, bounded_too: bool = False) -> None:
        """Rows this run can use at most: a taskset without end is read only that far (before its dataset is read);
        with `bounded_too` any taskset is (vf-eval, which evaluates the first n rows: reasoning_gym_v1 builds its
        1,000 tasks in 9 s, its first 5 in 0.02 s)."""
        if self.max_tasks is not None or bounded_too:
            self.max_tasks = max(n, 1)

    def read_tasks(self) -> list[dict[str, Any]]:
        """The dataset's rows: every task of a finite taskset, the first `max_tasks` of one without end (or of any,
        when limited for vf-eval)."""
        tasks = iter(self.v1_env.taskset)
        if self.max_tasks is not None:
            if not self.v1_env.taskset.bounded:
                print(f"{self.env_id}: the taskset yields tasks without end; reading the first {self.max_tasks}",
                      file=sys.stderr, flush=True)
            tasks = itertools.islice(tasks, self.max_tasks)
        self.tasks = list(tasks)
        return [task_row(t, i) for i, t in enumerate(self.tasks)]

    def use_renderer(self, spec: str | dict[str, Any]) -> None:
        """Render prompts with this `renderers` renderer (a local fine-tune's path matches none by name)."""
        self.renderer = renderer_config(self.env_id, spec)

    def use_workers(self, workers: int) -> None:
        """Run the episodes in verifiers' env server with `workers` processes (verifiers_env_server); 0: here."""
        self.workers = workers

    async def _open(self, client) -> None:
        """Open `env.serving()` (or, with workers, start the env server) once per event loop; find the base model
        whose tokenizer renders prompts.

        The serving context lives in a task of its own, which enters and leaves it (its servers and task
        groups must be left by the task that entered them); `aclose` ends it."""
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        async with self._lock:
            if self._loop is loop:
                return
            if self.renderer_model_name is None:
                self.renderer_model_name = await base_model(client)
            if self.workers:
                await self._start_server(client)
                self._loop = loop
                return
            ready, stop = asyncio.Event(), asyncio.Event()

            async def serve() -> None:
                async with self.v1_env.serving():
                    ready.set()
                    await stop.wait()

            task, waiter = asyncio.create_task(serve()), asyncio.create_task(ready.wait())
            done, _ = await asyncio.wait({task, waiter}, timeout=SLOW_SERVING_S, return_when=asyncio.FIRST_COMPLETED)
            if not done:  # verifiers waits up to 180 s for a tool server that never reports its port
                print(f"{self.env_id}: still starting verifiers' serving resources (the interception server, the "
                      f"taskset's tool servers) after {SLOW_SERVING_S:g}s", file=sys.stderr, flush=True)
                await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if task.done():
                try:
                    task.result()
                except Exception as e:
                    raise V1EnvironmentError(one_line(f"environment '{self.env_id}': verifiers could not start its "
                                                      f"serving resources: {type(e).__name__}: {e}", 600)) from e
            self._serving, self._loop = (task, stop), loop

    async def _start_server(self, client) -> None:
        from verifiers.v1.serve import env_config_data

        from vfrl.envs.verifiers_env_server import EnvServerError, EnvServerProcess

        if self.server is not None:  # started in an event loop that has ended: its client went with it
            await asyncio.to_thread(self.server.end)
        os.environ[API_KEY_VAR] = str(client.api_key)  # the workers read it from the environment they start with
        self.server = EnvServerProcess(self.env_id, env_config_data(self.v1_env.config), self.workers)
        try:
            await self.server.start()
        except EnvServerError as e:
            self.server = None
            raise V1EnvironmentError(str(e)) from None

    async def aclose(self) -> None:
        """Leave `env.serving()` (its interception server, shared tools), or stop the env server; the next
        rollout opens it again."""
        if self.server is not None:
            server, self.server, self._loop = self.server, None, None
            await server.stop()
        if self._serving is not None:
            (task, stop), self._serving, self._loop = self._serving, None, None
            stop.set()
            await task

    def context(self, client, model: str, sampling: dict[str, Any]):
        vf = self.vf
        os.environ[API_KEY_VAR] = str(client.api_key)
        known = {k: v for k, v in sampling.items() if k in SAMPLING_KEYS + (GROUP_TAG,) and v is not None}
        if known.get("top_k") == -1:
            known.pop("top_k")
        return vf.ModelContext(model=model, client=vf.TrainClientConfig(
            base_url=str(client.base_url).rstrip("/"), api_key_var=API_KEY_VAR, renderer=self.renderer,
            renderer_model_name=self.renderer_model_name), sampling=vf.SamplingConfig(**known))

    async def episode(self, client, model: str, row: dict[str, Any], sampling: dict[str, Any]) -> list[Rollout]:
        """The rollouts of one episode: one per trace of a trainable agent."""
        task = self.tasks[row["example_id"]]
        if self.server is not None:
            episode = await self.server.run(self.context(client, model, sampling), task.data.model_dump(mode="json"))
        else:
            (slot,) = self.v1_env.slots(task)
            episode = await self.v1_env.run_slot(slot, self.context(client, model, sampling))
        return episode_rollouts(episode, row["example_id"], row.get("answer", ""), model)

    async def rollout_with_state(self, client, model, row, example_id, sampling, record_tokens=True):
        if not record_tokens:
            raise V1EnvironmentError(f"environment '{self.env_id}' is a verifiers 0.4 package: it samples token "
                                     f"ids from vLLM's /inference/v1/generate, so it needs vLLM (no text mode)")
        await self._open(client)
        try:
            rollouts = await self.episode(client, model, row, sampling)
        except DroppedEpisode as e:
            raise V1EnvironmentError(f"environment '{self.env_id}', example {example_id}: {e}") from None
        if len(rollouts) > 1:  # one rollout is asked for; the trainer and vf-eval take whole groups (run_group)
            raise V1EnvironmentError(f"environment '{self.env_id}', example {example_id}: the episode has "
                                     f"{len(rollouts)} traces to train; sample it by groups (run_group)")
        return rollouts[0], {}

    async def run_group(self, client, model: str, example_id: int, n: int, sampling: dict[str, Any],
                        semaphore: asyncio.Semaphore, eval: bool = False, record_tokens: bool = True,
                        faults: RolloutFaults | None = None) -> list[Rollout]:
        """The rollouts of up to `n` episodes of one example (already scored: verifiers scores inside the
        episode), one per trace of a trainable agent, so a group may hold more than `n` and the group's
        baseline is the mean over its traces. With `faults`, a failed episode is dropped and counted."""
        if not record_tokens:
            await self.rollout_with_state(client, model, {}, example_id, sampling, record_tokens=False)
        await self._open(client)
        data = self.rows(eval)
        row = data[example_id % len(data)]

        async def one(j: int, group: int | None) -> list[Rollout]:
            s = {**sampling, "seed": sampling["seed"] + j} if sampling.get("seed") is not None else sampling
            if group is not None:  # its first turn is its share of the group's request (verifiers_group_request)
                s = tag(s, group, j)
            async with semaphore:
                deadline = start_clock(faults.timeout if faults else None)
                try:
                    async with asyncio.timeout(seconds_left(deadline)) as limit:
                        return await self.episode(client, model, row, s)
                except TimeoutError:
                    if faults is None or not limit.expired():
                        raise
                    faults.drop("timed_out", f"example {example_id} not done after {faults.timeout:g}s")
                except DroppedEpisode as e:
                    if faults is None:
                        raise V1EnvironmentError(f"environment '{self.env_id}', example {example_id}: {e}") from None
                    faults.drop(e.kind, str(e))
            return []

        with open_group(n) as group:
            group = group if self.group_first_turns and not self.workers else None
            return [r for episode in await asyncio.gather(*(one(j, group) for j in range(n))) for r in episode]


async def base_model(client) -> str:
    """The base model vLLM serves (its path: verifiers loads its tokenizer to render prompts), not an adapter."""
    page = await client.models.list()
    models = list(page.data)
    for m in models:
        if getattr(m, "parent", None) is None:
            return getattr(m, "root", None) or m.id
    raise V1EnvironmentError("vLLM lists no base model on /v1/models")
