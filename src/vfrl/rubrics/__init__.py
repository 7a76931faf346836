"""verifiers' `verifiers.rubrics` module paths, for packages that import from there."""

from vfrl.environments.judge_rubric import JudgeRubric  # noqa: F401
from vfrl.environments.math_rubric import MathRubric  # noqa: F401
from vfrl.environments.rubric import Rubric, RubricGroup  # noqa: F401
