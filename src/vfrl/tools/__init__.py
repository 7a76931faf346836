"""Tools for ToolEnv, as verifiers' `verifiers.tools` names them: `from vfrl.tools import python`."""

from vfrl.tools.python import python

__all__ = ["python"]
