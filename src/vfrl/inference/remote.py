"""A vLLM server vfrl did not start (`inference.base_url`): what training needs of it, checked before training.

    trainer (this machine)  --HTTP-->  vLLM at inference.base_url (started by someone else, left running)
        writes <run_dir>/adapters/policy-N         reads the same path: shared storage (docs/scaling.md)

The trainer uses it as it uses its own server: the OpenAI routes, /health for the watch, and the weight
sync by path (`/v1/load_lora_adapter`, or `/collective_rpc` with vfrl's worker extension for full weights).
`server_problems` asks for each of those once, without changing anything on the server, and says what is
missing in one line each, so a run fails before its trainer loads a model rather than at its first push.
What it cannot see from outside: the server's --max-lora-rank (the first push fails with vLLM's own
message if the adapter's rank is above it) and whether it reads the run directory (the first push names
the path it could not find).

HTTP only (httpx), imported only for such a run: the launcher stays light.
"""

from __future__ import annotations

import os

from vfrl.config import RLConfig
from vfrl.inference.endpoints import server_root
from vfrl.inference.reload_route import RELOAD_PATH

RELOAD_EXTENSION = "vfrl.inference.worker_extension.WeightReloadExtension"


def api_key(cfg: RLConfig) -> str:
    """The key sent to the server: $inference.api_key_var, "EMPTY" (no key, as vLLM clients send) when unset."""
    return os.environ.get(cfg.inference.api_key_var) or "EMPTY"


def server_problems(cfg: RLConfig, timeout: float = 10.0) -> list[str]:
    """One line per thing the server at inference.base_url lacks for this run; [] when it has everything.

    It must answer GET /v1/models with the key, serve `model` under that name, and have the weight sync the
    run uses: runtime LoRA loading (use_lora) or vfrl's full-weight reload (use_lora = false, or
    lora_sync = "merged"); and for a verifiers 0.4 environment, the scale-out generate route."""
    import httpx

    inference, args = cfg.inference, cfg.args
    url, var = inference.base_url, inference.api_key_var
    where = f"the vLLM server at {url} (inference.base_url)"
    problems: list[str] = []
    with httpx.Client(base_url=server_root(url), timeout=timeout,
                      headers={"Authorization": f"Bearer {api_key(cfg)}"}) as http:
        try:
            r = http.get("/v1/models")
        except httpx.HTTPError as e:
            return [f"{where} does not answer ({type(e).__name__}: {e or 'no reply'}); start it (docs/scaling.md) "
                    f"or correct the URL"]
        if r.status_code in (401, 403):
            held = (f"${var} is not set" if not os.environ.get(var) else f"${var} does not hold its key")
            return [f"{where} refused the API key ({r.status_code}): {held}; export {var} with the key the server "
                    f"was started with (its --api-key or VLLM_API_KEY), or name another variable in "
                    f"inference.api_key_var"]
        try:
            cards = r.json()["data"] if r.status_code == 200 else None
        except (ValueError, KeyError, TypeError):
            cards = None
        if cards is None:
            return [f"{where} answered GET /v1/models with {r.status_code} {r.text[:200]!r}, not a model list; "
                    f"is it a vLLM OpenAI server?"]
        models = [c.get("id") for c in cards if not c.get("parent")]  # base models; LoRA adapters name a parent
        if cfg.model not in models:
            problems.append(f'{where} serves {", ".join(map(str, models)) or "no model"}, not model = "{cfg.model}": '
                            f"it must serve the model the trainer trains under that name (vf-vllm @ a config with "
                            f"the same model does; vllm serve: --served-model-name {cfg.model})")
        if cfg.serves_adapters:
            problems += _lora_problems(http, where, args.lora_rank)
        else:
            needs = "trainer.args.use_lora = false" if not args.use_lora else 'trainer.args.lora_sync = "merged"'
            problems += _reload_problems(http, where, needs)
        if _needs_scale_out(cfg) and http.post("/inference/v1/generate", json={}).status_code == 404:
            problems.append(f'{where} has no /inference/v1/generate, which env.id = "{cfg.env.id}" (a verifiers 0.4 '
                            f"package) samples through: start it with vf-vllm and inference.enable_scale_out = true")
    return problems


def _lora_problems(http, where: str, rank: int) -> list[str]:
    from vfrl.inference.lora_ranks import lora_rank_ceiling

    start = (f"start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora --max-lora-rank "
             f"{lora_rank_ceiling(rank)} (vf-vllm does both)")
    # empty names: vLLM refuses them (400) before touching the engine; without the route the answer is 404
    if http.post("/v1/load_lora_adapter", json={"lora_name": "", "lora_path": ""}).status_code == 404:
        return [f"{where} has no runtime LoRA loading (POST /v1/load_lora_adapter: 404), which trainer.args.use_lora "
                f"= true needs: {start}"]
    # the route exists whenever runtime updating is on; LoRA itself shows in vLLM's metrics when --enable-lora
    metrics = http.get("/metrics")
    if metrics.status_code == 200 and "vllm:" in metrics.text and "vllm:lora_requests_info" not in metrics.text:
        return [f"{where} serves without LoRA (its /metrics has no vllm:lora_requests_info), which "
                f"trainer.args.use_lora = true needs: {start}"]
    return []


def _reload_problems(http, where: str, needs: str) -> list[str]:
    start = (f"start it with vf-vllm @ a config with {needs} (VLLM_SERVER_DEV_MODE=1 and "
             f"--worker-extension-cls {RELOAD_EXTENSION}, vfrl installed beside vLLM)")
    r = http.post("/collective_rpc", json={"method": "vfrl_loaded_version"})  # reads, changes nothing
    if r.status_code == 404:
        return [f"{where} has no full-weight reload (POST /collective_rpc: 404, vLLM's dev mode is off), which "
                f"{needs} needs: {start}"]
    if r.status_code != 200:
        return [f"{where} has no vfrl full-weight reload in its workers (POST /collective_rpc: {r.status_code} "
                f"{r.text[:160]!r}), which {needs} needs: {start}"]
    if http.post(RELOAD_PATH, json={}).status_code == 404:  # vfrl's route answers an empty body with 400
        return [f"{where} has no POST {RELOAD_PATH} (a vLLM started without vf-vllm, or by an older vfrl), which "
                f"{needs} needs: {start}"]
    return []


def _needs_scale_out(cfg: RLConfig) -> bool:
    from vfrl.inference.scale_out import scale_out_needed

    return scale_out_needed(cfg.inference.enable_scale_out, cfg.env.id)
