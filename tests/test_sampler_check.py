"""The mismatch alarm watches vLLM against the trainer on the same policy (learner/sampler_check.py), not
mismatch_kl, which also holds one step of policy change in the one-step off-policy loop."""

import dataclasses

import pytest

from test_train_step import fake_batch, make_learner, make_trainer


def step_two_of_a_one_step_off_policy_run(tiny_model, tmp_path, learning_rate):
    """Step 1 trains on batch 1 (policy 0); batch 2 was sampled by policy 0 too, and step 2 trains it at policy 1."""
    trainer = make_learner(tiny_model, tmp_path, learning_rate=learning_rate)
    batch = fake_batch(trainer, seed=1)  # sampling logprobs of policy 0
    first = trainer.train_step(batch)
    second = trainer.train_step(dataclasses.replace(batch, step=1))
    return first, second


def test_a_large_policy_step_moves_mismatch_kl_but_not_the_sampler_check(tiny_model, tmp_path):
    first, second = step_two_of_a_one_step_off_policy_run(tiny_model, tmp_path, learning_rate=5e-2)
    assert first["sampler_mismatch_kl"] < 1e-6 and first["mismatch_kl"] < 1e-6  # on-policy: the same thing
    assert second["mismatch_kl"] > 1e-3  # policy 1 against policy 0's samples: the step's own change
    assert second["sampler_mismatch_kl"] < 1e-6  # policy 0's weights, kept: vLLM and trainer agree


def test_samples_from_another_policy_than_claimed_show_in_the_sampler_check(tiny_model, tmp_path):
    """A broken sync: vLLM sampled with other weights than those of the policy the batch names."""
    trainer = make_learner(tiny_model, tmp_path, learning_rate=5e-2)
    batch = fake_batch(trainer, seed=1)
    trainer.train_step(batch)
    trainer.train_step(batch)  # policy 2 now; batch still claims policy 0, whose weights are no longer kept
    stale = trainer.train_step(dataclasses.replace(batch, policy_version=1))  # claims policy 1, sampled by 0
    assert stale["sampler_mismatch_kl"] > 1e-3


def test_the_alarm_follows_the_sampler_check_and_falls_back_to_mismatch_kl(tiny_model, tmp_path):
    trainer = make_trainer(tiny_model, tmp_path)
    record = {"mismatch_kl": 0.7, "sampler_mismatch_kl": 1e-8}
    assert trainer.run_log.mismatch.check(record.get("sampler_mismatch_kl", record["mismatch_kl"])) is None
    batch = fake_batch(trainer.learner)
    trainer.run_log.step(1, {"step": 1, "max_steps": 4, "mismatch_kl": 0.7, "sampler_mismatch_kl": 1e-8}, batch)
    trainer.run_log.step(2, {"step": 2, "max_steps": 4, "mismatch_kl": 0.7}, batch)  # not measured: mismatch_kl decides
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert ['"mismatch_kl_alert": 0' in lines[0], '"mismatch_kl_alert": 1' in lines[1]] == [True, True]


@pytest.mark.parametrize("numel_limit, measured", [(10**9, True), (10, False)])
def test_trainable_parameters_past_the_limit_are_not_copied(tiny_model, tmp_path, numel_limit, measured):
    from vfrl.learner.sampler_check import SamplerCheck

    trainer = make_learner(tiny_model, tmp_path)
    trainer.sampler_check = SamplerCheck(trainer.policy, max_numel=numel_limit)
    assert ("sampler_mismatch_kl" in trainer.train_step(fake_batch(trainer))) is measured
