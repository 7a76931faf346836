"""alphabet-sort: sort names alphabetically, then sort again as each follow-up turn adds names.

Turn 1 gives 3-5 names; each later turn adds 1-3 more and asks for the whole list sorted again.
The reward is dense: per turn, difflib's similarity between the reply (one name per line, bullets
and numbering dropped) and the correct sorted list as text, 1.0 when identical, averaged over all
turns (a turn never answered scores 0). Character-level similarity gives partial credit to a
misspelt or half-sorted list. The fraction of turns sorted exactly is logged as `exact_turns`
(weight 0).
"""

import random
import re
from difflib import SequenceMatcher

import vfrl

NAMES = [
    "Ada", "Alan", "Amy", "Ben", "Bea", "Cal", "Cleo", "Dan", "Dora", "Eli", "Eve", "Finn", "Fay", "Gus", "Gwen",
    "Hal", "Hope", "Ian", "Ivy", "Jack", "Jade", "Kai", "Kim", "Leo", "Lily", "Max", "Mia", "Ned", "Nora", "Otto",
    "Opal", "Paul", "Pia", "Quin", "Ray", "Rose", "Sam", "Sue", "Ted", "Tia", "Uma", "Vic", "Vera", "Walt", "Wren",
    "Xia", "Yuri", "Zed", "Zoe", "Abe", "Ava", "Bo", "Cy", "Del", "Ema", "Flo", "Ike", "Joy", "Lu", "Ola",
]
SYSTEM_PROMPT = "Sort names alphabetically. Reply with one name per line."


def make_rows(n: int, seed: int, num_turns: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        sizes = [rng.randint(3, 5)] + [rng.randint(1, 3) for _ in range(num_turns - 1)]
        names = rng.sample(NAMES, sum(sizes))
        rounds, start = [], 0
        for size in sizes:
            rounds.append(names[start : start + size])
            start += size
        rows.append({"question": "Sort:\n" + "\n".join(rounds[0]), "answer": "\n".join(sorted(names)),
                     "info": {"rounds": rounds}, "task": "alphabet-sort"})
    return rows


def reply_names(text: str) -> list[str]:
    """Names from a reply: one per line, bullets and numbering stripped."""
    return [re.sub(r"^\s*(?:[-*]|\d+[.)])?\s*", "", line).strip() for line in text.splitlines() if line.strip()]


def turns(completion, info) -> list[tuple[list[str] | None, list[str]]]:
    """(names in the reply, or None if the turn never came; the correct sorted names) per turn."""
    replies = [m["content"] or "" for m in completion if m["role"] == "assistant"]
    return [(reply_names(replies[t]) if t < len(replies) else None,
             sorted(n for r in info["rounds"][: t + 1] for n in r)) for t in range(len(info["rounds"]))]


def sort_similarity(completion, info) -> float:
    scores = [0.0 if got is None else SequenceMatcher(None, "\n".join(got), "\n".join(want)).ratio()
              for got, want in turns(completion, info)]
    return sum(scores) / len(scores)


def exact_turns(completion, info) -> float:
    done = turns(completion, info)
    return sum(got == want for got, want in done) / len(done)


class AlphabetSortEnv(vfrl.MultiTurnEnv):
    def is_completed(self, messages, state) -> bool:
        return state["turn"] >= len(state["info"]["rounds"])

    def env_response(self, messages, state):
        new = state["info"]["rounds"][state["turn"]]
        return [{"role": "user", "content": "Add:\n" + "\n".join(new) + "\nSort all again."}]


def load_environment(num_train_examples: int = 2000, num_eval_examples: int = 100, num_turns: int = 2,
                     seed: int = 0) -> vfrl.MultiTurnEnv:
    if not 1 <= num_turns <= 10:
        raise ValueError(f"num_turns must be between 1 and 10, got {num_turns}")
    return AlphabetSortEnv(
        dataset=make_rows(num_train_examples, seed, num_turns),
        eval_dataset=make_rows(num_eval_examples, seed + 1, num_turns),
        system_prompt=SYSTEM_PROMPT,
        rubric=vfrl.Rubric(funcs=[sort_similarity, exact_turns], weights=[1.0, 0.0]),
        max_turns=num_turns,
        env_id="alphabet-sort",
    )
