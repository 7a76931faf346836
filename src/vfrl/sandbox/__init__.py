"""Model code run on this machine, isolated (local.py): what the python tool runs in."""

from vfrl.sandbox.local import Limits, Result, SandboxUnavailable, isolation_problem, run

__all__ = ["Limits", "Result", "SandboxUnavailable", "isolation_problem", "run"]
