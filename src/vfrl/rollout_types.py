"""What the rollout side hands the learner: a `Rollout` (one sampled conversation, its tokens and its reward) and a
`Batch` (one training step's rollouts, with the policy that sampled them). Both sides import these; neither imports
the other."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Messages = list[dict[str, Any]]


@dataclass
class TokenBranch:
    """Another token sequence of a rollout: the conversation went on in a context that is not a prefix
    extension of the first (verifiers 0.4 forks a trace's message graph at compaction or a rewritten
    history). Same meaning as the Rollout fields of the same names."""

    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float]
    completion_mask: list[int]


@dataclass
class Rollout:
    example_id: int
    prompt: Messages | str  # a str for message_type="completion"
    # every message after the prompt: model replies, tool/env messages; for message_type="completion" the text
    # after the prompt, the model's and the environment's
    completion: Messages | str
    answer: Any  # as the row gives it (verifiers keeps an integer an integer)
    prompt_ids: list[int]  # the first turn's prompt tokens (this and the next three: empty in text mode)
    completion_ids: list[int]  # everything after them: model tokens of every turn, env tokens between
    completion_logprobs: list[float]  # sampling logprobs, one per completion token (0.0 on env tokens)
    completion_mask: list[int]  # 1 = policy token (gets loss), 0 = environment token
    policy: str  # the served model / adapter name that sampled it
    truncated: bool = False
    reward: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    task: str = "default"
    info: dict[str, Any] = field(default_factory=dict)
    # [start, end) of each model turn inside completion_ids
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    # how turns after the first were sent: "chat" (vLLM's prompt ids extended the sequence),
    # "tokens" (the template rewrote history, so the sequence went on as raw token ids), "completion"
    # (message_type="completion": /v1/completions, later turns as token ids) or "text"
    # (record_tokens=False: plain requests, no token sequence kept)
    sequence_mode: str = "chat"
    error: str | None = None  # why the rollout ended early, if a request failed
    # reward function name -> what went wrong (raised, hung, NaN, not a number); that function scored 0
    reward_errors: dict[str, str] = field(default_factory=dict)
    # the rollout's other token sequences, each trained as a row of its own with this rollout's advantage
    more_branches: list[TokenBranch] = field(default_factory=list)

    def sequences(self) -> list["Rollout | TokenBranch"]:
        """Every token sequence this rollout trains: its own, then its other branches."""
        return [self, *self.more_branches]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Rollout":
        """The inverse of `dataclasses.asdict` (a checkpoint's pending batch)."""
        return cls(**{**data, "more_branches": [TokenBranch(**b) for b in data.get("more_branches", [])]})


@dataclass
class Batch:
    step: int
    policy_version: int  # the policy the rollouts were sampled from
    rollouts: list[Rollout]
    example_ids: list[int]
    gen_start: float = 0.0  # wall-clock (time.time) bounds of generation
    gen_end: float = 0.0
    load_s: float = 0.0  # vLLM's load of policy_version, which the generation waited for (Pipeline.push)
    metrics: dict[str, float] = field(default_factory=dict)  # the step's fault counts, see step_faults.py
    # rollouts per group, in example_ids order; fewer where faults dropped some. None: every group full
    group_sizes: list[int] | None = None
    warning: str | None = None  # one line about the batch's faults, for the console

    def sizes(self) -> list[int]:
        if self.group_sizes is not None:
            return self.group_sizes
        return [len(self.rollouts) // len(self.example_ids)] * len(self.example_ids)


def json_default(value: Any) -> Any:
    """`json.dumps(row, default=json_default)`: rollout files save messages of any shape (a pydantic model
    as its set fields, a dataclass or an object as its fields, anything else as its str) instead of raising."""
    try:
        if hasattr(value, "model_dump"):
            return value.model_dump(exclude_none=True)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        if isinstance(value, Mapping):
            return dict(value)
        if isinstance(value, (set, frozenset)):
            return list(value)
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if hasattr(value, "__dict__") and not isinstance(value, type) and not callable(value):
            return dict(vars(value))
        return str(value)
    except Exception:
        return safe_repr(value)


def safe_repr(value: Any) -> str:
    """repr(value), or its type's name where its repr raises."""
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
