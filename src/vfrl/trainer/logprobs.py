"""Per-token logprobs of given tokens under the model."""

import torch


def sequence_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """input_ids, attention_mask: (B, T) -> logprob of token t+1 given tokens <= t: (B, T-1)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]  # (B, T-1, V)
    logits = logits.float() / temperature
    targets = input_ids[:, 1:].unsqueeze(-1)  # (B, T-1, 1)
    # logsumexp + gather instead of a full log_softmax tensor: one (B, T-1, V) buffer less
    return logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
