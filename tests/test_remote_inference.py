"""Training against a vLLM server vf-rl did not start (inference.base_url), without vLLM: the config keys and
their one-line errors, the plan (no inference pane, every device to the trainer), the server checks (one line
per missing thing, against a fake server), the adapter sync on a server that outlives runs, and a session
whose status, logs and stop never reach the server. The real server: test_remote_inference_e2e.py."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import tmux_socket
from typer.testing import CliRunner

from fake_vllm_server import FakeVLLM
from vfrl.config import RLConfig
from vfrl.inference.remote import server_problems
from vfrl.launcher import cli, procs, tmux
from vfrl.launcher.config_errors import ConfigError, load_user_config
from vfrl.launcher.machine import Machine
from vfrl.launcher.plan import PlanError, make_plan

ROOT = Path(__file__).resolve().parents[1]
VF_RL = str(Path(sys.executable).parent / "vf-rl")
HEAD = 'model = "m"\n[env]\nid = "reverse-text"\n'
URL = "http://gpu-node-3:8000/v1"


def remote_cfg(url=URL, use_lora=True, env_id="reverse-text", **inference) -> RLConfig:
    return RLConfig.model_validate({"model": "m", "env": {"id": env_id}, "inference": {"base_url": url, **inference},
                                    "trainer": {"args": {"use_lora": use_lora}}})


# ---- config ----

@pytest.mark.parametrize("body, message", [
    (HEAD + '[inference]\nbase_url = "gpu-node-3:8000"\n',
     'inference.base_url = "gpu-node-3:8000" is invalid: must be the OpenAI base URL of a vLLM server, '
     'http(s)://host:port/v1, e.g. "http://gpu-node-3:8000/v1"'),
    (HEAD + '[inference]\nbase_url = "http://gpu-node-3:8000"\n',  # the server's root, not its OpenAI base URL
     'inference.base_url = "http://gpu-node-3:8000" is invalid: must be the OpenAI base URL of a vLLM server, '
     'http(s)://host:port/v1, e.g. "http://gpu-node-3:8000/v1"'),
    (HEAD + f'[inference]\nbase_url = "{URL}"\napi_key_var = "sk-3f9a"\n',
     'inference.api_key_var = "sk-3f9a" is invalid: must be the name of an environment variable that holds the '
     'key, e.g. "VLLM_API_KEY", not the key itself'),
    (HEAD + '[inference]\napi_key_var = "VLLM_API_KEY"\n',
     'inference.api_key_var = "VLLM_API_KEY" is invalid: only used with inference.base_url; a server vf-rl starts '
     'gets a key vf-rl makes'),
])
def test_remote_keys_are_checked_in_one_line_each(tmp_path, body, message):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as e:
        load_user_config(path)
    assert str(e.value) == f"{path}: {message}"


def test_base_url_is_written_without_its_trailing_slash_and_the_trainer_calls_it():
    c = remote_cfg(url=URL + "/")
    assert c.inference.base_url == URL and c.inference.url == URL
    assert RLConfig.model_validate({"model": "m", "env": {"id": "e"}, "inference": {"host": "0.0.0.0", "port": 9}}
                                   ).inference.url == "http://127.0.0.1:9/v1"  # vf-rl's own server, as before


# ---- the plan ----

def test_a_remote_plan_has_no_inference_pane_and_gives_the_trainer_every_core(tmp_path):
    plan = make_plan(remote_cfg(), tmp_path / "run", "s", Machine(0, 2), tmp_path)
    assert plan.inference is None and plan.device == "cpu"
    assert plan.trainer.env == {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "2"}
    assert plan.notes == []  # no [inference] key of a server vf-rl starts was set


def test_a_remote_plan_gives_the_trainer_the_first_gpus_and_refuses_more_than_present(tmp_path):
    c = remote_cfg()
    c.trainer.gpus = 2
    plan = make_plan(c, tmp_path / "run", "s", Machine(2, 16), tmp_path)
    assert plan.trainer_devices == ["0", "1"] and plan.inference_devices == []
    assert plan.trainer.env["CUDA_VISIBLE_DEVICES"] == "0,1" and "accelerate" in plan.trainer.command[0]
    with pytest.raises(PlanError) as e:
        make_plan(c, tmp_path / "run", "s", Machine(1, 16), tmp_path)
    assert str(e.value) == ("trainer.gpus = 2 is invalid: this machine has 1 GPU, all of them the trainer's "
                            "(inference.base_url)")


def test_dry_run_shows_the_remote_server_and_only_the_trainer_pane(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "detect_machine", lambda: Machine(0, 2))
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/quickstart.toml").read_text())
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--dry-run", "--model", "Qwen/Qwen2.5-0.5B-Instruct",
                                          "--inference.base_url", URL, "--tmux-socket", "vfrl-remote-no-server"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f'base_url = "{URL}"' in out  # in the resolved config
    assert "devices:        no GPU in use: trainer with 2 thread(s); inference is remote\n" in out
    assert ("note:           inference.base_url: vf-rl starts no vLLM server, so inference.gpus and inference.args "
            "(for a server it starts) are not used\n") in out
    assert (f"vLLM endpoint:  {URL} (inference.base_url: a server vf-rl neither starts nor stops; API key from "
            f"$VFRL_API_KEY; checked before the trainer starts)\n") in out
    assert "--- pane Trainer:" in out and "--- pane Inference" not in out and "vf-vllm" not in out
    assert "was not started by vf-rl and is left running" in out and "kill" not in out
    assert not (tmp_path / "outputs").exists()


# ---- the server checks: one line per missing thing ----

def test_a_server_with_everything_the_run_needs_passes(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "k")
    with FakeVLLM(key="k") as srv:
        assert server_problems(remote_cfg(srv.base_url, api_key_var="VLLM_API_KEY")) == []
        # the checks changed nothing: the LoRA probe names no adapter, nothing was loaded
        assert srv.adapters == {}
    with FakeVLLM(lora_route=False, reload="ok") as srv:  # full fine-tuning needs the reload, not LoRA
        assert server_problems(remote_cfg(srv.base_url, use_lora=False)) == []


def test_no_server_at_the_url_is_one_line():
    with FakeVLLM() as srv:
        url = srv.base_url
    (line,) = server_problems(remote_cfg(url))
    assert line.startswith(f"the vLLM server at {url} (inference.base_url) does not answer (ConnectError: ")
    assert line.endswith("); start it (docs/scaling.md) or correct the URL")


@pytest.mark.parametrize("held, expected", [
    (None, "$VLLM_API_KEY is not set"),
    ("wrong", "$VLLM_API_KEY does not hold its key"),
])
def test_a_refused_api_key_is_one_line_naming_the_variable(monkeypatch, held, expected):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    if held:
        monkeypatch.setenv("VLLM_API_KEY", held)
    with FakeVLLM(key="right") as srv:
        assert server_problems(remote_cfg(srv.base_url, api_key_var="VLLM_API_KEY")) == [
            f"the vLLM server at {srv.base_url} (inference.base_url) refused the API key (401): {expected}; export "
            f"VLLM_API_KEY with the key the server was started with (its --api-key or VLLM_API_KEY), or name another "
            f"variable in inference.api_key_var"]


def test_a_server_that_is_not_vllm_is_one_line():
    with FakeVLLM() as srv:
        srv.answer = lambda *a: (404, {"detail": "Not Found"})
        assert server_problems(remote_cfg(srv.base_url)) == [
            f"the vLLM server at {srv.base_url} (inference.base_url) answered GET /v1/models with 404 "
            f"'{{\"detail\": \"Not Found\"}}', not a model list; is it a vLLM OpenAI server?"]


def test_another_model_is_one_line_and_adapters_do_not_count_as_served_models():
    with FakeVLLM(model="Qwen/Qwen2.5-0.5B", adapters=("m",)) as srv:  # an adapter named like the model
        assert server_problems(remote_cfg(srv.base_url)) == [
            f'the vLLM server at {srv.base_url} (inference.base_url) serves Qwen/Qwen2.5-0.5B, not model = "m": it '
            f"must serve the model the trainer trains under that name (vf-vllm @ a config with the same model does; "
            f"vllm serve: --served-model-name m)"]


LORA_START = ("start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora --max-lora-rank 8 "
              "(vf-vllm does both)")


def test_no_runtime_lora_loading_is_one_line():
    with FakeVLLM(lora_route=False) as srv:
        assert server_problems(remote_cfg(srv.base_url)) == [
            f"the vLLM server at {srv.base_url} (inference.base_url) has no runtime LoRA loading (POST "
            f"/v1/load_lora_adapter: 404), which trainer.args.use_lora = true needs: {LORA_START}"]


def test_lora_loading_without_enable_lora_is_one_line():
    with FakeVLLM(lora_enabled=False) as srv:
        assert server_problems(remote_cfg(srv.base_url)) == [
            f"the vLLM server at {srv.base_url} (inference.base_url) serves without LoRA (its /metrics has no "
            f"vllm:lora_requests_info), which trainer.args.use_lora = true needs: {LORA_START}"]


RELOAD_START = ("start it with vf-vllm @ a config with trainer.args.use_lora = false (VLLM_SERVER_DEV_MODE=1 and "
                "--worker-extension-cls vfrl.inference.worker_extension.WeightReloadExtension, vfrl installed "
                "beside vLLM)")


def test_no_full_weight_reload_is_one_line():
    with FakeVLLM() as srv:  # a LoRA server: no dev mode
        assert server_problems(remote_cfg(srv.base_url, use_lora=False)) == [
            f"the vLLM server at {srv.base_url} (inference.base_url) has no full-weight reload (POST /collective_rpc: "
            f"404, vLLM's dev mode is off), which trainer.args.use_lora = false needs: {RELOAD_START}"]
    with FakeVLLM(reload="no-extension") as srv:
        (line,) = server_problems(remote_cfg(srv.base_url, use_lora=False))
        assert line.startswith(f"the vLLM server at {srv.base_url} (inference.base_url) has no vfrl full-weight "
                               f"reload in its workers (POST /collective_rpc: 500 ")
        assert line.endswith(f"which trainer.args.use_lora = false needs: {RELOAD_START}")
    with FakeVLLM(reload="no-route") as srv:
        assert server_problems(remote_cfg(srv.base_url, use_lora=False)) == [
            f"the vLLM server at {srv.base_url} (inference.base_url) has no POST /vfrl/reload_weights (a vLLM started "
            f"without vf-vllm, or by an older vfrl), which trainer.args.use_lora = false needs: {RELOAD_START}"]


def test_every_missing_thing_gets_its_own_line():
    with FakeVLLM(model="other", lora_route=False) as srv:
        lines = server_problems(remote_cfg(srv.base_url))
    assert [line.split(") ", 1)[1].split(" ", 2)[:2] for line in lines] == [["serves", "other,"], ["has", "no"]]


def test_a_verifiers_package_needs_the_scale_out_route(monkeypatch):
    monkeypatch.setattr("vfrl.inference.scale_out.is_verifiers_package", lambda env_id: env_id == "v1-env")
    with FakeVLLM() as srv:
        assert server_problems(remote_cfg(srv.base_url, env_id="v1-env")) == [
            f'the vLLM server at {srv.base_url} (inference.base_url) has no /inference/v1/generate, which env.id = '
            f'"v1-env" (a verifiers 0.4 package) samples through: start it with vf-vllm and '
            f"inference.enable_scale_out = true"]
    with FakeVLLM(scale_out=True) as srv:
        assert server_problems(remote_cfg(srv.base_url, env_id="v1-env")) == []


def test_vf_rl_refuses_a_lacking_server_before_starting_anything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/quickstart.toml").read_text())
    with FakeVLLM(model="other", lora_route=False) as srv:
        result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--model", "Qwen/Qwen2.5-0.5B-Instruct",
                                              "--inference.base_url", srv.base_url, "--detach",
                                              "--trainer.args.lora_sync", '"adapter"',  # the quick start merges
                                              "--tmux-socket", tmux_socket("remote-refused", tmp_path)])
    assert result.exit_code == 2, result.output
    errors = result.stderr.strip().splitlines()[-2:]
    assert errors[0].startswith(f"vf-rl: error: the vLLM server at {srv.base_url} (inference.base_url) serves other,")
    assert errors[1].startswith(f"vf-rl: error: the vLLM server at {srv.base_url} (inference.base_url) has no runtime")
    assert not (tmp_path / "outputs").exists()


def test_the_python_api_checks_a_named_server_the_same_way_before_writing_anything(tmp_path, monkeypatch):
    from vfrl.grpo import GRPOTrainer, grpo_defaults

    monkeypatch.chdir(tmp_path)
    with FakeVLLM(model="other", reload="ok") as srv:  # no peft_config: full fine-tuning, which it offers
        trainer = GRPOTrainer(model="m", env="reverse-text", args=grpo_defaults(), vllm_base_url=srv.base_url)
        assert trainer.config.inference.base_url == srv.base_url  # one key behind both ways in
        with pytest.raises(SystemExit) as e:
            trainer.train()
    assert str(e.value).startswith(f"vfrl: the vLLM server at {srv.base_url} (inference.base_url) serves other, not "
                                   f'model = "m"')
    assert "\n" not in str(e.value) and not (tmp_path / "outputs").exists()


# ---- the adapter sync on a server that outlives runs ----

def test_the_first_push_clears_adapters_an_earlier_run_left_on_the_server(tmp_path):
    from vfrl.rollouts.weight_sync import AdapterSync

    with FakeVLLM(adapters=("policy-1", "policy-2", "someone-elses")) as srv:
        sync = AdapterSync(srv.base_url, "EMPTY", tmp_path)
        for version in (1, 2, 3):
            (tmp_path / f"policy-{version}").mkdir()
            assert sync.load(tmp_path / f"policy-{version}", version) == f"policy-{version}"
        assert srv.adapters == {"someone-elses": "/elsewhere/someone-elses", "policy-2": str(tmp_path / "policy-2"),
                                "policy-3": str(tmp_path / "policy-3")}
        models = [r for r in srv.requests if r[1] == "/v1/models"]
        assert len(models) == 1  # listed once, at the first push, not on every step's critical path


def test_a_server_that_cannot_read_the_adapter_says_it_needs_shared_storage(tmp_path):
    from vfrl.rollouts.weight_sync import AdapterSync

    with FakeVLLM(readable=False) as srv:
        with pytest.raises(RuntimeError) as e:
            AdapterSync(srv.base_url, "EMPTY", tmp_path).load(tmp_path / "policy-0", 0)
    assert str(e.value).endswith("; a vLLM server on another machine must read the trainer's run directory at the "
                                 "same path (shared storage, docs/scaling.md)")


# ---- a session: status, logs and stop never reach the server ----

@pytest.fixture
def socket_name(tmp_path):
    name = tmux_socket("remote", tmp_path)
    yield name
    subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)


def vf_rl(*args, timeout=60):
    return subprocess.run([VF_RL, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("ending", ["stop", "trainer finishes"])
def test_a_remote_run_never_signals_the_server_even_one_its_run_dir_names(tmp_path, socket_name, ending):
    """vf-rl's own launch path with a stand-in trainer. The stand-in server is a process this test started,
    and a stale inference.pid (as a resumed run dir that once had vf-vllm keeps) names it: neither `vf-rl stop`
    nor the trainer's epilogue may touch it."""
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        c = load_user_config(_write(tmp_path / "cfg.toml", HEAD + f'[inference]\nbase_url = "{URL}"\n'))
        run_dir = (tmp_path / "outputs" / "remote").resolve()
        plan = make_plan(c, run_dir, "remote", Machine(0, 2), tmp_path)
        plan.trainer.command = ["bash", "-c", f"echo $$ > {run_dir}/trainer.pid; echo training; "  # as vf-train
                                + ("exec sleep 600" if ending == "stop" else "sleep 1")]
        run_dir.mkdir(parents=True)
        (run_dir / "inference.pid").write_text(str(server.pid))
        srv = tmux.server(socket_name)
        cli.launch(srv, plan, tmp_path / "cfg.toml", run_dir, tmp_path)
        assert tmux.pane_state(srv, "remote", "inference") is None  # the trainer's pane and the metrics only
        status = vf_rl("status", "--tmux-socket", socket_name).stdout
        assert "remote: trainer " in status and f", inference remote at {URL}, " in status, status
        logs = vf_rl("logs", "--pane", "inference", "--tmux-socket", socket_name)
        assert logs.returncode == 2 and logs.stderr.strip() == (
            f"vf-rl: error: {run_dir}: the inference server is remote ({URL}, inference.base_url); its log is where "
            f"it runs")
        if ending == "trainer finishes":
            deadline = time.time() + 20
            while "left running" not in (pane := "\n".join(srv.cmd("capture-pane", "-p", "-t", tmux.option(
                    srv, "remote", tmux.PANE_OPTION["trainer"])).stdout)):
                assert time.time() < deadline, pane
                time.sleep(0.2)
            assert (f"vf-rl: trainer exited with code 0; the inference server at {URL} was not started by vf-rl and "
                    f"is left running.") in pane
            assert server.poll() is None, "the trainer's epilogue signalled the remote server"
        res = vf_rl("stop", "--tmux-socket", socket_name)
        code = "130" if ending == "stop" else "0"
        assert res.returncode == 0 and f"stopped 'remote' (trainer exit code {code})" in res.stdout, (
            res.stdout + res.stderr)
        assert server.poll() is None, "vf-rl stop signalled the remote server"
        assert (run_dir / "logs" / "trainer.log").read_text().startswith("training")
        assert not (run_dir / ".api_key").exists()
        assert procs.pane_processes([], run_dir) == set()
    finally:
        server.kill()
        server.wait()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
