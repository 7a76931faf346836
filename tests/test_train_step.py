"""Real training steps: the tiny model with a peft LoRA, fake rollouts with plausible token ids, no server."""

import math
import random

import pytest
import torch

from vfrl.config import RLConfig
from vfrl.rollout_types import Batch, Rollout
from vfrl.learner.logprobs import naive_sequence_logprobs, sequence_logprobs, sequence_logprobs_and_entropy
from vfrl.learner.reference import ReferencePolicy
from vfrl.learner.learner import Learner
from vfrl.trainer.trainer import RLTrainer

GROUP, GROUPS = 4, 2


def make_trainer(model_dir, run_dir, **args) -> RLTrainer:
    args = {"rollouts_per_example": GROUP, "batch_size": GROUP * GROUPS, "micro_batch_size": 4, "max_tokens": 12,
            "max_seq_len": 64, "learning_rate": 1e-2, "log_completions": False, "output_dir": str(run_dir), **args}
    cfg = RLConfig.model_validate({"model": str(model_dir), "env": {"id": "reverse-text"},
                                   "trainer": {"gpus": 0, "args": args}})
    return RLTrainer(cfg, run_dir, base_url="http://127.0.0.1:9/v1", api_key="unused")


def make_learner(model_dir, run_dir, **args) -> Learner:
    return make_trainer(model_dir, run_dir, **args).learner


def fake_batch(trainer: Learner, seed: int = 0, truncated=(), env_tokens: bool = False, rewards=None) -> Batch:
    """Rollouts as vLLM would return them: chat-template prompt ids, sampled character ids and the sampling
    logprobs of the current policy. `env_tokens`: a multi-turn completion with 3 environment tokens inside."""
    rng = random.Random(seed)
    tok = trainer.tokenizer
    rollouts = []
    for g in range(GROUPS):
        question = "".join(rng.choice("abcdefghij") for _ in range(6))
        prompt_ids = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                             tokenize=True)["input_ids"]
        for j in range(GROUP):
            i = g * GROUP + j
            completion = tok.encode("".join(rng.choice("abcdefghij") for _ in range(rng.randint(5, 10))))
            mask = [1] * len(completion)
            if env_tokens:
                completion = completion[:3] + tok.encode("env") + completion[3:]
                mask = mask[:3] + [0, 0, 0] + mask[3:]
            ids = torch.tensor([prompt_ids + completion])
            with torch.no_grad():
                lp = sequence_logprobs(trainer.model, ids, torch.ones_like(ids), trainer.run.temperature)
            logprobs = [v if m else 0.0 for v, m in zip(lp[0, len(prompt_ids) - 1 :].tolist(), mask)]
            reward = rewards[i] if rewards is not None else rng.random()
            rollouts.append(Rollout(example_id=g, prompt=[{"role": "user", "content": question}], completion=[],
                                    answer=question[::-1], prompt_ids=prompt_ids, completion_ids=completion,
                                    completion_logprobs=logprobs, completion_mask=mask, policy="policy-0",
                                    truncated=i in truncated, reward=reward))
    return Batch(step=0, policy_version=0, rollouts=rollouts, example_ids=list(range(GROUPS)))


def trainable(trainer: Learner) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def changed(before: dict[str, torch.Tensor], trainer: Learner) -> bool:
    after = trainable(trainer)
    return any(not torch.equal(before[n], after[n]) for n in before)


@pytest.mark.parametrize("loss_type", ["ratio_mask", "ppo_clip", "gspo"])
def test_train_step_updates_the_adapter(tiny_model, tmp_path, loss_type):
    trainer = make_learner(tiny_model, tmp_path, loss_type=loss_type)
    batch = fake_batch(trainer)
    before = trainable(trainer)
    stats = trainer.train_step(batch)
    assert math.isfinite(stats["loss"]) and stats["grad_norm"] > 0
    assert changed(before, trainer)
    assert stats["entropy"] > 0  # near log(99) for a random-ish model
    assert stats["mismatch_kl"] < 1e-6  # the sampling logprobs came from this very policy
    assert stats["clip_fraction_low"] == stats["clip_fraction_high"] == 0.0  # ratio 1 before the update
    assert stats["loss_tokens"] == sum(len(r.completion_ids) for r in batch.rollouts)
    assert {"reward_mean", "reward_std", "zero_std_groups", "lr", "masked_fraction"} <= set(stats)


def test_the_sampler_correction_weighs_a_stale_batch_and_masks_what_is_past_its_cap(tiny_model, tmp_path):
    """vllm_importance_sampling_correction: on the policy's own batch every weight is 1; on a batch one policy
    stale the weights move off 1; a mask at a cap no sequence's weight stays under gives no gradient at all."""
    trainer = make_learner(tiny_model, tmp_path, vllm_importance_sampling_correction=True, learning_rate=5e-2)
    batch = fake_batch(trainer)
    first = trainer.train_step(batch)
    assert abs(first["importance_sampling_ratio"] - 1) < 1e-4 and first["importance_sampling_masked_fraction"] == 0
    assert math.isfinite(first["loss"]) and first["grad_norm"] > 0
    stale = trainer.train_step(batch)  # sampled by the policy before this one
    assert abs(stale["importance_sampling_ratio"] - 1) > 1e-3 and math.isfinite(stale["loss"])

    masked = make_learner(tiny_model, tmp_path / "masked", vllm_importance_sampling_correction=True,
                          vllm_importance_sampling_mode="sequence_mask", vllm_importance_sampling_cap=1e-6)
    before = trainable(masked)
    stats = masked.train_step(fake_batch(masked))
    assert stats["importance_sampling_masked_fraction"] == 1.0 and stats["grad_norm"] == 0
    assert not changed(before, masked)


def test_kl_is_zero_before_the_first_update_and_positive_after(tiny_model, tmp_path):
    trainer = make_learner(tiny_model, tmp_path, beta=0.1)
    batch = fake_batch(trainer)
    first = trainer.train_step(batch)
    assert first["kl"] == 0.0  # the adapter starts with B = 0: the policy is the reference
    second = trainer.train_step(batch)
    assert second["kl"] > 0
    assert math.isfinite(second["loss"])


def test_later_iterations_keep_the_sampling_policy_as_old(tiny_model, tmp_path):
    """With old = the sampler's logprobs for every iteration, ratios leave [1 - eps, 1 + eps] after the
    first update and get clipped; had "old" been recomputed each iteration, every ratio would stay 1."""
    one = make_learner(tiny_model, tmp_path / "one", loss_type="ppo_clip", epsilon=0.01, num_iterations=1)
    stats = one.train_step(fake_batch(one))
    assert stats["clip_fraction_low"] + stats["clip_fraction_high"] == 0.0
    three = make_learner(tiny_model, tmp_path / "three", loss_type="ppo_clip", epsilon=0.01, num_iterations=3)
    before = trainable(three)
    stats = three.train_step(fake_batch(three))
    assert stats["clip_fraction_low"] + stats["clip_fraction_high"] > 0.05
    assert changed(before, three) and three.scheduler.scheduler.last_epoch == 1  # the schedule counts batches


def test_masked_truncated_rollouts_contribute_nothing(tiny_model, tmp_path):
    trainer = make_learner(tiny_model, tmp_path, mask_truncated_completions=True)
    batch = fake_batch(trainer, truncated=range(GROUP * GROUPS))
    before = trainable(trainer)
    stats = trainer.train_step(batch)
    assert stats["loss_tokens"] == 0 and stats["loss"] == 0.0 and stats["truncated_fraction"] == 1.0
    assert not changed(before, trainer)
    half = fake_batch(trainer, truncated=range(0, GROUP * GROUPS, 2))
    stats = trainer.train_step(half)
    assert stats["loss_tokens"] == sum(len(r.completion_ids) for r in half.rollouts if not r.truncated)


def test_zero_truncated_completions_turns_equal_rewards_into_a_signal(tiny_model, tmp_path):
    rewards = [1.0] * (GROUP * GROUPS)  # every group's rewards equal: advantage 0, no update
    plain = make_learner(tiny_model, tmp_path / "plain")
    before = trainable(plain)
    stats = plain.train_step(fake_batch(plain, truncated={0, 5}, rewards=rewards))
    assert stats["zero_std_groups"] == 1.0 and not changed(before, plain)
    zeroed = make_learner(tiny_model, tmp_path / "zeroed", zero_truncated_completions=True)
    before = trainable(zeroed)
    stats = zeroed.train_step(fake_batch(zeroed, truncated={0, 5}, rewards=rewards))
    assert stats["zero_std_groups"] == 0.0 and stats["reward_mean"] == 1.0  # the rubric's reward is logged
    assert changed(before, zeroed)


def test_environment_tokens_train_only_when_unmasked(tiny_model, tmp_path):
    masked = make_learner(tiny_model, tmp_path / "masked")
    batch = fake_batch(masked, env_tokens=True)
    policy_tokens = sum(sum(r.completion_mask) for r in batch.rollouts)
    assert masked.train_step(batch)["loss_tokens"] == policy_tokens
    unmasked = make_learner(tiny_model, tmp_path / "unmasked", mask_env_responses=False)
    stats = unmasked.train_step(fake_batch(unmasked, env_tokens=True))
    assert stats["loss_tokens"] == policy_tokens + 3 * GROUP * GROUPS
    # env tokens have no sampling logprob (0.0): using it would show as mismatch and as masked ratios
    assert stats["mismatch_kl"] < 1e-6 and stats["masked_fraction"] == 0.0


def test_a_batch_that_lost_rollouts_trains_logs_its_fault_counts_and_warns(tiny_model, tmp_path, capsys):
    """Faults left group 1 with one rollout of four (tests/test_rollout_faults.py makes such batches)."""
    import json

    run = make_trainer(tiny_model, tmp_path, micro_batch_size=2)
    trainer = run.learner
    batch = fake_batch(trainer)
    batch.rollouts = batch.rollouts[: GROUP + 1]
    batch.group_sizes = [GROUP, 1]
    batch.rollouts[0].reward, batch.rollouts[0].reward_errors = 0.0, {"lcs": "returned nan"}
    batch.metrics = {"rollouts_dropped": 3.0, "reward_errors/lcs": 1.0}
    batch.warning = "step 1: 3 of 8 rollouts dropped: 3 timed out (example 1 not done after 300s)"
    before = trainable(trainer)
    stats = trainer.train_step(batch)
    assert math.isfinite(stats["loss"]) and stats["grad_norm"] > 0 and changed(before, trainer)
    assert stats["loss_tokens"] == sum(len(r.completion_ids) for r in batch.rollouts)
    assert stats["rollouts_dropped"] == 3.0 and stats["reward_errors/lcs"] == 1.0
    assert stats["zero_std_groups"] == 0.5  # the group of one has no spread
    run.run_log.step(1, {"step": 1, "max_steps": 4, **stats}, batch)
    assert f"!!! WARNING: {batch.warning}" in capsys.readouterr().out
    rows = [json.loads(x) for x in (tmp_path / "rollouts" / "step_1.jsonl").read_text().splitlines()]
    assert (len(rows) == GROUP + 1 and rows[0]["reward_errors"] == {"lcs": "returned nan"}
            and rows[1]["reward_errors"] == {})


# ---- logprobs and the reference policy ----
def lora_model(model_dir, seed=0):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    return model


def test_chunked_logprobs_and_gradients_equal_the_naive_ones(tiny_model):
    model = lora_model(tiny_model)
    torch.manual_seed(1)
    ids = torch.randint(3, 99, (3, 21))
    attn = torch.ones_like(ids)
    positions = torch.rand(3, 20) > 0.3
    naive, naive_entropy = naive_sequence_logprobs(model, ids, attn, temperature=0.7)
    (naive * positions).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()
    chunked, entropy = sequence_logprobs_and_entropy(model, ids, attn, 0.7, positions, chunk_size=7)
    chunked.sum().backward()
    assert (chunked - naive * positions).abs().max() < 1e-5
    assert (entropy - naive_entropy * positions).abs().max() < 1e-5
    for n, p in model.named_parameters():
        if p.requires_grad:  # fp32 sums in another order: relative to the largest gradient entry
            assert (p.grad - grads[n]).abs().max() <= 2e-5 * grads[n].abs().max(), n


def test_reference_of_lora_is_the_base_model(tiny_model):
    from transformers import AutoModelForCausalLM

    model = lora_model(tiny_model)
    ids = torch.randint(3, 99, (2, 12))
    attn = torch.ones_like(ids)
    base = sequence_logprobs(AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32), ids, attn)
    ref = ReferencePolicy(model, str(tiny_model), use_lora=True).logprobs(ids, attn, 1.0)
    assert (ref - base).abs().max() < 1e-6
    assert (sequence_logprobs(model, ids, attn).detach() - base).abs().max() > 1e-3  # the adapter is back on


def test_reference_of_full_fine_tuning_is_a_frozen_copy_of_the_base(tiny_model):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    ids = torch.randint(3, 99, (2, 12))
    attn = torch.ones_like(ids)
    base = sequence_logprobs(model, ids, attn).detach()
    reference = ReferencePolicy(model, str(tiny_model), use_lora=False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # training moves every weight
    assert (reference.logprobs(ids, attn, 1.0) - base).abs().max() < 1e-6
    assert not any(p.requires_grad for p in reference.frozen.parameters())


def test_full_fine_tuning_step_with_kl_against_the_frozen_base(tiny_model, tmp_path):
    trainer = make_learner(tiny_model, tmp_path, use_lora=False, beta=0.1, learning_rate=1e-3)
    batch = fake_batch(trainer)
    before = trainable(trainer)
    first = trainer.train_step(batch)
    assert first["kl"] == 0.0 and changed(before, trainer)
    assert trainer.train_step(batch)["kl"] > 0


@pytest.fixture
def fresh_accelerate_state():
    """accelerate keeps one process-wide state, and the other tests' Accelerators have no mixed precision."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.mark.parametrize("use_lora", [True, False])
@pytest.mark.usefixtures("fresh_accelerate_state")
def test_a_bf16_step_runs_as_on_a_gpu_and_full_fine_tuning_moves_every_weight(tiny_model, tmp_path, use_lora):
    """bf16 as a GPU runs it: accelerate's mixed precision, which hands the model's outputs back in fp32. The H100
    found two faults no CPU run had: lm_head's chunks met fp32 hidden states with bf16 weights (a dtype error at
    the first step), and full fine-tuning on bf16 weights dropped every update under half a weight's rounding step
    (the 49 norm weights, at 1.0, never moved). Now the step runs and, from fp32 master weights, every weight moves."""
    trainer = make_learner(tiny_model, tmp_path, bf16=True, use_lora=use_lora, learning_rate=1e-5)
    assert trainer.accelerator.mixed_precision == "bf16"
    batch = fake_batch(trainer)
    before = trainable(trainer)
    stats = trainer.train_step(batch)
    assert math.isfinite(stats["loss"]) and stats["mismatch_kl"] < 1e-2
    after = trainable(trainer)
    moved = [n for n in before if not torch.equal(before[n], after[n])]
    if use_lora:  # lora_B starts at 0, so lora_A gets no gradient in the first step
        assert moved and all("lora_B" in n for n in moved)
    else:
        assert len(moved) == len(before) and all(p.dtype == torch.float32 for p in after.values())


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_lora_adapters_take_their_bf16_inputs_as_they_are_and_train_the_same(tiny_model, tmp_path):
    """peft casts each adapter's bf16 input to the adapter's fp32 and autocast casts it straight back: two copies
    of the activations for the same numbers (0.07 of a 0.50 s LoRA step on an H200). With bf16 the trainer turns
    that cast off; the steps are bit for bit those with it on (bf16 -> fp32 -> bf16 is exact)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    def adapters(trainer):
        return [m for m in trainer.model.modules() if isinstance(m, BaseTunerLayer)]

    kept = make_learner(tiny_model, tmp_path / "kept", bf16=True, use_lora=True, learning_rate=1e-3)
    cast = make_learner(tiny_model, tmp_path / "cast", bf16=True, use_lora=True, learning_rate=1e-3)
    assert adapters(kept) and not any(m.cast_input_dtype_enabled for m in adapters(kept))
    for m in adapters(cast):
        m.cast_input_dtype_enabled = True  # peft's default: what the trainer did before
    assert trainable(kept).keys() == trainable(cast).keys()
    start = trainable(kept)
    assert all(torch.equal(start[n], b) for n, b in trainable(cast).items())
    for seed in (0, 1):  # the second step also moves lora_A (lora_B starts at 0)
        batch = fake_batch(kept, seed=seed)
        assert kept.train_step(batch)["loss"] == cast.train_step(batch)["loss"]
    after_kept, after_cast = trainable(kept), trainable(cast)
    assert all(torch.equal(after_kept[n], after_cast[n]) for n in after_kept)
    assert any("lora_A" in n and not torch.equal(start[n], after_kept[n]) for n in start)


def test_lm_head_outside_the_forward_runs_without_its_module_hooks(tiny_model):
    """FSDP2 hooks a sharded lm_head: called again outside the forward, its group was freed in the middle of
    backward (an illegal memory access on the H100). The chunks apply a plain Linear head's weight directly."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    calls = []
    model.get_output_embeddings().register_forward_pre_hook(lambda m, args: calls.append(args[0].shape[1]))
    ids = torch.randint(0, 50, (2, 12))
    chunked = sequence_logprobs(model, ids, torch.ones_like(ids), chunk_size=5)
    assert calls == [0]  # the model's own forward, at no position (logits_to_keep)
    naive, _ = naive_sequence_logprobs(model, ids, torch.ones_like(ids), with_entropy=False)
    assert (chunked - naive).abs().max() < 1e-5


def test_micro_batches_go_by_length_without_padding_columns_and_keep_the_gradient(tiny_model, tmp_path):
    from vfrl.learner.batch import make_train_batch

    whole = make_learner(tiny_model, tmp_path / "whole", micro_batch_size=GROUP * GROUPS)
    split = make_learner(tiny_model, tmp_path / "split", micro_batch_size=2)
    batch = fake_batch(whole)
    tb, _ = make_train_batch(batch.rollouts, split.shape, split.pad_id)
    parts = tb.micro_batches(2)
    lengths = [p.attention_mask.sum(1).tolist() for p in parts]
    assert [len(x) for x in lengths] == [2, 2, 2, 2] and sum(lengths, []) == sorted(tb.attention_mask.sum(1).tolist())
    assert all(p.input_ids.shape[1] == max(x) and p.loss_mask.shape[1] == max(x) - 1 for p, x in zip(parts, lengths))
    assert sum(float(p.loss_mask.sum()) for p in parts) == float(tb.loss_mask.sum())
    assert torch.equal(torch.cat([p.advantages for p in parts]).sort().values, tb.advantages.sort().values)
    before = trainable(whole)
    assert all(torch.equal(before[n], p) for n, p in trainable(split).items())  # the same start
    a, b = whole.train_step(batch), split.train_step(batch)
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5) and a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
    # the step's gradients (still in .grad) agree; Adam's first update is lr x sign, so compare those
    grads = [(p.grad, q.grad) for p, q in zip(whole.model.parameters(), split.model.parameters()) if p.requires_grad]
    assert (all(torch.allclose(g, h, rtol=1e-4, atol=1e-7) for g, h in grads)
            and any(g.abs().sum() > 0 for g, _ in grads))


def test_a_step_lays_out_its_micro_batches_from_cpu_tensors_and_trains_as_the_rows_do(tiny_model, tmp_path,
                                                                                      monkeypatch):
    """On a GPU, reading a micro-batch's tokens there waits for every kernel queued before: the layout
    (shared_prefix.layout) is worked out before the tensors move. Packed or not, the step is the same."""
    from vfrl.learner import learner as trainer_module
    from vfrl.learner.shared_prefix import layout

    seen = []

    def spy(model, input_ids, attention_mask):
        out = layout(model, input_ids, attention_mask)
        seen.append((input_ids.device.type, attention_mask.device.type, out is not None))
        return out

    monkeypatch.setattr(trainer_module, "layout", spy)
    packed = make_learner(tiny_model, tmp_path / "packed", beta=0.1)
    rows = make_learner(tiny_model, tmp_path / "rows", beta=0.1)
    batch = fake_batch(packed)
    a = packed.train_step(batch)
    assert seen == [("cpu", "cpu", True)] * GROUPS  # one micro-batch per group, each packed
    monkeypatch.setattr(trainer_module, "layout", lambda *args: None)
    b = rows.train_step(batch)
    for key in ("loss", "grad_norm", "kl", "mismatch_kl", "entropy"):
        assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-7), key


def test_an_adapter_push_writes_what_peft_loads_without_a_model_card(tiny_model, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from vfrl.rollouts.push_files import save_adapter

    trainer = make_learner(tiny_model, tmp_path / "run")
    trainer.train_step(fake_batch(trainer))  # lora_B is no longer zero
    model = trainer.accelerator.unwrap_model(trainer.model)
    save_adapter(model, tmp_path / "adapter")
    assert sorted(p.name for p in (tmp_path / "adapter").iterdir()) == ["adapter_config.json",
                                                                        "adapter_model.safetensors"]
    assert "create_or_update_model_card" not in vars(model)  # the method is back
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), tmp_path / "adapter")
    mine = {n: p for n, p in model.named_parameters() if "lora_" in n}
    theirs = dict(loaded.named_parameters())
    assert mine and all(torch.equal(p.detach(), theirs[n].detach()) for n, p in mine.items())


@pytest.mark.parametrize("targets", [["q_proj", "v_proj"], ["q_proj", "embed_tokens"]])
def test_save_adapter_writes_what_peft_s_own_save_writes(tiny_model, tmp_path, targets):
    """save_adapter decides peft's save_embedding_layers = "auto" once per model instead of at every save: the files
    hold the same tensors as a plain save_pretrained, with the embeddings targeted (base embeddings saved too) or
    not."""
    import warnings

    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from vfrl.rollouts.push_files import save_adapter

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(r=4, target_modules=targets))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft's "Setting save_embedding_layers to True" for the embeddings
        model.save_pretrained(tmp_path / "peft")
        for i in range(2):  # the second save uses the decision the first one made
            save_adapter(model, tmp_path / f"mine{i}")
    theirs = load_file(tmp_path / "peft" / "adapter_model.safetensors")
    assert any("embed_tokens.base_layer" in k for k in theirs) == ("embed_tokens" in targets)
    for i in range(2):
        mine = load_file(tmp_path / f"mine{i}" / "adapter_model.safetensors")
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_liger_kernels_are_applied_to_the_model_without_their_cross_entropy(tiny_model, monkeypatch):
    """use_liger_kernel hands the model instance to liger-kernel (a GPU library: faked here; the real kernels ran
    in scripts/gpu_check.py's train_lora_liger on an H200, docs/gpu.md), with its fused cross-entropy off, and
    refuses a model type it has no kernels for rather than training on without them."""
    import sys
    import types

    from vfrl.config import RLConfig
    from vfrl.learner.policy import load_policy

    applied = []
    transformers_mod = types.ModuleType("liger_kernel.transformers")
    transformers_mod._apply_liger_kernel_to_instance = lambda model, **kw: applied.append((type(model).__name__, kw))
    patch_mod = types.ModuleType("liger_kernel.transformers.monkey_patch")
    patch_mod.MODEL_TYPE_TO_APPLY_LIGER_FN = {"qwen2": None, "llama": None}
    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", transformers_mod)
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers.monkey_patch", patch_mod)
    config = RLConfig.model_validate({"model": str(tiny_model), "env": {"id": "reverse-text"},
                                      "trainer": {"args": {"use_liger_kernel": True}}})
    model = load_policy(config)
    assert applied == [("Qwen2ForCausalLM", {"rope": True, "rms_norm": True, "swiglu": True, "cross_entropy": False,
                                             "fused_linear_cross_entropy": False})]
    assert hasattr(model, "peft_config")  # applied to the base model, then wrapped in the adapter
    patch_mod.MODEL_TYPE_TO_APPLY_LIGER_FN = {"llama": None}
    with pytest.raises(ValueError, match="no kernels for model type 'qwen2'"):
        load_policy(config)
