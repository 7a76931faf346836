from vfrl.environments.classic import ReasoningGymEnv  # noqa: F401
