"""arithmetic: one- and two-step word problems about everyday quantities, answered in `\\boxed{}`.

Rows are generated from a seed (offline). The answer is always a whole number. The reward is
vfrl's MathRubric: 1.0 when the last `\\boxed{...}` of the reply equals the answer (exactly,
numerically or symbolically), else 0.0.
"""

import random

import vfrl

SYSTEM_PROMPT = "Solve the problem. Give only the final number, as \\boxed{answer}."
NAMES = ["Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivan", "Jo"]
ITEMS = ["apples", "books", "coins", "pens", "shells", "stamps", "marbles", "cards"]


def one_step(rng: random.Random, hi: int) -> tuple[str, int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(2, hi), rng.randint(2, hi)
    kind = rng.choice(["add", "sub", "mul", "div"])
    if kind == "add":
        return f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?", a + b
    if kind == "sub":
        a, b = max(a, b), min(a, b)
        return f"{name} has {a} {item} and gives away {b}. How many {item} are left?", a - b
    if kind == "mul":
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        return f"There are {a} boxes with {b} {item} in each box. How many {item} are there in all?", a * b
    b, q = rng.randint(2, 12), rng.randint(2, 12)
    return f"{name} shares {b * q} {item} equally among {b} friends. How many {item} does each friend get?", q


def two_step(rng: random.Random, hi: int) -> tuple[str, int]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    packs, per, extra = rng.randint(2, 9), rng.randint(2, 12), rng.randint(1, hi)
    if rng.random() < 0.5:
        return (f"{name} buys {packs} packs of {per} {item} and finds {extra} more. "
                f"How many {item} does {name} have?", packs * per + extra)
    extra = rng.randint(1, packs * per)
    return (f"{name} buys {packs} packs of {per} {item} and loses {extra} of them. "
            f"How many {item} does {name} have left?", packs * per - extra)


def make_rows(n: int, seed: int, max_number: int, two_step_fraction: float) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        steps = two_step if rng.random() < two_step_fraction else one_step
        question, answer = steps(rng, max_number)
        rows.append({"question": question, "answer": str(answer), "task": "arithmetic",
                     "info": {"steps": 2 if steps is two_step else 1}})
    return rows


def load_environment(num_train_examples: int = 2000, num_eval_examples: int = 100, max_number: int = 50,
                     two_step_fraction: float = 0.3, system_prompt: str = SYSTEM_PROMPT,
                     seed: int = 0) -> vfrl.SingleTurnEnv:
    if max_number < 2:
        raise ValueError(f"max_number must be at least 2, got {max_number}")
    if not 0.0 <= two_step_fraction <= 1.0:
        raise ValueError(f"two_step_fraction must be between 0 and 1, got {two_step_fraction}")
    return vfrl.SingleTurnEnv(
        dataset=make_rows(num_train_examples, seed, max_number, two_step_fraction),
        eval_dataset=make_rows(num_eval_examples, seed + 1, max_number, two_step_fraction),
        system_prompt=system_prompt,
        rubric=vfrl.MathRubric(),
    )
