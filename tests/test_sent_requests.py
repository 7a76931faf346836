"""sent_requests.py: the trainer's client counts its requests as they go out, and the loop can wait for the next n."""

import asyncio

from fake_vllm_server import FakeVLLM
from openai import AsyncOpenAI

from vfrl.rollouts.sent_requests import SentRequests


def test_a_wait_for_n_requests_ends_when_the_nth_goes_out_through_openai_s_client():
    async def main(base_url: str) -> list[int]:
        sent = SentRequests()
        client = AsyncOpenAI(base_url=base_url, api_key="k", http_client=sent.client(), max_retries=0)
        two = sent.reach(2)
        seen = []
        for _ in range(3):
            await client.models.list()
            seen.append((sent.count, two.done()))
        later = sent.reach(1)
        assert not later.done()
        await client.models.list()
        assert later.done()
        return seen

    with FakeVLLM() as server:
        seen = asyncio.run(main(server.base_url))
        assert [path for _, path, _ in server.requests] == ["/v1/models"] * 4
    assert seen == [(1, False), (2, True), (3, True)]


def test_a_wait_given_up_on_is_dropped_at_the_next_request():
    async def main() -> SentRequests:
        sent = SentRequests()
        sent.reach(5).cancel()
        await sent.hook(None)
        return sent

    sent = asyncio.run(main())
    assert sent.count == 1 and sent._waiting == []


def test_the_loop_s_wait_ends_when_the_requests_are_out_or_the_batch_ends_or_at_its_limit():
    """The trainer's hold before a training step (RLTrainer._train): the requests going out end it, not the batch."""
    async def case(before: int, requests: int, then: float, limit: float) -> tuple[float, bool, bool]:
        sent, loop = SentRequests(), asyncio.get_running_loop()
        for _ in range(before):  # the batch before, its requests through this client or not
            await sent.hook(None)

        async def batch():
            for _ in range(requests):
                await asyncio.sleep(0.01)
                await sent.hook(None)
            await asyncio.sleep(then)

        requests_out = sent.reach(3)
        task = asyncio.create_task(batch())
        t0 = loop.time()
        await sent.wait(requests_out, task, limit)
        took, done = loop.time() - t0, task.done()
        task.cancel()
        return took, done, requests_out.done()

    out = {name: asyncio.run(case(*args)) for name, args in {
        "requests out": (3, 3, 30, 30), "batch ended": (3, 1, 0, 30), "limit": (3, 1, 30, 0.05),
        "no limit": (3, 3, 30, 0), "requests not through this client": (0, 0, 30, 30)}.items()}
    assert 0.02 < out["requests out"][0] < 10 and not out["requests out"][1]  # long before the 30 s batch ends
    assert out["batch ended"][0] < 10 and out["batch ended"][1]
    assert 0.05 <= out["limit"][0] < 10 and not out["limit"][1]
    assert out["no limit"][0] < 0.005  # a step training bounded: no wait at all
    assert out["requests not through this client"][0] < 0.005  # verifiers v1's own client: nothing to wait for
    assert all(requests_out_done for _, _, requests_out_done in out.values())  # each dropped after
