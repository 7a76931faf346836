"""vfrl: RL post-training for language models (vLLM inference + peft/accelerate trainer, one TOML)."""

from vfrl.config import RLConfig, load_config
from vfrl.environments import (
    EnvGroup, Environment, JudgeRubric, MathRubric, MultiTurnEnv, Parser, Rollout, Rubric, RubricGroup,
    SingleTurnEnv, StatefulToolEnv, ThinkParser, ToolEnv, XMLParser, extract_boxed_answer, load_environment,
)

__version__ = "0.1.0"
__all__ = [
    "RLConfig", "load_config",
    "Environment", "Rollout", "SingleTurnEnv", "MultiTurnEnv", "ToolEnv", "StatefulToolEnv", "EnvGroup",
    "Rubric", "RubricGroup", "JudgeRubric", "MathRubric", "extract_boxed_answer",
    "Parser", "XMLParser", "ThinkParser", "load_environment",
]
