"""verifiers' `verifiers.envs` module paths, for packages that import from there."""
