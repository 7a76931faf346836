from vfrl.envs.rubric import RubricGroup  # noqa: F401
