"""A base-model environment package written against verifiers' classic API only, as a verifiers 0.3 user wrote one
for a model without a chat template: `message_type="completion"`, a `prompt` column of plain text, an
`env_response` that returns the text to append, and reward functions that read the completion as a str.

The text is in the format the model was trained on, written out by hand as one writes a base model's few-shot
format: the embedded tiny model knows `<|im_start|>`/`<|im_end|>` turns (its tokenizer reads them as its special
tokens), so no chat template is involved and its replies score. Not a copy of a verifiers environment: reverse a
word, then the next word in the next turn."""

from difflib import SequenceMatcher

import verifiers as vf
from verifiers.types import State

WORDS = ["abc", "hello", "stone", "river", "quick", "lamp"]
ASSISTANT = "<|im_start|>assistant\n"


def turn(word: str) -> str:
    return f"<|im_start|>user\n{word}<|im_end|>\n{ASSISTANT}"


class ReverseEachEnv(vf.MultiTurnEnv):
    async def env_response(self, messages: str, state: State, **kwargs) -> str:
        # the reply ended with <|im_end|>, a special token its text leaves out: the next turn opens on a new line
        return "\n" + turn(state["info"]["words"][len(state["trajectory"])])


def load_environment(turns: int = 2, num_examples: int = 6):
    def build_dataset():
        rows = []
        for i in range(num_examples):
            words = [WORDS[(i + k) % len(WORDS)] for k in range(turns)]
            rows.append({"prompt": "<|im_start|>system\nReverse the text.<|im_end|>\n" + turn(words[0]),
                         "answer": words[-1][::-1], "info": {"words": words}})
        return rows

    # the last reply: what follows the last assistant turn's opening
    parser = vf.Parser(extract_fn=lambda text: text.rsplit(ASSISTANT, 1)[-1].strip())

    def last_reply_reversed(parser, completion, answer) -> float:
        return SequenceMatcher(None, parser.parse_answer(completion), answer).ratio()

    def every_reply_reversed(state, info) -> float:
        replies = [step["completion"].strip() for step in state["trajectory"]]
        scores = [SequenceMatcher(None, r, w[::-1]).ratio() for r, w in zip(replies, info["words"])]
        return sum(scores) / len(info["words"])

    rubric = vf.Rubric(funcs=[every_reply_reversed, last_reply_reversed], weights=[1.0, 0.0], parser=parser)
    return ReverseEachEnv(message_type="completion", dataset=build_dataset, parser=parser, rubric=rubric,
                          max_turns=turns)
