"""vfrl: RL post-training for language models (vLLM inference + peft/accelerate trainer, one TOML)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from vfrl.env_names import ENVIRONMENT_NAMES  # plain lists: importing them costs nothing
from vfrl.errors import __all__ as ERROR_NAMES

if TYPE_CHECKING:
    from vfrl.config import RLConfig, load_config
    from vfrl.envs import (
        EnvGroup, Environment, JudgeRubric, MathRubric, MultiTurnEnv, Parser, Rollout, Rubric, RubricGroup,
        MaybeThinkParser, SingleTurnEnv, StatefulToolEnv, ThinkParser, ToolEnv, XMLParser, extract_boxed_answer,
        load_environment,
    )

__version__ = "0.1.0"
# the types verifiers exports at the top (`vf.Info`, `vf.ClientConfig`); its errors (`vf.SandboxError`) are ERROR_NAMES
TYPE_NAMES = ["Info", "SamplingArgs", "ClientConfig"]
__all__ = [
    "RLConfig", "load_config", *ENVIRONMENT_NAMES, *ERROR_NAMES, *TYPE_NAMES,
    # training from a script, with the names of verifiers' GRPOTrainer guide (docs/python_api.md)
    "GRPOTrainer", "grpo_defaults", "lora_defaults", "get_model_and_tokenizer",
]
_HOME = {"RLConfig": "vfrl.config", "load_config": "vfrl.config", "GRPOTrainer": "vfrl.grpo",
         "grpo_defaults": "vfrl.grpo", "lora_defaults": "vfrl.grpo", "get_model_and_tokenizer": "vfrl.grpo",
         **dict.fromkeys(ERROR_NAMES, "vfrl.errors"), **dict.fromkeys(TYPE_NAMES, "vfrl.types")}
# verifiers' module paths, reachable as attributes too (`vf.utils.data_utils.load_example_dataset`)
_SUBMODULES = ("types", "utils", "rubrics", "envs")


def __getattr__(name: str):
    """Exports load on first use: `vf-rl` imports vfrl.config and must not pay for openai (environments)."""
    if name in _SUBMODULES:
        module = import_module(f"vfrl.{name}")
        if name == "utils":
            import_module("vfrl.utils.data_utils")
        return module
    if name not in __all__:
        raise AttributeError(f"module 'vfrl' has no attribute {name!r}")
    value = getattr(import_module(_HOME.get(name, "vfrl.envs")), name)
    globals()[name] = value
    return value
