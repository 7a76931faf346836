from vfrl.environments.classic import (
    BOXED_SYSTEM_PROMPT, THINK_BOXED_SYSTEM_PROMPT, BrowserEnv, PythonEnv, ReasoningGymEnv, SandboxEnv, TextArenaEnv,
    extract_hash_answer, load_example_dataset,
)
from vfrl.environments.env_group import EnvGroup
from vfrl.environments.environment import DatasetBuildError, Environment, Rollout
from vfrl.environments.judge_rubric import JudgeRubric
from vfrl.environments.loader import load_environment
from vfrl.environments.math_rubric import MathRubric, extract_boxed_answer
from vfrl.environments.messages import (
    AssistantMessage, Message, Messages, State, SystemMessage, ToolCall, ToolMessage, UserMessage,
)
from vfrl.environments.multiturn import MultiTurnEnv, SingleTurnEnv, stop
from vfrl.environments.parsers import Parser, ThinkParser, XMLParser
from vfrl.environments.rubric import Rubric, RubricGroup
from vfrl.environments.tools import StatefulToolEnv, ToolEnv

__all__ = [
    "Environment", "Rollout", "SingleTurnEnv", "MultiTurnEnv", "ToolEnv", "StatefulToolEnv", "EnvGroup",
    "Rubric", "RubricGroup", "JudgeRubric", "MathRubric", "extract_boxed_answer",
    "Parser", "XMLParser", "ThinkParser", "load_environment",
    # verifiers' classic API names (docs/environments.md, "Porting from verifiers")
    "stop", "State", "Messages", "Message", "SystemMessage", "UserMessage", "AssistantMessage", "ToolMessage",
    "ToolCall", "DatasetBuildError", "load_example_dataset", "extract_hash_answer", "BOXED_SYSTEM_PROMPT",
    "THINK_BOXED_SYSTEM_PROMPT", "ReasoningGymEnv", "TextArenaEnv", "PythonEnv", "SandboxEnv", "BrowserEnv",
]
