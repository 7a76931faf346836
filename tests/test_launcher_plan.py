"""Launch plans on paper (no GPU needed), the --dry-run golden output, and a launcher that never imports torch."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

from vfrl.bundle import bundle_root
from vfrl.config import RLConfig
from vfrl.launcher import cli
from vfrl.launcher.plan import Machine, PlanError, make_plan, split_gpus

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
BIN = str(Path(sys.executable).parent)


def cfg(inference_gpus=6, trainer_gpus=2, inference_args=None, **trainer):
    trainer = {"batch_size": 64, "micro_batch_size": 8, **trainer}
    return RLConfig.model_validate({"model": "m", "env": {"id": "e"},
                                    "inference": {"gpus": inference_gpus, "args": inference_args or {}},
                                    "trainer": {"gpus": trainer_gpus, "args": trainer}})


def test_gpu_split_is_contiguous_inference_first():
    assert split_gpus(6, 2, 8) == ([0, 1, 2, 3, 4, 5], [6, 7])
    assert split_gpus(1, 1, 8) == ([0], [1])
    with pytest.raises(PlanError, match="this machine has 2 GPUs; lower inference.gpus"):
        split_gpus(2, 1, 2)


def test_plan_on_eight_gpus_six_for_vllm_two_for_the_trainer(tmp_path):
    plan = make_plan(cfg(inference_args={"tensor_parallel_size": 2}), tmp_path / "run", "s", Machine(8, 64), tmp_path)
    assert plan.inference.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5"
    assert plan.trainer.env["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert (plan.tensor_parallel, plan.data_parallel) == (2, 3)
    assert plan.config.inference.args["data_parallel_size"] == 3  # what vf-vllm reads from the resolved config
    cmd = plan.trainer.command
    assert cmd[1:3] == ["launch", "--config-file"] and cmd[4:6] == ["--num-processes", "2"]
    assert Path(cmd[3]) == bundle_root() / "configs" / "accelerate" / "ddp.yaml"
    assert cmd[6].endswith("vf-train") and cmd[7:] == ["@", str(tmp_path / "run" / "config.toml")]


@pytest.mark.parametrize("gpus, tp, dp", [(1, 1, 1), (2, 1, 2), (4, 2, 2), (4, 4, 1), (8, 2, 4)])
def test_vllm_data_parallel_is_gpus_over_tensor_parallel(tmp_path, gpus, tp, dp):
    plan = make_plan(cfg(gpus, 1, {"tensor_parallel_size": tp}), tmp_path, "s", Machine(gpus + 1, 8), tmp_path)
    assert plan.data_parallel == dp
    assert plan.config.inference.args.get("data_parallel_size", 1) == dp


def test_one_trainer_gpu_runs_vf_train_without_accelerate(tmp_path):
    plan = make_plan(cfg(1, 1), tmp_path, "s", Machine(2, 8), tmp_path)
    assert plan.trainer.command[0].endswith("vf-train") and plan.trainer_processes == 1
    assert (plan.inference.env["CUDA_VISIBLE_DEVICES"], plan.trainer.env["CUDA_VISIBLE_DEVICES"]) == ("0", "1")


@pytest.mark.parametrize("name", ["single_gpu", "ddp", "zero3", "fsdp"])
def test_accelerate_config_by_name_is_the_bundled_yaml(tmp_path, name):
    c = cfg()
    c.trainer.accelerate_config = name
    plan = make_plan(c, tmp_path, "s", Machine(8, 8), tmp_path)
    assert plan.trainer.command[3] == str(bundle_root() / "configs" / "accelerate" / f"{name}.yaml")


def test_accelerate_config_path_must_exist(tmp_path):
    c = cfg()
    c.trainer.accelerate_config = "mine.yaml"
    with pytest.raises(PlanError, match=r'trainer.accelerate_config = "mine.yaml" is invalid: no such file'):
        make_plan(c, tmp_path, "s", Machine(8, 8), tmp_path)
    (tmp_path / "mine.yaml").write_text("distributed_type: MULTI_GPU\n")
    assert make_plan(c, tmp_path, "s", Machine(8, 8), tmp_path).trainer.command[3] == str(tmp_path / "mine.yaml")


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_accelerate_configs_load_in_accelerate(path):
    from accelerate.commands.config.config_args import ClusterConfig

    assert ClusterConfig.from_yaml_file(path).num_machines == 1


def test_more_gpus_requested_than_present_is_refused_at_launch_only(tmp_path):
    c = cfg(6, 2)  # valid on paper: shipped 8-GPU configs validate on a laptop
    with pytest.raises(PlanError) as e:
        make_plan(c, tmp_path, "s", Machine(4, 8), tmp_path)
    assert str(e.value) == ("inference.gpus + trainer.gpus = 8 is invalid: this machine has 4 GPUs; "
                            "lower inference.gpus (6) or trainer.gpus (2)")


def test_without_gpu_the_cores_are_split(tmp_path):
    plan = make_plan(cfg(), tmp_path, "s", Machine(0, 8), tmp_path)
    assert plan.device == "cpu"
    assert plan.inference.env == {"CUDA_VISIBLE_DEVICES": "", "VLLM_CPU_OMP_THREADS_BIND": "0-3"}
    assert plan.trainer.env == {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "4"}
    assert plan.trainer.command[0].endswith("vf-train")
    two = make_plan(cfg(), tmp_path, "s", Machine(0, 2), tmp_path)
    assert two.inference.env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and two.trainer.env["OMP_NUM_THREADS"] == "1"


# ---- --dry-run golden output ----

GOLDEN_CONFIG = """
model = "models/tiny-reverse"
[env]
id = "reverse-text"
[inference]
gpus = 6
[inference.args]
tensor_parallel_size = 2
[trainer]
gpus = 2
[trainer.args]
run_name = "golden"
batch_size = 64
micro_batch_size = 8
"""
GOLDEN_CASES = {"dry_run_8gpu": Machine(8, 64), "dry_run_cpu": Machine(0, 2)}


def dry_run(tmp_path, monkeypatch, machine, config_text, *extra):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "detect_machine", lambda: machine)
    (tmp_path / "cfg.toml").write_text(config_text)
    args = ["run", "cfg.toml", "--dry-run", "--inference.port", "18123", "--session", "golden",
            "--tmux-socket", "vfrl-golden-no-server", *extra]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    return (result.stdout.replace(str(tmp_path), "<tmp>").replace(BIN, "<bin>")
            .replace(str(bundle_root()), "<bundle>"))


@pytest.mark.parametrize("name", GOLDEN_CASES)
def test_dry_run_prints_the_plan_exactly(tmp_path, monkeypatch, name):
    """Regenerate after an intended change: VFRL_UPDATE_GOLDEN=1 pytest tests/test_launcher_plan.py"""
    out = dry_run(tmp_path, monkeypatch, GOLDEN_CASES[name], GOLDEN_CONFIG)
    plan_part = out[out.index("# plan\n"):]
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("VFRL_UPDATE_GOLDEN"):
        golden.write_text(plan_part)
    assert plan_part == golden.read_text()
    assert not (tmp_path / "outputs").exists()  # started nothing, wrote nothing


def test_dry_run_prints_the_resolved_config_with_overrides(tmp_path, monkeypatch):
    config_text = (ROOT / "configs/rl/qwen2.5-1.5b-instruct-8gpu.toml").read_text()
    out = dry_run(tmp_path, monkeypatch, Machine(8, 64), config_text, "--trainer.args.max_steps", "7")
    resolved = tomllib.loads(out[out.index("# resolved config"):out.index("# plan\n")].split("\n", 1)[1])
    expected = RLConfig.model_validate(tomllib.loads((ROOT / "configs/rl/qwen2.5-1.5b-instruct-8gpu.toml").read_text()))
    expected.trainer.args.max_steps = 7
    expected.inference.port = 18123
    expected.inference.args["data_parallel_size"] = 3
    assert resolved == tomllib.loads(tomli_w.dumps(expected.model_dump(mode="json", exclude_none=True)))


def test_dry_run_reports_a_gpu_shortage_as_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "detect_machine", lambda: Machine(2, 8))
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/qwen2.5-1.5b-instruct-8gpu.toml").read_text())
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--dry-run", "--tmux-socket", f"vfrl-golden-{os.getpid()}"])
    assert result.exit_code == 2
    assert result.stderr.strip() == ("vf-rl: error: cfg.toml: inference.gpus + trainer.gpus = 8 is invalid: this "
                                     "machine has 2 GPUs; lower inference.gpus (6) or trainer.gpus (2)")


@pytest.mark.parametrize("host, reachable", [("0.0.0.0", True), ("::", True), ("10.0.0.5", True), ("gpu-node-3", True),
                                             ("127.0.0.1", False), ("::1", False), ("localhost", False)])
def test_a_host_beyond_loopback_is_announced_in_one_line(tmp_path, monkeypatch, host, reachable):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "detect_machine", lambda: Machine(0, 2))
    (tmp_path / "cfg.toml").write_text(GOLDEN_CONFIG)
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--dry-run", "--inference.host", host,
                                          "--tmux-socket", "vfrl-golden-no-server"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("vf-rl: note:")]
    expected = (f'vf-rl: note: inference.host = "{host}": vLLM will be reachable from the network; the per-run '
                f"API key protects every endpoint but /health")
    assert notes == ([expected] if reachable else [])


def test_a_mistyped_option_is_not_taken_for_a_config_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/quickstart.toml").read_text())
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--dry-rnu"])
    assert result.exit_code == 2 and "no such option --dry-rnu; did you mean --dry-run?" in result.stderr


# ---- the launcher stays light ----

HEAVY = {"torch", "vllm", "transformers", "peft", "accelerate", "openai"}  # openai: ~1 s of imports


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["@", "configs/rl/quickstart.toml", "--dry-run"],
                                  ["status", "--tmux-socket", "vfrl-no-such-server"]])
def test_vf_rl_imports_no_torch_or_vllm(argv):
    """The console script's own path (main()), not just the module: help, errors and plans stay fast."""
    code = ("import sys\nfrom vfrl.launcher.cli import main\nsys.argv = ['vf-rl', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print('HEAVY', sorted({{m.split('.')[0] for m in sys.modules}} & {HEAVY!r}))")
    res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT)
    assert res.stdout.splitlines()[-1] == "HEAVY []", res.stdout[-2000:] + res.stderr[-2000:]


def test_vf_rl_help_runs_and_documents_overrides():
    out = subprocess.run([f"{BIN}/vf-rl", "run", "--help"], capture_output=True, text=True, check=True,
                         env={**os.environ, "COLUMNS": "200"}).stdout
    assert "--trainer.args.max_steps 10" in out and "--dry-run" in out and "--replace" in out


def test_an_environment_that_is_not_installed_stops_the_launch_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/quickstart.toml").read_text())
    args = ["run", "cfg.toml", "--env.id", "no-such-env", "--model", "Qwen/Qwen2.5-0.5B-Instruct",  # a hub id: not checked
            "--tmux-socket", f"vfrl-env-{os.getpid()}", "--detach"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert line.startswith('vf-rl: error: cfg.toml: env.id = "no-such-env" is invalid: no such environment is '
                           'installed (installed: ') and "reverse-text" in line and "\n" not in line
    assert not (tmp_path / "outputs").exists()
    dry = CliRunner().invoke(cli.app, [*args[:-1], "--dry-run"])  # the plan is still shown, with a warning
    assert dry.exit_code == 0 and "vf-rl: warning: cfg.toml: env.id" in dry.stderr


def test_inference_args_become_kebab_case_vllm_flags_booleans_bare_or_negated():
    from vfrl.inference.server import flag_args

    assert flag_args({"enforce_eager": True, "max_model_len": 512, "enable_prefix_caching": False,
                      "tensor_parallel_size": 2, "data_parallel_size": 3}) == [
        "--enforce-eager", "--max-model-len", "512", "--no-enable-prefix-caching", "--tensor-parallel-size", "2",
        "--data-parallel-size", "3"]
