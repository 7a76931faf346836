from vfrl.envs.classic import BrowserEnv  # noqa: F401
