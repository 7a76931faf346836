"""A verifiers 0.4 harness whose rollout ends without a model call (benchmarks/v1_harness_bounds/README.md)."""

from verifiers.v1.harnesses.null.harness import NullHarness
from verifiers.v1.runtimes import ProgramResult

__all__ = ["NoModelCallHarness"]


class NoModelCallHarness(NullHarness):
    async def setup(self, runtime) -> None:
        pass  # no program to prepare

    async def launch(self, ctx, trace, runtime, *args, **kwargs) -> ProgramResult:
        return ProgramResult(exit_code=0, stdout="", stderr="")
