"""Environments: a dataset, the rollout logic that talks to an OpenAI-compatible server, and a rubric.

A rollout keeps the token ids and sampling logprobs vLLM returned (`return_token_ids`, `logprobs`),
so training sequences are built from exactly the tokens the policy sampled, never re-tokenized text.
Rollouts of a multi-turn conversation hold one sequence: the first prompt, then every model reply
and the environment's messages in between, with `completion_mask` 0 on environment tokens. A
conversation whose history was rewritten (a verifiers trace that forked) also holds the sequences
of its other contexts (`more_branches`), trained with the rollout's one reward and advantage.
`record_tokens=False` (text mode, for evaluating a server that is not vLLM) keeps only the messages:
the id, logprob and mask lists stay empty.

Dataset rows (list of dicts or a HF `datasets.Dataset`): `question` (or a chat `prompt`), optional
`answer`, `info`, `task`, `example_id`. `system_prompt` and `few_shot` build the chat prompt from
`question`. With `message_type="completion"` (a model without a chat template) the prompt is one text,
the completion the text sampled after it (`completion_prompt` says how a row becomes that text).
A dataset may also be a function that returns one (verifiers' `dataset=build_dataset`):
it is called on first use of the split, so an environment whose data comes from the network loads
without it, and fails when (and only if) that split is read.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import traceback
from pathlib import Path
from typing import Any, Iterable

from vfrl.envs.faults import (
    RolloutFailed, RolloutFaults, is_rejected_request, one_line, own_line, request_error_text, seconds_left,
    start_clock,
)
from vfrl.envs.group_request import GroupRequest
from vfrl.envs.messages import content_text, message_field, messages
from vfrl.envs.parsers import Parser
from vfrl.envs.rubric import Rubric
from vfrl.envs.slow_notice import said_if_slow
from vfrl.envs.tool_defs import Tool
from vfrl.rollout_types import Messages, Rollout, TokenBranch  # noqa: F401  (re-exported: packages import them here)

log = logging.getLogger(__name__)

def as_rows(data: Any, what: str) -> list[dict[str, Any]]:
    """A list of dicts from a list, any iterable of mappings, or a HF `datasets.Dataset`."""
    if data is None:
        return []
    if hasattr(data, "to_list"):  # datasets.Dataset, without importing datasets
        data = data.to_list()
    rows = [dict(r) for r in data]
    for i, row in enumerate(rows):
        if "prompt" not in row and "question" not in row:
            raise ValueError(f"{what} row {i} has neither 'question' nor 'prompt' (keys: {sorted(row)})")
    return rows


class DatasetBuildError(RuntimeError):
    """A dataset builder function raised; the message is one line naming the builder and the error."""

    worded_for_users = True  # vf-train prints the message alone (trainer/failure.py: describe)


# the row keys every environment fills in; the others reach reward functions by name, as in verifiers
ROW_FIELDS = ("prompt", "question", "answer", "info", "task", "example_id")
MESSAGE_TYPES = ("chat", "completion")


def completion_prompt(prompt: Messages | str) -> str:
    """The text a message_type="completion" environment sends: a text prompt as is; chat messages (a `prompt`
    of messages, or the one built from `system_prompt`, `few_shot` and `question`) as their texts joined by a
    blank line, without roles, as verifiers' completions client writes them."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(content_text(message_field(m, "content")) for m in prompt)


def info_dict(info: Any) -> dict[str, Any]:
    """A row's `info` as a dict: a JSON object in a string (a column of strings, as hub datasets store nested data)
    is parsed, as verifiers parses it."""
    if isinstance(info, str):
        try:
            info = json.loads(info) if info.strip() else {}
        except json.JSONDecodeError:
            raise ValueError(f"a row's info is a string that is not a JSON object: {info[:80]!r}") from None
    return dict(info or {})


def marked(env: Any, attr: str) -> list:
    """`env`'s methods marked with `attr` (looked up on the class: getattr on the instance would build lazy
    datasets, properties), highest `<attr>_priority` first, then by name."""
    names = [n for n in dir(type(env)) if getattr(getattr(type(env), n, None), attr, None) is True]
    return sorted((getattr(env, n) for n in names), key=lambda m: (-getattr(m, f"{attr}_priority", 0), m.__name__))


def teardown(func=None, priority: int = 0):
    """Marks a method (sync or async, no arguments) to run once when the environment is closed at the end of a
    run (vf-train, vf-eval: `Environment.aclose`), as verifiers' `@vf.teardown` does: a cache or a client the
    environment holds for all its rollouts. Higher `priority` runs first."""

    def mark(f):
        f.teardown, f.teardown_priority = True, priority
        return f

    return mark if func is None else mark(func)


class Environment:
    """Base class. Subclasses implement `rollout`; scoring goes through the rubric."""

    def __init__(
        self,
        dataset: Iterable[dict[str, Any]] | None = None,
        eval_dataset: Iterable[dict[str, Any]] | None = None,
        system_prompt: str | None = None,
        few_shot: Messages | None = None,
        parser: Parser | None = None,
        rubric: Rubric | None = None,
        env_id: str | None = None,
        sampling_args: dict[str, Any] | None = None,
        message_type: str = "chat",
        tool_defs: list[Any] | None = None,
        # verifiers' later classic releases take these too: kept, as there, but vfrl's run settings govern
        # (its concurrency, dataset formatting, sequence length); pass_threshold is kept for the package to read;
        # score_rollouts=False leaves rollouts unscored (vf-eval generates completions; training refuses it)
        max_workers: int = 512, env_args: dict | None = None, map_kwargs: dict | None = None,
        max_seq_len: int | None = None, score_rollouts: bool = True, pass_threshold: float = 0.5,
        **kwargs: Any,
    ):
        self.max_workers, self.env_args, self.map_kwargs = max_workers, dict(env_args or {}), dict(map_kwargs or {})
        self.max_seq_len, self.score_rollouts, self.pass_threshold = max_seq_len, score_rollouts, pass_threshold
        # the tools a rollout offers the model, unless its row's info or its setup_state names others (multiturn.py)
        self.tool_defs = None if tool_defs is None else [Tool.of(t) for t in tool_defs]
        if message_type not in MESSAGE_TYPES:
            raise ValueError(f"message_type must be 'chat' or 'completion' (a text prompt for a model without a "
                             f"chat template), got {message_type!r}")
        self.message_type = message_type
        self.system_prompt = system_prompt
        self.few_shot = list(few_shot or [])
        self.parser = parser or Parser()
        self.rubric = rubric or Rubric(parser=self.parser)
        self.env_id = env_id or type(self).__name__
        # the environment's own request settings (verifiers' `sampling_args`); the run's settings win
        self.sampling_args = dict(sampling_args or {})
        self._splits: dict[str, Any] = {"dataset": dataset, "eval_dataset": eval_dataset}
        self._built: dict[str, list[dict[str, Any]] | None] = {}
        for key, value in kwargs.items():  # as verifiers keeps its other keywords (`max_concurrent`, ...)
            setattr(self, key, value)
        if not callable(dataset) and not callable(eval_dataset):
            if not self.dataset and not self.eval_dataset:
                raise ValueError(f"{self.env_id}: give a dataset or an eval_dataset (both are empty)")

    def _split(self, name: str) -> list[dict[str, Any]] | None:
        if name not in self._built:
            source = self._splits[name]
            if callable(source) and not hasattr(source, "to_list"):
                builder = getattr(source, "__qualname__", repr(source))
                with said_if_slow(f"{self.env_id}: building its {name} ({builder}())") as outcome:
                    try:
                        source = source()
                    except DatasetBuildError:
                        raise  # an inner env's builder (EnvGroup), already worded
                    except Exception as e:
                        frame = traceback.extract_tb(e.__traceback__)[-1]
                        raise DatasetBuildError(one_line(
                            f"{self.env_id}: building its {name} ({builder}()) raised {type(e).__name__}: {e}", 400)
                            + f" (at {Path(frame.filename).name}:{frame.lineno})") from e
                    outcome["done"] = f"{len(source)} rows" if hasattr(source, "__len__") else "built"
            self._built[name] = None if source is None and name == "eval_dataset" else self.format_dataset(
                as_rows(source, name))
        return self._built[name]

    @property
    def dataset(self) -> list[dict[str, Any]]:
        return self._split("dataset")

    @dataset.setter
    def dataset(self, rows: Any) -> None:
        self._splits["dataset"] = rows
        self._built.pop("dataset", None)

    @property
    def eval_dataset(self) -> list[dict[str, Any]] | None:
        return self._split("eval_dataset")

    @eval_dataset.setter
    def eval_dataset(self, rows: Any) -> None:
        self._splits["eval_dataset"] = rows
        self._built.pop("eval_dataset", None)

    def format_dataset(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Fill the conventions in once: `prompt` from `question`, `answer`/`info`/`task`/`example_id` defaults."""
        out = []
        for i, row in enumerate(rows):
            row = dict(row)
            row["prompt"] = self.prompt_of(row)
            row.setdefault("answer", "")
            row["info"] = info_dict(row.get("info"))
            row.setdefault("task", "default")
            row.setdefault("example_id", i)
            out.append(row)
        return out

    def prompt_of(self, row: dict[str, Any]) -> Messages | str:
        """The row's `prompt` as given (after `system_prompt` when it has no system message of its own), else
        `system_prompt`, the `few_shot` messages and `question` as a user message; for message_type="completion",
        that as one text (`completion_prompt`)."""
        if isinstance(row.get("prompt"), str):
            if self.message_type != "completion":
                raise ValueError(f"{self.env_id}: a row's prompt is text ({row['prompt'][:40]!r}), which a chat "
                                 "environment cannot send; give it message_type='completion', or chat messages")
            return row["prompt"]
        if "prompt" in row:  # the system prompt first, unless it has its own (as verifiers' later releases do)
            messages = [dict(m) for m in row["prompt"]]
            if self.system_prompt and not (messages and message_field(messages[0], "role") == "system"):
                messages.insert(0, {"role": "system", "content": self.system_prompt})
        else:
            messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            messages += [dict(m) for m in self.few_shot]
            messages.append({"role": "user", "content": row["question"]})
        return completion_prompt(messages) if self.message_type == "completion" else messages

    async def rollout(self, client, model: str, row: dict[str, Any], example_id: int, sampling: dict[str, Any],
                      record_tokens: bool = True) -> Rollout:
        return (await self.rollout_with_state(client, model, row, example_id, sampling, record_tokens=record_tokens))[0]

    async def rollout_with_state(self, client, model: str, row: dict[str, Any], example_id: int,
                                 sampling: dict[str, Any],
                                 record_tokens: bool = True) -> tuple[Rollout, dict[str, Any]]:
        """One unscored rollout and the state its rubric reads (kept out of Rollout, which is saved as JSON).

        `record_tokens=True` (training) keeps vLLM's token ids and logprobs and fails clearly when the
        server returns none; False (text mode) sends plain chat requests and keeps only the messages."""
        raise NotImplementedError

    def limit_tasks(self, n: int, bounded_too: bool = False) -> None:
        """A run reads at most `n` rows: nothing to do for a dataset already in hand (verifiers_v1.py's taskset
        without end is read only that far)."""

    async def aclose(self) -> None:
        """Run the `@teardown` methods, once; one that raises is logged and the others still run."""
        if getattr(self, "_teardown_done", False):
            return
        self._teardown_done = True
        for handler in marked(self, "teardown"):
            try:
                result = handler()
                if inspect.isawaitable(result):
                    await result
            except Exception as e:
                log.warning("%s: its teardown %s raised %s: %s", self.env_id, handler.__name__, type(e).__name__, e)

    async def score(self, rollout: Rollout, state: dict[str, Any] | None = None) -> Rollout:
        if not self.score_rollouts:
            return rollout
        state = state if state is not None else {"truncated": rollout.truncated}
        # the row's other columns too, by name, as verifiers passes them
        extra = {k: v for k, v in (state.get("input") or {}).items() if k not in ROW_FIELDS}
        # a completion environment's text stays a str (verifiers hands it so); chat messages read both ways
        prompt, completion = (x if isinstance(x, str) else messages(x) for x in (rollout.prompt, rollout.completion))
        rollout.reward, rollout.metrics = await self.rubric.score(
            **extra, prompt=prompt, completion=completion, answer=rollout.answer,
            state=state, task=rollout.task, info=rollout.info,
        )
        rollout.reward_errors = dict(state.get("reward_errors") or {})  # the rubric's record, see rubric.py
        return rollout

    def rows(self, eval: bool = False) -> list[dict[str, Any]]:
        if eval and self.eval_dataset is not None:
            return self.eval_dataset
        return self.dataset or self.eval_dataset or []

    async def run_group(self, client, model: str, example_id: int, n: int, sampling: dict[str, Any],
                        semaphore: asyncio.Semaphore, eval: bool = False, record_tokens: bool = True,
                        faults: RolloutFaults | None = None) -> list[Rollout]:
        """Up to `n` scored rollouts of one example; the semaphore bounds concurrent rollouts.
        `record_tokens=False`: text mode, see `rollout_with_state`. `faults`: each rollout gets
        `faults.timeout` seconds from when it gets its slot (scoring included), and one the server
        rejects or that runs out of time is left out and counted there (see faults.py); without it
        every error propagates and there is no time limit."""
        data = self.rows(eval)
        row = data[example_id % len(data)]

        group = GroupRequest(n)

        async def one(j: int) -> Rollout | None:
            # a `seed` names the group; sample j draws with seed + j, so samples differ yet replay exactly
            s = {**sampling, "seed": sampling["seed"] + j} if sampling.get("seed") is not None else sampling
            group.join(j)  # the first turns of the group go out as one request with n (group_request.py)
            late = f"example {example_id} not done after {faults.timeout:g}s" if faults and faults.timeout else ""
            async with semaphore:
                # gather runs each rollout in its own task, so the clock is this rollout's alone; it starts
                # with the slot, as waiting behind other rollouts is not this one's stall
                deadline = start_clock(faults.timeout if faults else None)
                try:
                    async with asyncio.timeout(seconds_left(deadline)) as limit:
                        r, state = await self.rollout_with_state(client, model, row, example_id, s,
                                                                 record_tokens=record_tokens)
                except TimeoutError:
                    if not limit.expired():
                        raise
                    faults.drop("timed_out", late)
                    return None
                except Exception as e:
                    if faults is not None and is_rejected_request(e):
                        faults.drop("rejected", request_error_text(e))
                        return None
                    if at := own_line(e, self):  # the package's bug: said in one line with its line
                        raise RolloutFailed(one_line(
                            f"environment '{self.env_id}': a rollout of example {example_id} raised "
                            f"{type(e).__name__}: {e}", 400) + f" (at {at})") from e
                    raise
            if (left := seconds_left(deadline)) is not None and left <= 0:  # no time left to score it in
                faults.drop("timed_out", late)
                return None
            return await self.score(r, state)  # the rubric keeps to the time left (faults.py says how)

        return [r for r in await asyncio.gather(*(one(j) for j in range(n))) if r is not None]

    async def evaluate(self, client, model: str, num_examples: int = -1, rollouts_per_example: int = 1,
                       sampling: dict[str, Any] | None = None, max_concurrent: int = 32,
                       record_tokens: bool = True) -> list[Rollout]:
        """Scored rollouts of the first `num_examples` eval rows (all when -1), grouped by example."""
        count = len(self.rows(eval=True)) if num_examples < 0 else min(num_examples, len(self.rows(eval=True)))
        semaphore = asyncio.Semaphore(max_concurrent)
        groups = await asyncio.gather(*(
            self.run_group(client, model, i, rollouts_per_example, dict(sampling or {}), semaphore, eval=True,
                           record_tokens=record_tokens)
            for i in range(count)
        ))
        return [r for g in groups for r in g]
