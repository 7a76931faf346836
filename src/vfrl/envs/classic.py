"""What environment packages written for verifiers' classic API (<= 0.3) use beyond the core classes.

`import vfrl as vf` in place of `import verifiers as vf` should be the whole port. This module holds
the rest of what those packages name: `vf.utils.data_utils` helpers, `ReasoningGymEnv`, and the
classes that need services vfrl does not run (hosted browsers), which raise one line saying so when
built instead of failing somewhere later. SandboxEnv lives in sandbox_env.py.
"""

from __future__ import annotations

from typing import Any

from vfrl.envs.math_rubric import extract_boxed_answer
from vfrl.envs.multiturn import SingleTurnEnv
from vfrl.envs.parsers import Parser, XMLParser
from vfrl.envs.rubric import Rubric

BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
THINK_BOXED_SYSTEM_PROMPT = ("Think step-by-step inside <think>...</think> tags. "
                             "Then, give your final answer inside \\boxed{}.")


def extract_hash_answer(text: str) -> str:
    """GSM8K's answer: what follows `####` (the text itself when there is none)."""
    return text.split("####")[1].strip() if "####" in text else text


def numbers_only(text: str) -> str:
    return "".join(c for c in str(text) if c.isdigit() or c == ".")


def lettered(question: str, options: list[str], letters: str = "ABCDEFGHIJ") -> str:
    """A multiple-choice question with its options lettered A, B, ... below it."""
    return f"Question: {question}\n" + "".join(f"\n{letters[i]}: {o}" for i, o in enumerate(options))


def gpqa_row(x: dict) -> dict:
    """GPQA's correct answer and three wrong ones under letters in an order drawn from the question (the same
    every time; verifiers draws it anew each run)."""
    import random

    options = [x["Correct Answer"], x["Incorrect Answer 1"], x["Incorrect Answer 2"], x["Incorrect Answer 3"]]
    order = random.Random(x["Question"]).sample(range(4), 4)  # order[k]: the option shown under letter k
    text = f"Question: {x['Question']}\n\n" + "\n".join(f"{'ABCD'[k]}: {options[i]}" for k, i in enumerate(order))
    return {"question": text, "answer": "ABCD"[order.index(0)]}


def is_python_problem(x: dict) -> bool:
    return x["prompt"].startswith("Solve the following coding problem using the programming language python:")


# verifiers' example datasets: name -> (hub dataset, its configs (rows concatenated), default split,
# row -> {"question", "answer"}, which rows to keep)
EXAMPLE_DATASETS = {
    "aime2024": ("HuggingFaceH4/aime_2024", [None], "train",
                 lambda x: {"question": x["problem"], "answer": str(int(x["answer"]))}, None),
    "aime2025": ("opencompass/AIME2025", ["AIME2025-I", "AIME2025-II"], "test",
                 lambda x: {"question": x["question"], "answer": numbers_only(x["answer"])}, None),
    "amc2023": ("knoveleng/AMC-23", [None], "train", lambda x: {"question": x["problem"], "answer": x["answer"]}, None),
    "gpqa_diamond": ("Idavidrein/gpqa", ["gpqa_diamond"], "train", gpqa_row, None),
    "gpqa_main": ("Idavidrein/gpqa", ["gpqa_main"], "train", gpqa_row, None),
    "gsm8k": ("openai/gsm8k", ["main"], "test",
              lambda x: {"question": x["question"], "answer": extract_hash_answer(x["answer"])}, None),
    "math": ("chiayewken/competition_math", [None], "train",
             lambda x: {"question": x["problem"], "answer": extract_boxed_answer(x["solution"])}, None),
    "math500": ("HuggingFaceH4/MATH-500", [None], "test", lambda x: {"question": x["problem"], "answer": x["answer"]},
                None),
    "mmlu": ("cais/mmlu", ["all"], "dev",
             lambda x: {"question": lettered(x["question"], x["choices"]), "answer": "ABCD"[x["answer"]]}, None),
    "mmlu_pro": ("TIGER-Lab/MMLU-Pro", [None], "validation",
                 lambda x: {"question": lettered(x["question"], x["options"]), "answer": x["answer"]}, None),
    "openbookqa": ("allenai/openbookqa", ["main"], "train", lambda x: {
        "question": f"Question: {x['question_stem']}\n\nChoices:\n" + "\n".join(
            f"{label}. {text}" for label, text in zip(x["choices"]["label"], x["choices"]["text"])),
        "answer": x["answerKey"]}, None),
    "openrs": ("knoveleng/open-rs", [None], "train", lambda x: {"question": x["problem"], "answer": x["answer"]}, None),
    "openrs_easy": ("knoveleng/open-rs", [None], "train", lambda x: {"question": x["problem"], "answer": x["answer"]},
                    lambda x: x["level"] == "Easy"),
    "openrs_hard": ("knoveleng/open-rs", [None], "train", lambda x: {"question": x["problem"], "answer": x["answer"]},
                    lambda x: x["level"] == "Hard"),
    "prime_code": ("PrimeIntellect/verifiable-coding-problems", [None], "train",
                   lambda x: {"question": x["prompt"], "answer": x["verification_info"]}, is_python_problem),
}


def load_example_dataset(name: str = "gsm8k", split: str | None = None, n: int | None = None, seed: int = 0):
    """A known benchmark from the Hugging Face hub as `question`/`answer` rows (a `datasets.Dataset`), by the
    names verifiers' classic releases know (`EXAMPLE_DATASETS`).

    Needs the `datasets` package and the hub (or its local cache)."""
    if name not in EXAMPLE_DATASETS:
        raise ValueError(f"load_example_dataset: unknown dataset {name!r} (vfrl knows {', '.join(EXAMPLE_DATASETS)})")
    try:
        from datasets import concatenate_datasets, load_dataset
    except ImportError:
        raise ImportError("load_example_dataset needs the `datasets` package: pip install datasets") from None
    path, configs, default_split, to_row, keep = EXAMPLE_DATASETS[name]
    dataset = concatenate_datasets([load_dataset(path, config, split=split or default_split) for config in configs])
    if keep is not None:
        dataset = dataset.filter(keep)
    if n is not None and n > 0:
        dataset = dataset.shuffle(seed=seed).select(range(n))
    return dataset.map(to_row, remove_columns=dataset.column_names)


class ReasoningGymEnv(SingleTurnEnv):
    """Reasoning Gym tasks, generated offline from a seed: `gym` is a task name, or a list of names
    or `{"name", "weight", "config"}` dicts (a weighted mix). The reply's `<answer>` is scored by the
    task's own `score_answer`; the format reward is logged with weight 0."""

    def __init__(self, gym: str | list[str | dict], num_train_examples: int = 1000, num_eval_examples: int = 100,
                 system_prompt: str | None = None, parser: Parser | None = None, seed: int = 0):
        try:
            import reasoning_gym
            from reasoning_gym.composite import DatasetSpec
            from reasoning_gym.utils import SYSTEM_PROMPTS
        except ImportError:
            raise ImportError("ReasoningGymEnv needs the reasoning-gym package: pip install reasoning-gym") from None
        size = num_train_examples + num_eval_examples
        if isinstance(gym, str):
            data = reasoning_gym.create_dataset(gym, size=size, seed=seed)
        else:
            specs = [DatasetSpec(name=g, weight=1.0, config={}) if isinstance(g, str) else DatasetSpec(**g)
                     for g in gym]
            data = reasoning_gym.create_dataset("composite", datasets=specs, size=size, seed=seed)
        rows = [{"question": entry["question"], "answer": str(entry["answer"]), "info": {"index": i}}
                for i, entry in enumerate(data)]
        parser = parser or XMLParser(["answer"])

        def check_answer_reward_func(completion, info) -> float:
            return float(data.score_answer(answer=str(parser.parse_answer(completion)).strip(),
                                           entry=data[info["index"]]))

        rubric = Rubric(funcs=[check_answer_reward_func, parser.get_format_reward_func()], weights=[1.0, 0.0],
                        parser=parser)
        self.gym_dataset = data
        super().__init__(dataset=rows[:num_train_examples], eval_dataset=rows[num_train_examples:] or None,
                         system_prompt=system_prompt if system_prompt is not None else SYSTEM_PROMPTS["default"],
                         parser=parser, rubric=rubric)


class Unsupported:
    """A verifiers class that needs a service vfrl does not run: building one raises one line."""

    needs = "a service vfrl does not run"

    def __init__(self, *args: Any, **kwargs: Any):
        raise NotImplementedError(f"vfrl does not support {type(self).__name__}: it needs {self.needs}")


class BrowserEnv(Unsupported):
    needs = "a hosted browser (Browserbase)"
