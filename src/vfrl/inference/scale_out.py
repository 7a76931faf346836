"""What a verifiers 0.4 environment needs before vLLM starts, found without importing it.

verifiers 0.4's train client posts token ids to vLLM's `/inference/v1/generate`, which vLLM serves
only with `--enable-scale-out`.
`inference.enable_scale_out = "auto"` (the default) serves them always: they add routes behind the
API key and nothing else, so one vf-vllm serves every kind of package (vf-eval of a verifiers 0.4
package against a server started for a classic one). A server vf-rl did not start (`inference.base_url`)
is asked for them only when `env.id` is a verifiers 0.4 package (`is_verifiers_package`): a module/package
whose source imports `verifiers.v1` (one that imports only the classic `verifiers` runs on vfrl's own
API: verifiers_compat.py), else an installed distribution that requires `verifiers`. Importing it would
import verifiers (seconds) in the launcher for every run; reading its metadata does not.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from vfrl.verifiers_compat import verifiers_api, verifiers_taskset


def find_uv() -> str | None:
    """uv on PATH, else next to this Python (the venv's bin, when the venv was not activated)."""
    return shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))


def is_verifiers_package(env_id: str) -> bool:
    """Does `env.id` name a verifiers 0.4 package (rather than a vfrl environment or a classic verifiers one)?"""
    from importlib.metadata import PackageNotFoundError, distribution, entry_points, packages_distributions
    from importlib.util import find_spec

    if any(ep.name in (env_id, env_id.replace("_", "-")) for ep in entry_points(group="vfrl.environments")):
        return False
    module = env_id.replace("-", "_").split("/")[-1].split("@")[0]
    if verifiers_taskset(module):  # one verifiers ships: a 0.4 taskset, known without importing verifiers
        return True
    try:
        spec = find_spec(module)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    api = verifiers_api(module)  # its source says which verifiers: classic packages are vfrl's (verifiers_compat.py)
    if api is not None:
        return api == "v1"
    for dist in packages_distributions().get(module, []):
        try:
            requires = distribution(dist).requires or []
        except PackageNotFoundError:
            continue
        if any(re.match(r"verifiers\b", r.strip()) for r in requires):
            return True
    return False


def scale_out_enabled(setting: bool | str) -> bool:
    """Does vf-vllm serve the scale-out routes? `inference.enable_scale_out`: true, false, or "auto" (on)."""
    return setting == "auto" or bool(setting)


def scale_out_needed(setting: bool | str, env_id: str) -> bool:
    """Must a server the run did not start serve them? When asked for, or ("auto") for a verifiers 0.4 package."""
    return is_verifiers_package(env_id) if setting == "auto" else bool(setting)

