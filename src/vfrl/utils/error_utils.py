"""verifiers' `verifiers.utils.error_utils`: an error and the errors that caused it, as one value."""

from __future__ import annotations


def get_error_chain(error: BaseException | None, parent_type: type[BaseException] | None = None) -> list[BaseException]:
    """`error`, then its `__cause__`, then that one's, ...; with `parent_type`, up to the first that is not one."""
    chain = []
    while error is not None and (parent_type is None or isinstance(error, parent_type)):
        chain.append(error)
        error = error.__cause__
    return chain


class ErrorChain:
    """An error's causal chain: `SomeError in ErrorChain(e)` asks whether any error of the chain is one; two
    chains are equal when their errors are of the same types in the same order."""

    def __init__(self, error: BaseException, build_error_chain=get_error_chain):
        self.root_error = error
        self.chain = build_error_chain(error)

    def types(self) -> tuple[str, ...]:
        return tuple(type(e).__name__ for e in self.chain)

    def __contains__(self, error_type: type[BaseException]) -> bool:
        return any(isinstance(e, error_type) for e in self.chain)

    def __eq__(self, other: object) -> bool:
        return self.types() == other.types() if isinstance(other, ErrorChain) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.types())

    def __str__(self) -> str:
        return " -> ".join(self.types())

    def __repr__(self) -> str:
        return " -> ".join(repr(e) for e in self.chain)
