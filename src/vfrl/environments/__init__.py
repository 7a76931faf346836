from vfrl.environments.environment import Environment, Rollout, SingleTurnEnv
from vfrl.environments.loader import load_environment
from vfrl.environments.rubric import Rubric

__all__ = ["Environment", "Rollout", "SingleTurnEnv", "Rubric", "load_environment"]
