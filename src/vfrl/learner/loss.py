"""Policy-gradient losses, per token. Reduction to one number is normalization.py's job.

All take (B, T) trainer logprobs `logprobs`, the old policy's `old_logprobs` (the sampling
logprobs vLLM returned: the behaviour policy that produced the tokens, held fixed for every one
of `num_iterations` updates, as PPO holds its pi_old) and (B,) `advantages`; ratio = pi / pi_old.
Each returns a PolicyLoss: the per-token loss and where a bound took the token's gradient away.

  loss_type = "ratio_mask" (default, prime-rl style): -ratio * A; tokens with ratio outside
              [mask_ratio_low, mask_ratio_high] are dropped.
  loss_type = "ppo_clip"   (PPO / GRPO / DAPO clip-higher): -min(ratio * A, clip(ratio, 1 - epsilon,
              1 + epsilon_high) * A).
  loss_type = "gspo"       (GSPO): the PPO clip applied to the sequence ratio
              exp(mean over the sequence's loss tokens of log ratio), shared by all its tokens.
  beta > 0 adds beta * kl_penalty (k3 estimator of KL(pi || pi_ref)) per token.

With vllm_importance_sampling_correction (TRL's name), pi_old is instead the trainer's own policy before the
step's first update, and the gap between it and the sampler (vLLM, one policy behind in the async loop, with
its own numerics) becomes a weight on each token's loss, `importance_weights`: truncated (TIS) or masked (MIS)
at `vllm_importance_sampling_cap`, per token or per sequence.

`compute_loss` puts it together for one micro-batch: typed LossInputs -> LossOutputs, no model, no state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vfrl.sections import LossSection


@dataclass
class PolicyLoss:
    per_token: torch.Tensor  # (B, T) loss of each token (before normalization and loss mask)
    low: torch.Tensor  # (B, T) bool: the lower bound took this token's gradient away
    high: torch.Tensor  # (B, T) bool: the upper bound did


MAX_LOG_RATIO = 20.0  # caps ratio at e^20: a -inf (or -9999) old logprob gives a huge ratio, never inf * 0 = NaN


def importance_ratio(logprobs, old_logprobs) -> torch.Tensor:
    return torch.exp((logprobs - old_logprobs).clamp(max=MAX_LOG_RATIO))


def ratio_mask_loss(logprobs, old_logprobs, advantages, mask_ratio_low: float, mask_ratio_high: float) -> PolicyLoss:
    ratio = importance_ratio(logprobs, old_logprobs)
    low, high = ratio < mask_ratio_low, ratio > mask_ratio_high
    per_token = -ratio * advantages[:, None] * ~(low | high)
    return PolicyLoss(per_token, low, high)


def _clipped(ratio, advantages, epsilon: float, epsilon_high: float) -> PolicyLoss:
    adv = advantages[:, None]
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    # the min picks the clipped (constant) branch: below 1 - eps for A < 0, above 1 + eps_high for A > 0
    return PolicyLoss(per_token, (ratio < 1 - epsilon) & (adv < 0), (ratio > 1 + epsilon_high) & (adv > 0))


def ppo_clip_loss(logprobs, old_logprobs, advantages, epsilon: float, epsilon_high: float) -> PolicyLoss:
    return _clipped(importance_ratio(logprobs, old_logprobs), advantages, epsilon, epsilon_high)


def gspo_loss(logprobs, old_logprobs, advantages, loss_mask, epsilon: float, epsilon_high: float) -> PolicyLoss:
    n = loss_mask.sum(-1).clamp(min=1)
    seq_log_ratio = ((logprobs - old_logprobs) * loss_mask).sum(-1) / n  # (B,)
    ratio = torch.exp(seq_log_ratio.clamp(max=MAX_LOG_RATIO))[:, None].expand_as(logprobs)
    return _clipped(ratio, advantages, epsilon, epsilon_high)


IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def importance_weights(old_logprobs, sampling_logprobs, sampled, mode: str, cap: float) -> torch.Tensor:
    """The sampler correction's weight of each token, (B, T): w = pi_old / pi_sampler, from (B, T) logprobs
    and `sampled` (B, T) bool, the tokens the sampler drew (every other token weighs 1).

      token_*     w_t = exp(old_t - sampling_t)                   for each sampled token t
      sequence_*  w   = exp(sum over the row's sampled t of (old_t - sampling_t)), shared by its tokens
      *_truncate  w <- min(w, cap)                                TIS: a bounded weight, biased, low variance
      *_mask      w <- w if w <= cap else 0                       MIS: what is too far off-policy gets no loss
    """
    if mode not in IS_MODES:
        raise ValueError(f"unknown vllm_importance_sampling_mode {mode!r}; one of {', '.join(IS_MODES)}")
    log_w = (old_logprobs - sampling_logprobs) * sampled  # 0 where not sampled: weight 1
    if mode.startswith("sequence"):
        log_w = log_w.sum(-1, keepdim=True).expand_as(old_logprobs)
    w = torch.exp(log_w.clamp(max=MAX_LOG_RATIO))
    if mode.endswith("truncate"):
        return w.clamp(max=cap)
    return w * (w <= cap)


def kl_penalty(logprobs, ref_logprobs) -> torch.Tensor:
    """k3 estimator of KL(pi || pi_ref) per token: exp(d) - d - 1 with d = ref - logp; >= 0, 0 iff equal."""
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1


def mismatch_kl(logprobs, sampling_logprobs) -> torch.Tensor:
    """k3 estimate of KL(sampler || trainer) per token (sampled tokens): the trainer/vLLM mismatch signal."""
    log_ratio = logprobs - sampling_logprobs
    return torch.exp(-log_ratio) - 1 + log_ratio


def policy_loss(logprobs, old_logprobs, advantages, loss_mask, loss: LossSection) -> PolicyLoss:
    """Dispatch on `loss.loss_type`, with its bounds."""
    if loss.loss_type == "ratio_mask":
        return ratio_mask_loss(logprobs, old_logprobs, advantages, loss.mask_ratio_low, loss.mask_ratio_high)
    if loss.loss_type == "ppo_clip":
        return ppo_clip_loss(logprobs, old_logprobs, advantages, loss.epsilon, loss.upper_epsilon)
    if loss.loss_type == "gspo":
        return gspo_loss(logprobs, old_logprobs, advantages, loss_mask, loss.epsilon, loss.upper_epsilon)
    raise ValueError(f"unknown loss_type {loss.loss_type!r}")


@dataclass
class LossInputs:
    """One micro-batch, every tensor on the same device."""

    logprobs: torch.Tensor  # (B, T) the trainer's, with gradient
    old_logprobs: torch.Tensor  # (B, T) pi_old, the same for every iteration of the step
    ref_logprobs: torch.Tensor | None  # (B, T) pi_ref of the KL penalty; None when beta = 0
    advantages: torch.Tensor  # (B,)
    loss_mask: torch.Tensor  # (B, T) 1 where the token gets loss
    loss_weights: torch.Tensor  # (B, T) the whole batch's normalization (normalization.py), 0 off the mask
    is_weights: torch.Tensor | None = None  # (B, T) the sampler correction (importance_weights); None: off


@dataclass
class LossOutputs:
    loss: torch.Tensor  # () sum of weight * per-token loss: this micro-batch's part of the batch's loss
    low: torch.Tensor  # () loss tokens the lower bound took out
    high: torch.Tensor  # () loss tokens the upper bound took out
    kl: torch.Tensor | None  # () sum of the KL penalty over loss tokens, no gradient; None when beta = 0


def compute_loss(inputs: LossInputs, loss: LossSection) -> LossOutputs:
    """`loss`: loss_type, its bounds and beta (`[trainer.args]`' loss section)."""
    pl = policy_loss(inputs.logprobs, inputs.old_logprobs, inputs.advantages, inputs.loss_mask, loss)
    per_token, kl = pl.per_token, None  # (B, T)
    if inputs.is_weights is not None:
        per_token = per_token * inputs.is_weights
    if inputs.ref_logprobs is not None:
        kl = kl_penalty(inputs.logprobs, inputs.ref_logprobs)  # (B, T)
        per_token = per_token + loss.beta * kl
    counted = inputs.loss_mask > 0
    return LossOutputs(loss=(per_token * inputs.loss_weights).sum(), low=(pl.low & counted).sum(),
                       high=(pl.high & counted).sum(),
                       kl=None if kl is None else (kl.detach() * inputs.loss_mask).sum())
