"""classic_calc as verifiers' later classic releases (0.1.10 - 0.3) let a user write it, in the shapes the
community's packages take (prime-environments): no ToolEnv, a `MultiTurnEnv` from its module path that offers
`tool_defs` (a `vf.Tool` made by `convert_func_to_tool_def`) and runs the model's calls itself in
`env_response`, reading them as verifiers' flat tool calls (`call.name`, `call.arguments`) and ending the rollout
with a `vf.ToolParseError` on arguments it cannot read; a `@vf.cleanup` handler and a `@vf.teardown` one; a
keyword verifiers keeps as an attribute (`max_concurrent`); and its rubric in a package of its own beside this module
(`classic_calc_scoring`, reading the reply with a `MaybeThinkParser`), which imports verifiers' module paths too.
Only `verifiers` is imported, never vfrl. Not a copy of a verifiers environment."""

import json

import verifiers as vf
from verifiers.envs.multiturn_env import MultiTurnEnv
from verifiers.types import Messages, State
from verifiers.utils.tool_utils import convert_func_to_tool_def

from classic_calc_scoring import calc_rubric


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


class CalcEnv(MultiTurnEnv):
    @vf.stop
    async def answered(self, state: State) -> bool:
        last = state["trajectory"][-1]["completion"][-1] if state["trajectory"] else None
        return last is not None and not last.tool_calls

    async def env_response(self, messages: Messages, state: State, **kwargs) -> Messages:
        results = []
        for call in messages[-1].tool_calls:
            try:
                args = json.loads(call.arguments)
            except json.JSONDecodeError as e:
                raise vf.ToolParseError(f"arguments of {call.name} are not JSON: {call.arguments!r}") from e
            results.append(vf.ToolMessage(tool_call_id=call.id, content=str(add(**args))))
        return results

    @vf.cleanup
    async def note_the_end(self, state: State) -> None:
        state["cleaned_up"] = True

    @vf.teardown
    async def say_closed(self) -> None:
        print("classic_calc_late: teardown ran", flush=True)


def load_environment(max_turns: int = 3):
    return CalcEnv(dataset=[{"question": "add 2 3", "answer": 5}], tool_defs=[convert_func_to_tool_def(add)],
                   max_turns=max_turns, rubric=calc_rubric(), max_concurrent=4)
