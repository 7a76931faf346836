from vfrl.environments.classic import BrowserEnv  # noqa: F401
