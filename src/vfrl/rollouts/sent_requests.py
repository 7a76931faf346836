"""The requests the trainer's vLLM client has sent, counted as they go out, and a wait for the next n of them.

Why the loop waits for it: when generation bounds the step (the loop waited for the last batch), the next
batch's requests and the training step start at the same moment, in one process. The training step's Python
holds the GIL most of the time the event loop would send, so the requests would go out late and vLLM would
begin the batch late. Training that starts once they are out is later by what it does not need (the step
waits for generation anyway), and the batch earlier, so the step is shorter (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio

import httpx


class SentRequests:
    def __init__(self) -> None:
        self.count = 0
        self._waiting: list[tuple[int, asyncio.Future]] = []
        self._at_last_reach = 0
        # whether the last batch's requests went through this client: an environment with a client of its own
        # (verifiers v1's) sends none here, and a wait for them would only ever end at its limit
        self.sees_batches = True

    async def hook(self, request: httpx.Request) -> None:
        """An httpx "request" event hook: called as each request (a retry too) goes out."""
        self.count += 1
        for target, future in self._waiting:
            if self.count >= target and not future.done():
                future.set_result(None)
        self._waiting = [(t, f) for t, f in self._waiting if not f.done()]

    def reach(self, n: int) -> asyncio.Future:
        """Done once `n` more requests than now have gone out. Called once a batch, before the next batch starts:
        fewer than `n` since the last call means the batch in between sent its requests some other way."""
        self.sees_batches = self.count - self._at_last_reach >= n
        self._at_last_reach = self.count
        future = asyncio.get_running_loop().create_future()
        self._waiting.append((self.count + n, future))
        return future

    async def wait(self, requests_out: asyncio.Future, batch: asyncio.Future, limit: float) -> None:
        """Until `requests_out` (a `reach`) is done, or `batch` (the batch that sends them: it failed, or sent
        fewer), or `limit` seconds have passed; then `requests_out` is dropped. No wait where the last batch's
        requests did not go through this client."""
        if limit > 0 and self.sees_batches:
            await asyncio.wait([requests_out, batch], timeout=limit, return_when=asyncio.FIRST_COMPLETED)
        requests_out.cancel()

    def client(self) -> httpx.AsyncClient:
        """The HTTP client for openai's AsyncOpenAI: openai's defaults, this count's hook."""
        from openai import DefaultAsyncHttpxClient

        return DefaultAsyncHttpxClient(event_hooks={"request": [self.hook]})
