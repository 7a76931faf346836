from vfrl.envs.math_rubric import MathRubric  # noqa: F401
