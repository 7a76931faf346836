"""MultiTurnEnv: the model and the environment take turns until `is_completed` or `max_turns`.

Override `env_response(messages, state)` (the environment's next messages), `is_completed(messages,
state)` and optionally `setup_state(state)`; each may be sync or async. Methods marked `@stop`
(verifiers' stop conditions, `(self, state) -> bool`) end the rollout too. `state` is a dict that
lives for one rollout and reaches the rubric: it starts with prompt, answer, task, info, example_id,
turn (model replies so far), completion, truncated, input (the dataset row) and trajectory (one
step per model reply: its prompt, completion and whether it was truncated).

As in verifiers' later classic releases: `state["tool_defs"]` holds the tools each request of the rollout
offers the model (the row's `info["tool_defs"]`, else the environment's `tool_defs`; `setup_state` or
`env_response` may set others); an
`env_response` that sets `state["final_env_response"]` (messages, possibly none) ends the rollout with
them; methods marked `@cleanup` run with the state when a rollout ends, however it ends, before scoring.

With `message_type="completion"` the conversation is one text: `messages` is the prompt and the
completion so far (a str), `env_response` returns the text to append (a str, "" for none), each reply's
text is appended as sampled, and `state["completion"]` is the text after the prompt.
"""

from __future__ import annotations

import logging
from typing import Any

from vfrl.envs.environment import Environment, info_dict, marked
from vfrl.rollout_types import Messages, Rollout
from vfrl.envs.faults import is_rejected_request, request_error_text
from vfrl.envs.group_request import group_member
from vfrl.envs.hook_results import State, Verdict, maybe_await, positional_params
from vfrl.envs.messages import Message, messages as as_messages
from vfrl.envs.rubric import call_with_named_args
from vfrl.envs.sampling import CompletionSampler, SequenceError, TurnSampler, sampling_request
from vfrl.envs.tool_defs import Tool
from vfrl.errors import Error

log = logging.getLogger(__name__)


def stop(func=None, priority: int = 0):
    """Marks a method `(self, state) -> bool` (sync or async) as a stop condition, as verifiers'
    `@vf.stop` does: the rollout ends when any returns True. Higher `priority` is asked first."""

    def mark(f):
        f.stop, f.stop_priority = True, priority
        return f

    return mark if func is None else mark(func)


def cleanup(func=None, priority: int = 0):
    """Marks a method (sync or async; it names any of `state`, `env`) to run when each rollout ends, however it
    ends, before it is scored, as verifiers' `@vf.cleanup` does. Higher `priority` runs first."""

    def mark(f):
        f.cleanup, f.cleanup_priority = True, priority
        return f

    return mark if func is None else mark(func)


def extend(conversation: Messages | str, new: Messages | str) -> Messages | str:
    """`conversation` followed by `new`: text is joined into a new str, a list of messages grows in place (the
    list a rollout's state holds stays that list)."""
    if isinstance(conversation, str):
        return conversation + new
    conversation += new
    return conversation


# verifiers' later hooks (0.1.10+) that rebuild a rollout's conversation or trajectory turn by turn: vfrl's loop
# grows one conversation (prompt, replies, env_response), the sequence it trains, and does not call them
TRAJECTORY_HOOKS = ("get_prompt_messages", "render_completion", "add_trajectory_step")


class MultiTurnEnv(Environment):
    def __init__(self, max_turns: int = 10, **kwargs):
        if hooks := [h for h in TRAJECTORY_HOOKS if hasattr(type(self), h)]:
            raise NotImplementedError(
                f"vfrl does not support {type(self).__name__}.{hooks[0]}: vfrl grows one conversation a turn (the "
                "prompt, the replies, env_response's messages) and trains it as one sequence; a conversation rebuilt "
                "each turn is not run")
        super().__init__(**kwargs)
        if max_turns == 0 or max_turns < -1:
            raise ValueError(f"max_turns must be at least 1 (or -1: no limit), got {max_turns}")
        self.max_turns = max_turns
        self.sampler_flags: dict[str, Any] = {}  # shared by this env's rollouts, see TurnSampler
        # a package's own max_turns_reached (verifiers marks it a stop condition) is asked after each reply only
        self.stop_conditions = [c for c in marked(self, "stop") if c.__name__ != "max_turns_reached"]
        self.cleanup_handlers = marked(self, "cleanup")

    async def finished(self, messages: Messages, state: dict[str, Any]) -> bool:
        # a package's is_completed may take (messages, state) or, as verifiers' later releases, (state)
        asked = (messages, state) if positional_params(self.is_completed) >= 2 else (state,)
        if await maybe_await(self.is_completed(*asked)):
            return True
        for condition in self.stop_conditions:
            if await maybe_await(call_with_named_args(condition, {"state": state, "messages": messages})):
                return True
        return False

    # ---- what a subclass overrides (sync or async; a base hook's result is read with or without await,
    # hook_results.py says why) ----
    def setup_state(self, state: dict[str, Any], **kwargs: Any) -> State:
        return state if isinstance(state, State) else State(state)

    def is_completed(self, *args: Any, **kwargs: Any) -> Verdict:
        """`(messages, state)` or `(state)`. No: the loop asks the stop conditions and max_turns itself."""
        return Verdict(False)

    def env_response(self, messages: Messages | str, state: dict[str, Any], **kwargs: Any) -> Messages | str:
        raise NotImplementedError(f"{type(self).__name__} must implement env_response(messages, state)")

    # verifiers' own stop conditions, which packages call from theirs (`return await self.max_turns_reached(state)`).
    # The loop asks max_turns_reached after each reply, where verifiers asks its stop conditions (before
    # env_response): every step of the trajectory counts, a package's own model calls too, and a package's override
    # decides instead. It checks the others itself (a vf.Error, final_env_response, a turn that no longer fits).
    def max_turns_reached(self, state: dict[str, Any], **kwargs: Any) -> Verdict:
        return Verdict(len(state["trajectory"]) >= self.max_turns > 0)

    def prompt_too_long(self, state: dict[str, Any], **kwargs: Any) -> Verdict:
        return Verdict(state.get("prompt_too_long", False))

    def has_error(self, state: dict[str, Any], **kwargs: Any) -> Verdict:
        return Verdict(state.get("error") is not None)

    def has_final_env_response(self, state: dict[str, Any], **kwargs: Any) -> Verdict:
        return Verdict(state.get("final_env_response") is not None)

    def tools_for_request(self, state: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The OpenAI `tools` of the rollout's next request: its `state["tool_defs"]`."""
        return [Tool.of(t).openai() for t in state.get("tool_defs") or []] or None

    async def run_cleanup(self, state: dict[str, Any]) -> None:
        for handler in self.cleanup_handlers:
            await maybe_await(call_with_named_args(handler, {"state": state, "env": self}))

    # ---- the loop ----
    async def rollout_with_state(self, client, model: str, row: dict[str, Any], example_id: int,
                                 sampling: dict[str, Any],
                                 record_tokens: bool = True) -> tuple[Rollout, dict[str, Any]]:
        text = self.message_type == "completion"  # the conversation is one str (see the module docstring)
        sampling = {**self.sampling_args, **sampling}  # the environment's own settings, the run's winning; once
        prompt = self.prompt_of(row)
        prompt = prompt if text else as_messages(prompt)
        state = State({
            "prompt": prompt, "answer": row.get("answer", ""), "task": row.get("task", "default"),
            "info": info_dict(row.get("info")), "example_id": example_id, "turn": 0, "completion": "" if text else [],
            "truncated": False, "input": row, "trajectory": [],
            # as verifiers gives them, for a package's own calls to the policy (another seat of a game)
            "client": client, "model": model, "sampling_args": sampling_request(sampling, record_tokens),
        })
        info = state["info"]
        tool_defs = info["tool_defs"] if "tool_defs" in info else self.tool_defs
        state["tool_defs"] = [Tool.of(t) for t in tool_defs or []]
        try:
            state = await maybe_await(self.setup_state(state)) or state
            return await self.run_turns(client, model, prompt, state, sampling, record_tokens)
        finally:
            await self.run_cleanup(state)

    async def run_turns(self, client, model: str, prompt: Messages | str, state: dict[str, Any],
                        sampling: dict[str, Any], record_tokens: bool) -> tuple[Rollout, dict[str, Any]]:
        text = self.message_type == "completion"
        example_id = state["example_id"]
        messages = prompt if text else as_messages(prompt)
        completion = state["completion"]
        # in a group (run_group), the first turn is this rollout's share of one request with n: the membership
        # comes beside the call, as this method's signature is the one Environment subclasses implement
        group = group_member()
        sampler = CompletionSampler(client, model, sampling, record_tokens, group=group) if text else TurnSampler(
            client, model, sampling, self.sampler_flags, record_tokens=record_tokens, group=group)
        new: Messages | str = "" if text else []
        error = None
        while not await self.finished(messages, state):
            if not text:  # as verifiers reads them for every request: env_response may change them
                sampler.tools = self.tools_for_request(state)
            try:
                turn = await sampler.sample(messages, new)
            except Exception as e:
                if not sampler.turns or not (isinstance(e, SequenceError) or is_rejected_request(e)):
                    raise  # nothing sampled yet (run_group may drop the rollout), or not about this request
                # a later turn no longer fits the context window, the server refused it (a malformed
                # tool call in the history) or it cannot be joined to the sequence: end the rollout
                # with the turns it has, all of them sampled and trainable
                log.warning("rollout of example %s ended at turn %d: %s", example_id, state["turn"], e)
                error, state["truncated"] = request_error_text(e) if is_rejected_request(e) else str(e), True
                break
            reply = turn.message if text else [Message(turn.message)]
            state["trajectory"].append({"prompt": messages if text else list(messages), "completion": reply,
                                        "is_truncated": turn.truncated})
            messages, completion = extend(messages, reply), extend(completion, reply)
            state["completion"] = completion
            state["turn"] += 1
            if turn.truncated:
                state["truncated"] = True
                break
            if await maybe_await(self.max_turns_reached(state)) or await self.finished(messages, state):
                break
            try:
                new = await maybe_await(self.env_response(messages, state))
            except Error as e:  # verifiers' way to end a rollout, not the run (errors.py): its turns are kept
                log.warning("rollout of example %s ended at turn %d: %s: %s", example_id, state["turn"],
                            type(e).__name__, e)
                error, state["error"] = f"{type(e).__name__}: {e}", e
                break
            if isinstance(new, tuple):  # verifiers' older (messages, state) return form
                new, state = new
            final = state.get("final_env_response")
            new = self.env_turn(new if final is None else final)
            messages, completion = extend(messages, new), extend(completion, new)
            state["completion"] = completion
            if final is not None:
                break
        if (own_calls := len(state["trajectory"]) - sampler.turns) > 0 and not self.sampler_flags.get("own_calls"):
            self.sampler_flags["own_calls"] = True  # said once: the same holds for every rollout
            log.warning("%s calls the model itself (%d calls in the rollout of example %s, recorded in its "
                        "trajectory): vfrl samples them and trains the rollout's own conversation only",
                        type(self).__name__, own_calls, example_id)
        seq = sampler.seq
        return Rollout(
            example_id=example_id, prompt=prompt, completion=completion, answer=state["answer"],
            prompt_ids=seq.prompt_ids, completion_ids=seq.completion_ids, completion_logprobs=seq.completion_logprobs,
            completion_mask=seq.completion_mask, policy=model, truncated=state["truncated"], task=state["task"],
            info=state["info"], turn_spans=seq.turn_spans, sequence_mode=sampler.mode, error=error,
        ), state

    def env_turn(self, new: Any) -> Messages | str:
        """What env_response returned, checked against the message type: a str to append to a completion
        environment's text, messages for a chat one."""
        if (self.message_type == "completion") != isinstance(new, str):
            wanted = "the text to append (a str)" if self.message_type == "completion" else "a list of messages"
            raise TypeError(f"{type(self).__name__}.env_response returned {type(new).__name__}; a "
                            f"message_type={self.message_type!r} environment returns {wanted}")
        return new if isinstance(new, str) else as_messages(new)


class SingleTurnEnv(MultiTurnEnv):
    """One prompt, one model reply."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_turns", 1)
        super().__init__(**kwargs)
