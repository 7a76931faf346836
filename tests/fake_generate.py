"""A fake of vLLM's token-in/token-out route (`POST /inference/v1/generate`, served with
`--enable-scale-out`) and `/v1/models`, for testing verifiers 0.4 environments in-process.

It answers the way vLLM 0.32 does in its default `output_mode="tokens"` (`choices[0].token_ids`,
one `{"token_id", "logprob"}` per sampled token, `finish_reason`) as vf-vllm passes it on: with the
`token: "token_id:<id>"` placeholder verifiers' client requires (inference/generate_compat.py). The reply is
the user's last message reversed, or what `reply` says for the decoded prompt (encoded with the served model's
tokenizer), followed by the first stop token (`refuse=True`: HTTP 400 instead), each sampled token's logprob
`-1 - position / 1000` so a test can tell where every logprob landed; a request with `n` gets n such choices.
Every request body and Authorization header is kept in `requests`.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from vfrl.inference.generate_compat import with_placeholders


class FakeGenerate:
    def __init__(self, model_dir: str, adapter: str = "policy-0", refuse: bool = False,
                 reply: Callable[[str], str] | None = None):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model_dir, self.adapter, self.refuse = model_dir, adapter, refuse
        self.reply = reply or (lambda text: text.split("user\n")[-1].split("<|im_end|>")[0][::-1])
        self.requests: list[dict] = []
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"auth": request.headers.get("Authorization"), "body": body})
        if self.refuse:  # as vLLM refuses a request it cannot serve
            return web.json_response({"error": {"message": "refused by the fake server"}}, status=400)
        prompt = body["token_ids"]
        stop = body["sampling_params"].get("stop_token_ids") or [self.tok.eos_token_id]
        reply = self.reply(self.tok.decode(prompt))
        ids = self.tok.encode(reply, add_special_tokens=False)[: body["sampling_params"].get("max_tokens", 64)]
        finish = "length" if len(ids) == body["sampling_params"].get("max_tokens") else "stop"
        if finish == "stop":
            ids = ids + stop[:1]
        # vLLM 0.32's shape (`token_id`, no `token`), then vf-vllm's rewrite of it (inference/generate_compat.py)
        content = [{"token_id": t, "logprob": -1.0 - (len(prompt) + i) / 1000} for i, t in enumerate(ids)]
        return web.json_response(with_placeholders({"request_id": f"r{len(self.requests)}", "choices": [
            {"index": i, "token_ids": ids, "finish_reason": finish, "logprobs": {"content": content}}
            for i in range(body["sampling_params"].get("n", 1))]}))

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model_dir, "object": "model", "root": self.model_dir, "parent": None, "max_model_len": 1024},
            {"id": self.adapter, "object": "model", "root": "/adapters/x", "parent": self.model_dir,
             "max_model_len": 1024}]})

    async def __aenter__(self) -> "FakeGenerate":
        app = web.Application()
        app.router.add_post("/inference/v1/generate", self.generate)
        app.router.add_get("/v1/models", self.models)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()
