"""`vf-rl export RUN_DIR`: a run's policy as a plain Hugging Face model folder, the adapter merged into the base
(peft's merge_and_unload), which transformers loads and vLLM serves without LoRA flags; `--adapter-only` copies
the peft adapter folder as it is instead."""

from __future__ import annotations

import shutil
from pathlib import Path

from vfrl.config import load_config
from vfrl.launcher.run_policy import Policy
from vfrl.run_dir import RunDir, atomic_directory


def export_policy(run_dir: Path, policy: Policy, out: Path, adapter_only: bool = False) -> Path:
    """Write `policy` of `run_dir` to `out` (made whole, then renamed into place); returns `out`."""
    base = load_config(RunDir(run_dir).config).model
    with atomic_directory(out) as tmp:
        if adapter_only or not policy.adapter:  # an adapter as it is; a full fine-tune's folder is the model
            shutil.copytree(policy.path, tmp, dirs_exist_ok=True)
            if not policy.adapter:
                copy_tokenizer(base, tmp)
            return out
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
        merged = PeftModel.from_pretrained(model, str(policy.path)).merge_and_unload()
        merged.save_pretrained(tmp)
        copy_tokenizer(base, tmp)
    return out


def copy_tokenizer(base: str, folder: Path) -> None:
    """The base model's tokenizer (and chat template) beside the weights, so the folder serves alone."""
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
