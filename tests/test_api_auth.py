"""The per-run API key guards every path of vf-vllm's server but /health (LoRA mode here; full-weight
mode in test_full_ft_parity.py), and a server started without a key stays open as vLLM leaves it."""

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient, WebSocketDenialResponse

from conftest import assert_only_health_is_open
from vfrl.inference.server import AUTH_MIDDLEWARE, RequireApiKey, server_argv


@pytest.mark.e2e
def test_lora_server_answers_401_on_every_route_but_health(shared_vllm_server):
    srv = shared_vllm_server
    checked = assert_only_health_is_open(srv.base_url, srv.config, srv.log, srv.api_key)
    # the ones issue 9 found open, and a LoRA-mode route (the app was built with vf-vllm's VLLM_* switches)
    assert {"/tokenize", "/scale_elastic_ep", "/metrics", "/docs", "/openapi.json", "/ping", "/version",
            "/v1/load_lora_adapter"} <= checked


def test_both_modes_install_the_middleware_and_inference_args_cannot_drop_it():
    for rank in (8, None):  # LoRA, full weights
        argv = server_argv("m", "127.0.0.1", 8000, rank, {"middleware": "my.Middleware"})
        assert argv[-2:] == ["--middleware", AUTH_MIDDLEWARE] and "my.Middleware" in argv


def app_behind_the_middleware(monkeypatch, key: str | None) -> TestClient:
    async def ws(websocket):
        await websocket.accept()
        await websocket.send_text("in")
        await websocket.close()

    if key:
        monkeypatch.setenv("VLLM_API_KEY", key)
    else:
        monkeypatch.delenv("VLLM_API_KEY", raising=False)
    app = Starlette(routes=[Route("/{any:path}", lambda r: PlainTextResponse("ran"),
                                  methods=["GET", "POST", "OPTIONS"]),
                            WebSocketRoute("/ws", ws)])
    app.add_middleware(RequireApiKey)
    return TestClient(app)


def test_without_a_key_every_path_is_served_as_before(monkeypatch):
    client = app_behind_the_middleware(monkeypatch, None)
    assert client.post("/tokenize").text == "ran" and client.get("/metrics").text == "ran"
    with client.websocket_connect("/ws") as ws:
        assert ws.receive_text() == "in"


def test_with_a_key_only_health_and_cors_preflights_pass_without_it(monkeypatch):
    client = app_behind_the_middleware(monkeypatch, "k")
    assert client.get("/health").text == "ran"
    assert client.post("/tokenize").status_code == 401
    assert client.post("/tokenize", headers={"Authorization": "Bearer k2"}).status_code == 401
    assert client.post("/tokenize", headers={"Authorization": "Bearer k"}).text == "ran"
    assert client.options("/tokenize").status_code == 401  # not a preflight
    preflight = {"Origin": "http://x", "Access-Control-Request-Method": "POST"}
    assert client.options("/tokenize", headers=preflight).text == "ran"  # vLLM's CORS middleware answers these
    with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect("/ws"):
        pass
    assert denied.value.status_code == 401
    with client.websocket_connect("/ws", headers={"Authorization": "Bearer k"}) as ws:
        assert ws.receive_text() == "in"


def test_health_stays_open_under_a_root_path(monkeypatch):
    client = TestClient(app_behind_the_middleware(monkeypatch, "k").app, root_path="/prefix")  # vLLM's --root-path
    assert client.get("/prefix/health").text == "ran"
    assert client.get("/prefix/tokenize").status_code == 401
