"""POST /vfrl/reload_weights {"directory": ..., "version": N}: a full-weight push in one call.

A push of full weights (use_lora = false, lora_sync = "merged") asks four things of vLLM: stop admitting
requests and let the running ones finish on the old weights, reload the weights in place (the worker
extension's `vfrl_reload_weights`), drop the prefix cache the old weights computed (when vLLM keeps one), admit
requests again.
As four HTTP calls (/pause?mode=wait, /collective_rpc, /reset_prefix_cache, /resume) they are four round trips
and a fixed 20 ms sleep at the end of vLLM's `pause_generation`, there so that the drained requests' last
outputs reach their callers before the pause call returns (its comment: not needed for correctness). This
route makes the same engine calls from inside the API server, without the sleep: the drained requests were
computed on the old weights all the same.

vf-vllm adds it as an ASGI middleware (vLLM's `--middleware`, inside the API-key check) when it serves full
weights. A reload that fails leaves generation paused: the served model may be half loaded, and
the trainer stops on the error.
"""

from __future__ import annotations

from vfrl.inference.endpoints import route_path

RELOAD_PATH = "/vfrl/reload_weights"
STAGE_PATH = "/vfrl/stage_weights"  # the same body: load it beside generation, for the reload to swap in


async def reload_weights(engine, directory: str, version: int) -> tuple[int, dict]:
    """(HTTP status, JSON body) of a push of the weights in `directory` as policy `version`."""
    core = getattr(engine, "engine_core", None)
    if core is not None and hasattr(core, "pause_scheduler_async"):
        await core.pause_scheduler_async(mode="wait", clear_cache=False)  # pause_generation without its sleep
    else:
        await engine.pause_generation(mode="wait", clear_cache=False)
    workers = await engine.collective_rpc("vfrl_reload_weights", args=(directory, str(version)))
    if not workers or any((w or {}).get("version") != version for w in workers):
        return 500, {"error": f"vLLM workers did not all load version {version}: {workers}; generation stays paused"}
    if caches_prefixes(engine) and not await engine.reset_prefix_cache():
        return 500, {"error": "vLLM could not reset its prefix cache after the weight reload; generation stays paused"}
    await engine.resume_generation()
    return 200, {"results": workers}


async def stage_weights(engine, directory: str, version: int) -> tuple[int, dict]:
    """(HTTP status, JSON body) of a request to load `directory` as policy `version` while vLLM goes on sampling
    (the worker extension's `vfrl_stage_weights`, staged_weights.py); no pause. Each worker answers whether it
    staged; its reload of the same directory and version then swaps the weights in."""
    return 200, {"results": await engine.collective_rpc("vfrl_stage_weights", args=(directory, str(version)))}


def caches_prefixes(engine) -> bool:
    """Whether vLLM keeps a prefix cache, whose blocks the old weights computed. Without one (a server started with
    `enable_prefix_caching = false`) there is nothing to drop, and the reset, an engine round trip that walks every
    KV block (thousands with the CPU build's default cache), is left out."""
    cache = getattr(getattr(engine, "vllm_config", None), "cache_config", None)
    return getattr(cache, "enable_prefix_caching", True) is not False


class ReloadRoute:
    """Pure ASGI: answers POST RELOAD_PATH and STAGE_PATH, passes everything else on."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        path = route_path(scope) if scope["type"] == "http" else None
        if path not in ROUTES:
            return await self.app(scope, receive, send)
        from starlette.requests import Request
        from starlette.responses import JSONResponse

        if scope.get("method") != "POST":
            return await JSONResponse({"error": f"{path} takes POST"}, 405)(scope, receive, send)
        try:
            body = await Request(scope, receive).json()
            directory, version = str(body["directory"]), int(body["version"])
        except (ValueError, KeyError, TypeError) as err:
            answer = JSONResponse({"error": f'expected {{"directory": "...", "version": N}}: {err!r}'}, 400)
            return await answer(scope, receive, send)
        try:
            status, content = await ROUTES[path](scope["app"].state.engine_client, directory, version)
        except Exception as err:  # the worker's own error (e.g. no *.safetensors files): in the server log, whole
            from vllm.logger import init_logger

            init_logger(__name__).exception("vfrl: %s of %s as version %d failed", path, directory, version)
            status, content = 500, {"error": f"{type(err).__name__}: {err}"
                                    + ("; generation stays paused" if path == RELOAD_PATH else "")}
        await JSONResponse(content, status)(scope, receive, send)


ROUTES = {RELOAD_PATH: reload_weights, STAGE_PATH: stage_weights}
RELOAD_MIDDLEWARE = f"{__name__}.{ReloadRoute.__name__}"
