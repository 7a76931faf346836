"""vfrl: RL post-training for language models (vLLM inference + peft/accelerate trainer, one TOML)."""

from vfrl.config import RLConfig, load_config
from vfrl.environments import Environment, Rollout, Rubric, SingleTurnEnv, load_environment

__version__ = "0.1.0"
__all__ = ["RLConfig", "load_config", "Environment", "Rollout", "Rubric", "SingleTurnEnv", "load_environment"]
