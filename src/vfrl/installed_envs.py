"""Which environments are installed here, and the line for an id that names none of them.

An environment is installed as vfrl's own packages are (a `vfrl.environments` entry point) or as the community's
are (a distribution that requires verifiers, imported by its module name; `vf-install` puts them there). The line
for an unknown id names the nearest installed ones and the command that installs it. Read from the installed
distributions' metadata, without importing any of them: the launcher asks it before anything starts.
"""

from __future__ import annotations

import difflib
import re

ENTRY_POINT_GROUP = "vfrl.environments"
SHOWN = 12  # installed names listed in the line; the rest are counted


def installed_environments() -> list[str]:
    """Every environment id installed here: vfrl's entry points, and the module names of distributions that
    require verifiers (as `env.id` names them)."""
    from importlib.metadata import distributions, entry_points

    names = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for dist in distributions():
        requires = dist.requires or []
        name = dist.metadata["Name"] or ""
        if name and name.lower() not in ("vfrl", "verifiers") and any(
                re.match(r"verifiers\b", r.strip()) for r in requires):
            names.add(name.replace("-", "_").lower())
    return sorted(names)


def not_installed_line(env_id: str) -> str:
    """`environment 'sadd' is not installed; did you mean 'sad'? (installed: ...); install it with ...`."""
    names = installed_environments()
    if env_id.replace("-", "_").lower() in names or env_id in names:  # its metadata is seen, its module is not
        return (f"environment '{env_id}' is installed, but its module cannot be imported from this Python (an "
                "editable install's .pth file is read only from a site-packages folder, not from PYTHONPATH); run "
                "vfrl from the Python it was installed for, or install it there with `vf-install`")
    near = difflib.get_close_matches(env_id, names, n=3, cutoff=0.6) or difflib.get_close_matches(
        env_id.replace("-", "_"), names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
    shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    return (f"environment '{env_id}' is not installed{hint} (installed: {shown or 'none'}); install it with "
            f"`vf-install {env_id}` (a folder: `vf-install --path DIR`)")
