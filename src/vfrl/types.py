"""verifiers' `verifiers.types` names, for packages that import them from there."""

from typing import Any

from vfrl.envs.messages import (  # noqa: F401
    AssistantMessage, Message, Messages, State, SystemMessage, ToolCall, ToolMessage, UserMessage,
)

Info = dict[str, Any]
