"""reasoning-gym: tasks from the Reasoning Gym library (`pip install reasoning-gym`) by name.

`load_environment(gym="leg_counting")` or `gym=["leg_counting", "basic_arithmetic"]`. The library
generates every task procedurally from a seed, offline. The model answers inside
`<answer>...</answer>`; the reward is the task's own `score_answer` (1.0 when right, partial credit
where the task defines it). The format reward (weight 0) is logged to show whether the tags are used.

The module is not called `reasoning_gym` so that it does not shadow the library it wraps.
"""

from __future__ import annotations

import difflib
from itertools import zip_longest

import reasoning_gym
from reasoning_gym.utils import SYSTEM_PROMPTS

import vfrl

# Names used in guides that the library spells differently.
ALIASES = {"arithmetic_basic": "basic_arithmetic"}


def task_names() -> list[str]:
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def make_task(name: str, size: int, seed: int, config: dict):
    name = ALIASES.get(name, name)
    known = task_names()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"known tasks: {', '.join(known)}"
        raise ValueError(f"reasoning-gym has no task '{name}'; {hint}")
    try:
        return name, reasoning_gym.create_dataset(name, size=size, seed=seed, **config)
    except (TypeError, AssertionError) as e:  # the library checks its configs with asserts
        raise ValueError(f"reasoning-gym task '{name}' rejected config {config}: {e}") from None


def load_environment(gym: str | list[str] = "leg_counting", num_train_examples: int = 1000,
                     num_eval_examples: int = 100, seed: int = 0, config: dict | None = None,
                     system_prompt: str = SYSTEM_PROMPTS["default"]) -> vfrl.SingleTurnEnv:
    """`config` holds the task's settings (e.g. `{"max_animals": 3}`); with several tasks, one dict
    per task name: `{"leg_counting": {"max_animals": 3}}`."""
    names = [gym] if isinstance(gym, str) else list(gym)
    if not names:
        raise ValueError("gym must name at least one reasoning-gym task")
    config = dict(config or {})
    per_task = {n: config.get(n, {}) for n in names} if len(names) > 1 else {names[0]: config}
    n_train, n_eval = -(-num_train_examples // len(names)), -(-num_eval_examples // len(names))
    # One generated dataset per task, split in two: train and eval rows never share an item.
    tasks = dict(make_task(n, n_train + n_eval, seed, per_task[n]) for n in names)

    def rows(start: int, stop: int) -> list[dict]:
        per = [[{"question": ds[i]["question"], "answer": str(ds[i]["answer"]), "task": name,
                 "info": {"gym": name, "index": i}} for i in range(start, stop)] for name, ds in tasks.items()]
        return [row for group in zip_longest(*per) for row in group if row is not None]  # tasks interleaved

    parser = vfrl.XMLParser(["answer"])

    def correct_answer(completion, info) -> float:
        ds = tasks[info["gym"]]
        return float(ds.score_answer(answer=parser.parse_answer(completion), entry=ds[info["index"]]))

    rubric = vfrl.Rubric(funcs=[correct_answer, parser.get_format_reward_func()], weights=[1.0, 0.0], parser=parser)
    return vfrl.SingleTurnEnv(
        dataset=rows(0, n_train)[:num_train_examples],
        eval_dataset=rows(n_train, n_train + n_eval)[:num_eval_examples],
        system_prompt=system_prompt, parser=parser, rubric=rubric,
    )
