"""verifiers' `verifiers.types` names, for packages that import them from there."""

from typing import Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from vfrl.envs.messages import (  # noqa: F401
    AssistantMessage, Message, Messages, State, SystemMessage, ToolCall, ToolMessage, UserMessage,
)
from vfrl.envs.tool_defs import Tool  # noqa: F401

Info = dict[str, Any]
SamplingArgs = dict[str, Any]


class ClientConfig(BaseModel):
    """verifiers' settings of an OpenAI-compatible client a package makes itself (a judge's): the variable its key
    is in, its base URL, timeouts, limits and headers (`vfrl.utils.client_utils.setup_openai_client`). verifiers'
    renderer and endpoint settings are kept, not used: vfrl's own model client is set in the config."""

    model_config = ConfigDict(extra="allow")

    api_key_var: str = "PRIME_API_KEY"
    api_base_url: str = "https://api.pinference.ai/api/v1"
    timeout: float = 3600.0
    connect_timeout: float = 5.0
    max_connections: int = 28000
    max_keepalive_connections: int = 28000
    max_retries: int = 10
    extra_headers: dict[str, str] = Field(default_factory=dict)


class RolloutScore(TypedDict):
    """A rollout's reward and metrics, as verifiers' scoring methods return them."""

    reward: float
    metrics: dict[str, float]


class RolloutScores(TypedDict):
    """Rollouts' rewards and metrics, as verifiers' scoring methods return them (vfrl's Rubric refuses a subclass
    that overrides those methods: it scores with the reward functions)."""

    reward: list[float]
    metrics: dict[str, list[float]]


class TrajectoryStepTokens(TypedDict):
    """One model call's tokens as verifiers keeps them (`vfrl.utils.response_utils.parse_response_tokens`)."""

    prompt_ids: list[int]
    prompt_mask: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    completion_logprobs: list[float]
    overlong_prompt: bool
    is_truncated: bool


class TrajectoryStep(TypedDict, total=False):
    """One model call of a rollout, as a package that makes calls of its own (another seat of a game) records it in
    `state["trajectory"]`. vfrl keeps them there and trains the rollout's own conversation only."""

    prompt: Messages
    completion: Messages
    response: Any
    tokens: TrajectoryStepTokens | None
    reward: float | None
    advantage: float | None
    is_truncated: bool
    trajectory_id: str
    extras: dict[str, Any]
