"""classic_calc_late's rubric, in a top-level package its distribution ships beside it (as the community's
packages ship `rubrics/` or `utils/`), written against verifiers' classic module paths."""

from verifiers.parsers.maybe_think_parser import MaybeThinkParser
from verifiers.rubrics.rubric import Rubric
from verifiers.utils.async_utils import maybe_await


def calc_rubric() -> Rubric:
    async def says_the_sum(parser, completion, answer) -> float:
        replies = await maybe_await(parser.get_assistant_messages, completion)
        return float(bool(replies) and parser.parse_answer(completion) == str(answer))

    def called_add(completion) -> float:
        return float(any(call.name == "add" for m in completion if m.role == "assistant"
                         for call in (m.tool_calls or [])))

    def cleaned_up(state) -> float:  # the @vf.cleanup handler ran before scoring
        return float(state.get("cleaned_up", False))

    return Rubric(funcs=[says_the_sum, called_add, cleaned_up], weights=[1.0, 0.0, 0.0], parser=MaybeThinkParser())
