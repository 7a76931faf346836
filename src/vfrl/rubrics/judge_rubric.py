from vfrl.environments.judge_rubric import JudgeRubric  # noqa: F401
