"""verifiers' `verifiers.envs.integrations` module paths."""
