"""verifiers' `verifiers.utils` module paths, for packages that import from there."""
