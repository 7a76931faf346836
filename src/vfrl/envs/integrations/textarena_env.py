from vfrl.envs.textarena_env import TextArenaEnv  # noqa: F401
