from vfrl.environments.env_group import EnvGroup
from vfrl.environments.environment import Environment, Rollout
from vfrl.environments.judge_rubric import JudgeRubric
from vfrl.environments.loader import load_environment
from vfrl.environments.math_rubric import MathRubric, extract_boxed_answer
from vfrl.environments.multiturn import MultiTurnEnv, SingleTurnEnv
from vfrl.environments.parsers import Parser, ThinkParser, XMLParser
from vfrl.environments.rubric import Rubric, RubricGroup
from vfrl.environments.tools import StatefulToolEnv, ToolEnv

__all__ = [
    "Environment", "Rollout", "SingleTurnEnv", "MultiTurnEnv", "ToolEnv", "StatefulToolEnv", "EnvGroup",
    "Rubric", "RubricGroup", "JudgeRubric", "MathRubric", "extract_boxed_answer",
    "Parser", "XMLParser", "ThinkParser", "load_environment",
]
