"""A small environment package written against verifiers' classic API only, as a verifiers 0.3 user wrote
it: `import verifiers as vf` and verifiers' module paths, no vfrl import. vfrl's loader reads those imports
as vfrl's (vfrl/verifiers_compat.py). Not a copy of a verifiers environment: a quiz that asks "are you
sure?" until the model has answered `rounds` times."""

import verifiers as vf
from verifiers.types import Messages, State
from verifiers.utils.data_utils import BOXED_SYSTEM_PROMPT, extract_boxed_answer

BUILDS = []  # how often the dataset builder ran


class QuizEnv(vf.MultiTurnEnv):
    @vf.stop
    async def answered_enough(self, state: State) -> bool:
        return len(state["trajectory"]) >= state["info"]["rounds"]

    async def env_response(self, messages: Messages, state: State, **kwargs) -> Messages:
        return [vf.UserMessage(content="Are you sure?")]


def load_environment(rounds: int = 2):
    def build_dataset():
        BUILDS.append(1)
        return [{"question": "6 * 7?", "answer": 42, "info": {"rounds": rounds}, "hint": "think of 40 + 2"}]

    parser = vf.Parser(extract_fn=extract_boxed_answer)

    def every_reply_right(parser, completion, answer, **kwargs) -> float:
        replies = parser.get_assistant_messages(completion)
        return sum(parser.parse(m.content) == str(answer) for m in replies) / len(replies)

    def answer_is_int(answer, hint) -> float:  # names a dataset column, as verifiers allows
        return float(isinstance(answer, int) and hint.startswith("think"))

    rubric = vf.Rubric(funcs=[every_reply_right, answer_is_int], weights=[1.0, 0.0], parser=parser)
    return QuizEnv(dataset=build_dataset, system_prompt=BOXED_SYSTEM_PROMPT, parser=parser, rubric=rubric,
                   sampling_args={"temperature": 0.25})
