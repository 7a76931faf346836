"""Find and load an environment package by id.

Whatever goes wrong on the way (the id names no package, its import fails, its `load_environment`
refuses the args, raises, or returns something that is not an environment) is an
`EnvironmentLoadError` whose message is one line naming the environment, its package and the error,
with the file and line it came from; the original exception is its `__cause__`, so the traceback is
there for the log. vf-train and vf-eval print the line alone.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import re
import traceback
from importlib.metadata import entry_points
from pathlib import Path

from vfrl.env_args import args_problem, params_of
from vfrl.env_protocol import EnvironmentProtocol, missing
from vfrl.envs.environment import Environment
from vfrl.envs.faults import one_line
from vfrl.envs.verifiers_v1 import V1EnvironmentError, is_v1_module, v1_exports, v1_only
from vfrl.installed_envs import ENTRY_POINT_GROUP, not_installed_line
from vfrl.package_folders import installed_from, own_modules_first
from vfrl.verifiers_compat import load_classic_as_vfrl, verifiers_api, verifiers_taskset

log = logging.getLogger(__name__)


class EnvironmentLoadError(RuntimeError):
    """An environment could not be loaded; the message is one line."""

    worded_for_users = True  # vf-train prints the message alone (trainer/failure.py: describe)


class EnvironmentNotFound(EnvironmentLoadError, LookupError):
    pass


VFRL_SOURCE = str(Path(__file__).resolve().parents[1])


def where(e: BaseException, outside_vfrl: bool = False) -> str:
    """`file.py:12`: where e was raised, the innermost frame that is neither importlib's nor this file's (nor,
    with `outside_vfrl`, any of vfrl's: the package's line that asked vfrl for what it lacks); '' when there is
    none, e.g. a SyntaxError, whose message names the place itself."""
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        if not frame.filename.startswith("<") and "/importlib/" not in frame.filename and frame.filename != __file__ \
                and not (outside_vfrl and frame.filename.startswith(VFRL_SOURCE)):
            return f"{Path(frame.filename).name}:{frame.lineno}"
    return ""


def failure(what: str, e: BaseException) -> EnvironmentLoadError:
    # a refusal of vfrl's (NotImplementedError: a class or hook it does not run) names the package's line
    at = (isinstance(e, NotImplementedError) and where(e, outside_vfrl=True)) or where(e)
    return EnvironmentLoadError(one_line(f"{what} {type(e).__name__}: {e}" + (f" (at {at})" if at else ""), 400))


def read_as_vfrl_if_classic(module: str) -> bool:
    """Is `module` written for verifiers' classic API? Then its verifiers imports read as vfrl's from now on."""
    if verifiers_api(module) != "classic":
        return False
    load_classic_as_vfrl(module)
    return True


# verifiers' classic modules whose classes run their episodes in a hosted service, and the service
HOSTED = {f"vfrl.envs.experimental.{m}": "Prime Intellect's remote sandboxes"
          for m in ("rlm_env", "sandbox_mixin", "opencode_env", "opencode_qa_env", "opencode_rlm_env",
                    "cli_agent_env", "harbor_env", "composable")}


def hosted_service(module: str) -> str | None:
    """The service a classic verifiers module needs that vfrl does not run (its remote sandboxes), if it is one."""
    return next((service for path, service in HOSTED.items() if module == path or module.startswith(f"{path}.")), None)


def classic_gap(env_id: str, e: BaseException) -> EnvironmentLoadError | None:
    """A classic verifiers package asking for a module path or a name vfrl does not have (its imports read as
    vfrl's): `from verifiers.x import`, `from verifiers.types import X`, `vf.X`."""
    name = getattr(e, "name", None) or ""
    module = getattr(getattr(e, "obj", None), "__name__", None)
    if isinstance(e, ModuleNotFoundError) and name.startswith("vfrl."):
        what = f"imports verifiers{name[4:]}"
    elif isinstance(e, ImportError) and name.split(".")[0] == "vfrl" and (
            asked := re.match(r"cannot import name '(\w+)'", str(e))):
        what = f"imports {asked.group(1)} from verifiers{name[4:]}"
    elif isinstance(e, AttributeError) and module and module.split(".")[0] == "vfrl":
        what = f"uses verifiers{module[4:]}.{name}"
    else:
        return None
    at = where(e, outside_vfrl=True)
    if service := hosted_service(name):
        return EnvironmentLoadError(
            f"environment '{env_id}' {what}, whose environments run in {service}, a service vfrl does not run"
            f"{f' (at {at})' if at else ''}")
    return EnvironmentLoadError(
        f"environment '{env_id}' is written for verifiers' classic API, which vfrl runs with its own classes, and it "
        f"{what}, which vfrl does not have{f' (at {at})' if at else ''}; "
        f"see docs/environments.md, 'Porting from verifiers', for what vfrl has")


def classic_elsewhere(env_id: str, e: BaseException) -> EnvironmentLoadError | None:
    """Verifiers' classic API asked of the installed verifiers 0.4 by a module vfrl does not read as vfrl's: one
    the environment does not ship (a library it uses), as only the environment's own modules are read so."""
    if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "verifiers":
        what = f"imports {e.name}"
    elif isinstance(e, AttributeError) and getattr(getattr(e, "obj", None), "__name__", None) == "verifiers":
        what = f"asks for verifiers.{e.name}"
    else:
        return None
    at = where(e)
    return EnvironmentLoadError(
        f"environment '{env_id}': {at or 'its code'} {what}, verifiers' classic API (<= 0.3), which the installed "
        f"verifiers {verifiers_version()} does not have; vfrl runs the classic API with its own classes in the "
        f"environment's own modules, not in other packages: change that module's `import verifiers as vf` to "
        f"`import vfrl as vf` (docs/environments.md, 'Porting from verifiers')")


def verifiers_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verifiers")
    except PackageNotFoundError:
        return "(none)"


def not_the_packages(module, dist) -> Path | None:
    """Where `module` was imported from, when that is not the folder the distribution `dist` (whose entry point names
    it) was installed from: another module of that name came first on the path (verifiers' reverse_text example on
    PYTHONPATH, beside vfrl's bundled reverse-text). None when it is the package's, or when that cannot be told."""
    home = installed_from(dist) if dist is not None else None
    file = getattr(module, "__file__", None)
    if home is None or file is None or home in Path(file).resolve().parents:
        return None
    path = Path(file).resolve()
    return path.parent if path.name == "__init__.py" else path


def load_v1_environment(env_id: str, package: str, env_args: dict) -> Environment:
    """A verifiers 0.4 taskset package, wrapped for vfrl (verifiers_v1.py); `env_args` go to its taskset config."""
    from vfrl.envs.verifiers_v1 import V1Environment

    try:
        return V1Environment(env_id, env_args)
    except V1EnvironmentError as e:
        raise EnvironmentLoadError(str(e)) from None
    except Exception as e:
        raise failure(f"environment '{env_id}' ({package}, verifiers 0.4): loading it raised", e) from e


def load_environment(env_id: str, **env_args) -> Environment:
    """`reverse-text` -> the `vfrl.envs` entry point of that name, else module `reverse_text`.

    The target is a `load_environment(**env_args)` function (or a module that has one).
    """
    target, package, classic = None, None, False

    def raised(what: str, e: Exception) -> EnvironmentLoadError:  # where the package's code raised e
        return ((classic and classic_gap(env_id, e)) or classic_elsewhere(env_id, e)
                or failure(f"environment '{env_id}' ({package}): {what} raised", e))

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in (env_id, env_id.replace("_", "-")):
            package = f"package {ep.dist.name} {ep.dist.version}" if ep.dist else f"entry point {ep.value}"
            own_modules_first(ep.module.split(".")[0])
            classic = read_as_vfrl_if_classic(ep.module.split(".")[0])
            try:
                module = importlib.import_module(ep.module)
            except Exception as e:
                raise raised(f"importing {ep.value}", e) from e
            if other := not_the_packages(module, ep.dist):  # a module of that name comes first on the path
                package = f"module {ep.module} at {other}, before {package}'s"
                log.warning("environment '%s': %s is imported from %s, which comes before the one of the installed "
                            "%s on the path (PYTHONPATH): loading that one", env_id, ep.module, other, ep.dist.name)
                if is_v1_module(module):
                    return load_v1_environment(env_id, package, env_args)
            try:
                target = ep.load()
            except Exception as e:
                raise raised(f"importing {ep.value}", e) from e
            break
    if target is None:
        module_name = env_id.replace("-", "_").split("/")[-1]
        module_name = verifiers_taskset(module_name) or module_name
        if "." not in module_name:
            own_modules_first(module_name)
        classic = read_as_vfrl_if_classic(module_name)
        package = f"module {module_name}" + (", verifiers' classic API" if classic else "")
        try:
            target = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name == "verifiers":
                raise EnvironmentLoadError(
                    f"environment '{env_id}' ({package}) is written for the verifiers library, which is not installed "
                    f"here; install vfrl's verifiers extra: pip install -e '.[verifiers]' (verifiers 0.4)") from None
            if e.name != module_name:
                raise raised("importing it", e) from e
            raise EnvironmentNotFound(not_installed_line(env_id)) from None
        except Exception as e:
            raise raised("importing it", e) from e
    if inspect.ismodule(target) and is_v1_module(target):
        return load_v1_environment(env_id, package, env_args)
    func = getattr(target, "load_environment", target)
    if not callable(func):
        if inspect.ismodule(target) and (harnesses := v1_exports(target, "Harness")):
            raise EnvironmentNotFound(
                f"environment '{env_id}' ({package}) is a verifiers 0.4 harness package (it exports "
                f"{', '.join(harnesses)}), not an environment: a taskset's roles name it as their harness")
        raise EnvironmentNotFound(f"environment '{env_id}' ({package}) has no load_environment() function")
    if (params := params_of(func)) is not None and (
            problem := args_problem(f"environment '{env_id}' ({package})", params, env_args)):
        raise EnvironmentLoadError(problem)
    try:
        env = func(**env_args)
    except Exception as e:
        raise raised("load_environment()", e) from e
    checked(env, f"environment '{env_id}' ({package}): load_environment()")
    if env.env_id == type(env).__name__:  # not named by its package: its messages name it by the id it was loaded by
        env.env_id = env_id
    return env


def load_configured_environment(env_id: str, env_args: dict, renderer: str | dict | None = None,
                                workers: int = 0, sandbox: str | None = None) -> Environment:
    """`[env]` as vf-train, vf-eval and the Python API load it: `id` with `args`, and for a verifiers 0.4
    package its `renderer` (which a vfrl environment, rendered by vLLM's chat template, has no use for) and its
    `workers`; `sandbox` (env.sandbox) for this process's SandboxEnv (vfrl/sandbox/__init__.py)."""
    if sandbox is not None:
        from vfrl.sandbox import MODE_ENV

        os.environ[MODE_ENV] = sandbox
    env = load_environment(env_id, **env_args)
    if renderer is None and not workers:
        return env
    from vfrl.envs.verifiers_v1 import V1Environment

    if not isinstance(env, V1Environment):
        raise EnvironmentLoadError(v1_only(env_id, renderer, workers))
    env.use_workers(workers)
    if renderer is None:
        return env
    try:
        env.use_renderer(renderer)
    except V1EnvironmentError as e:
        raise EnvironmentLoadError(str(e)) from None
    return env


def checked(env, what: str) -> EnvironmentProtocol:
    """`env` when it is what the trainer and vf-eval call (env_protocol.py); else one line: `what` returned it."""
    if lacks := missing(env):
        raise EnvironmentLoadError(f"{what} returned {type(env).__name__}, not a vfrl Environment (it has no "
                                   f"{', '.join(lacks)})")
    return env


def trainable(env: Environment) -> Environment:
    """`env`, when it gives rewards to train on: one that leaves its rollouts unscored (verifiers'
    `score_rollouts=False`, for generating completions with vf-eval) is refused in one line."""
    checked(env, "the Python API's env")
    if not env.score_rollouts:
        raise EnvironmentLoadError(f"environment '{env.env_id}' does not score its rollouts (it sets "
                                   "score_rollouts=False): there is no reward to train on; vf-eval runs it to "
                                   "generate completions")
    return env
