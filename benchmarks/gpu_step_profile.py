"""Where a trainer step's GPU time goes: torch.profiler over RLTrainer.train_step, LoRA and full fine-tuning.

    python scripts/gpu_check.py --only model --workdir /tmp/gc ...      # makes the model (Qwen2.5-0.5B's shape)
    python benchmarks/gpu_step_profile.py --workdir /tmp/gc --out DIR

The lead it follows (docs/gpu.md, section 3): on an H100 the LoRA step (0.68 s) was slower than full
fine-tuning's (0.56 s) at the same shapes, although LoRA skips every base weight's gradient. Variants:

    lora              the trainer as configured (bf16 base, peft's fp32 adapter, accelerate's bf16 autocast; the
                      adapters' inputs stay bf16: policy.keep_adapter_inputs_in_bf16)
    lora_input_cast   the same with peft's own input cast back on (each adapter's input copied to fp32, and
                      autocast copies it back to bf16): what the trainer did before
    lora_bf16_adapter the adapter's weights cast to bf16 as well
    lora_liger, full_liger   Liger's fused RMSNorm, rotary and SwiGLU kernels patched into transformers' Qwen2
                      (liger-kernel, if installed; the patch is process-wide, so these run last)
    full              every weight trains (fp32 master weights, bf16 autocast)

For each: a warm-up step, 2 timed steps (median), then one profiled step: the top operators by CUDA time,
the CUDA time summed over kernels against the step's wall time (the GPU's idle share), and kernel count.
Writes DIR/gpu_step_profile.json and one table per variant (DIR/profile_<variant>.txt).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True, help="gpu_check.py's workdir (holds model/)")
    p.add_argument("--out", required=True)
    p.add_argument("--variants", nargs="+", default=["lora", "lora_input_cast", "lora_bf16_adapter", "full"])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke run (with --tiny)")
    p.add_argument("--tiny", action="store_true", help="gpu_check.py's --tiny model and shapes")
    a = p.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    gc_mod = gpu_check()
    ctx = gc_mod.Context(argparse.Namespace(device=a.device, tiny=a.tiny, workdir=a.workdir, peak_tflops=None))
    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {"gpu": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__, "variants": {}}
    kept = {}
    for variant in sorted(a.variants, key=lambda v: v.endswith("_liger")):  # Liger's patch stays once applied
        if variant.endswith("_liger"):
            from liger_kernel.transformers import apply_liger_kernel_to_qwen2

            apply_liger_kernel_to_qwen2(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                        fused_linear_cross_entropy=False)
        trainer = gc_mod.make_trainer(ctx, Path(a.workdir) / f"run-profile-{variant}",
                                      not variant.startswith("full")).learner
        if variant == "lora_input_cast":
            from peft.tuners.tuners_utils import BaseTunerLayer

            for module in trainer.model.modules():
                if isinstance(module, BaseTunerLayer):
                    module.cast_input_dtype_enabled = True
        if variant == "lora_bf16_adapter":
            for name, param in trainer.model.named_parameters():
                if param.requires_grad:
                    param.data = param.data.to(torch.bfloat16)
        warm_up = trainer.train_step(gc_mod.fake_batch(trainer, seed=0))
        times = []
        for k in range(2):
            batch = gc_mod.fake_batch(trainer, seed=k + 1)
            sync()
            t0 = time.perf_counter()
            trainer.train_step(batch)
            sync()
            times.append(time.perf_counter() - t0)
        batch = gc_mod.fake_batch(trainer, seed=9)
        sync()
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            t0 = time.perf_counter()
            trainer.train_step(batch)
            sync()
            profiled_s = time.perf_counter() - t0
        events = prof.key_averages()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        cuda_us = sum(e.time_range.elapsed_us() for e in kernels) if cuda else None
        key = "self_device_time_total" if cuda else "self_cpu_time_total"
        (out_dir / f"profile_{variant}.txt").write_text(events.table(sort_by=key, row_limit=25))
        top = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:15]
        results["variants"][variant] = {
            "step_s": [round(t, 3) for t in times], "profiled_step_s": round(profiled_s, 3),
            "kernel_time_s": round(cuda_us / 1e6, 3) if cuda_us is not None else None,
            "kernels": len(kernels), "first_step_entropy": warm_up["entropy"],
            "top_ops": [{"op": e.key, "self_ms": round(getattr(e, key) / 1e3, 1), "calls": e.count}
                        for e in top],
        }
        weights = {n: p.detach().float().cpu() for n, p in trainer.model.named_parameters() if p.requires_grad}
        if variant == "lora_input_cast" and "lora" in kept:  # the same steps from the same start: the same weights?
            results["lora_vs_lora_input_cast_max_abs"] = max(float((weights[n] - kept["lora"][n]).abs().max())
                                                             for n in weights)
        if variant in ("lora", "full"):
            kept[variant] = weights
        if variant.endswith("_liger") and variant.split("_")[0] in kept:  # the same 4 steps, fused kernels
            ref = kept[variant.split("_")[0]]
            results[f"{variant}_vs_unfused_max_abs"] = max(float((weights[n] - ref[n]).abs().max()) for n in weights)
        print(variant, json.dumps(results["variants"][variant])[:600], flush=True)
        del trainer
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    print({k: v for k, v in results.items() if k.endswith("_max_abs")})
    (out_dir / "gpu_step_profile.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
