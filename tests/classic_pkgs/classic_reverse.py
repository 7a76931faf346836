"""A single-turn environment package written against verifiers' classic API only, as a verifiers 0.3 user
wrote one: `import verifiers as vf`, a `vf.SingleTurnEnv` over a dataset builder, an `XMLParser` whose format
reward rides along at weight 0, and a reward that reads the parsed answer. Not a copy of a verifiers
environment: the embedded tiny model's own task (reverse a short string), so its replies score."""

from difflib import SequenceMatcher

import verifiers as vf

WORDS = ["abc", "hello", "stone", "river", "quick", "lamp"]


def load_environment(num_examples: int = 6):
    def build_dataset():
        return [{"question": w, "answer": w[::-1]} for w in (WORDS * num_examples)[:num_examples]]

    parser = vf.XMLParser(["answer"], answer_field="answer")

    def similarity(parser, completion, answer) -> float:  # a bare reply (no tags) is read as the answer too
        reply = parser.parse_answer(completion) or (completion[-1].content if completion else "")
        return SequenceMatcher(None, (reply or "").strip(), answer).ratio()

    rubric = vf.Rubric(funcs=[similarity, parser.get_format_reward_func()], weights=[1.0, 0.0], parser=parser)
    return vf.SingleTurnEnv(dataset=build_dataset, system_prompt="Reverse the text.", parser=parser, rubric=rubric)
