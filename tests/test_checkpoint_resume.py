"""Checkpoints and resume.

Unit part: a checkpoint restores weights, optimizer, scheduler and RNGs exactly; a save that dies
half-way leaves nothing that counts as a checkpoint; keep_last; how --resume finds its checkpoint.

Real part (the issue's test): `vf-rl` runs 4 steps uninterrupted; a second run of the same config is
killed with SIGKILL right after its step-2 checkpoint; `vf-rl --resume` continues it (all three against the
session's vf-vllm). Steps 3-4 must
see the same examples and prompts as the uninterrupted run, and the losses must be equal.
"""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import BIN, SharedServer, against_server, log_since, write_config, tmux_socket
from vfrl.launcher.plot import read_metrics
from vfrl.launcher.resume import ResumeError, find_checkpoint
from vfrl.learner.checkpoint import (
    TrainingState, latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint,
)
from vfrl.rollout_types import Batch, Rollout


# ---------- unit ----------
def lora_setup(model_dir, seed=0):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, get_scheduler

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    sched = get_scheduler("cosine", opt, num_warmup_steps=1, num_training_steps=10)
    return model, opt, sched


def sgd_step(model, opt, sched):
    ids = torch.randint(3, 30, (2, 12))  # draws from the torch RNG: a restored RNG must give the same ids
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad()
    return float(loss.detach())


def state(step):
    return TrainingState(step=step, seed=0, examples_per_step=4, dataset_size=100)


def pending_batch():
    r = Rollout(example_id=7, prompt=[{"role": "user", "content": "abc"}],
                completion=[{"role": "assistant", "content": "cba"}], answer="cba", prompt_ids=[1, 2, 3],
                completion_ids=[4, 5], completion_logprobs=[-0.123456789012345, -1e-9],
                completion_mask=[1, 1], policy="policy-1", reward=0.75, metrics={"lcs": 0.75})
    return Batch(step=2, policy_version=1, rollouts=[r], example_ids=[7], gen_start=1.0, gen_end=2.0)


def test_checkpoint_restores_training_exactly(tmp_path, tiny_model):
    model, opt, sched = lora_setup(tiny_model)
    sgd_step(model, opt, sched)
    later = dataclasses.replace(pending_batch(), step=3, policy_version=0)  # num_batches_ahead = 2: one more
    path = save_checkpoint(tmp_path / "checkpoints", model, opt, sched, state(1), [pending_batch(), later])
    expected_loss = sgd_step(model, opt, sched)
    expected = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    model2, opt2, sched2 = lora_setup(tiny_model, seed=123)  # different init and RNG state
    st, (pending, pending_later) = load_checkpoint(path, model2, opt2, sched2)
    assert st == state(1)
    assert pending.example_ids == [7] and pending.rollouts[0] == pending_batch().rollouts[0]  # floats exact
    assert (pending_later.step, pending_later.policy_version) == (3, 0)  # in order
    assert sgd_step(model2, opt2, sched2) == expected_loss
    for n, p in model2.named_parameters():
        if p.requires_grad:
            assert torch.equal(p, expected[n]), n
    assert sched2.get_last_lr() == sched.get_last_lr()


def test_checkpoint_layout_is_a_usable_adapter(tmp_path, tiny_model):
    model, opt, sched = lora_setup(tiny_model)
    path = save_checkpoint(tmp_path / "checkpoints", model, opt, sched, state(3))
    assert path.name == "step-3"
    assert {p.name for p in path.iterdir()} == {"model", "trainer_state.pt", "trainer_state.json", "COMPLETE"}
    assert (path / "model" / "adapter_config.json").exists() and (path / "model" / "adapter_model.safetensors").exists()


def test_full_weights_checkpoint_round_trip(tmp_path, tiny_model):
    """use_lora = false: save_pretrained writes all weights (tied lm_head once); loading restores them all."""
    from transformers import AutoModelForCausalLM, get_scheduler

    def setup(seed):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        return model, opt, get_scheduler("constant", opt)

    model, opt, sched = setup(0)
    sgd_step(model, opt, sched)
    path = save_checkpoint(tmp_path, model, opt, sched, state(1))
    assert not (path / "model" / "adapter_model.safetensors").exists()
    expected_loss = sgd_step(model, opt, sched)
    model2, opt2, sched2 = setup(5)
    load_checkpoint(path, model2, opt2, sched2)
    assert sgd_step(model2, opt2, sched2) == expected_loss
    for (n, p), (_, q) in zip(model.named_parameters(), model2.named_parameters()):
        assert torch.equal(p, q), n


class DiesWhileSaving:
    def save_pretrained(self, path):
        Path(path).mkdir(parents=True)
        (Path(path) / "adapter_model.safetensors").write_bytes(b"half")
        raise OSError("disk full")


def test_a_save_that_dies_midway_leaves_no_checkpoint(tmp_path, tiny_model):
    model, opt, sched = lora_setup(tiny_model)
    ckpts = tmp_path / "checkpoints"
    good = save_checkpoint(ckpts, model, opt, sched, state(2))
    with pytest.raises(OSError):
        save_checkpoint(ckpts, DiesWhileSaving(), opt, sched, state(4))
    assert not (ckpts / "step-4").exists()
    assert not list(ckpts.glob(".*.tmp"))  # a full disk gets its space back at once
    assert latest_checkpoint(ckpts) == good
    (ckpts / "step-6").mkdir()  # e.g. copied by hand without its marker: not a checkpoint
    (ckpts / "step-6" / "trainer_state.json").write_text("{}")
    assert list_checkpoints(ckpts) == [good]
    save_checkpoint(ckpts, model, opt, sched, state(4))
    assert not list(ckpts.glob(".*.tmp"))  # the dead save's tmp dir is gone


KILLED_BEFORE_RENAME = """
import os, signal, sys
from pathlib import Path
sys.path[:0] = [{tests!r}]
from test_checkpoint_resume import lora_setup, state
from vfrl.learner.checkpoint import save_checkpoint

model, opt, sched = lora_setup({model!r})
save_checkpoint(Path({ckpts!r}), model, opt, sched, state(2))
rename = Path.rename
def rename_or_die(self, target):  # the trainer is killed with step 4 written and marked, not yet renamed
    if self.name == ".step-4.tmp":
        os.kill(os.getpid(), signal.SIGKILL)
    return rename(self, target)
Path.rename = rename_or_die
save_checkpoint(Path({ckpts!r}), model, opt, sched, state(4))
"""


def test_a_trainer_killed_between_writing_and_renaming_a_checkpoint_resumes_from_the_previous(tmp_path, tiny_model):
    ckpts = tmp_path / "checkpoints"
    code = KILLED_BEFORE_RENAME.format(tests=str(Path(__file__).parent), model=str(tiny_model), ckpts=str(ckpts))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert (ckpts / ".step-4.tmp" / "COMPLETE").exists()  # everything written, but never renamed into place
    assert latest_checkpoint(ckpts) == ckpts / "step-2"
    model, opt, sched = lora_setup(tiny_model, seed=1)
    assert load_checkpoint(ckpts / "step-2", model, opt, sched)[0].step == 2
    run_dir = tmp_path
    assert find_checkpoint(tmp_path.parent / "nothing", str(run_dir))[1] == ckpts / "step-2"  # what --resume picks


def test_keep_last(tmp_path, tiny_model):
    model, opt, sched = lora_setup(tiny_model)
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, model, opt, sched, state(step), keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-3", "step-4"]


def fake_run(base: Path, steps: list[int]) -> None:
    for s in steps:
        d = base / "checkpoints" / f"step-{s}"
        d.mkdir(parents=True)
        (d / "COMPLETE").write_text("")


def test_a_state_file_from_an_older_version_still_loads():
    """Older checkpoints wrote data_position and policy_version too (both always equalled step)."""
    old = {"step": 3, "data_position": 3, "seed": 7, "policy_version": 3, "examples_per_step": 4, "dataset_size": 9}
    assert TrainingState.from_json(json.dumps(old)) == TrainingState(step=3, seed=7, examples_per_step=4,
                                                                     dataset_size=9)


def test_resume_finds_checkpoints(tmp_path):
    base = tmp_path / "outputs" / "run"
    fake_run(base, [2, 4])
    fake_run(base.with_name("run-2"), [2])
    base.with_name("run-3").mkdir()  # a run that died before its first checkpoint
    assert find_checkpoint(base, "latest") == (base.with_name("run-2"),
                                               base.with_name("run-2") / "checkpoints" / "step-2")
    assert find_checkpoint(base, str(base / "checkpoints" / "step-2"))[1] == (base / "checkpoints" / "step-2").resolve()
    assert find_checkpoint(base, str(base)) == (base.resolve(), (base / "checkpoints" / "step-4").resolve())
    with pytest.raises(ResumeError, match="has no complete checkpoint step-4 .it has: step-2"):
        find_checkpoint(base, "4")
    with pytest.raises(ResumeError, match="no run directory"):
        find_checkpoint(tmp_path / "outputs" / "other", "latest")


def test_a_resumed_run_dir_forgets_the_old_exit_codes_and_pids_and_keeps_the_old_config(tmp_path):
    from vfrl.launcher.resume import prepare_run_dir

    for name in ("trainer.exitcode", "inference.exitcode", "config.toml", "inference.pid", "trainer.pid"):
        (tmp_path / name).write_text("0\n")
    prepare_run_dir(tmp_path)  # a stale inference code would let `vf-rl status` report the new server exited
    assert not (tmp_path / "trainer.exitcode").exists() and not (tmp_path / "inference.exitcode").exists()
    # the old vf-vllm's pid names a dead process: the trainer would take the new (or remote) server for lost
    assert not (tmp_path / "inference.pid").exists() and not (tmp_path / "trainer.pid").exists()
    assert [p.read_text() for p in tmp_path.glob("config.before-resume-*.toml")] == ["0\n"]


def test_resume_without_checkpoint_is_one_clear_line(tmp_path, tiny_model):
    cfg = write_config(tmp_path / "cfg.toml", tiny_model, port=0, output_dir=tmp_path / "outputs")
    proc = subprocess.run([str(BIN / "vf-rl"), "@", str(cfg), "--resume", "--no-attach", "--tmux-socket",
                           tmux_socket("resume", tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "no run directory" in proc.stderr and "save_strategy" in proc.stderr


def test_cpu_server_never_chunks_prefills_of_seeded_requests(monkeypatch):
    """vLLM CPU: a chunked prefill rewinds the request's generator, which CPU generators cannot do."""
    from vfrl.inference import server

    monkeypatch.setattr(server, "_cpu_build", lambda: True)
    assert "--no-enable-chunked-prefill" in server.server_argv("m", "127.0.0.1", 8000, 8, {})
    user = server.server_argv("m", "127.0.0.1", 8000, 8, {"enable_chunked_prefill": True})
    assert "--enable-chunked-prefill" in user and "--no-enable-chunked-prefill" not in user
    monkeypatch.setattr(server, "_cpu_build", lambda: False)
    assert "--no-enable-chunked-prefill" not in server.server_argv("m", "127.0.0.1", 8000, 8, {})


# ---------- the real thing ----------
pytestmark_e2e = pytest.mark.e2e

RUN_ARGS = dict(max_steps=4, save_strategy="steps", save_steps=2, keep_last=2, seed=7, batch_size=8,
                rollouts_per_example=4, micro_batch_size=8, max_tokens=8)


def vf_rl(cfg: Path, socket_name: str, *extra: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "vf-rl"), "@", str(cfg), "--no-attach", "--tmux-socket", socket_name, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                            start_new_session=True, env={**os.environ, "SHARED_VLLM_KEY": SharedServer.api_key})


def rollouts(run_dir: Path, step: int) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()]


def run_config(path: Path, model: Path, output_dir: Path, run_name: str, server: SharedServer) -> Path:
    """RUN_ARGS against the session's vf-vllm (inference.base_url): a run that starts its own vLLM, is resumed
    and starts another is test_faults_e2e's; here the three runs share one server, one after the other."""
    return against_server(write_config(path, model, port=0, output_dir=output_dir, run_name=run_name, **RUN_ARGS),
                          server.base_url)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model, shared_vllm_server):
    """(uninterrupted run dir, killed-then-resumed run dir, outputs of the three vf-rl calls, the server's log
    from the killed run's start on)."""
    tmp = tmp_path_factory.mktemp("resume")
    sock = f"vfrl-resume-{tmp.name}"
    out = {}
    procs = []
    try:
        full_cfg = run_config(tmp / "full.toml", tiny_model, tmp / "outputs", "full", shared_vllm_server)
        full = vf_rl(full_cfg, sock, cwd=tmp)
        procs.append(full)
        out["full"] = (full.communicate(timeout=600)[0], full.returncode)

        cfg = run_config(tmp / "killed.toml", tiny_model, tmp / "outputs", "killed", shared_vllm_server)
        run_dir = tmp / "outputs" / "killed"
        log_start = shared_vllm_server.log.stat().st_size
        p = vf_rl(cfg, sock, cwd=tmp)
        procs.append(p)
        deadline = time.time() + 600
        while not (run_dir / "checkpoints" / "step-2" / "COMPLETE").exists():
            assert time.time() < deadline and p.poll() is None, "no step-2 checkpoint"
            time.sleep(0.05)
        trainer_pid = int((run_dir / "trainer.pid").read_text())
        os.kill(trainer_pid, signal.SIGKILL)
        killed_at = read_metrics(run_dir)[-1]["step"] if (run_dir / "metrics.jsonl").exists() else 0
        out["killed"] = (p.communicate(timeout=300)[0], p.returncode, killed_at)

        p = vf_rl(cfg, sock, "--resume", cwd=tmp)
        procs.append(p)
        out["resumed"] = (p.communicate(timeout=600)[0], p.returncode)
        out["server_log"] = log_since(shared_vllm_server.log, log_start)
        yield tmp / "outputs" / "full", run_dir, out
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


@pytestmark_e2e
def test_uninterrupted_run_checkpoints(runs):
    full, _, out = runs
    log, code = out["full"]
    assert code == 0, log[-3000:]
    assert [p.name for p in list_checkpoints(full / "checkpoints")] == ["step-2", "step-4"]
    assert (full / "checkpoints" / "step-2" / "pending_batch.json").exists()  # batch 3, made by policy 1
    assert not (full / "checkpoints" / "step-4" / "pending_batch.json").exists()  # nothing left to train


@pytestmark_e2e
def test_sigkill_after_step_2_checkpoint_then_resume(runs):
    full, killed, out = runs
    log, code, killed_at = out["killed"]
    assert code == 128 + signal.SIGKILL, log[-3000:]  # vf-rl reports the trainer's death
    assert killed_at <= 3
    log, code = out["resumed"]
    assert code == 0, log[-3000:]
    assert "vf-rl: resuming from" in log and "resumed from" in log
    assert not list(full.parent.glob("killed-*")), "--resume must reuse the run dir"
    # the adapter vLLM served first after the restart is the checkpoint's
    assert out["server_log"].count("Loaded new LoRA adapter: name 'policy-2'") == 2  # first run + resume
    m = read_metrics(killed)
    assert [r["step"] for r in m] == [1, 2, 3, 4]  # appended, each step once
    assert m[2].get("resumed_from") == 2


@pytestmark_e2e
def test_resumed_steps_see_the_same_data(runs):
    full, killed, _ = runs
    for step in (3, 4):
        a, b = rollouts(full, step), rollouts(killed, step)
        assert [r["example_id"] for r in a] == [r["example_id"] for r in b], step
        assert [r["prompt"] for r in a] == [r["prompt"] for r in b], step


@pytestmark_e2e
def test_resumed_losses_equal_the_uninterrupted_run(runs):
    """Exact equality, not a tolerance: same batch, same weights, same optimizer state, same CPU kernels.

    Step 3 trains the batch stored in the step-2 checkpoint (sampled by policy 1, as in the
    uninterrupted run). Step 4's batch is regenerated by vLLM from the checkpoint's adapter with the
    same per-request seeds; vLLM CPU seeded sampling is deterministic, so the completions and their
    logprobs are bit-identical and so is the loss. Any difference would show a real reproducibility bug.
    """
    full, killed, _ = runs
    a, b = read_metrics(full), read_metrics(killed)
    for step in (3, 4):
        ra, rb = rollouts(full, step), rollouts(killed, step)
        assert [r["completion"] for r in ra] == [r["completion"] for r in rb], step
        assert a[step - 1]["loss"] == b[step - 1]["loss"], (step, a[step - 1]["loss"], b[step - 1]["loss"])
        assert a[step - 1]["reward_mean"] == b[step - 1]["reward_mean"]
        assert a[step - 1]["policy_version"] == b[step - 1]["policy_version"] == step - 2


@pytest.fixture(scope="module")
def ahead_runs(tmp_path_factory, tiny_model, shared_vllm_server):
    """num_batches_ahead = 2, for real: a run of 5 steps with a checkpoint after step 2, then `--resume` from that
    checkpoint in the same run dir. (metrics and rollout files of the whole run, kept before the resume; the
    resumed run dir; the two vf-rl outputs.)"""
    import shutil

    tmp = tmp_path_factory.mktemp("ahead")
    sock = f"vfrl-ahead-{tmp.name}"
    cfg = against_server(write_config(tmp / "ahead.toml", tiny_model, port=0, output_dir=tmp / "outputs",
                                      run_name="ahead", num_batches_ahead=2,
                                      **{**{k: v for k, v in RUN_ARGS.items() if k != "keep_last"}, "max_steps": 5}),
                         shared_vllm_server.base_url)
    run_dir = tmp / "outputs" / "ahead"
    outputs = []
    try:
        for extra in ((), ("--resume", str(run_dir / "checkpoints" / "step-2"))):
            p = vf_rl(cfg, sock, *extra, cwd=tmp)
            outputs.append(p.communicate(timeout=600))
            assert p.returncode == 0, outputs[-1][0][-3000:]
            if not extra:
                shutil.copytree(run_dir, tmp / "whole")  # what the uninterrupted run wrote
        yield tmp / "whole", run_dir, outputs
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], capture_output=True)


@pytestmark_e2e
def test_two_batches_ahead_train_two_policies_back_and_resume_exactly(ahead_runs):
    """Batches sampled two policies before the one they train (never three); vLLM holds the three adapters the
    batches in flight and the newest push need; the checkpoint keeps the two batches older policies sampled,
    and the resumed run trains on them and samples the rest again, with the uninterrupted run's losses."""
    whole, resumed, _ = ahead_runs
    a = [m for m in read_metrics(whole) if "loss" in m]
    assert [m["step"] - 1 - m["policy_version"] for m in a] == [0, 1, 2, 2, 2]
    kept = sorted(p.name for p in (whole / "checkpoints" / "step-2").glob("pending_batch*.json"))
    assert kept == ["pending_batch.1.json", "pending_batch.json"]  # batches 3 and 4, sampled by policies 0 and 1
    b = [m for m in read_metrics(resumed) if "loss" in m]
    assert [m["step"] for m in b] == [1, 2, 3, 4, 5] and b[2].get("resumed_from") == 2
    for step in (3, 4, 5):
        assert [r["completion"] for r in rollouts(whole, step)] == [r["completion"] for r in rollouts(resumed, step)]
        assert a[step - 1]["loss"] == b[step - 1]["loss"], step
        assert a[step - 1]["policy_version"] == b[step - 1]["policy_version"] == step - 3


@pytest.mark.e2e
def test_export_merges_the_adapter_and_the_folder_replies_as_vllm_does_with_the_adapter(runs, shared_vllm_server,
                                                                                          tmp_path):
    """`vf-rl export RUN_DIR`: a plain Hugging Face folder (no LoRA left in it, the base's weights changed by the
    merge) whose greedy replies under transformers are those of the run's adapter served by vLLM, on 8 prompts."""
    import httpx
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vfrl.inference.endpoints import server_root
    from vfrl.launcher.run_policy import find_policy

    full = runs[0]
    done = subprocess.run([str(BIN / "vf-rl"), "export", str(full), "-o", str(tmp_path / "merged")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    policy = find_policy(full)
    assert done.stdout.strip() == f"wrote {tmp_path / 'merged'}: step {policy.step} as a Hugging Face model folder"
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", torch_dtype=torch.float32).eval()
    base = AutoModelForCausalLM.from_pretrained(shared_vllm_server.model, torch_dtype=torch.float32)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    changed = [n for n, w in merged.state_dict().items() if not torch.equal(w, base.state_dict()[n])]
    assert changed and all(n.endswith("weight") for n in changed), changed
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "merged")

    http = httpx.Client(base_url=server_root(shared_vllm_server.base_url), timeout=120,
                        headers={"Authorization": f"Bearer {SharedServer.api_key}"})
    name = f"export-check-{policy.step}"
    loaded = http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(policy.path)})
    assert loaded.status_code == 200, loaded.text
    try:
        for word in ["apple", "banana", "cherry", "dates", "elderberry", "fig", "grape", "honeydew"]:
            ids = tokenizer(f"Reverse the text: {word}").input_ids
            reply = http.post("/v1/completions", json={"model": name, "prompt": ids, "max_tokens": 12,
                                                       "temperature": 0}).json()["choices"][0]["text"]
            with torch.no_grad():
                out = merged.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
            assert tokenizer.decode(out[0, len(ids):], skip_special_tokens=True) == reply, word
    finally:
        http.post("/v1/unload_lora_adapter", json={"lora_name": name})
