"""arithmetic: whole-number arithmetic, as word problems or as bare sums.

Rows are generated from a seed (offline). The answer is always a whole number. Two styles:
- `style="word"` (default): one- and two-step word problems about everyday quantities, answered in
  `\\boxed{}`; the reward is vfrl's MathRubric, 1.0 when the last `\\boxed{...}` of the reply equals the
  answer (exactly, numerically or symbolically), else 0.0.
- `style="bare"`: "What is 7 + 12? Answer with only the number." (`operations` picks among + - *); the
  reward is 1.0 when the last number in the reply is the answer. Made for small chat models that never
  write `\\boxed{}` (a 0% baseline teaches nothing). No system prompt by default, so a chat template's own
  default system prompt stays; `short_reply` (weight 0) logs how often the reply is the number alone.
"""

import random
import re

import vfrl

SYSTEM_PROMPT = "Solve the problem. Give only the final number, as \\boxed{answer}."
BARE_INSTRUCTION = "Answer with only the number."
OPERATIONS = {"+": "+", "-": "-", "*": "times"}
NAMES = ["Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivan", "Jo"]
ITEMS = ["apples", "books", "coins", "pens", "shells", "stamps", "marbles", "cards"]
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


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


def bare(rng: random.Random, hi: int, operations: list[str]) -> tuple[str, int]:
    op = rng.choice(operations)
    a, b = rng.randint(2, hi), rng.randint(2, hi)
    if op == "-":
        a, b = max(a, b), min(a, b)
    if op == "*":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
    answer = {"+": a + b, "-": a - b, "*": a * b}[op]
    return f"What is {a} {OPERATIONS[op]} {b}? {BARE_INSTRUCTION}", answer


def make_rows(n: int, seed: int, max_number: int, two_step_fraction: float, style: str = "word",
              operations: list[str] = ("+", "-", "*")) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        if style == "bare":
            (question, answer), steps = bare(rng, max_number, list(operations)), 1
        else:
            two = rng.random() < two_step_fraction
            (question, answer), steps = (two_step if two else one_step)(rng, max_number), 2 if two else 1
        rows.append({"question": question, "answer": str(answer), "task": "arithmetic", "info": {"steps": steps}})
    return rows


def last_number(text: str) -> str | None:
    """The last number written in `text` ("1,200" -> "1200", "7." -> "7"), or None."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "").removesuffix(".0") if found else None


def number_rubric() -> vfrl.Rubric:
    parser = vfrl.Parser()

    def correct_number(completion, answer) -> float:
        return float(last_number(parser.parse_answer(completion) or "") == answer)

    def short_reply(completion, answer) -> float:
        return float((parser.parse_answer(completion) or "").strip().rstrip(".") == answer)

    return vfrl.Rubric(funcs=[correct_number, short_reply], weights=[1.0, 0.0], parser=parser)


def load_environment(num_train_examples: int = 2000, num_eval_examples: int = 100, max_number: int = 50,
                     two_step_fraction: float = 0.3, style: str = "word", operations: list[str] | None = None,
                     system_prompt: str | None = None, seed: int = 0) -> vfrl.SingleTurnEnv:
    if style not in ("word", "bare"):
        raise ValueError(f"style must be 'word' or 'bare', got {style!r}")
    operations = list(operations or OPERATIONS)
    if not operations or set(operations) - set(OPERATIONS):
        raise ValueError(f"operations must be a non-empty list of {list(OPERATIONS)}, got {operations}")
    if max_number < 2:
        raise ValueError(f"max_number must be at least 2, got {max_number}")
    if not 0.0 <= two_step_fraction <= 1.0:
        raise ValueError(f"two_step_fraction must be between 0 and 1, got {two_step_fraction}")
    word = style == "word"
    return vfrl.SingleTurnEnv(
        dataset=make_rows(num_train_examples, seed, max_number, two_step_fraction, style, operations),
        eval_dataset=make_rows(num_eval_examples, seed + 1, max_number, two_step_fraction, style, operations),
        system_prompt=system_prompt if system_prompt is not None else SYSTEM_PROMPT if word else None,
        rubric=vfrl.MathRubric() if word else number_rubric(),
    )
