"""Rows that start alike, forwarded once: a GRPO group's rollouts share their prompt's tokens, and the trainer
ran those tokens through the model once per rollout (8 times in the quick start, where the prompt is most of a
row). Here each run of rows with a common prefix becomes one packed sequence, the prefix once and then each
row's own tokens, under an attention mask in which a row's tokens see the prefix and their own earlier tokens
and nothing of the other rows':

    rows                       packed (one sequence)            positions
    [p p p p a a]              [p p p p | a a | b b b | c]      0 1 2 3 | 4 5 | 4 5 6 | 4
    [p p p p b b b]
    [p p p p c]

Every hidden state a row's logprobs read is the one the row's own forward gives (same tokens before it, same
positions), and gathering them back into (B, T) sums the prefix's gradient over the rows that read it, as the
rows' separate forwards did. Only the order of floating-point sums changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Packed:
    input_ids: torch.Tensor  # (P, N) the packed sequences, right-padded
    position_ids: torch.Tensor  # (P, N)
    segment: torch.Tensor  # (P, N) 0: the prefix, k: the run's k-th row, -1: padding
    index: torch.Tensor  # (B, T) where each row position's hidden state is, in the (P * N) flattened packs

    def mask(self) -> torch.Tensor:
        """(P, 1, N, N) bool, True where query position n may attend to key position m: built where `segment` is
        (on a GPU, a few kernels instead of a copy of P * N * N bytes), for one forward and freed after it."""
        n = torch.arange(self.segment.shape[1], device=self.segment.device)
        causal = n[None, :] <= n[:, None]  # (N, N): key m at or before query n
        q, k = self.segment[:, :, None], self.segment[:, None, :]
        # the prefix, or the query's own row; padding (-1, at the end) sees the prefix and the padding up to itself,
        # so no query attends to nothing (a NaN in some kernels)
        mask = causal & ((k == q) | (k == 0))
        return mask[:, None]

    def to(self, device) -> "Packed":
        return Packed(*(t.to(device) for t in (self.input_ids, self.position_ids, self.segment, self.index)))


def unpadded(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """Each right-padded row's own tokens."""
    return [ids[:n] for ids, n in zip(input_ids.tolist(), attention_mask.sum(1).tolist())]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def plan(rows: list[list[int]]) -> list[tuple[int, list[int]]]:
    """Runs of consecutive rows packed together: (shared prefix length, row indices). A row joins the run before
    it when that makes fewer tokens to forward than starting a run of its own."""
    runs: list[tuple[int, list[int]]] = []
    for i, row in enumerate(rows):
        if runs:
            shared, members = runs[-1]
            s = common_prefix(rows[members[0]][:shared], row)
            joined = s + sum(len(rows[j]) - s for j in members) + len(row) - s
            apart = shared + sum(len(rows[j]) - shared for j in members) + len(row)
            if s > 0 and joined < apart:
                runs[-1] = (s, members + [i])
                continue
        runs.append((len(row), [i]))
    return runs


def pairs_per_token(config) -> float:
    """How many query-key pairs of attention cost what one token's linear layers cost, in a layer of `config`'s
    model: a token's projections and MLP ~8h^2 + 6hi FLOPs, a pair 4h (its score, its share of the output)."""
    h = getattr(config, "hidden_size", None)
    if not h:
        return 1000.0
    return 2 * h + 1.5 * (getattr(config, "intermediate_size", None) or 4 * h)


def pack(input_ids: torch.Tensor, attention_mask: torch.Tensor, pair_cost: float = 1000.0) -> Packed | None:
    """The packed form of right-padded rows (B, T), or None when it is not less work: tokens (x `pair_cost`,
    pairs_per_token) plus attention pairs. Under the packed mask the attention computes every query-key pair of
    a sequence, where plain causal rows skip the half after each query: long rows after a short prefix cost
    more packed."""
    rows = unpadded(input_ids, attention_mask)
    runs = plan(rows)
    sizes = [shared + sum(len(rows[j]) - shared for j in members) for shared, members in runs]
    P, N = len(runs), max(sizes)
    B, T = input_ids.shape
    if P * N * (pair_cost + N) >= B * T * (pair_cost + T / 2):
        return None
    ids = torch.zeros((P, N), dtype=torch.long)
    positions = torch.zeros((P, N), dtype=torch.long)
    segment = torch.full((P, N), -1, dtype=torch.long)  # 0: the prefix, k: the run's k-th row, -1: padding
    index = torch.zeros((B, T), dtype=torch.long)
    for p, (shared, members) in enumerate(runs):
        base = p * N
        ids[p, :shared] = torch.tensor(rows[members[0]][:shared], dtype=torch.long)
        positions[p, :shared] = torch.arange(shared)
        segment[p, :shared] = 0
        at = shared
        for k, j in enumerate(members, start=1):
            own = rows[j][shared:]
            ids[p, at:at + len(own)] = torch.tensor(own, dtype=torch.long)
            positions[p, at:at + len(own)] = torch.arange(shared, shared + len(own))
            segment[p, at:at + len(own)] = k
            index[j, :shared] = base + torch.arange(shared)
            index[j, shared:len(rows[j])] = base + torch.arange(at, at + len(own))
            at += len(own)
    return Packed(ids, positions, segment, index).to(input_ids.device)


def model_config(model):
    """The transformers config of `model`, inside a DDP-style wrapper (`.module`) or not; None if it has none."""
    return getattr(getattr(model, "module", model), "config", None)


def packs(model) -> bool:
    """Whether `model` takes the packed mask as it is: torch's scaled_dot_product_attention with a boolean mask
    (transformers' "sdpa", its default where flash-attention is not installed), in layers that all attend to
    every earlier position (a custom mask replaces a sliding window or chunked attention)."""
    config = model_config(model)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    types = getattr(config, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types)
    return getattr(config, "sliding_window", None) is None or getattr(config, "use_sliding_window", True) is False


def layout(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Packed | None:
    """How `model` forwards these rows: packed where that is less work and the model takes the mask, else None (as
    they are). It reads the tokens: given CPU tensors, the device has nothing to wait for (a GPU tensor's tokens
    wait for every kernel queued before them)."""
    return pack(input_ids, attention_mask, pairs_per_token(model_config(model))) if packs(model) else None


def hidden_states(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, packed: Packed | None | str = "auto",
                  **kwargs) -> torch.Tensor:
    """The last hidden states (after the final norm), (B, T, H), of right-padded rows, forwarded as `packed` says
    (a `layout` of these rows, on their device; "auto": work it out here). Positions past a row's end hold some
    other position's state: nothing may read them."""
    if isinstance(packed, str):
        packed = layout(model, input_ids, attention_mask)
    if packed is None:
        out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, **kwargs)
        return out.hidden_states[-1]
    out = model(input_ids=packed.input_ids, attention_mask=packed.mask(), position_ids=packed.position_ids,
                output_hidden_states=True, **kwargs)
    flat = out.hidden_states[-1].reshape(-1, out.hidden_states[-1].shape[-1])
    return flat[packed.index]
