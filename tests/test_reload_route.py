"""vf-vllm's POST /vfrl/reload_weights and /vfrl/stage_weights (vfrl.inference.reload_route) against a stand-in
engine: the order of their engine calls, and what they answer when the body or the reload is wrong. The real route, on a
real vf-vllm, runs in every full-weight and merged-LoRA test (test_full_ft_parity.py)."""

from types import SimpleNamespace

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from vfrl.inference.reload_route import RELOAD_PATH, STAGE_PATH, ReloadRoute


class Core:
    def __init__(self, calls):
        self.calls = calls

    async def pause_scheduler_async(self, mode, clear_cache):
        self.calls.append(("pause", mode, clear_cache))


class Engine:
    """AsyncLLM's calls the route makes; `loads` is what the workers return, or an exception they raise."""

    def __init__(self, loads, prefix_reset=True, prefix_caching=None):
        self.calls, self.loads, self.prefix_reset = [], loads, prefix_reset
        self.engine_core = Core(self.calls)
        if prefix_caching is not None:  # AsyncLLM's vllm_config.cache_config, as far as the route reads it
            self.vllm_config = SimpleNamespace(cache_config=SimpleNamespace(enable_prefix_caching=prefix_caching))

    async def collective_rpc(self, method, args=()):
        self.calls.append(("rpc", method, args))
        if isinstance(self.loads, Exception):
            raise self.loads
        return self.loads

    async def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))
        return self.prefix_reset

    async def resume_generation(self):
        self.calls.append(("resume",))


def client(engine) -> TestClient:
    app = Starlette(routes=[Route("/{any:path}", lambda r: PlainTextResponse("app"), methods=["GET", "POST"])])
    app.state.engine_client = engine
    app.add_middleware(ReloadRoute)
    return TestClient(app)


def test_a_push_pauses_reloads_resets_the_prefix_cache_and_resumes_in_that_order():
    engine = Engine([{"version": 3, "load_s": 0.01}])
    r = client(engine).post(RELOAD_PATH, json={"directory": "/w/step-3", "version": 3})
    assert r.status_code == 200 and r.json() == {"results": [{"version": 3, "load_s": 0.01}]}
    assert engine.calls == [("pause", "wait", False), ("rpc", "vfrl_reload_weights", ("/w/step-3", "3")),
                            ("reset_prefix_cache",), ("resume",)]


@pytest.mark.parametrize("prefix_caching, resets", [(True, True), (None, True), (False, False)])
def test_the_prefix_cache_is_reset_unless_vllm_keeps_none(prefix_caching, resets):
    engine = Engine([{"version": 3}], prefix_caching=prefix_caching)
    assert client(engine).post(RELOAD_PATH, json={"directory": "/w/step-3", "version": 3}).status_code == 200
    assert (("reset_prefix_cache",) in engine.calls) is resets and engine.calls[-1] == ("resume",)


@pytest.mark.parametrize("loads, prefix_reset, says", [
    ([{"version": 2}], True, "did not all load version 3"),
    ([], True, "did not all load version 3"),
    (FileNotFoundError("no *.safetensors files in /w/step-3"), True, "FileNotFoundError: no *.safetensors"),
    ([{"version": 3}], False, "could not reset its prefix cache"),
])
def test_a_failed_reload_answers_500_and_leaves_generation_paused(loads, prefix_reset, says):
    engine = Engine(loads, prefix_reset)
    r = client(engine).post(RELOAD_PATH, json={"directory": "/w/step-3", "version": 3})
    assert r.status_code == 500 and says in r.json()["error"] and "stays paused" in r.json()["error"]
    assert ("resume",) not in engine.calls  # the served model may be half loaded: nothing may sample it


@pytest.mark.parametrize("body", [{}, {"directory": "/w"}, {"directory": "/w", "version": "three"}, [1]])
def test_a_body_it_cannot_read_is_a_400_and_touches_nothing(body):
    engine = Engine([{"version": 3}])
    r = client(engine).post(RELOAD_PATH, json=body)
    assert r.status_code == 400 and "directory" in r.json()["error"]
    assert engine.calls == []


def test_other_paths_and_methods_are_not_its_own():
    engine = Engine([{"version": 3}])
    c = client(engine)
    assert c.post("/pause").text == "app" and c.get("/v1/models").text == "app"
    assert c.get(RELOAD_PATH).status_code == 405 and c.get(STAGE_PATH).status_code == 405 and engine.calls == []


def test_a_stage_asks_the_workers_to_load_beside_generation_without_pausing_it():
    engine = Engine([{"staged": True}])
    r = client(engine).post(STAGE_PATH, json={"directory": "/w/step-3", "version": 3})
    assert r.status_code == 200 and r.json() == {"results": [{"staged": True}]}
    assert engine.calls == [("rpc", "vfrl_stage_weights", ("/w/step-3", "3"))]  # no pause, no resume


def test_a_failed_stage_answers_500_and_pauses_nothing():
    engine = Engine(FileNotFoundError("no *.safetensors files in /w/step-3"))
    r = client(engine).post(STAGE_PATH, json={"directory": "/w/step-3", "version": 3})
    assert r.status_code == 500 and "FileNotFoundError" in r.json()["error"] and "paused" not in r.json()["error"]
    assert [c[0] for c in engine.calls] == ["rpc"]
