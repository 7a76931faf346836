from vfrl.environments.math_rubric import MathRubric  # noqa: F401
