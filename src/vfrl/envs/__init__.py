"""The environment library: what an environment is (environment.py), the classic kinds (multiturn.py, tools.py,
env_group.py), scoring (rubric.py, parsers.py), loading a package by id (loader.py), sampling through vLLM
(sampling.py), and the vf-init / vf-install / vf-eval commands (cli/). The folder is named as verifiers names
its own (`verifiers.envs`), so `vf.envs.integrations` and friends resolve the same way."""

import sys

from vfrl.env_names import ENVIRONMENT_NAMES
from vfrl.envs.classic import (
    BOXED_SYSTEM_PROMPT, THINK_BOXED_SYSTEM_PROMPT, BrowserEnv, ReasoningGymEnv, extract_hash_answer,
    load_example_dataset,
)
from vfrl.envs.env_group import EnvGroup
from vfrl.envs.environment import DatasetBuildError, Environment, Rollout, teardown
from vfrl.envs.judge_rubric import JudgeRubric
from vfrl.envs.loader import load_environment
from vfrl.envs.math_rubric import MathRubric, extract_boxed_answer
from vfrl.envs.messages import (
    AssistantMessage, Message, Messages, State, SystemMessage, ToolCall, ToolMessage, UserMessage,
)
from vfrl.envs.multiturn import MultiTurnEnv, SingleTurnEnv, cleanup, stop
from vfrl.envs.parsers import MaybeThinkParser, Parser, ThinkParser, XMLParser
from vfrl.envs.rubric import Rubric, RubricGroup
from vfrl.envs.sandbox_env import PythonEnv, SandboxEnv
from vfrl.envs.textarena_env import TextArenaEnv
from vfrl.envs.tool_defs import Tool
from vfrl.envs.tools import StatefulToolEnv, ToolEnv

__all__ = list(ENVIRONMENT_NAMES)  # env_names.py lists them

# verifiers' classic module paths of these classes (`from verifiers.envs.multiturn_env import MultiTurnEnv`),
# as names of the modules that hold them here: importing one finds it in sys.modules once this package is in
CLASSIC_MODULES = {"multiturn_env": "multiturn", "singleturn_env": "multiturn", "tool_env": "tools",
                   "stateful_tool_env": "tools", "sandbox_env": "sandbox_env", "python_env": "sandbox_env"}
for _path, _module in CLASSIC_MODULES.items():
    globals()[_path] = sys.modules[f"vfrl.envs.{_path}"] = sys.modules[f"vfrl.envs.{_module}"]
