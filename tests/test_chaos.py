"""A few rounds of the chaos run (benchmarks/chaos.py, whose 20 rounds are docs/reliability.md's table) in the suite.

Real: vf-rl, real tmux and real peft against the session's vf-vllm (inference.base_url), so a round costs a
vf-train start, not a vLLM start. The victims are the run's own processes that such a run has: vf-train, the
trainer pane's shell and the tmux server (vLLM's processes are the heal e2e's, test_faults_e2e.py). Seed 11 draws
each of them once, at an eval, a push and a push, one of them with SIGTERM. Each round the script checks what the
benchmark checks: no process of the run left, metrics.jsonl's steps once each, every checkpoint on disk loads,
and the continued run's losses equal the uninterrupted run's.
"""

import sys

import pytest

from conftest import ROOT, SharedServer, against_server, write_config

sys.path.insert(0, str(ROOT / "benchmarks"))
import chaos  # noqa: E402

VICTIMS = ["vf-train", "trainer pane shell", "tmux server"]


@pytest.mark.e2e
def test_three_chaos_rounds_lose_nothing_train_nothing_twice_and_leave_nothing(tmp_path, tiny_model,
                                                                            shared_vllm_server, monkeypatch):
    cfg = against_server(write_config(tmp_path / "chaos.toml", tiny_model, port=0, output_dir=tmp_path / "unused",
                                      run_name="chaos", seed=7, batch_size=8, micro_batch_size=8, max_tokens=8,
                                      num_eval_examples=8),
                         shared_vllm_server.base_url)
    monkeypatch.setenv("SHARED_VLLM_KEY", SharedServer.api_key)
    args = chaos.parse_args(["--rounds", "3", "--seed", "11", "--steps", "36", "--pause-scale", "0.2",
                             "--config", str(cfg), "--victims", ",".join(VICTIMS), "--save-steps", "4",
                             "--eval-steps", "6", "--dir", str(tmp_path / "chaos")])
    assert args.remote and args.session == "chaos"
    result = chaos.chaos(args)
    rounds, summary = result["rounds"], result["summary"]
    assert summary["failures"] == [], summary["failures"]
    assert sorted(r["victim"] for r in rounds) == sorted(VICTIMS)
    assert {r["signal"] for r in rounds} == {"SIGKILL", "SIGTERM"}
    for r in rounds:  # none of them can heal: each stops the run, which goes on with the command it printed
        assert r["outcome"] in ("stopped", "finished"), r
        assert r["continued"] in ("printed command", "--resume latest", "afresh (max_steps reached)"), r
    assert sum(r["checkpoints_loaded"] for r in rounds) >= 2
    losses = summary["loss_checks"]
    assert losses["vs_reference"] + losses["vs_before_fault"] >= 4, losses
    assert losses["exact"] == losses["vs_reference"] + losses["vs_before_fault"], losses
