"""Rollouts -> padded training tensors, aligned for next-token prediction."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vfrl.environments.environment import Rollout


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # (B, T)
    attention_mask: torch.Tensor  # (B, T)
    loss_mask: torch.Tensor  # (B, T-1) 1 where position t predicts a policy token
    sampling_logprobs: torch.Tensor  # (B, T-1)
    advantages: torch.Tensor  # (B,)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def slice(self, start: int, stop: int) -> "TrainBatch":
        return TrainBatch(*(t[start:stop] for t in (self.input_ids, self.attention_mask, self.loss_mask,
                                                     self.sampling_logprobs, self.advantages)))


def collate(rollouts: list[Rollout], advantages: torch.Tensor, max_seq_len: int, pad_id: int) -> TrainBatch:
    seqs = [(r.prompt_ids + r.completion_ids)[:max_seq_len] for r in rollouts]
    T = max(len(s) for s in seqs)
    B = len(seqs)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, T), dtype=torch.long)
    loss_mask = torch.zeros((B, T - 1), dtype=torch.float32)
    sampling_logprobs = torch.zeros((B, T - 1), dtype=torch.float32)
    for i, (r, seq) in enumerate(zip(rollouts, seqs)):
        input_ids[i, : len(seq)] = torch.tensor(seq)
        attention_mask[i, : len(seq)] = 1
        P = len(r.prompt_ids)
        n = max(len(seq) - P, 0)  # completion tokens that survived truncation
        # completion token j sits at index P + j and is predicted from position P + j - 1
        loss_mask[i, P - 1 : P - 1 + n] = torch.tensor(r.completion_mask[:n], dtype=torch.float32)
        sampling_logprobs[i, P - 1 : P - 1 + n] = torch.tensor(r.completion_logprobs[:n])
    return TrainBatch(input_ids, attention_mask, loss_mask, sampling_logprobs, advantages.float())
