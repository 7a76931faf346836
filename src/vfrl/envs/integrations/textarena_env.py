from vfrl.envs.classic import TextArenaEnv  # noqa: F401
