"""Two costs on every verifiers 0.4 rollout that are not verifiers' work, taken off vf-train's one Python thread,
and a lock of renderers' that holds across event loops.

A profile of a batch of rollouts of a one-turn taskset (benchmarks/verifiers_v1_overhead.py, docs/benchmarks.md)
shows them among the largest items, with nothing of verifiers' own behaviour behind them:

- **pydantic's default-factory check.** verifiers builds its trace graph with `model_construct`, and pydantic 2.14
  asks, for every field with a `default_factory`, on every call, whether the factory takes the validated data:
  `inspect.signature(factory)`, which for builtins such as `list` and `dict` parses a text signature and copies
  `sys.modules` each time (pydantic/pydantic#13376 fixed the same for private attributes only). The answer depends
  on the factory alone, so it is computed once per factory.
- **httpcore's connection pool.** verifiers' train client (one `AsyncOpenAI` for every rollout, posting token ids
  to vLLM) runs on httpx, whose pool walks every queued request against every connection, asking each socket
  for its peer name, whenever a request starts or ends: quadratic in the requests in flight. The train client gets
  openai's aiohttp-backed httpx client instead (`httpx-aiohttp`, the `openai[aiohttp]` extra), with verifiers' own
  timeout and limits: the same requests over another transport.

And renderers' lookup of the served model's length (once per model name: each pushed adapter is a new one) waits
on one module-level `asyncio.Lock`, which binds to the first event loop it is contended in: a later loop in the same
process (the Python API's second `train()` or `evaluate()`) then fails the model calls that meet it contended
(`RuntimeError: ... is bound to a different event loop`) until the lookup is cached. It gets a fresh lock per loop.

All are applied once per process, when the first verifiers 0.4 environment is built.
"""

from __future__ import annotations

import asyncio
import functools


@functools.cache  # once per process
def memoize_default_factory_check() -> None:
    """pydantic's `takes_validated_data_argument(factory)`, computed once per factory (hashable ones)."""
    from pydantic._internal import _fields

    check = _fields.takes_validated_data_argument
    answers: dict = {}

    def memoized(factory) -> bool:
        try:
            return answers[factory]
        except KeyError:
            answer = answers[factory] = check(factory)
            return answer
        except TypeError:  # an unhashable factory: asked every time, as pydantic does
            return check(factory)

    _fields.takes_validated_data_argument = memoized


@functools.cache
def aiohttp_train_client() -> None:
    """verifiers' clients get an httpx client on aiohttp (its timeout and limits kept); unchanged without the
    `httpx-aiohttp` package."""
    try:
        from httpx_aiohttp import HttpxAiohttpClient
    except ImportError:
        return
    import httpx
    from verifiers.v1.clients import base

    def build_async_httpx(config) -> httpx.AsyncClient:
        return HttpxAiohttpClient(timeout=httpx.Timeout(**config.timeout.model_dump()), limits=base.DEFAULT_LIMITS)

    base.build_async_httpx = build_async_httpx


@functools.cache
def model_length_lock_per_loop() -> None:
    """renderers' `_resolve_max_prompt_len` with its module's lock made anew whenever the event loop changes."""
    from renderers import client

    resolve, made_for = client._resolve_max_prompt_len, {}

    async def resolve_in_this_loop(openai_client, model: str):
        loop = asyncio.get_running_loop()
        if made_for.get("loop") is not loop:
            made_for["loop"], client._max_prompt_len_lock = loop, asyncio.Lock()
        return await resolve(openai_client, model)

    client._resolve_max_prompt_len = resolve_in_this_loop


def apply() -> None:
    memoize_default_factory_check()
    aiohttp_train_client()
    model_length_lock_per_loop()
