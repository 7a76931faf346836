"""What a sweep is, without starting it (launcher/sweep.py): its axes, its runs and their names, the server they
share, the machine split between them; the adapter names a shared server keeps apart; `vf-rl --sweep --dry-run`.
The real stack: test_sweep_e2e.py."""

import subprocess
from pathlib import Path

import pytest
import tomli_w

from conftest import BIN
from vfrl.launcher.config_errors import load_user_config
from vfrl.launcher.machine import Machine
from vfrl.launcher.overrides import Override
from vfrl.launcher.sweep import SweepError, expand, parse_axis, run_name
from vfrl.launcher.watch import watch_runs
from vfrl.rollouts.weight_sync import AdapterSync
from vfrl.run_dir import append_jsonl


def base_config(tmp_path: Path, **args) -> Path:
    path = tmp_path / "base.toml"
    path.write_text(tomli_w.dumps({
        "model": str(tmp_path), "env": {"id": "reverse-text"}, "inference": {"port": 0},
        "trainer": {"args": {"run_name": "lr", "output_dir": str(tmp_path / "outputs"), "use_lora": True,
                             "lora_rank": 8, "lora_sync": "merged", **args}},
    }))
    return path


def sweep_of(tmp_path: Path, specs: list[str], machine=Machine(0, 8), overrides=(), **args):
    path = base_config(tmp_path, **args)
    return expand(lambda extra: load_user_config(path, list(overrides) + extra), [parse_axis(s) for s in specs],
                  tmp_path / "outputs" / "lr", "lr", machine, tmp_path)


def test_an_axis_is_a_dotted_key_and_its_values_as_toml_literals():
    axis = parse_axis("--trainer.args.learning-rate=1e-3, 3e-3")
    assert axis.key == "trainer.args.learning_rate" and axis.values == (1e-3, 3e-3) and axis.texts == ("1e-3", "3e-3")
    assert parse_axis("env.args.style=bare,chat").values == ("bare", "chat")
    for bad, says in (("trainer.args.seed", "expected KEY=VALUE"), ("trainer.args.seed=", "expected KEY=VALUE"),
                      ("trainer.args.seed=1,,2", "expected KEY=VALUE"), ("trainer.args.seed=1,1", "given twice"),
                      ("model=a,b", "the same for every run"), ("inference.args.dtype=float16,bfloat16", "same for"),
                      ("trainer.args.lora_sync=adapter,merged", "same for"),
                      ("trainer.args.run_name=a,b", "same for")):
        with pytest.raises(SweepError, match=says):
            parse_axis(bad)


def test_run_names_say_the_values_and_stay_path_safe():
    axes = [parse_axis("trainer.args.learning_rate=1e-3"), parse_axis("env.id=a/b c")]
    assert run_name(axes, ("1e-3", "a/b c")) == "learning_rate=1e-3,id=a_b_c"


def test_a_sweep_runs_the_product_of_its_axes_against_one_server_sized_for_them_all(tmp_path):
    sweep = sweep_of(tmp_path, ["trainer.args.learning_rate=1e-3,3e-3", "trainer.args.num_batches_ahead=1,2"],
                     overrides=[Override("trainer.args.max_steps", 7, "--trainer.args.max_steps")])
    names = [r.name for r in sweep.runs]
    assert names == ["learning_rate=1e-3,num_batches_ahead=1", "learning_rate=1e-3,num_batches_ahead=2",
                     "learning_rate=3e-3,num_batches_ahead=1", "learning_rate=3e-3,num_batches_ahead=2"]
    assert [r.plan.session for r in sweep.runs] == ["lr-1", "lr-2", "lr-3", "lr-4"]
    for run in sweep.runs:
        cfg = run.config
        assert cfg.args.max_steps == 7  # the command line's overrides reach every run
        assert cfg.args.run_name == run.name and run.plan.run_dir == tmp_path / "outputs" / "lr" / run.name
        assert cfg.args.learning_rate == run.values["trainer.args.learning_rate"]
        assert cfg.args.lora_sync == "adapter"  # served side by side: never merged into the shared weights
        assert run.plan.inference is None and run.plan.server_dir == tmp_path / "outputs" / "lr"
        assert run.plan.trainer.env["VFRL_SERVER_DIR"] == str(tmp_path / "outputs" / "lr")
        assert run.plan.trainer.env["OMP_NUM_THREADS"] == "1"  # 4 trainer threads of 8 cores, split 4 ways
    assert any('lora_sync = "adapter"' in note for note in sweep.notes)
    server = sweep.server
    assert server.run_dir == tmp_path / "outputs" / "lr" and server.session == "lr"
    assert server.config.inference.args["max_loras"] == 2 * 2 + 2 * 3  # each run's adapters_served(k)
    command = server.inference.command
    assert [command[i + 1] for i, a in enumerate(command) if a == "--trainer-pid"] == [
        str(r.plan.run_dir / "trainer.pid") for r in sweep.runs]
    assert sweep.record()["runs"][1] == {
        "name": names[1], "session": "lr-2", "run_dir": str(sweep.runs[1].plan.run_dir),
        "values": {"trainer.args.learning_rate": 1e-3, "trainer.args.num_batches_ahead": 2}}


def test_the_server_takes_the_largest_lora_rank_swept(tmp_path):
    sweep = sweep_of(tmp_path, ["trainer.args.lora_rank=8,32"])
    assert sweep.server.config.args.lora_rank == 32


def test_what_cannot_share_one_server_is_refused_in_one_line(tmp_path):
    with pytest.raises(SweepError, match="use_lora = true"):
        sweep_of(tmp_path, ["trainer.args.seed=1,2"], use_lora=False, lora_sync="adapter")
    with pytest.raises(SweepError, match="same key is swept twice"):
        sweep_of(tmp_path, ["trainer.args.seed=1,2", "trainer.args.seed=3"])


def test_runs_on_one_server_serve_and_unload_only_their_own_adapters(tmp_path):
    """Each run loads `<run>/policy-N`, clears only its own names at its first load, and unloads its old versions."""
    calls = []

    class Http:
        def get(self, path):
            return type("R", (), {"json": lambda self: {"data": [{"id": "base"}, {"id": "a/policy-3"},
                                                                   {"id": "b/policy-3"}]}})()

        def post(self, path, json):
            calls.append((path, json["lora_name"]))
            return type("R", (), {"status_code": 200, "text": ""})()

    sync = AdapterSync("http://x/v1", "k", tmp_path, keep=2, run="a")
    sync.http = Http()
    for version in range(3):
        (tmp_path / f"policy-{version}").mkdir()
        assert sync.load(tmp_path / f"policy-{version}", version) == f"a/policy-{version}"
    assert calls == [("/v1/unload_lora_adapter", "a/policy-3"),  # its own, from before; never b's
                     ("/v1/load_lora_adapter", "a/policy-0"), ("/v1/load_lora_adapter", "a/policy-1"),
                     ("/v1/load_lora_adapter", "a/policy-2"), ("/v1/unload_lora_adapter", "a/policy-0")]
    assert not (tmp_path / "policy-0").exists() and (tmp_path / "policy-2").exists()  # its folder named as ever
    assert AdapterSync("http://x/v1", "k", tmp_path).name_of(4) == "policy-4"  # a run alone: as before


def test_watch_runs_shows_each_runs_steps_under_its_name_and_ends_with_one_line_per_run(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "bb"]
    for i, d in enumerate(dirs):
        d.mkdir()
        for step in (1, 2):
            append_jsonl(d / "metrics.jsonl", {"step": step, "max_steps": 2, "reward_mean": 0.1 * step + i,
                                               "loss": 0.5, "train_end": float(step)})
        (d / "trainer.exitcode").write_text(str(i))
    written = []
    assert watch_runs(dirs, write=written.append, poll=0) == [0, 1]
    lines = "\n".join(written).split("\n")
    assert [line.split()[0] for line in lines if line.startswith(("a ", "bb"))][:6] == ["a", "a", "a", "bb", "bb", "bb"]
    last = lines[-2:]
    assert last[0].startswith("a ") and "2/2" in last[0] and last[0].endswith("exit 0")
    assert last[1].startswith("bb") and "1.200" in last[1] and last[1].endswith("exit 1")
    screens = []
    for d in dirs:  # a terminal (the sweep's metrics pane): one line per run, redrawn
        (d / "metrics.jsonl").write_text("")
    watch_runs(dirs, write=screens.append, poll=0, live=True)
    assert screens and all(screen.startswith("\033[H\033[J") for screen in screens)
    assert len(screens[-1].split("\n")) == 2 + len(dirs)  # title, header, a line per run


def test_vf_rl_sweep_dry_run_shows_the_runs_the_server_and_every_script(tmp_path):
    path = base_config(tmp_path)
    done = subprocess.run([str(BIN / "vf-rl"), "@", str(path), "--sweep", "trainer.args.seed=1,2", "--dry-run"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "sweep:          lr, 2 runs against one vLLM" in out and "lr-1" in out and "seed=2" in out
    assert "--max-loras" in out and "up to 4 at once" in out
    assert out.count("vf-train @") == 2 and out.count("vf-vllm @") == 1 and out.count("--trainer-pid") == 2
    assert not (tmp_path / "outputs").exists()  # nothing written
    bad = subprocess.run([str(BIN / "vf-rl"), "@", str(path), "--sweep", "model=a,b", "--dry-run"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert bad.returncode == 2 and "the same for every run of a sweep" in bad.stderr and "Traceback" not in bad.stderr
