"""The reference policy of the KL penalty (`beta` > 0): the model as loaded from `model`.

LoRA: the same model with the adapter disabled (peft's `disable_adapter()`), so no second copy
lives in memory. Full fine-tuning (`use_lora = false`): every weight trains, so the base weights
survive only in a frozen copy, loaded once from `model` (one more model's worth of memory).
Loading from `model`, not copying the live weights, keeps it the base policy after a resume too.
"""

from __future__ import annotations

import torch

from vfrl.learner.logprobs import sequence_logprobs
from vfrl.learner.shared_prefix import packs


class ReferencePolicy:
    def __init__(self, model, model_path: str, use_lora: bool, dtype: torch.dtype | None = None):
        self.model = model  # the trained model (possibly wrapped by accelerate)
        self.frozen = None
        if not use_lora:
            from transformers import AutoModelForCausalLM

            inner = getattr(model, "module", model)
            # dtype: the compute dtype (the trained model may hold fp32 master weights of a bf16 run)
            self.frozen = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype or inner.dtype).to(inner.device)
            self.frozen.requires_grad_(False).eval()

    @torch.no_grad()
    def logprobs(self, input_ids, attention_mask, temperature: float, positions=None, chunk_size: int = 1024,
                 packed="auto"):
        if self.frozen is not None:
            packed = packed if packs(self.frozen) else None  # a layout made for the trained model
            return sequence_logprobs(self.frozen, input_ids, attention_mask, temperature, positions, chunk_size, packed)
        inner = getattr(self.model, "module", self.model)
        with inner.disable_adapter():  # a peft model: base weights only
            return sequence_logprobs(self.model, input_ids, attention_mask, temperature, positions, chunk_size, packed)
