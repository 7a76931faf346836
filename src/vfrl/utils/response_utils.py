"""verifiers' `verifiers.utils.response_utils`: a model response read back as messages and as tokens, for packages
that call the policy themselves through `state["client"]` and record the call as a `TrajectoryStep`."""

from __future__ import annotations

from typing import Any

from vfrl.envs.messages import message_field
from vfrl.types import TrajectoryStepTokens


def _logprobs(choice: Any, message_type: str) -> list[float] | None:
    logprobs = message_field(choice, "logprobs")
    if logprobs is None:
        return None
    if message_type == "completion":
        return message_field(logprobs, "token_logprobs")
    content = message_field(logprobs, "content")
    return None if content is None else [message_field(token, "logprob") for token in content]


async def parse_response_tokens(response: Any, message_type: str = "chat",
                                max_seq_len: int | None = None) -> TrajectoryStepTokens | None:
    """The call's prompt and completion token ids and the completion's logprobs, or None where the server did not
    return them (vLLM does with `return_token_ids` and `logprobs`, as `state["sampling_args"]` asks); cut to
    `max_seq_len` as verifiers cuts them: an overlong prompt keeps no completion."""
    choices = message_field(response, "choices") or []
    if len(choices) != 1:
        return None
    choice = choices[0]
    prompt_ids = message_field(choice if message_type == "completion" else response, "prompt_token_ids")
    completion_ids = message_field(choice, "token_ids")
    logprobs = _logprobs(choice, message_type)
    if prompt_ids is None or completion_ids is None or logprobs is None:
        return None
    prompt_ids, completion_ids, logprobs = list(prompt_ids), list(completion_ids), list(logprobs)
    overlong = truncated = False
    if max_seq_len is not None and len(prompt_ids) > max_seq_len:
        overlong = truncated = True
        prompt_ids, completion_ids, logprobs = prompt_ids[:max_seq_len], [], []
    elif max_seq_len is not None and len(prompt_ids) + len(completion_ids) > max_seq_len:
        truncated = True
        room = max_seq_len - len(prompt_ids)
        completion_ids, logprobs = completion_ids[:room], logprobs[:room]
    return TrajectoryStepTokens(prompt_ids=prompt_ids, prompt_mask=[0] * len(prompt_ids),
                                completion_ids=completion_ids, completion_mask=[1] * len(completion_ids),
                                completion_logprobs=logprobs, overlong_prompt=overlong, is_truncated=truncated)


def _dump(call: Any) -> dict[str, Any]:
    if isinstance(call, dict):
        return call
    if hasattr(call, "model_dump"):
        return call.model_dump()
    return {key: _dump(value) if hasattr(value, "__dict__") else value for key, value in vars(call).items()}


async def parse_response_messages(response: Any, message_type: str = "chat") -> list[dict[str, Any]] | str:
    """The reply as the messages a completion adds (chat: one assistant message with its tool calls), or its text
    (a completion environment)."""
    choices = message_field(response, "choices") or []
    if message_type == "completion":
        return (message_field(choices[0], "text") or "") if choices else ""
    message = message_field(choices[0], "message") if choices else None
    content = (message_field(message, "content") or "") if message else ""
    reply: dict[str, Any] = {"role": "assistant", "content": content}
    if message is not None and (calls := message_field(message, "tool_calls")):
        reply["tool_calls"] = [_dump(call) for call in calls]
    return [reply]


async def parse_is_truncated(response: Any, message_type: str = "chat") -> bool:
    """Did the reply stop at its token limit?"""
    choices = message_field(response, "choices") or []
    return bool(choices) and message_field(choices[0], "finish_reason") == "length"
