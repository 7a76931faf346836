"""Monitoring: console output through a pipe, the mismatch-KL watch, vf-rl plot, wandb offline, no wandb import."""

import io
import json
import os
import subprocess
import sys
from types import SimpleNamespace

from conftest import BIN, ROOT
from vfrl.run_dir import set_aside_after
from vfrl.trainer.console import TrainerConsole, progress_line
from vfrl.trainer.mismatch import MismatchWatch
from vfrl.trainer.wandb_sink import WandbSink


def record(step: int, **kw) -> dict:
    r = {"step": step, "max_steps": 10, "reward_mean": 0.5 + 0.01 * step, "loss": -0.01 * step,
         "mismatch_kl": 1e-6, "tokens_per_s": 900.0, "step_s": 2.0, "generate_s": 1.5, "wait_s": 0.25,
         "train_s": 1.5, "sync_s": 0.05, "mismatch_kl_alert": 0}
    r.update(kw)
    return r


def rollout(prompt: str, reply: str, reward: float):
    return SimpleNamespace(prompt=[{"role": "user", "content": prompt}],
                           completion=[{"role": "assistant", "content": reply}], reward=reward, example_id=3,
                           answer=prompt[::-1])


# ---------- console ----------
def test_progress_line_has_every_part():
    line = progress_line(record(3))
    for part in ("step 3/10", "reward 0.530", "loss -0.0300", "mismatch 1.0e-06", "900 tok/s", "2.00s:",
                 "gen 1.50", "wait 0.25", "train 1.50", "sync 0.05"):
        assert part in line, (part, line)


def test_console_through_a_pipe_is_plain_readable_text():
    out = io.StringIO()  # not a TTY, like `vf-train | tee trainer.log`
    con = TrainerConsole(out)
    con.step(record(1))
    con.completions(1, [rollout("abc", "cba", 1.0), rollout("hello [bold]x[/bold]", "olleh", 0.6)], limit=2)
    con.warn("mismatch_kl jumped")
    text = out.getvalue()
    assert "\x1b[" not in text  # no colour or cursor codes in the log
    assert "step 1/10 | reward 0.510" in text
    assert "'cba'" in text and "1.000" in text and "[bold]x[/bold]" in text  # markup shown, not interpreted
    assert "!!! WARNING: mismatch_kl jumped" in text
    assert all(len(line) <= 160 for line in text.splitlines())


def test_completions_table_respects_limit():
    out = io.StringIO()
    TrainerConsole(out).completions(5, [rollout(f"p{i}", f"c{i}", 0.1 * i) for i in range(6)], limit=2)
    assert "'c1'" in out.getvalue() and "'c2'" not in out.getvalue()
    out = io.StringIO()
    TrainerConsole(out).completions(5, [rollout("p", "c", 0.0)], limit=0)
    assert out.getvalue() == ""


# ---------- mismatch watch ----------
def test_mismatch_watch_absolute_threshold():
    watch = MismatchWatch(warn_at=0.1, jump=10)
    assert watch.check(0.05) is None
    assert "above mismatch_kl_warn = 0.1" in watch.check(0.2)
    assert "mismatch_kl is nan" in watch.check(float("nan"))


def test_mismatch_watch_jump_versus_running_median():
    watch = MismatchWatch(warn_at=0.1, jump=10, min_history=4)
    for v in (0.002, 0.003, 0.0025, 0.002):
        assert watch.check(v) is None
    reason = watch.check(0.05)  # 20x the median 0.00225, below the absolute threshold
    assert reason and "jumped to 0.05" in reason and "22x" in reason
    assert watch.check(0.003) is None  # the jump did not enter the median


def test_mismatch_watch_ignores_noise_at_fp32_parity_level():
    watch = MismatchWatch(warn_at=0.1, jump=10)
    for v in (1e-9, 2e-9, 1e-9, 5e-8, 1e-7, 9e-4):  # 1e4x the median, but far below warn_at / 100
        assert watch.check(v) is None


def test_mismatch_watch_waits_for_history_before_calling_jumps():
    """The quick start's mismatch_kl over its first 12 steps (lr warm-up: one step of policy change
    grows from 1e-9 to 0.02) is no incident; a later 30x jump is."""
    watch = MismatchWatch(warn_at=0.1, jump=10)
    warmup = (3e-9, 2e-8, 8e-4, 3.1e-3, 8.8e-3, 1.74e-2, 2.13e-2, 4.9e-3, 5.9e-3, 2.23e-2, 6.7e-3, 6.3e-3)
    assert [watch.check(v) for v in warmup] == [None] * len(warmup)
    assert "jumped to 0.09" in watch.check(0.09)


def test_resume_sets_later_metrics_aside(tmp_path):
    m = tmp_path / "metrics.jsonl"
    m.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)) + '{"step": 4, "lo')
    assert set_aside_after(m, 2) == 2
    assert [json.loads(line)["step"] for line in m.read_text().splitlines()] == [1, 2]
    discarded = (tmp_path / "metrics.discarded.jsonl").read_text().splitlines()
    assert discarded[0] == '{"step": 3}' and discarded[1].startswith('{"step": 4')


# ---------- vf-rl plot ----------
def test_vf_rl_plot_writes_valid_pngs(tmp_path):
    rows = [record(s, mismatch_kl=1e-6 * s, mismatch_kl_alert=int(s == 7)) for s in range(1, 13)]
    rows.insert(0, {"step": 0, "max_steps": 10, "eval/reward_mean": 0.4})
    rows.append({"step": 12, "max_steps": 12, "eval/reward_mean": 0.6})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.run([str(BIN / "vf-rl"), "plot", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    from PIL import Image

    expected = [tmp_path / "curves.png"] + [tmp_path / "plots" / f"{n}.png"
                                            for n in ("reward", "loss", "mismatch_kl", "step_time")]
    for png in expected:
        assert f"wrote {png}" in proc.stdout
        with Image.open(png) as img:
            img.verify()
            assert img.format == "PNG"
        with Image.open(png) as img:
            assert img.size[0] > 300 and sum(1 for c in img.convert("L").histogram() if c) > 10  # something was drawn


def test_vf_rl_plot_names_a_dir_without_metrics(tmp_path):
    proc = subprocess.run([str(BIN / "vf-rl"), "plot", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no metrics.jsonl" in proc.stderr and "Traceback" not in proc.stderr


# ---------- wandb ----------
def test_wandb_offline_writes_run_files_under_run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sink = WandbSink(tmp_path, "unit", {"trainer": {"args": {"seed": 0}}})
    sink.log(record(1))
    sink.log({"step": 1, "eval/reward_mean": 0.7})
    sink.completions(1, [rollout("abc", "cba", 1.0)])
    sink.alert("mismatch_kl at step 1", "offline: printed, not sent")
    sink.finish()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("run-*.wandb")), list(runs[0].iterdir())
    assert (tmp_path / "wandb_run_id").read_text().strip() in runs[0].name


def test_report_to_none_never_imports_wandb(tiny_model, tmp_path):
    """Build the real trainer with report_to = "none" and check wandb was never imported."""
    code = f"""
import sys
from pathlib import Path
sys.path.insert(0, {str(ROOT / 'tests')!r})
from conftest import write_config
from vfrl.config import load_config
from vfrl.trainer.trainer import RLTrainer
cfg = load_config(write_config(Path({str(tmp_path)!r}) / "c.toml", Path({str(tiny_model)!r}), 8000,
                               Path({str(tmp_path)!r})))
assert cfg.args.report_to == "none"
RLTrainer(cfg, Path({str(tmp_path)!r}) / "run", "http://127.0.0.1:9/v1", "k")
print("wandb imported:", "wandb" in sys.modules)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "wandb imported: False" in proc.stdout


def test_trainer_log_flags_a_mismatch_jump_in_metrics_console_and_wandb(tiny_model, tmp_path, capsys):
    """RunLog.step: metrics.jsonl line per step with mismatch_kl_alert, rollouts file, warning, wandb alert."""
    from conftest import write_config
    from vfrl.config import load_config
    from vfrl.rollout_types import Batch, Rollout
    from vfrl.trainer.trainer import RLTrainer

    cfg = load_config(write_config(tmp_path / "c.toml", tiny_model, 8000, tmp_path, log_completions=True,
                                   logging_steps=2, num_completions_to_print=1))
    trainer = RLTrainer(cfg, tmp_path / "run", "http://127.0.0.1:9/v1", "k")

    class Sink:  # stands in for WandbSink: records what the trainer sends
        logged, alerts, tables = [], [], []

        def log(self, record):
            self.logged.append(record)

        def alert(self, title, text):
            self.alerts.append(title)

        def completions(self, step, rollouts):
            self.tables.append(step)

    trainer.run_log.tracker = sink = Sink()
    r = Rollout(example_id=1, prompt=[{"role": "user", "content": "abc"}],
                completion=[{"role": "assistant", "content": "cba"}], answer="cba", prompt_ids=[1], completion_ids=[2],
                completion_logprobs=[-0.1], completion_mask=[1], policy="policy-0", reward=1.0)
    batch = Batch(step=0, policy_version=0, rollouts=[r], example_ids=[1])
    for step, kl in enumerate((2e-3, 3e-3, 2e-3, 2.5e-3) * 2 + (2e-3, 3e-3, 0.06), start=1):
        trainer.run_log.step(step, record(step, mismatch_kl=kl), batch)
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["mismatch_kl_alert"] for x in lines] == [0] * 10 + [1]
    out = capsys.readouterr().out
    assert "!!! WARNING: step 11: mismatch_kl jumped to 0.06" in out
    assert sink.alerts == ["mismatch_kl at step 11"] and [x["step"] for x in sink.logged] == list(range(1, 12))
    assert sink.tables == [2, 4, 6, 8, 10] and out.count("sample completions") == 5
    assert (tmp_path / "run" / "rollouts" / "step_11.jsonl").exists()


def test_report_to_tensorboard_writes_event_files_tensorboard_reads(tmp_path):
    """report_to = "tensorboard": the step and eval records as scalars at their step, sample completions and the
    mismatch alarm as text, in <run_dir>/tensorboard, read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from vfrl.config import TrainerArgs
    from vfrl.run_dir import RunDir
    from vfrl.rollout_types import Batch
    from vfrl.trainer.run_log import RunLog

    paths = RunDir(tmp_path / "run")
    paths.rollouts.mkdir(parents=True)
    args = TrainerArgs(report_to="tensorboard", logging_steps=1, num_completions_to_print=1)
    log = RunLog(paths, args, TrainerConsole(io.StringIO()), config={"model": "m"})
    batch = Batch(step=0, policy_version=0, rollouts=[], example_ids=[])
    for step in (1, 2):
        log.step(step, record(step), batch)
    log.tracker.completions(2, [rollout("abc | x", "cba", 1.0)])
    log.eval(2, {"eval/reward_mean": 0.75, "eval/pass@4": 1.0}, [])
    log.tracker.alert("mismatch_kl at step 2", "jumped")
    log.tracker.finish()
    events = EventAccumulator(str(paths.tensorboard), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    assert [(e.step, round(e.value, 4)) for e in events.Scalars("loss")] == [(1, -0.01), (2, -0.02)]
    assert [(e.step, e.value) for e in events.Scalars("eval/pass@4")] == [(2, 1.0)]
    assert "step" not in events.Tags()["scalars"] and "max_steps" in events.Tags()["scalars"]
    texts = {tag: [e.tensor_proto.string_val[0].decode() for e in events.Tensors(tag)]
             for tag in ("completions/text_summary", "alerts/text_summary")}
    assert any("| 3 | abc \\| x | cba | 1.000 |" in t for t in texts["completions/text_summary"])
    assert "jumped" in texts["alerts/text_summary"][0]


def test_a_console_whose_pipe_is_gone_goes_quiet_instead_of_ending_the_run():
    """`vf-train | tee` with tee gone (the pane closed): rich would raise SystemExit(1) mid-step, and the run would
    end before its emergency checkpoint. The console stops writing; the caller goes on."""
    read, write = os.pipe()
    os.close(read)
    out = os.fdopen(write, "w")
    con = TrainerConsole(out)
    for step in (1, 2):
        con.step(record(step))
        con.warn("still here")
    assert con.console.quiet
