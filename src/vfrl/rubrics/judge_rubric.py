from vfrl.envs.judge_rubric import JudgeRubric  # noqa: F401
