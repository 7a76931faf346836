"""An HTTP stand-in for a vLLM server vf-rl did not start, for the remote-server checks (inference/remote.py).

It answers the routes those checks and the adapter sync use the way vLLM 0.32 answers them, each one
switchable to what a server started without the matching flag answers: `/health`, `/v1/models` (base
model, then loaded adapters with their `parent`), `/v1/load_lora_adapter` and `/v1/unload_lora_adapter`
(VLLM_ALLOW_RUNTIME_LORA_UPDATING), `/metrics` (`vllm:lora_requests_info` with --enable-lora),
`/collective_rpc` (VLLM_SERVER_DEV_MODE + vfrl's worker extension), `/vfrl/reload_weights` (vf-vllm's
route for a full-weight push), `/inference/v1/generate`
(--enable-scale-out). With `key`, every path but /health wants `Authorization: Bearer <key>`.
Every request is kept in `requests` as (method, path, JSON body).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeVLLM:
    def __init__(self, model: str = "m", key: str | None = None, lora_route: bool = True, lora_enabled: bool = True,
                 reload: str = "none", scale_out: bool = False, adapters: tuple[str, ...] = (),
                 readable: bool = True):
        """reload: "ok" (vf-vllm with use_lora = false), "no-route" (vLLM started by hand with dev mode and
        vfrl's worker extension, without vf-vllm's reload route), "no-extension" (dev mode without vfrl's
        worker extension: vLLM's 500), "none" (no dev mode: 404). readable: False answers an adapter load as vLLM
        does when the path does not exist on its machine."""
        self.model, self.key, self.lora_route, self.lora_enabled = model, key, lora_route, lora_enabled
        self.reload, self.scale_out, self.readable = reload, scale_out, readable
        self.adapters: dict[str, str] = {name: f"/elsewhere/{name}" for name in adapters}
        self.requests: list[tuple[str, str, dict | None]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "FakeVLLM":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, method: str, path: str, body: dict | None, auth: str | None) -> tuple[int, object]:
        if path == "/health":
            return 200, ""
        if self.key is not None and auth != f"Bearer {self.key}":
            return 401, {"error": "Unauthorized"}
        if (method, path) == ("GET", "/v1/models"):
            cards = [{"id": self.model, "object": "model", "root": self.model, "parent": None}]
            cards += [{"id": n, "object": "model", "root": p, "parent": self.model} for n, p in self.adapters.items()]
            return 200, {"object": "list", "data": cards}
        if (method, path) == ("GET", "/metrics"):
            lora = ('# HELP vllm:lora_requests_info Running stats on lora requests.\n'
                    '# TYPE vllm:lora_requests_info gauge\n') if self.lora_enabled else ""
            return 200, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n" + lora
        if path == "/v1/load_lora_adapter" and self.lora_route:
            name, where = body.get("lora_name"), body.get("lora_path")
            if not name or not where:
                return 400, {"error": {"message": "Both 'lora_name' and 'lora_path' must be provided."}}
            if name in self.adapters:
                return 400, {"error": {"message": f"The lora adapter '{name}' has already been loaded."}}
            if not self.readable:
                return 404, {"error": {"message": f"Loading lora {name} failed: No adapter found for {where}"}}
            self.adapters[name] = where
            return 200, f"Success: LoRA adapter '{name}' added successfully."
        if path == "/v1/unload_lora_adapter" and self.lora_route:
            if self.adapters.pop(body.get("lora_name"), None) is None:
                return 404, {"error": {"message": "cannot be found"}}
            return 200, "Success"
        if path == "/collective_rpc" and self.reload != "none":
            if self.reload == "no-extension":
                return 500, {"error": {"message": "'Worker' object has no attribute 'vfrl_loaded_version'"}}
            return 200, {"results": [-1]}
        if path == "/vfrl/reload_weights" and self.reload == "ok":
            return 400, {"error": "expected {\"directory\": \"...\", \"version\": N}: KeyError('directory')"}
        if path == "/inference/v1/generate" and self.scale_out:
            return 400, {"error": {"message": "token_ids: field required"}}
        return 404, {"detail": "Not Found"}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.requests.append((method, self.path, body))
                status, payload = fake.answer(method, self.path, body, self.headers.get("Authorization"))
                data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(payload, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def log_message(self, *args):
                pass

        return Handler
