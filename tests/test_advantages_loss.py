import math

import torch

from vfrl.trainer.advantages import group_advantages
from vfrl.trainer.loss import importance_ratio_loss


def test_group_advantages_subtract_group_mean():
    r = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 4.0])
    assert torch.allclose(group_advantages(r, 2), torch.tensor([0.5, -0.5, 0.0, 0.0, -1.0, 1.0]))


def test_group_advantages_scaled_by_group_std():
    r = torch.tensor([1.0, 0.0, 3.0, 3.0])
    adv = group_advantages(r, 2, scale_rewards=True)
    std = math.sqrt(0.5)  # unbiased std of (1, 0)
    assert torch.allclose(adv, torch.tensor([0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.0, 0.0]))


def test_importance_ratio_loss_hand_computed():
    logp = torch.tensor([[math.log(0.5), math.log(0.2), 0.0]], requires_grad=True)
    old = torch.tensor([[math.log(0.25), math.log(0.2), 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    adv = torch.tensor([2.0])
    # ratios 2.0 and 1.0 on the two loss tokens -> -(2*2 + 1*2) / 2 tokens = -3
    loss, stats = importance_ratio_loss(logp, old, adv, mask, num_loss_tokens=2, mask_ratio_low=0.1, mask_ratio_high=10)
    assert math.isclose(loss.item(), -3.0, rel_tol=1e-6)
    loss.backward()
    # d/dlogp of -ratio*A/N = -ratio*A/N
    assert torch.allclose(logp.grad, torch.tensor([[-2.0, -1.0, 0.0]]))
    assert stats.masked_fraction == 0.0


def test_importance_ratio_loss_masks_out_of_range_tokens():
    logp = torch.tensor([[0.0, 0.0]])
    old = torch.tensor([[math.log(0.01), 0.0]])  # ratio 100 on the first token
    loss, stats = importance_ratio_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), 2, 0.125, 8.0)
    assert math.isclose(loss.item(), -0.5)  # only the in-range token (ratio 1) counts, / 2 tokens
    assert stats.masked_fraction == 0.5
    assert stats.mismatch_kl > 0


def test_mismatch_kl_is_zero_when_logprobs_agree():
    lp = torch.log(torch.tensor([[0.3, 0.6]]))
    _, stats = importance_ratio_loss(lp, lp.clone(), torch.tensor([1.0]), torch.ones(1, 2), 2, 0.1, 10)
    assert stats.mismatch_kl == 0.0
