from vfrl.environments.rubric import RubricGroup  # noqa: F401
