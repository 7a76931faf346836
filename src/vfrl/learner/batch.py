"""Rollouts -> padded training tensors, aligned for next-token prediction.

Which tokens get loss (verifiers' meaning of the three switches):
- policy tokens (completion_mask 1, sampled by vLLM with a logprob) always, unless masked below;
- environment tokens (completion_mask 0: tool/user turns inside a multi-turn completion) only when
  `mask_env_responses = false`; they have no sampling logprob, so the trainer's own logprob at the
  start of the step stands in for it (see Learner.train_step);
- `mask_truncated_completions`: a truncated rollout gets no loss at all;
- `zero_truncated_completions`: a truncated rollout's reward is 0 before advantages are computed.
A rollout is truncated when vLLM stopped it at max_tokens (finish_reason "length") or when
prompt + completion is cut at `max_seq_len` here.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from vfrl.rollout_types import Rollout
from vfrl.sections import BatchSection
from vfrl.learner.advantages import flat_groups, group_advantages
from vfrl.learner.normalization import loss_weights
from vfrl.learner.shared_prefix import unpadded


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T)
    loss_mask: torch.Tensor  # (B, T-1) 1 where position t predicts a token that gets loss
    sampled_mask: torch.Tensor  # (B, T-1) bool: the predicted token was sampled by vLLM (has a sampling logprob)
    sampling_logprobs: torch.Tensor  # (B, T-1) 0 where not sampled
    advantages: torch.Tensor  # (B,)
    truncated: torch.Tensor  # (B,) bool
    # (B, T-1) the whole batch's normalization (normalization.py), so micro-batch losses add up to the batch's
    loss_weights: torch.Tensor | None = None
    # (B, T-1) pi_old and pi_ref, fixed by the step's first forward (trainer.fix_old_policy) for its later iterations
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    is_weights: torch.Tensor | None = None  # (B, T-1) the sampler correction's weights (loss.importance_weights)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def _map(self, f) -> "TrainBatch":
        return TrainBatch(*(None if (v := getattr(self, x.name)) is None else f(v) for x in fields(self)))

    def micro_batches(self, size: int, by_prefix: bool = False) -> list["TrainBatch"]:
        """Micro-batches of `size` rows, each cut to its own longest row: shortest sequences together, or with
        `by_prefix` rows in the order of their tokens, so that rows which start alike (a group's rollouts) sit
        side by side for shared_prefix.py to forward their common prefix once.

        Rows are right-padded, so the columns past a micro-batch's longest row are padding that no
        token attends to and no loss reads: cutting them changes no logprob, only the work. The loss
        weights are the whole batch's (normalization.py), so which rows share a micro-batch does not
        change the step's gradient either."""
        if by_prefix:
            rows = unpadded(self.input_ids, self.attention_mask)
            order = torch.tensor(sorted(range(len(rows)), key=rows.__getitem__), dtype=torch.long)
        else:
            order = torch.argsort(self.attention_mask.sum(1), stable=True)
        parts = [self._map(lambda t, rows=order[i:i + size]: t[rows]) for i in range(0, len(self), size)]
        return [part.trimmed() for part in parts]

    def trimmed(self) -> "TrainBatch":
        T = max(2, int(self.attention_mask.sum(1).max()))  # a row of padding alone still has a position
        return self._map(lambda t: t if t.dim() == 1
                         else t[:, :T] if t.shape[1] == self.input_ids.shape[1]
                         else t[:, :T - 1])

    def to(self, device) -> "TrainBatch":
        return self._map(lambda t: t.to(device))


def is_truncated(rollout: Rollout, max_seq_len: int) -> bool:
    """vLLM stopped it at max_tokens, or one of its sequences is longer than max_seq_len."""
    return rollout.truncated or any(len(s.prompt_ids) + len(s.completion_ids) > max_seq_len
                                    for s in rollout.sequences())


def collate(rollouts: list[Rollout], advantages: torch.Tensor, max_seq_len: int, pad_id: int,
            mask_env_responses: bool = True, mask_truncated_completions: bool = False, rows: int = 0) -> TrainBatch:
    """One row per token sequence: a rollout's own, then its other branches (a forked verifiers trace), each
    with the rollout's advantage and truncation. `rows`: pad with rows that get no loss up to this many (the
    places of dropped rollouts)."""
    owners = [i for i, r in enumerate(rollouts) for _ in r.sequences()]  # the rollout of each row
    parts = [s for r in rollouts for s in r.sequences()]
    seqs = [(s.prompt_ids + s.completion_ids)[:max_seq_len] for s in parts]
    T = max(len(s) for s in seqs)
    B = max(len(seqs), rows)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, T), dtype=torch.long)
    # a padding row attends to its first token: a row that attends to nothing can give NaN in some
    # attention kernels, and 0 x NaN is NaN in the gradient
    attention_mask[len(seqs):, 0] = 1
    loss_mask = torch.zeros((B, T - 1), dtype=torch.float32)
    sampled_mask = torch.zeros((B, T - 1), dtype=torch.bool)
    sampling_logprobs = torch.zeros((B, T - 1), dtype=torch.float32)
    truncated = torch.zeros(B, dtype=torch.bool)
    truncated[: len(seqs)] = torch.tensor([is_truncated(rollouts[i], max_seq_len) for i in owners], dtype=torch.bool)
    advantages = torch.cat([advantages.float()[owners], torch.zeros(B - len(seqs))])
    for i, (part, seq) in enumerate(zip(parts, seqs)):
        input_ids[i, : len(seq)] = torch.tensor(seq)
        attention_mask[i, : len(seq)] = 1
        P = len(part.prompt_ids)
        n = max(len(seq) - P, 0)  # completion tokens that survived truncation
        # completion token j sits at index P + j and is predicted from position P + j - 1
        span = slice(P - 1, P - 1 + n)
        sampled = torch.tensor(part.completion_mask[:n], dtype=torch.bool)
        sampled_mask[i, span] = sampled
        sampling_logprobs[i, span] = torch.tensor(part.completion_logprobs[:n]) * sampled
        if not (mask_truncated_completions and truncated[i]):
            loss_mask[i, span] = (sampled | (not mask_env_responses)).float()
    return TrainBatch(input_ids, attention_mask, loss_mask, sampled_mask, sampling_logprobs, advantages, truncated)


def train_rewards(rollouts: list[Rollout], max_seq_len: int, zero_truncated_completions: bool) -> torch.Tensor:
    """The rewards the advantages are computed from: the rubric's, or 0 for a truncated rollout when asked."""
    return torch.tensor([0.0 if zero_truncated_completions and is_truncated(r, max_seq_len) else r.reward
                         for r in rollouts], dtype=torch.float32)


def make_train_batch(rollouts: list[Rollout], shape: BatchSection, pad_id: int,
                     group_sizes: list[int] | None = None) -> tuple[TrainBatch, torch.Tensor]:
    """Rollouts of one step -> (TrainBatch with its loss weights, rewards used for the advantages).

    `group_sizes`: rollouts per group where faults dropped some (default: every group full). The
    TrainBatch keeps `batch_size` rows all the same, the dropped ones as padding without loss, so the
    micro-batches, their share among trainer processes and dr_grpo's constant are a full batch's. It has
    more rows when rollouts have several branches (Rollout.more_branches) or an episode several traces."""
    rewards = train_rewards(rollouts, shape.max_seq_len, shape.zero_truncated_completions)
    advantages = group_advantages(rewards, group_sizes or shape.rollouts_per_example, shape.scale_rewards)
    batch = collate(rollouts, advantages, shape.max_seq_len, pad_id, shape.mask_env_responses,
                    shape.mask_truncated_completions, rows=shape.batch_size)
    if shape.filter_zero_std_groups:  # DAPO's dynamic sampling: out of the batch and of its normalization
        flat = flat_groups(rewards, group_sizes or shape.rollouts_per_example)
        rows = torch.tensor([bool(flat[i]) for i, r in enumerate(rollouts) for _ in r.sequences()], dtype=torch.bool)
        batch.loss_mask[: len(rows)][rows] = 0
    batch.loss_weights = loss_weights(batch.loss_mask, shape.loss_normalization, shape.max_tokens)
    return batch, rewards
