"""Token-level importance-ratio policy-gradient loss (the default).

ratio_t = exp(logp_trainer_t - logp_sampler_t) corrects for the sampler being one policy step
behind (and for any trainer/vLLM numerical mismatch). Tokens whose ratio leaves
[mask_ratio_low, mask_ratio_high] are dropped from the loss rather than clipped.
"""

from dataclasses import dataclass

import torch


@dataclass
class LossStats:
    masked_fraction: float  # share of loss tokens dropped for an out-of-range ratio
    mismatch_kl: float  # mean k3 estimate of KL(sampler || trainer) over loss tokens


def importance_ratio_loss(
    logprobs: torch.Tensor,  # (B, T) trainer logprobs of the sampled tokens
    sampling_logprobs: torch.Tensor,  # (B, T) logprobs vLLM reported when sampling
    advantages: torch.Tensor,  # (B,)
    loss_mask: torch.Tensor,  # (B, T) 1 for policy tokens
    num_loss_tokens: int,  # loss tokens in the whole batch: the normaliser (DAPO-style)
    mask_ratio_low: float,
    mask_ratio_high: float,
) -> tuple[torch.Tensor, LossStats]:
    mask = loss_mask.bool()
    log_ratio = logprobs - sampling_logprobs  # (B, T)
    ratio = torch.exp(log_ratio)
    in_range = (ratio >= mask_ratio_low) & (ratio <= mask_ratio_high)
    keep = mask & in_range
    per_token = -ratio * advantages[:, None]  # (B, T)
    loss = (per_token * keep).sum() / max(num_loss_tokens, 1)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        k3 = torch.exp(-log_ratio) - 1 + log_ratio  # >= 0, unbiased for KL(sampler || trainer)
        stats = LossStats(
            masked_fraction=float((mask & ~in_range).sum() / n),
            mismatch_kl=float((k3 * mask).sum() / n),
        )
    return loss, stats
