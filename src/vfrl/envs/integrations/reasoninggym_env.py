from vfrl.envs.classic import ReasoningGymEnv  # noqa: F401
