"""The policy being trained: the model (with its LoRA adapter, or every weight), its optimizer and LR
schedule, and the accelerate wrapper that spreads them over the trainer processes."""

from __future__ import annotations

import warnings
from datetime import timedelta

import torch

from vfrl.config import RLConfig
from vfrl.sections import LoraSection, OptimizerSection


def make_accelerator(bf16: bool):
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, DistributedDataParallelKwargs, InitProcessGroupKwargs

    return Accelerator(
        mixed_precision="bf16" if bf16 else "no",
        # split_batches: the ranks split one batch, so the LR schedule steps once per batch (accelerate's
        # default steps the prepared scheduler once per process, as if each rank had its own batch)
        dataloader_config=DataLoaderConfiguration(split_batches=True),
        kwargs_handlers=[
            # ranks > 0 sit in a collective while rank 0 waits for vLLM, generates, evaluates or saves; a
            # crashed rank ends the others through the launcher (torchrun stops the group), not this timeout
            InitProcessGroupKwargs(timeout=timedelta(hours=3)),
            # no buffer broadcast in forward: the buffers (rotary frequencies) are equal on every rank, and a
            # forward skipped on one rank (a micro-batch without loss tokens) must not shift the collectives
            DistributedDataParallelKwargs(broadcast_buffers=False),
        ],
    )


def compute_dtype(bf16: bool) -> torch.dtype:
    return torch.bfloat16 if bf16 else torch.float32


def load_policy(config: RLConfig) -> torch.nn.Module:
    """The base model, wrapped in a fresh LoRA adapter when use_lora (else every parameter trains)."""
    from transformers import AutoModelForCausalLM

    args, lora = config.args.learner, config.args.lora
    # bf16 computes in bf16, but what trains keeps fp32 weights: a bf16 weight drops every AdamW update under half
    # its rounding step (at 1.0 that step is 0.0078), so full fine-tuning loads fp32 and accelerate's mixed
    # precision runs the forward and backward in bf16. LoRA: the frozen base in bf16, peft's adapter in fp32.
    model = AutoModelForCausalLM.from_pretrained(config.model, dtype=compute_dtype(args.bf16) if lora.use_lora
                                                 else torch.float32)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if args.use_liger_kernel:
        apply_liger_kernels(model)
    if not lora.use_lora:
        return model
    from peft import get_peft_model

    model = get_peft_model(model, lora_config(lora))
    if args.bf16:
        keep_adapter_inputs_in_bf16(model)
    return model


def lora_config(lora: LoraSection):
    """peft's LoraConfig for `[trainer.args]`' lora_* keys."""
    from peft import LoraConfig

    return LoraConfig(r=lora.lora_rank, lora_alpha=lora.lora_alpha, lora_dropout=lora.lora_dropout,
                      target_modules=lora.lora_target_modules, modules_to_save=lora.lora_modules_to_save,
                      use_rslora=lora.lora_use_rslora, task_type="CAUSAL_LM")


def apply_liger_kernels(model: torch.nn.Module) -> None:
    """Liger's fused RMSNorm, rotary embedding and SwiGLU kernels in place of transformers' unfused ones
    (trainer.args.use_liger_kernel). Liger's fused cross-entropy stays off: the logprobs apply lm_head in chunks
    themselves (logprobs.py). On an H200 it cut a step's kernel time by a quarter (docs/gpu.md)."""
    from liger_kernel.transformers import _apply_liger_kernel_to_instance
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    model_type = getattr(model.config, "model_type", None)
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:  # liger would log it and train on without its kernels
        raise ValueError(f"trainer.args.use_liger_kernel = true, but liger-kernel has no kernels for model type "
                         f"'{model_type}' (it has: {', '.join(sorted(MODEL_TYPE_TO_APPLY_LIGER_FN))}); remove it")
    _apply_liger_kernel_to_instance(model=model, rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=False)


def keep_adapter_inputs_in_bf16(model: torch.nn.Module) -> None:
    """peft casts each adapter's input to the adapter's fp32, and autocast casts it straight back to bf16 for the
    matmul: two copies of every adapted layer's activations, forward and backward, for the same bf16 numbers
    (bf16 -> fp32 -> bf16 is exact). On an H200 they were 0.07 of a 0.50 s LoRA step (docs/gpu.md). Every
    forward of the trainer's model runs under accelerate's bf16 autocast, which makes the one cast it needs."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    for module in model.modules():
        if isinstance(module, BaseTunerLayer):
            module.cast_input_dtype_enabled = False


def prepare_training(accelerator, model: torch.nn.Module, opt: OptimizerSection):
    """(model, optimizer, scheduler), prepared by accelerate: AdamW over the trainable parameters."""
    from transformers import get_scheduler

    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=opt.learning_rate,
                                  weight_decay=opt.weight_decay)
    scheduler = get_scheduler(opt.lr_scheduler_type, optimizer, num_warmup_steps=opt.warmup_steps,
                              num_training_steps=opt.max_steps)
    with warnings.catch_warnings():  # torch renamed broadcast_buffers; accelerate passes the old name
        warnings.filterwarnings("ignore", message="`broadcast_buffers` is deprecated", category=FutureWarning)
        return accelerator.prepare(model, optimizer, scheduler)
