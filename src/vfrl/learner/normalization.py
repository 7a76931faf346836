"""How per-token losses become one number: a weight per token, fixed for the whole batch.

loss = sum over tokens of weight * per_token_loss. The weights are computed once from the whole
batch's loss mask, so micro-batches just add up their share and gradient accumulation gives the
same gradient as one big batch. `loss_normalization` (TRL's `loss_type` names):

  "dapo"    every loss token counts the same: 1 / (loss tokens in the batch)            (DAPO)
  "dr_grpo" a constant, independent of lengths: 1 / (sequences * max_tokens)           (Dr. GRPO)
  "grpo"    every sequence counts the same: 1 / (its loss tokens * sequences with loss)  (GRPO)

Sequences without loss tokens (e.g. masked truncated rollouts) do not count in "grpo"'s
denominator, so masking them does not shrink everyone else's gradient.
"""

import torch


def loss_weights(loss_mask: torch.Tensor, normalization: str, max_tokens: int) -> torch.Tensor:
    """loss_mask: (B, T) of the whole batch -> weights (B, T), 0 where the mask is 0."""
    mask = loss_mask.float()
    if normalization == "dapo":
        return mask / mask.sum().clamp(min=1)
    if normalization == "dr_grpo":
        return mask / (mask.shape[0] * max_tokens)
    if normalization == "grpo":
        per_seq = mask.sum(-1, keepdim=True)  # (B, 1)
        num_seqs = (per_seq > 0).sum().clamp(min=1)
        return mask / (per_seq.clamp(min=1) * num_seqs)
    raise ValueError(f"unknown loss_normalization {normalization!r}")
