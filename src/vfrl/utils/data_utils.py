"""verifiers' `verifiers.utils.data_utils`: prompts and answer helpers for example datasets."""

from vfrl.envs.classic import (  # noqa: F401
    BOXED_SYSTEM_PROMPT, THINK_BOXED_SYSTEM_PROMPT, extract_hash_answer, load_example_dataset,
)
from vfrl.envs.math_rubric import extract_boxed_answer  # noqa: F401
