from vfrl.environments.classic import TextArenaEnv  # noqa: F401
