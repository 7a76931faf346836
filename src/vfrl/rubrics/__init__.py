"""verifiers' `verifiers.rubrics` module paths, for packages that import from there."""

from vfrl.envs.judge_rubric import JudgeRubric  # noqa: F401
from vfrl.envs.math_rubric import MathRubric  # noqa: F401
from vfrl.envs.rubric import Rubric, RubricGroup  # noqa: F401
