from vfrl.envs.rubric import Rubric  # noqa: F401
