"""verifiers' `verifiers.rubrics.experimental` module paths, for packages that import from there."""
