"""reverse-text: the model reads a short string and answers with it reversed.

Data is generated from a seed (offline). The reward is dense: difflib's similarity ratio
(2 * matched characters / total characters) between the reply and the reversed string, so a reply
that is partly right earns partial credit and learning shows within a few steps.
"""

import random
import string
from difflib import SequenceMatcher

import vfrl

SYSTEM_PROMPT = "Reverse the text."


def make_rows(n: int, seed: int, min_len: int, max_len: int, alphabet: str) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(min_len, max_len)))
        rows.append({"question": text, "answer": text[::-1], "task": "reverse-text"})
    return rows


def lcs_reward(completion, answer) -> float:
    reply = completion[-1]["content"].strip() if completion else ""
    return SequenceMatcher(None, reply, answer).ratio()


def load_environment(num_train_examples: int = 2000, num_eval_examples: int = 100, min_len: int = 3,
                     max_len: int = 8, alphabet: str = string.ascii_lowercase, seed: int = 0) -> vfrl.SingleTurnEnv:
    return vfrl.SingleTurnEnv(
        dataset=make_rows(num_train_examples, seed, min_len, max_len, alphabet),
        eval_dataset=make_rows(num_eval_examples, seed + 1, min_len, max_len, alphabet),
        system_prompt=SYSTEM_PROMPT,
        rubric=vfrl.Rubric(funcs=[lcs_reward], weights=[1.0]),
    )
