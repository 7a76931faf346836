"""Per-token logprobs (and entropy) of given tokens, without a full-vocabulary logits tensor.

The naive way, `model(ids).logits.float()`, holds a (B, T, V) fp32 tensor, and autograd keeps it
(and its gradient) for backward: with Qwen's V = 151936 that is 0.6 MB per token, each.
Here the model runs to its last hidden state only (`logits_to_keep` selects no position), then
lm_head runs over chunks of `chunk_size` token positions, and only at the positions asked for
(the trainer asks for loss tokens, not prompts). Each chunk sits under activation checkpointing:
autograd keeps the chunk's hidden states and recomputes its logits in backward, and a custom
backward for log_softmax-at-target needs one more (chunk_size, V) tensor, so about two blocks of
chunk logits exist at any time, whatever B and T are. benchmarks/logprob_memory.py measures it.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from vfrl.learner.shared_prefix import Packed, hidden_states

_NO_POSITION = torch.empty(0, dtype=torch.long)


class _TargetLogprob(torch.autograd.Function):
    """log_softmax(logits)[target], with a backward that allocates one (N, V) tensor where autograd's
    logsumexp/gather backward allocates several: d/dlogits = grad * (onehot(target) - softmax(logits))."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        lse = torch.logsumexp(logits, dim=-1)
        ctx.save_for_backward(logits, targets, lse)
        return logits.gather(-1, targets[:, None]).squeeze(-1) - lse

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, targets, lse = ctx.saved_tensors
        dlogits = (logits - lse[:, None]).exp_().mul_(-grad[:, None])  # -grad * softmax, in place
        dlogits.scatter_add_(-1, targets[:, None], grad[:, None])  # + grad at the target
        return dlogits, None


def _chunk_logprobs(hidden: torch.Tensor, targets: torch.Tensor, lm_head, temperature: float,
                    with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden: (N, H), targets: (N,) -> logprob of each target (N,), entropy (N,) (or empty)."""
    has_bias = getattr(lm_head, "bias", None) is not None
    if temperature != 1.0 and not has_bias:
        hidden = hidden / temperature  # lm_head is linear: scaling (N, H) is cheaper than scaling (N, V)
    logits = _apply_head(lm_head, hidden).float()  # (N, V): the only full-vocabulary tensor
    if temperature != 1.0 and has_bias:
        logits = logits / temperature
    logprobs = _TargetLogprob.apply(logits, targets)
    entropy = logprobs.new_empty(0)
    if with_entropy:  # logged, never trained on
        with torch.no_grad():
            entropy = torch.logsumexp(logits, dim=-1) - torch.softmax(logits, dim=-1).mul_(logits).sum(-1)
    return logprobs, entropy


def _apply_head(lm_head, hidden: torch.Tensor) -> torch.Tensor:
    """lm_head(hidden), outside the model's forward. A plain Linear with its weight in hand runs as F.linear:
    calling an FSDP2-sharded module would run FSDP's hooks a second time, outside the forward, and its group
    is then freed in the middle of backward (an illegal memory access on an H100, full fine-tuning under
    configs/accelerate/fsdp.yaml; docs/gpu.md). A wrapped head (peft) or a ZeRO-3-partitioned one (an empty
    weight until its module is called) runs as a module."""
    weight = getattr(lm_head, "weight", None)
    if isinstance(lm_head, torch.nn.Linear) and weight is not None and weight.numel() > 0:
        return torch.nn.functional.linear(hidden, weight, lm_head.bias)
    return lm_head(hidden)


def _has_logit_transform(config) -> bool:
    """Models whose logits are not plain lm_head(hidden) (Gemma-2 soft-capping, Cohere/Granite scaling)."""
    return any(getattr(config, k, None) not in (None, 1.0) for k in ("final_logit_softcapping", "logit_scale",
                                                                     "logits_scaling"))


def naive_sequence_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0,
                            with_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference implementation: full (B, T-1, V) fp32 logits. Returns (logprobs, entropy), (B, T-1) each."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float() / temperature
    lse = torch.logsumexp(logits, dim=-1)
    logprobs = logits.gather(-1, input_ids[:, 1:, None]).squeeze(-1) - lse
    entropy = torch.zeros_like(lse)
    if with_entropy:
        with torch.no_grad():
            entropy = lse.detach() - torch.softmax(logits, dim=-1).mul_(logits).sum(-1)
    return logprobs, entropy


def sequence_logprobs_and_entropy(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0,
    positions: torch.Tensor | None = None, chunk_size: int = 1024, with_entropy: bool = True,
    packed: Packed | None | str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask: (B, T) -> (logprobs, entropy), (B, T-1) each: logprob of token t+1 given
    tokens <= t, and the entropy of that next-token distribution. Only `positions` ((B, T-1) bool;
    default all) are computed; the rest are 0. Entropy is detached (and 0 unless `with_entropy`).
    `packed`: shared_prefix.layout of these rows, or "auto" (worked out from them)."""
    inner = getattr(model, "module", model)  # DDP-style wrappers
    if positions is not None and not positions.any():  # nothing asked for: skip the forward pass
        zeros = torch.zeros(positions.shape, dtype=torch.float32, device=positions.device)
        return zeros, zeros.clone()
    if _has_logit_transform(inner.config):
        logprobs, entropy = naive_sequence_logprobs(model, input_ids, attention_mask, temperature, with_entropy)
        if positions is not None:
            logprobs, entropy = logprobs * positions, entropy * positions
        return logprobs, entropy
    # (B, T-1, H), after the final norm; rows that share a prefix forward it once (shared_prefix.py)
    hidden = hidden_states(model, input_ids, attention_mask, packed,
                           logits_to_keep=_NO_POSITION.to(input_ids.device))[:, :-1]
    if positions is None:
        positions = torch.ones(hidden.shape[:2], dtype=torch.bool, device=hidden.device)
    positions = positions.bool()
    h, targets = hidden[positions], input_ids[:, 1:][positions]  # (N, H), (N,)
    lm_head = inner.get_output_embeddings()
    # accelerate's mixed precision hands a prepared model's outputs back in fp32 (bf16 weights on a GPU):
    # lm_head runs in its own weights' dtype, as it does inside the model's forward
    h = h.to(getattr(lm_head, "weight", h).dtype)
    parts = []
    for s in range(0, h.shape[0], chunk_size):
        args = (h[s : s + chunk_size], targets[s : s + chunk_size], lm_head, temperature, with_entropy)
        parts.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False) if torch.is_grad_enabled()
                     else _chunk_logprobs(*args))
    zeros = torch.zeros(positions.shape, dtype=torch.float32, device=hidden.device)
    logprobs = zeros.masked_scatter(positions, torch.cat([p[0] for p in parts])) if parts else zeros
    entropy = zeros.detach().clone()
    if with_entropy and parts:
        entropy = entropy.masked_scatter(positions, torch.cat([p[1] for p in parts]))
    return logprobs, entropy


def sequence_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0,
                      positions: torch.Tensor | None = None, chunk_size: int = 1024,
                      packed: Packed | None | str = "auto") -> torch.Tensor:
    """input_ids, attention_mask: (B, T) -> logprob of token t+1 given tokens <= t: (B, T-1)."""
    return sequence_logprobs_and_entropy(model, input_ids, attention_mask, temperature, positions, chunk_size,
                                         with_entropy=False, packed=packed)[0]
