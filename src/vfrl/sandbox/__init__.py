"""Model code run on this machine, isolated: one call (local.py), a rollout-long sandbox (container.py) and the client
that stands in for Prime Intellect's hosted sandboxes (client.py).

`mode()`: `env.sandbox` in the config (vf-eval `--sandbox`), carried to the process that loads the environment as
VFRL_SANDBOX: where verifiers' SandboxEnv runs its sandboxes, "hosted" (Prime Intellect's service, which vfrl does not
run: such an environment is refused in one line) or "local"; and "unsandboxed", the explicit consent to run the python
tool's code without isolation on a machine that cannot isolate (local.py: run), which it otherwise refuses.
"""

import os

from vfrl.sandbox.local import Limits, Result, SandboxUnavailable, isolation_problem, run

MODE_ENV = "VFRL_SANDBOX"
MODES = ("hosted", "local", "unsandboxed")


def mode() -> str:
    return os.environ.get(MODE_ENV, "hosted")


__all__ = ["Limits", "MODES", "MODE_ENV", "Result", "SandboxUnavailable", "isolation_problem", "mode", "run"]
