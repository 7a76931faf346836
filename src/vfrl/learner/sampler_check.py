"""vLLM against the trainer on the same weights: the signal the mismatch alarm watches.

`mismatch_kl` compares vLLM's logprobs of batch n with the trainer's at policy n, but one-step off-policy
batch n was sampled by policy n-1: the figure holds one optimizer step of policy change, which moves a
hundredfold from step to step in a healthy run (0.0001 to 0.06 for SmolLM2 at lr 3e-4, up to 0.7 for the
tiny model at lr 3e-3). A broken weight sync or a template mismatch hides in that, and the change alone
raised false alarms. So before each step the trainer also forwards the first `rows` rows of its first
micro-batch with the weights of the policy that sampled them, kept from the step before (the trainable
parameters only: a LoRA's few MB), and `sampler_mismatch_kl` is vLLM against the trainer on one policy:
~1e-9 in fp32 when the sync, the template and the tokenizer agree.

A model whose trainable parameters exceed `max_numel` (full fine-tuning of a large model: a copy per step
costs memory) is not checked; neither is a batch from a policy the trainer no longer holds (the first step
after a resume).
"""

from __future__ import annotations

import torch

from vfrl.learner.logprobs import sequence_logprobs
from vfrl.learner.loss import mismatch_kl


class SamplerCheck:
    def __init__(self, model, rows: int = 8, max_numel: int = 50_000_000):
        self.model, self.rows = model, rows
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.enabled = sum(p.numel() for p in self.params) <= max_numel
        self.kept: list[torch.Tensor] | None = None  # the trainable parameters of policy `kept_version`
        self.kept_version: int | None = None

    @torch.no_grad()
    def measure(self, input_ids, attention_mask, sampled, sampling_logprobs, policy: int, current: int,
                temperature: float) -> tuple[float, float] | None:
        """(sum of the per-token KL(vLLM || trainer) over the sampled tokens of the first rows, their count) under
        the weights of policy `policy` (the trainer holds `current`); None when it cannot be measured. Tensors as
        TrainBatch's: (B, T) ids and mask, (B, T-1) sampled mask and sampling logprobs."""
        if not self.enabled or (policy != current and policy != self.kept_version):
            return None
        now = None
        if policy != current:
            now = [p.detach().clone() for p in self.params]
            for p, kept in zip(self.params, self.kept):
                p.copy_(kept)
        try:
            was_training = self.model.training
            self.model.eval()
            logprobs = sequence_logprobs(self.model, input_ids[: self.rows], attention_mask[: self.rows], temperature)
            self.model.train(was_training)
        finally:
            if now is not None:
                for p, value in zip(self.params, now):
                    p.copy_(value)
        mask = sampled[: self.rows]  # (rows, T-1)
        kl = mismatch_kl(logprobs, sampling_logprobs[: self.rows]) * mask
        return float(kl.sum()), float(mask.sum())

    @torch.no_grad()
    def keep(self, version: int) -> None:
        """Remember the trainable parameters of policy `version` (before the step that moves past it)."""
        if not self.enabled:
            return
        if self.kept is None:
            self.kept = [p.detach().clone() for p in self.params]
        else:
            for kept, p in zip(self.kept, self.params):
                kept.copy_(p)
        self.kept_version = version
