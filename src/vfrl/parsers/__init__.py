"""verifiers' `verifiers.parsers` module paths, for packages that import from there."""

from vfrl.envs.parsers import MaybeThinkParser, Parser, ThinkParser, XMLParser  # noqa: F401
