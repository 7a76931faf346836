from vfrl.envs.parsers import MaybeThinkParser  # noqa: F401
