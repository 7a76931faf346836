import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import tomli_w

from vfrl.run_dir import RunDir, read_jsonl
from vfrl.testing import BIN, free_port, vf_vllm, write_config  # noqa: F401 (the tests import them from here)

ROOT = Path(__file__).resolve().parents[1]


SESSION_SERVERS = ("shared_vllm_server", "tool_server")  # the session's shared vf-vllm servers (below)
# Modules on the shared servers that run in the other lane all the same, to even out the two workers: that lane
# then starts its own shared server (once). None since the other lane took the concurrent-runs and sweep modules
# (~220 s); test_python_api.py (~70 s) had been moved there to even out 873 s against 748 s.
ON_THE_OTHER_LANE: tuple[str, ...] = ()


def real_stack_lane(name: str, text: str) -> str | None:
    """The lane of test module `name`, from its text: None when it marks no test e2e; else the lane of the modules
    that use the session's shared servers (they start once, on that lane's worker), or the other."""
    if "mark.e2e" not in text:
        return None
    shared = any(server in text for server in SESSION_SERVERS) and name not in ON_THE_OTHER_LANE
    return "the real stack, shared servers" if shared else "the real stack, other"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """scripts/test.sh runs the suite on two pytest-xdist workers. The real-stack (e2e) modules run in two lanes, one
    per worker, each lane's modules in order: those on the session's shared servers (which start once, in that
    worker), and those that start vLLM servers and trainers of their own. A real run keeps about half of the two
    cores busy (it waits on the server, on timeouts it provokes, on start-ups), so the lanes overlap well; one
    lane of them all left the other worker idle for the last 11 of 17 minutes. Each other module, whole (its module
    fixtures made once), goes to whichever worker is free. This runs in xdist's controller, which collects no
    tests: a module's lane is read from its text."""
    from xdist.scheduler import LoadScopeScheduling

    lanes = {f"tests/{path.name}": lane for path in Path(__file__).parent.glob("test_*.py")
             if (lane := real_stack_lane(path.name, path.read_text()))}

    class RealStackInTwoLanes(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return lanes.get(module, module)

        def _assign_work_unit(self, node) -> None:
            """As LoadScope, but a worker that holds one lane never takes the other: the next other scope instead
            (or nothing yet, when only the other lane is left: the worker that holds it takes it)."""
            held = {scope for scope in self.assigned_work.get(node, {}) if scope in lanes.values()}
            if held and next(iter(self.workqueue)) in lanes.values() and next(iter(self.workqueue)) not in held:
                other = next((scope for scope in self.workqueue if scope not in lanes.values()), None)
                if other is None:
                    return
                self.workqueue.move_to_end(other, last=False)
            super()._assign_work_unit(node)

    return RealStackInTwoLanes(config, log)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The embedded model: the one install.sh made, or a fresh one (same script, same seed)."""
    made = ROOT / "models" / "tiny-reverse"
    if (made / "model.safetensors").exists():
        return made
    out = tmp_path_factory.mktemp("model") / "tiny-reverse"
    subprocess.run([sys.executable, "-m", "vfrl.make_tiny_model", "--out", str(out)], check=True)
    return out


def tmux_socket(kind: str, tmp_path: Path) -> str:
    """A tmux socket name no other pytest run on this machine uses at the same time: sockets live in one
    /tmp/tmux-UID/ for all of them, and tmp_path's name (test_x0) repeats from run to run."""
    return f"vfrl-{kind}-{os.getpid()}-{tmp_path.name}"


@contextmanager
def socket_of_real_runs(kind: str, tmp_path: Path) -> Iterator[str]:
    """A tmux_socket for real vf-rl runs; at the end (a failure too) every vf-rl session on it gets the clean stop,
    so no vLLM is left behind, then its tmux server is killed."""
    from vfrl.launcher import tmux
    from vfrl.launcher.lifecycle import stop_run

    name = tmux_socket(kind, tmp_path)
    try:
        yield name
    finally:
        srv = tmux.server(name)
        for session in tmux.run_sessions(srv):
            stop_run(srv, session, trainer_grace=20, echo=lambda _: None)
        subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)


def against_server(cfg: Path, base_url: str, api_key_var: str = "SHARED_VLLM_KEY") -> Path:
    """Config file `cfg`, rewritten to train against the running server at `base_url` (inference.base_url, its
    API key in $api_key_var) instead of starting a vLLM of its own."""
    import tomllib

    config = tomllib.loads(cfg.read_text())
    config["inference"] = {"base_url": base_url, "api_key_var": api_key_var}
    cfg.write_text(tomli_w.dumps(config))
    return cfg


def log_since(log: Path, offset: int) -> str:
    """What a server log (others' requests in it too) got from byte `offset` on."""
    return log.read_bytes()[offset:].decode(errors="replace")


def train_package_two_steps(tmp_path: Path, model: Path, env: dict, pythonpath: Path, examples_per_step: int = 2,
                            traces_per_episode: int = 1, server: "SharedServer | None" = None, **trainer_args):
    """`vf-rl @ config` (real tmux, real vf-vllm) on the environment package `env` ([env] table) found on
    `pythonpath`: 2 steps of `examples_per_step` x 2 episodes, each `traces_per_episode` rollouts; `trainer_args`
    override the config's. With `server` (the session's shared vf-vllm), vf-rl trains against it
    (inference.base_url) instead of starting a vLLM of its own. Returns (the finished vf-rl, its run dir, the steps'
    metrics lines), after checking what every such run must show: exit 0, no traceback in trainer.log, the
    base and each step's adapter loaded into vLLM, no rollout dropped, each step's batch sampled by the one
    policy its metrics line names (one step off-policy: batches 1 and 2 are both the base model's)."""
    import tomllib

    cfg = write_config(tmp_path / "cfg.toml", model, port=0, output_dir=tmp_path / "outputs", max_steps=2,
                       batch_size=2 * examples_per_step, micro_batch_size=2 * examples_per_step,
                       rollouts_per_example=2, eval_strategy="no", **trainer_args)
    config = tomllib.loads(cfg.read_text())
    config["env"] = env
    cfg.write_text(tomli_w.dumps(config))
    if server is not None:
        against_server(cfg, server.base_url)
        log_start = server.log.stat().st_size
    socket_name = tmux_socket("pkg", tmp_path)
    try:
        done = subprocess.run([str(BIN / "vf-rl"), "@", str(cfg), "--no-attach", "--tmux-socket", socket_name],
                              capture_output=True, text=True, cwd=tmp_path, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(pythonpath),
                                   "SHARED_VLLM_KEY": SharedServer.api_key})
    finally:
        subprocess.run(["tmux", "-L", socket_name, "kill-server"], capture_output=True)
    run_dir = tmp_path / "outputs" / "test"
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in (run_dir / "logs" / "trainer.log").read_text()
    if server is None:
        server_log = (run_dir / "logs" / "inference.log").read_text()
    else:
        server_log = log_since(server.log, log_start)
    for version in (0, 1, 2):  # the base as policy-0, then one adapter per step
        assert f"Loaded new LoRA adapter: name 'policy-{version}'" in server_log
    steps = read_jsonl(RunDir(run_dir).metrics)
    assert [s["step"] for s in steps] == [1, 2] and all(s["rollouts_dropped"] == 0 for s in steps)
    for s in steps:
        rollouts = read_jsonl(RunDir(run_dir).step_rollouts(s['step']))
        assert (len(rollouts) == 2 * examples_per_step * traces_per_episode
                and {r["policy"] for r in rollouts} == {f"policy-{s['policy_version']}"})
    return done, run_dir, steps


def assert_served_is_trained(steps: list[dict]) -> None:
    """mismatch_kl ~ 0 on every step whose batch was sampled by the weights the trainer held when it trained it:
    step 1 (the base model on both sides), and any later one sampled by the policy of the step before. One step
    off-policy, a 2-step run's second batch is the base model's while the trainer holds step 1's update: its
    mismatch_kl is that update's drift, not a mismatch (a pushed adapter's logprobs are checked directly in the
    `..._sampled_after_a_sync_matches_the_trainer` tests)."""
    exact = [s for s in steps if s["policy_version"] == s["step"] - 1]
    assert exact and exact[0]["step"] == 1, steps
    assert all(s["mismatch_kl"] < 1e-5 for s in exact), [(s["step"], s["mismatch_kl"]) for s in exact]


async def sample_batch(env, base_url: str, api_key: str, policy: str, version: int, max_tokens: int,
                       examples: int = 2):
    """One batch of `env` (`examples` x 2 rollouts) sampled from `policy` by the trainer's Orchestrator (any
    environment: a verifiers 0.4 one is closed after)."""
    from openai import AsyncOpenAI

    from vfrl.config import TrainerArgs
    from vfrl.rollouts.orchestrator import Orchestrator

    args = TrainerArgs(batch_size=2 * examples, rollouts_per_example=2, max_tokens=max_tokens, eval_strategy="no",
                       rollout_timeout=240)
    try:
        orchestrator = Orchestrator(env, AsyncOpenAI(base_url=base_url, api_key=api_key), args.generation)
        return await orchestrator.generate(0, policy, version)
    finally:
        if hasattr(env, "aclose"):
            await env.aclose()


def served_batch(env, base_url: str, api_key: str, policy: str, version: int, max_tokens: int, examples: int = 2):
    """One batch of `env` sampled from `policy` on the real server at base_url."""
    import asyncio

    return asyncio.run(sample_batch(env, base_url, api_key, policy, version, max_tokens, examples))


def batch_from_pushed_adapter(server: "SharedServer", model_dir, env, tmp_path: Path, seed: int, scale: float,
                              max_tokens: int):
    """One batch of `env` (1 example x 2) sampled on `server` from a LoRA like a trained one
    (trained_like_adapter), pushed as vf-train pushes it (AdapterSync). Returns (the peft model, the name vLLM
    serves it under, the batch)."""
    from vfrl.rollouts.weight_sync import AdapterSync

    (tmp_path / "adapters").mkdir()
    model = trained_like_adapter(model_dir, seed=seed, scale=scale)
    policy, _ = AdapterSync(server.base_url, server.api_key, tmp_path / "adapters").push(model, seed)
    return model, policy, served_batch(env, server.base_url, server.api_key, policy, seed, max_tokens, examples=1)


def assert_reply_turn_reply(r) -> tuple[int, int]:
    """`r`'s two replies mask 1 and the turn between them (the environment's, a tool's) mask 0; returns that
    turn's span in the completion."""
    (a, b), (c, d) = r.turn_spans
    assert a == 0 and b < c and r.completion_mask == [1] * b + [0] * (c - b) + [1] * (d - c), r.turn_spans
    return b, c


def max_logprob_gap(model, rollouts, temperature: float = 1.0) -> float:
    """Largest |trainer - vLLM| logprob over every sampled token of `rollouts` (mask 1: the environment's tokens
    between turns were not sampled), both at the sampling `temperature`."""
    import torch

    from vfrl.learner.logprobs import sequence_logprobs

    worst = 0.0
    # a forked trace's other branches too (a rollout may be any object with the four token fields)
    for r in (s for rollout in rollouts for s in [rollout, *getattr(rollout, "more_branches", [])]):
        ids = torch.tensor([r.prompt_ids + r.completion_ids])
        with torch.no_grad():
            lp = sequence_logprobs(model, ids, torch.ones_like(ids), temperature)[0, len(r.prompt_ids) - 1 :]
        sampled = torch.tensor(r.completion_mask, dtype=torch.bool)
        worst = max(worst, (lp - torch.tensor(r.completion_logprobs))[sampled].abs().max().item())
    return worst


def trained_like_adapter(model_dir, seed: int, scale: float = 0.3):
    """The tiny model with a LoRA whose B matrices are non-zero (normal, std `scale`), as after some training."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, scale)
    return model.eval()


class SharedServer:
    """A real vLLM CPU server (vf-vllm) serving the tiny model, shared by every test of the session."""

    api_key = "shared-test-key"

    def __init__(self, base_url: str, model: str, log: Path, config: Path):
        self.base_url, self.model, self.log, self.config = base_url, model, log, config


@pytest.fixture(scope="session")
def nltk_data_folder(tmp_path_factory):
    """The nltk data textarena's Wordle reads (test_env_textarena.make_nltk_data), one folder for the session: nltk
    keeps a corpus once read and then refuses to read it from a folder no longer on `nltk.data.path`."""
    from test_env_textarena import make_nltk_data

    return make_nltk_data(tmp_path_factory.mktemp("nltk_data"))


@pytest.fixture(scope="session")
def shared_vllm_server(tmp_path_factory, tiny_model):
    """One vf-vllm for the session: fp32, max_model_len 1024 (the tiny model's position limit; its
    tokenizer spends one token per character), API key `SharedServer.api_key`, and verifiers 0.4's
    token route (/inference/v1/generate, enable_scale_out) beside the OpenAI ones."""
    tmp = tmp_path_factory.mktemp("shared-server")
    port = 0  # vLLM binds a free one itself: no other server of the machine can take it first
    (tmp / "config.toml").write_text(tomli_w.dumps({
        "model": str(tiny_model), "env": {"id": "reverse-text"},
        "inference": {"port": port, "enable_scale_out": True,
                      "args": {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True}},
    }))
    log = tmp / "server.log"
    with vf_vllm(tmp / "config.toml", port, SharedServer.api_key, log) as base_url:
        yield SharedServer(base_url, str(tiny_model), log, tmp / "config.toml")


@pytest.fixture(scope="session")
def tool_server(tmp_path_factory):
    """A vf-vllm for the tool tests, serving the tiny tool-calling model (tests/tool_model.py) with both ways
    a tool call is read: verifiers 0.4's token route (its renderer parses the call) and vLLM's own Hermes
    parser for the chat route (a classic ToolEnv). The rest as `shared_vllm_server`."""
    from tool_model import make_tool_model

    tmp = tmp_path_factory.mktemp("tool-server")
    model = make_tool_model(tmp / "tiny-tools")
    port = 0  # vLLM binds a free one itself: no other server of the machine can take it first
    (tmp / "config.toml").write_text(tomli_w.dumps({
        "model": str(model), "env": {"id": "reverse-text"},
        "inference": {"port": port, "enable_scale_out": True,
                      "args": {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True,
                               "enable_auto_tool_choice": True, "tool_call_parser": "hermes"}},
    }))
    log = tmp / "server.log"
    with vf_vllm(tmp / "config.toml", port, SharedServer.api_key, log) as base_url:
        yield SharedServer(base_url, str(model), log, tmp / "config.toml")


def served_routes(config: Path, server_log: Path) -> dict:
    """The routes of vLLM's app as vf-vllm's server built it, from a fresh process (tests/vllm_routes.py says why)."""
    import json

    done = subprocess.run([sys.executable, str(Path(__file__).parent / "vllm_routes.py"), str(config), str(server_log)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


ALL_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def assert_only_health_is_open(base_url: str, config: Path, server_log: Path, api_key: str) -> set[str]:
    """Every route and mount of the served app, every method, path parameters filled: 401 without the
    API key (and with a wrong one), except GET /health (200). Returns the paths checked.

    The routes come from the app itself, not a list here, so a route a new vLLM adds is checked too;
    the app is compared with the server's /openapi.json first, so it is the app the server runs."""
    import httpx

    app = served_routes(config, server_log)
    root = base_url.removesuffix("/v1")
    authorized = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=root, timeout=30) as http:
        served = http.get("/openapi.json", headers=authorized)
        assert served.status_code == 200, served.text
        assert set(served.json()["paths"]) == set(app["openapi_paths"]), "the app built here is not the one served"
        paths, websockets = set(app["paths"]), set(app["websockets"])
        paths.add("/no-such-path")
        assert len(paths) > 20 and "/health" in paths, sorted(paths)
        for path in sorted(paths - {"/health"}):
            for method in ALL_METHODS:
                r = http.request(method, path)
                assert r.status_code == 401, (f"{method} {path} answered {r.status_code} without the API key: "
                                              f"{r.text[:200]}")
            r = http.post(path, headers={"Authorization": "Bearer wrong"})
            assert r.status_code == 401, f"POST {path} answered {r.status_code} with a wrong API key"
        upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                   "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
        for path in sorted(websockets):
            r = http.get(path, headers=upgrade)
            assert r.status_code == 401, f"websocket {path} answered {r.status_code} without the API key"
        assert http.get("/health").status_code == 200
        # the paths vfrl's own clients use still answer with the key
        assert http.get("/v1/models", headers=authorized).status_code == 200
        assert http.get("/metrics", headers=authorized).status_code == 200
        tokenized = http.post("/tokenize", headers=authorized, json={"model": app["model"], "prompt": "ab"})
        assert tokenized.status_code == 200, tokenized.text
    return paths | websockets


def sandbox_processes() -> list[str]:
    """`uid pid args` of every process of this test process's sandboxes still on the machine: as root, those of its
    calls' user ids (vfrl/sandbox/local.py: call_uid), wherever they went; and any descendant of this process that
    is a sandbox's (a bwrap not reaped, what ran in it). Other processes' sandboxes are not counted."""
    from vfrl.proc_table import table

    first = 2_000_000 + (os.getpid() % 4_000_000) * 512
    procs = table()

    def ours(pid: int) -> bool:
        while pid > 1 and pid in procs:
            pid = procs[pid].ppid
            if pid == os.getpid():
                return True
        return False

    out = subprocess.run(["ps", "-eo", "uid=,pid=,args="], capture_output=True, text=True).stdout.splitlines()
    return [line for line in out if first <= int(line.split()[0]) < first + 512
            or (ours(int(line.split()[1])) and "ps -eo" not in line and "bwrap" in line)]
