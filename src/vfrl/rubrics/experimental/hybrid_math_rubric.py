from vfrl.envs.hybrid_math_rubric import HybridMathRubric  # noqa: F401
