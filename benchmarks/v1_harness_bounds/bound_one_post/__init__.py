"""A verifiers 0.4 harness whose chat loop is one non-streamed POST to the rollout's interception endpoint
(benchmarks/v1_harness_bounds/README.md): for one-turn tasks without tools only."""

import asyncio
import json
import weakref

import aiohttp
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.harnesses.null.harness import NullHarness
from verifiers.v1.runtimes import ProgramResult

__all__ = ["OnePostHarness"]

SESSIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its aiohttp session
HOLDERS: set[asyncio.Task] = set()  # the tasks that close them (the loop keeps only weak references to tasks)


def session() -> aiohttp.ClientSession:
    """This event loop's session, closed when the loop's tasks are cancelled at its end (asyncio.run's)."""
    loop = asyncio.get_running_loop()
    if loop not in SESSIONS:
        SESSIONS[loop] = opened = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

        async def close_at_the_loops_end() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                await opened.close()

        holder = loop.create_task(close_at_the_loops_end())
        HOLDERS.add(holder)
        holder.add_done_callback(HOLDERS.discard)
    return SESSIONS[loop]


class OnePostHarness(NullHarness):
    async def setup(self, runtime) -> None:
        pass  # no program to prepare

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, **kwargs) -> ProgramResult:
        assert not mcp_urls, "bound_one_post measures tool-less tasks"
        system_prompt, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages += [message_to_wire(m) for m in prompt]
        async with session().post(f"{endpoint.rstrip('/')}/chat/completions",
                                  json={"model": ctx.model, "messages": messages},
                                  headers={"Authorization": f"Bearer {secret}"}) as response:
            body = await response.json()
        if response.status != 200:
            return ProgramResult(exit_code=1, stdout="", stderr=json.dumps(body))
        return ProgramResult(exit_code=0, stdout="", stderr="")
