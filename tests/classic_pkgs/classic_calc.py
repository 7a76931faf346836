"""A tool-using environment package written against verifiers' classic API only (`import verifiers as vf`,
no vfrl import), as a verifiers 0.3 user wrote one: a `vf.ToolEnv` with one python tool. Asked to
"add 2 3", the model calls `add`, the environment runs it and sends the result back as a tool message,
and the model answers. Not a copy of a verifiers environment."""

import verifiers as vf


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def load_environment(max_turns: int = 3):
    dataset = [{"question": "add 2 3", "answer": 5}]

    def says_the_sum(parser, completion, answer) -> float:
        replies = parser.get_assistant_messages(completion)
        return float(bool(replies) and (replies[-1].content or "").strip() == str(answer))

    def called_add(completion) -> float:
        return float(any(call.name == "add" for m in completion if m.role == "assistant"
                         for call in (m.tool_calls or [])))

    rubric = vf.Rubric(funcs=[says_the_sum, called_add], weights=[1.0, 0.0])
    return vf.ToolEnv(dataset=dataset, tools=[add], max_turns=max_turns, rubric=rubric)
