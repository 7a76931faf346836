"""vf-rl refuses a local model folder that is not there, before tmux or vLLM start (a hub id is left to vLLM)."""

import json
from pathlib import Path

from typer.testing import CliRunner

from conftest import tmux_socket
from vfrl.launcher import cli
from vfrl.launcher.preflight import model_problem

ROOT = Path(__file__).resolve().parents[1]


def test_hub_ids_and_existing_folders_pass(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({}))
    assert model_problem("Qwen/Qwen2.5-0.5B-Instruct", tmp_path) is None
    assert model_problem("gpt2", tmp_path) is None
    assert model_problem("./m", tmp_path) is None
    assert model_problem(str(tmp_path / "m"), Path("/")) is None


def test_missing_local_folders_are_named_with_a_fix(tmp_path):
    problem = model_problem("./models/tiny-reverse", tmp_path)
    assert problem.startswith('model = "./models/tiny-reverse" is invalid: no such folder')
    assert "python -m vfrl.make_tiny_model --out ./models/tiny-reverse" in problem
    (tmp_path / "models").mkdir()  # first folder exists here: a local path, not a hub id
    assert "no such folder" in model_problem("models/other", tmp_path)
    (tmp_path / "models" / "empty").mkdir()
    assert "has no config.json" in model_problem("models/empty", tmp_path)


def test_quickstart_config_in_a_folder_without_the_model_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "quickstart.toml"
    cfg.write_text((ROOT / "configs" / "rl" / "quickstart.toml").read_text())
    result = CliRunner().invoke(cli.app, ["run", str(cfg), "--no-attach",
                                          "--tmux-socket", tmux_socket("model", tmp_path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f'vf-rl: error: {cfg}: model = "./models/tiny-reverse" is invalid')
    assert not (tmp_path / "outputs").exists()
    dry = CliRunner().invoke(cli.app, ["run", str(cfg), "--dry-run"])
    assert dry.exit_code == 0 and "vf-rl: warning:" in dry.stderr
