"""shared_prefix.py: rows that start alike forwarded once, with the logprobs, entropy and gradients of their own
forwards (the real tiny model, under peft LoRA, torch's sdpa attention)."""

import pytest
import torch

from vfrl.learner import shared_prefix
from vfrl.learner.batch import TrainBatch
from vfrl.learner.logprobs import sequence_logprobs_and_entropy
from vfrl.learner.shared_prefix import pack, plan


def test_plan_packs_rows_that_start_alike_and_leaves_the_rest_alone():
    p, q = [5, 6, 7, 8], [9, 9, 9]
    rows = [p + [1, 2], p + [3], p + [1, 4, 4], q + [1], [2, 2]]
    assert plan(rows) == [(4, [0, 1, 2]), (4, [3]), (2, [4])]  # a row alone: all of it is its prefix
    # a row that is all prefix, and rows sharing more than the prompt: the run's prefix is what all its rows share
    assert plan([p, p + [1], p + [1, 2]]) == [(4, [0, 1, 2])]
    assert plan([p + [1, 2], p + [1, 3]]) == [(5, [0, 1])]


def rows_to_batch(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    T = max(map(len, rows))
    ids, att = torch.zeros(len(rows), T, dtype=torch.long), torch.zeros(len(rows), T, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)], att[i, :len(r)] = torch.tensor(r), 1
    return ids, att


def test_the_packed_mask_lets_a_row_see_the_prefix_and_itself_only():
    ids, att = rows_to_batch([[5, 6, 1, 2], [5, 6, 3], [7]])
    packed = pack(ids, att)
    assert packed.input_ids.tolist() == [[5, 6, 1, 2, 3], [7, 0, 0, 0, 0]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 2], [0, 0, 0, 0, 0]]
    assert packed.mask()[0, 0].int().tolist() == [[1, 0, 0, 0, 0],
                                                [1, 1, 0, 0, 0],
                                                [1, 1, 1, 0, 0],
                                                [1, 1, 1, 1, 0],
                                                [1, 1, 0, 0, 1]]
    assert packed.mask()[1, 0].diagonal().all()  # padding attends to itself
    assert packed.index[1, :3].tolist() == [0, 1, 4] and packed.index[2, 0].item() == 5


def test_rows_with_nothing_in_common_are_not_packed():
    ids, att = rows_to_batch([[5, 6, 1], [7, 8, 9]])
    assert pack(ids, att) is None


def test_long_rows_after_a_short_prefix_are_not_packed():
    """Packing 8 rows of 200 own tokens after a 2-token prefix would save 14 tokens and multiply attention 8x."""
    ids, att = rows_to_batch([[5, 6] + [10 + i] * 200 for i in range(8)])
    assert pack(ids, att) is None
    # the same rows after a 100-token prompt pack where a token's linear layers outweigh its attention enough
    ids, att = rows_to_batch([[5] * 100 + [10 + i] * 200 for i in range(8)])
    assert pack(ids, att, pair_cost=100) is None and pack(ids, att, pair_cost=5000) is not None


def test_a_token_weighs_what_its_layer_s_linear_work_is_worth_in_attention_pairs():
    from types import SimpleNamespace as NS

    assert shared_prefix.pairs_per_token(NS(hidden_size=128, intermediate_size=256)) == 640  # the tiny model
    assert shared_prefix.pairs_per_token(NS(hidden_size=896, intermediate_size=4864)) == 9088  # Qwen2.5-0.5B


@pytest.fixture(scope="module")
def lora_model(tiny_model):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model),
                           LoraConfig(r=8, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)  # a trained adapter: its gradients reach lora_A too
    assert shared_prefix.packs(model)
    return model


def groups(n_groups: int, size: int, prompt_len: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(n_groups):
        prompt = torch.randint(3, 99, (prompt_len,), generator=g).tolist()
        first = torch.randint(3, 99, (3,), generator=g).tolist()
        for r in range(size):
            own = torch.randint(3, 99, (int(torch.randint(1, 12, (), generator=g)),), generator=g).tolist()
            rows.append(prompt + (first if r % 2 else []) + own)  # some rows share more than the prompt
    return rows + [[0]]  # a padding row, as collate makes for a dropped rollout


def forward_backward(model, ids, att, positions, packed: bool, monkeypatch):
    monkeypatch.setattr(shared_prefix, "packs", lambda m: packed)
    model.zero_grad()
    logprobs, entropy = sequence_logprobs_and_entropy(model, ids, att, 0.9, positions, 16)
    (logprobs * positions).sum().backward()
    return logprobs.detach(), entropy, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_packed_rows_get_their_own_forward_s_logprobs_entropy_and_gradients(lora_model, monkeypatch):
    rows = groups(3, 5, 12)
    ids, att = rows_to_batch(rows)
    assert pack(ids, att) is not None
    positions = torch.zeros(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool)
    for i, r in enumerate(rows[:-1]):
        positions[i, 11:len(r) - 1] = True  # the completion's tokens, as the loss mask asks
    alone = forward_backward(lora_model, ids, att, positions, False, monkeypatch)
    packed = forward_backward(lora_model, ids, att, positions, True, monkeypatch)
    assert torch.allclose(alone[0], packed[0], atol=1e-5) and torch.allclose(alone[1], packed[1], atol=1e-5)
    assert alone[2].keys() == packed[2].keys() and len(alone[2]) > 0
    for name, grad in alone[2].items():  # equal up to the order of float32 sums
        assert (grad - packed[2][name]).abs().max() <= 1e-5 * grad.abs().max(), name


def test_micro_batches_by_prefix_keep_a_group_s_rows_together():
    rows = [[5, 6, 1], [7, 8, 2, 2], [5, 6, 3, 3, 3], [7, 8, 4], [5, 6, 9, 9]]
    ids, att = rows_to_batch(rows)
    B, T = ids.shape
    tb = TrainBatch(ids, att, torch.zeros(B, T - 1), torch.zeros(B, T - 1, dtype=torch.bool), torch.zeros(B, T - 1),
                    torch.arange(B, dtype=torch.float32), torch.zeros(B, dtype=torch.bool))
    parts = tb.micro_batches(3, by_prefix=True)
    assert [p.advantages.tolist() for p in parts] == [[0.0, 2.0, 4.0], [1.0, 3.0]]  # rows 0, 2, 4 start 5 6
    assert parts[1].input_ids.shape[1] == 4  # each cut to its longest row


def test_only_sdpa_attention_over_every_earlier_position_is_packed():
    from types import SimpleNamespace as NS

    def model(**config):
        return NS(config=NS(_attn_implementation="sdpa", **config))

    assert shared_prefix.packs(model(layer_types=["full_attention"] * 2))
    assert not shared_prefix.packs(model(layer_types=["full_attention", "sliding_attention"]))
    assert shared_prefix.packs(model(sliding_window=32768, use_sliding_window=False))  # Qwen2.5's configs
    assert not shared_prefix.packs(model(sliding_window=4096))  # Mistral's
    assert not shared_prefix.packs(NS(config=NS(_attn_implementation="flash_attention_2", layer_types=None)))
    assert shared_prefix.packs(NS(module=model(layer_types=None)))  # DDP's wrapper
