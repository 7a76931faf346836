from vfrl.environments.rubric import Rubric  # noqa: F401
