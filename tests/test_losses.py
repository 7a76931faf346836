"""Advantages, each loss, each normalization and the masking switches, against hand-computed values."""

import math

import pytest
import torch
from pydantic import ValidationError

from vfrl.config import TrainerArgs
from vfrl.rollout_types import Rollout
from vfrl.learner.advantages import group_advantages, reward_stats
from vfrl.learner.batch import collate, make_train_batch
from vfrl.learner.loss import (LossInputs, compute_loss, gspo_loss, importance_weights, kl_penalty, mismatch_kl,
                               policy_loss, ppo_clip_loss, ratio_mask_loss)
from vfrl.learner.normalization import loss_weights

LOG = math.log


# ---- advantages ----
def test_group_advantages_subtract_group_mean():
    r = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 4.0])
    assert torch.allclose(group_advantages(r, 2), torch.tensor([0.5, -0.5, 0.0, 0.0, -1.0, 1.0]))


def test_group_advantages_scaled_by_group_std():
    r = torch.tensor([1.0, 0.0, 3.0, 3.0])
    adv = group_advantages(r, 2, scale_rewards=True)
    std = math.sqrt(0.5)  # unbiased std of (1, 0)
    assert torch.allclose(adv, torch.tensor([0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.0, 0.0]))


def test_group_of_one_has_zero_advantage_even_when_scaled():
    assert group_advantages(torch.tensor([3.0, 1.0]), 1, scale_rewards=True).tolist() == [0.0, 0.0]


def test_reward_stats():
    env = torch.tensor([1.0, 1.0, 0.0, 1.0])
    s = reward_stats(env, env, group_sizes=2)
    assert s["reward_mean"] == 0.75
    assert math.isclose(s["reward_std"], 0.5)  # unbiased std of (1, 1, 0, 1)
    assert s["zero_std_groups"] == 0.5  # the first group (1, 1) carries no signal


# ---- losses ----
def test_ratio_mask_loss_hand_computed():
    logp = torch.tensor([[LOG(0.5), LOG(0.2), 0.0]], requires_grad=True)
    old = torch.tensor([[LOG(0.25), LOG(0.2), 0.0]])
    pl = ratio_mask_loss(logp, old, torch.tensor([2.0]), mask_ratio_low=0.1, mask_ratio_high=10)
    # ratios 2 and 1 -> -ratio * A = -4, -2 (the third token is masked later by the loss mask)
    assert torch.allclose(pl.per_token[0, :2], torch.tensor([-4.0, -2.0]))
    (pl.per_token[0, :2].sum() / 2).backward()
    assert torch.allclose(logp.grad, torch.tensor([[-2.0, -1.0, 0.0]]))  # d(-ratio*A/2)/dlogp = -ratio*A/2


def test_ratio_mask_loss_drops_out_of_range_tokens():
    logp = torch.zeros(1, 3)
    old = torch.tensor([[LOG(0.01), 0.0, LOG(50.0)]])  # ratios 100, 1, 0.02
    pl = ratio_mask_loss(logp, old, torch.tensor([1.0]), 0.125, 8.0)
    assert pl.per_token.tolist() == [[0.0, -1.0, 0.0]]
    assert pl.high.tolist() == [[True, False, False]] and pl.low.tolist() == [[False, False, True]]


@pytest.mark.parametrize("old_value", [float("-inf"), -9999.0])
def test_an_impossible_sampling_logprob_is_masked_not_nan(old_value):
    logp = torch.zeros(1, 2, requires_grad=True)
    pl = ratio_mask_loss(logp, torch.tensor([[old_value, 0.0]]), torch.tensor([1.0]), 0.125, 8.0)
    pl.per_token.sum().backward()
    assert pl.per_token.tolist() == [[0.0, -1.0]] and logp.grad.tolist() == [[0.0, -1.0]]


def test_ppo_clip_loss_hand_computed():
    # ratios 1.5, 0.5, 1.0 for a positive and a negative advantage, epsilon 0.2
    old = torch.log(torch.tensor([[1 / 1.5, 1 / 0.5, 1.0]])).repeat(2, 1)
    logp = torch.zeros(2, 3, requires_grad=True)
    pl = ppo_clip_loss(logp, old, torch.tensor([1.0, -1.0]), epsilon=0.2, epsilon_high=0.2)
    # A=+1: -min(r, clip(r)) = -1.2 (clipped high), -0.5, -1;  A=-1: -min(-r, -clip(r)) = 1.5, 0.8 (clipped low), 1
    assert torch.allclose(pl.per_token, torch.tensor([[-1.2, -0.5, -1.0], [1.5, 0.8, 1.0]]))
    assert pl.high.tolist() == [[True, False, False], [False, False, False]]
    assert pl.low.tolist() == [[False, False, False], [False, True, False]]
    pl.per_token.sum().backward()
    # clipped tokens get no gradient; the others d(-r*A)/dlogp = -r*A
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.5, -1.0], [1.5, 0.0, 1.0]]))


def test_ppo_clip_higher_bound_is_separate():
    old = torch.log(torch.tensor([[1 / 1.25]]))
    pl = ppo_clip_loss(torch.zeros(1, 1), old, torch.tensor([1.0]), epsilon=0.2, epsilon_high=0.28)  # DAPO's
    assert math.isclose(pl.per_token.item(), -1.25, rel_tol=1e-6) and not pl.high.any()


def test_gspo_loss_uses_the_sequence_ratio():
    # log ratios log2 and 0 on the two loss tokens (the third is masked): sequence ratio sqrt(2) = 1.414
    logp = torch.tensor([[LOG(2.0), 0.0, 5.0]], requires_grad=True)
    old = torch.zeros(1, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    pl = gspo_loss(logp, old, torch.tensor([1.0]), mask, epsilon=0.2, epsilon_high=0.5)
    assert torch.allclose(pl.per_token, torch.full((1, 3), -math.sqrt(2)))  # every token carries the sequence's
    (pl.per_token * mask).sum().backward()
    # d/dlogp_t of -2 s (two tokens) = -2 s / 2 on each loss token, 0 on the masked one
    assert torch.allclose(logp.grad, torch.tensor([[-math.sqrt(2), -math.sqrt(2), 0.0]]))
    clipped = gspo_loss(logp, old, torch.tensor([1.0]), mask, epsilon=0.2, epsilon_high=0.2)
    assert torch.allclose(clipped.per_token, torch.full((1, 3), -1.2)) and clipped.high.all()


def test_kl_penalty_k3_hand_computed():
    kl = kl_penalty(torch.tensor([LOG(0.5), LOG(0.3)]), torch.tensor([LOG(0.25), LOG(0.3)]))
    # d = log(0.25/0.5): exp(d) - d - 1 = 0.5 + log 2 - 1
    assert torch.allclose(kl, torch.tensor([0.5 + LOG(2) - 1, 0.0]))


def test_mismatch_kl_zero_when_equal_positive_otherwise():
    lp = torch.log(torch.tensor([0.3, 0.6]))
    assert mismatch_kl(lp, lp.clone()).abs().max() == 0
    assert (mismatch_kl(lp, lp + 0.1) > 0).all()


def test_policy_loss_dispatch_defaults_epsilon_high_to_epsilon():
    args = TrainerArgs(loss_type="ppo_clip", epsilon=0.1)
    old = torch.log(torch.tensor([[1 / 1.15]]))
    pl = policy_loss(torch.zeros(1, 1), old, torch.tensor([1.0]), torch.ones(1, 1), args.loss)
    assert math.isclose(pl.per_token.item(), -1.1, rel_tol=1e-6)


# ---- the sampler correction (TIS / MIS) ----
# two rows: pi_old/pi_sampler per token = (2, 0.5, 4) and (1.5, 1.2, -); the last token of row 2 was not sampled
OLD = torch.log(torch.tensor([[0.4, 0.2, 0.8], [0.3, 0.6, 0.9]]))
SAMPLING = torch.log(torch.tensor([[0.2, 0.4, 0.2], [0.2, 0.5, 0.7]]))
SAMPLED = torch.tensor([[True, True, True], [True, True, False]])


@pytest.mark.parametrize("mode, expected", [
    ("token_truncate", [[2.0, 0.5, 3.0], [1.5, 1.2, 1.0]]),  # 4 capped at 3; not sampled: 1
    ("token_mask", [[2.0, 0.5, 0.0], [1.5, 1.2, 1.0]]),  # 4 > 3: no loss
    ("sequence_truncate", [[3.0] * 3, [1.8] * 3]),  # 2 * 0.5 * 4 = 4 -> 3; 1.5 * 1.2 = 1.8
    ("sequence_mask", [[0.0] * 3, [1.8] * 3]),
])
def test_importance_weights_hand_computed(mode, expected):
    w = importance_weights(OLD, SAMPLING, SAMPLED, mode, cap=3.0)
    assert torch.allclose(w, torch.tensor(expected), atol=1e-5), w


def test_importance_weights_scale_each_tokens_loss_and_unknown_modes_are_refused():
    logprobs = torch.log(torch.tensor([[0.5, 0.5]])).requires_grad_()
    inputs = LossInputs(logprobs, logprobs.detach(), None, torch.tensor([1.0]), torch.ones(1, 2),
                        torch.full((1, 2), 0.5), is_weights=torch.tensor([[2.0, 0.0]]))
    out = compute_loss(inputs, TrainerArgs(loss_type="ppo_clip").loss)
    assert math.isclose(out.loss.item(), -(2.0 * 1.0 * 0.5 + 0.0), rel_tol=1e-6)  # ratio 1, A = 1, weight 0.5
    out.loss.backward()
    assert logprobs.grad[0, 1] == 0 and logprobs.grad[0, 0] != 0  # the masked token gives no gradient
    with pytest.raises(ValueError, match="unknown vllm_importance_sampling_mode"):
        importance_weights(OLD, SAMPLING, SAMPLED, "token_clip", cap=3.0)
    with pytest.raises(ValidationError):
        TrainerArgs(vllm_importance_sampling_mode="token_clip")


# ---- normalizations ----
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 99.0, 99.0, 99.0]])


@pytest.mark.parametrize("normalization, expected", [
    ("dapo", (1 + 2 + 3 + 4) / 4),  # every token the same
    ("dr_grpo", (1 + 2 + 3 + 4) / (2 * 4)),  # 2 sequences x max_tokens 4
    ("grpo", ((1 + 2 + 3) / 3 + 4 / 1) / 2),  # mean per sequence, then over sequences
])
def test_normalizations_hand_computed(normalization, expected):
    w = loss_weights(MASK, normalization, max_tokens=4)
    assert math.isclose(float((w * PER_TOKEN).sum()), expected, rel_tol=1e-6)
    # micro-batches add up to the whole batch
    parts = sum(float((w[i : i + 1] * PER_TOKEN[i : i + 1]).sum()) for i in range(2))
    assert math.isclose(parts, expected, rel_tol=1e-6)


def test_grpo_normalization_ignores_sequences_without_loss_tokens():
    w = loss_weights(torch.tensor([[1.0, 1.0], [0.0, 0.0]]), "grpo", max_tokens=2)
    assert w.tolist() == [[0.5, 0.5], [0.0, 0.0]]


# ---- masking switches at the collate level ----
def rollout(prompt, completion, mask=None, logprobs=None, reward=0.0, truncated=False):
    mask = mask or [1] * len(completion)
    logprobs = logprobs or [-0.5 if m else 0.0 for m in mask]
    return Rollout(example_id=0, prompt=[], completion=[], answer="", prompt_ids=prompt, completion_ids=completion,
                   completion_logprobs=logprobs, completion_mask=mask, policy="p", truncated=truncated, reward=reward)


def test_env_tokens_get_no_loss_by_default_and_loss_without_a_sampling_logprob_when_unmasked():
    r = rollout([5, 6], [7, 8, 9, 10], mask=[1, 0, 0, 1])  # a model token, two env tokens, a model token
    masked = collate([r], torch.tensor([1.0]), 16, 0)
    assert masked.loss_mask.tolist() == [[0, 1, 0, 0, 1]]
    trained = collate([r], torch.tensor([1.0]), 16, 0, mask_env_responses=False)
    assert trained.loss_mask.tolist() == [[0, 1, 1, 1, 1]]
    assert trained.sampled_mask.tolist() == [[False, True, False, False, True]]
    assert trained.sampling_logprobs.tolist() == [[0.0, -0.5, 0.0, 0.0, -0.5]]


def test_truncated_rollouts_get_no_loss_when_masked():
    rs = [rollout([5], [6, 7], truncated=True), rollout([5], [6, 7]), rollout([5], [6, 7, 8, 9, 10])]
    b = collate(rs, torch.zeros(3), max_seq_len=4, pad_id=0, mask_truncated_completions=True)
    assert b.truncated.tolist() == [True, False, True]  # vLLM said "length"; cut at max_seq_len
    assert b.loss_mask.sum(-1).tolist() == [0, 2, 0]
    assert collate(rs, torch.zeros(3), 4, 0).loss_mask.sum(-1).tolist() == [2, 2, 3]


def test_zero_truncated_completions_zeroes_reward_before_advantages():
    rs = [rollout([5], [6], reward=1.0, truncated=True), rollout([5], [6], reward=1.0)]
    args = TrainerArgs(rollouts_per_example=2, batch_size=2, max_tokens=4, max_seq_len=8,
                       zero_truncated_completions=True)
    b, rewards = make_train_batch(rs, args.batch, pad_id=0)
    assert rewards.tolist() == [0.0, 1.0] and b.advantages.tolist() == [-0.5, 0.5]
    b, rewards = make_train_batch(rs, args.model_copy(update={"zero_truncated_completions": False}).batch, pad_id=0)
    assert rewards.tolist() == [1.0, 1.0] and b.advantages.tolist() == [0.0, 0.0]


# ---- config ----
def test_filter_zero_std_groups_takes_flat_groups_out_of_the_loss_and_its_normalization():
    # group 0: rewards 1, 1 (flat); group 1: 0, 1
    rs = [rollout([5], [6, 7], reward=1.0), rollout([5], [6], reward=1.0), rollout([5], [8], reward=0.0),
          rollout([5], [8, 9, 7], reward=1.0)]
    args = TrainerArgs(rollouts_per_example=2, batch_size=4, max_tokens=4, max_seq_len=8)
    kept, _ = make_train_batch(rs, args.batch, pad_id=0)
    assert kept.loss_mask.sum(-1).tolist() == [2, 1, 1, 3]
    b, _ = make_train_batch(rs, args.model_copy(update={"filter_zero_std_groups": True}).batch, pad_id=0)
    assert b.loss_mask.sum(-1).tolist() == [0, 0, 1, 3]
    assert torch.allclose(b.loss_weights.sum(), torch.tensor(1.0))  # dapo: 1 / the 4 tokens left, each
    assert torch.allclose(kept.loss_weights.sum(), torch.tensor(1.0)) and kept.loss_weights.max() < b.loss_weights.max()


def test_trl_normalization_name_as_loss_type_points_to_loss_normalization():
    with pytest.raises(ValidationError, match="loss_normalization = 'dr_grpo'"):
        TrainerArgs(loss_type="dr_grpo")


def test_mask_ratio_bounds_must_be_ordered():
    with pytest.raises(ValidationError, match="must be below mask_ratio_high"):
        TrainerArgs(mask_ratio_low=2.0, mask_ratio_high=1.0)
