"""vLLM's `/inference/v1/generate` answers in the shape verifiers 0.4's client reads.

vLLM 0.32 (CPU and CUDA builds) writes each sampled token's logprob entry as `{"token_id": 31,
"logprob": ...}`; verifiers 0.4's client (the `renderers` package, 0.1.12) requires `"token":
"token_id:31"` in every entry and refuses the response otherwise ("MalformedGenerateResponseError:
Engine response choice.logprobs.content[0].token must be 'token_id:31'"). vf-vllm adds this ASGI
middleware whenever it serves the scale-out routes: it adds the `token` placeholder next to each
`token_id` (top logprobs too) in the route's JSON responses and leaves everything else as it is.
"""

from __future__ import annotations

import json

from vfrl.inference.endpoints import route_path

GENERATE_PATH = "/inference/v1/generate"


def with_placeholders(payload: dict) -> dict:
    """Add `token: "token_id:N"` to every logprob entry that has only `token_id` (in place; returned)."""
    for choice in payload.get("choices") or []:
        for entry in ((choice.get("logprobs") or {}).get("content") or []):
            for e in [entry, *(entry.get("top_logprobs") or [])]:
                if isinstance(e, dict) and "token_id" in e and "token" not in e:
                    e["token"] = f"token_id:{e['token_id']}"
    return payload


class TokenIdPlaceholders:
    """Pure ASGI: rewrites the non-streaming JSON responses of `/inference/v1/generate` only."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or route_path(scope) != GENERATE_PATH:
            return await self.app(scope, receive, send)
        start: dict | None = None
        body: list[bytes] = []

        async def buffered(message):
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                if not headers.get(b"content-type", b"").startswith(b"application/json"):
                    start = None  # a stream or an error page: as it is
                    return await send(message)
                start = message
                return None
            if message["type"] != "http.response.body" or start is None:
                return await send(message)
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return None
            raw = b"".join(body)
            try:
                raw = json.dumps(with_placeholders(json.loads(raw))).encode()
            except (ValueError, AttributeError, TypeError):
                pass  # not the shape we know: send it unchanged
            headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
            await send({**start, "headers": headers + [(b"content-length", str(len(raw)).encode())]})
            await send({"type": "http.response.body", "body": raw})

        await self.app(scope, receive, buffered)


COMPAT_MIDDLEWARE = f"{__name__}.{TokenIdPlaceholders.__name__}"
