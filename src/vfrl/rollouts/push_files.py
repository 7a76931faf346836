"""What a push writes of a LoRA policy: the adapter as peft writes it, and (lora_sync = "merged") the base
weights with the adapter merged in.

Both are asked of the same model at every step, while the trainer's loop waits (Pipeline.push). peft's
state dicts walk every module each time, a cost that for a small model is most of the push. So each is asked
of peft once per model and kept as a plan: the parameter behind each tensor, whose values the optimizer
changes in place. A tensor that is not a parameter's own storage (a copy, a cast: another peft method) leaves
that model without a plan, and peft is asked at every push.
"""

from __future__ import annotations

import weakref
from pathlib import Path

from vfrl.rollouts.safetensors_rewrite import rewrite

_EMBEDDINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ADAPTER_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MERGE_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def save_adapter(model, path: Path) -> None:
    """peft's `save_pretrained` (adapter_config.json, adapter_model.safetensors) without what it redoes at every
    call for nothing, on the trainer's critical path at every step: the README model card, whose Jinja template
    is compiled each time (most of a small adapter's save); and save_embedding_layers = "auto", which re-reads
    and parses the base model's config.json to see whether the vocabulary was resized: decided once per model
    instead (embedding_layers_saved). Where `path` already holds an
    adapter of this model (a recycled directory), only its tensors are rewritten (rewritten_adapter)."""
    if rewritten_adapter(model, path):
        return
    model.create_or_update_model_card = lambda *args, **kwargs: None  # an instance attribute shadows the method
    try:
        model.save_pretrained(path, save_embedding_layers=embedding_layers_saved(model))
    finally:
        del model.create_or_update_model_card


def rewritten_adapter(model, path: Path) -> bool:
    """Where `path` holds an adapter this run wrote before (its adapter_config.json, and a safetensors file
    with the names, shapes and dtypes peft writes now), its tensors are overwritten in place with what peft's
    save_pretrained writes; False, and nothing written, where it does not."""
    if list(model.peft_config) != ["default"] or not (path / "adapter_config.json").is_file():
        return False
    return rewrite(adapter_tensors(model), path / "adapter_model.safetensors", metadata={"format": "pt"})


def adapter_tensors(model) -> dict:
    """The tensors peft's save_pretrained writes of `model`'s adapter (get_peft_model_state_dict), planned."""
    plan = _ADAPTER_PLANS.get(model)
    if plan is not None:
        return {name: parameter.detach() for name, parameter in plan.items()}
    from peft import get_peft_model_state_dict

    tensors = get_peft_model_state_dict(model, save_embedding_layers=embedding_layers_saved(model))
    if model not in _ADAPTER_PLANS:
        _ADAPTER_PLANS[model] = parameters_behind(model, tensors)
    return tensors


def embedding_layers_saved(model) -> bool:
    """What peft's save_embedding_layers = "auto" decides for `model`, asked of peft once: whether the adapter's
    state dict holds more with it than without. A run never resizes the vocabulary, so it stays decided."""
    if model not in _EMBEDDINGS:
        from peft import get_peft_model_state_dict

        auto = get_peft_model_state_dict(model, save_embedding_layers="auto")
        _EMBEDDINGS[model] = auto.keys() != get_peft_model_state_dict(model, save_embedding_layers=False).keys()
    return _EMBEDDINGS[model]


def merged_state_dict(model) -> dict:
    """The peft `model`'s base weights with its active adapters merged in, under the base model's own names
    (what `merge_and_unload().state_dict()` gives, without touching the model). The plan also keeps which
    adapters are active: a run does not switch them."""
    import torch
    from peft.tuners.lora import LoraLayer

    if model not in _MERGE_PLANS:
        layers = [(f"{name}.weight", module, [a for a in module.active_adapters if a in module.lora_A])
                  for name, module in model.get_base_model().named_modules() if isinstance(module, LoraLayer)]
        _MERGE_PLANS[model] = parameters_behind(model, unmerged_weights(model)), layers
    plan, layers = _MERGE_PLANS[model]
    merged = unmerged_weights(model) if plan is None else {key: p.detach() for key, p in plan.items()}
    with torch.no_grad():
        for weight, module, adapters in layers:
            for adapter in adapters:
                merged[weight] = merged[weight] + module.get_delta_weight(adapter)
    return merged


def unmerged_weights(model) -> dict:
    """The base model's state dict under its own names: LoRA factors left out, a trained modules_to_save copy
    in place of its original."""
    merged = {}
    for key, value in model.get_base_model().state_dict().items():
        if "lora_" in key or ".original_module." in key:  # adapter factors; a modules_to_save copy's original
            continue
        for adapter in model.active_adapters:
            key = key.replace(f".modules_to_save.{adapter}.", ".")
        merged[key.replace(".base_layer.", ".")] = value
    return merged


def parameters_behind(model, tensors: dict) -> dict | None:
    """name -> the parameter of `model` whose own storage `tensors[name]` is (same address, shape and
    strides), or None when one of them is not a parameter's (a buffer, a copy, a cast)."""
    owners = {(p.data_ptr(), tuple(p.shape), p.stride()): p for p in model.parameters()}
    plan = {}
    for name, tensor in tensors.items():
        owner = owners.get((tensor.data_ptr(), tuple(tensor.shape), tensor.stride()))
        if owner is None or owner.dtype != tensor.dtype:
            return None
        plan[name] = owner
    return plan


def tied_once(state_dict: dict) -> dict:
    """A tied weight (lm_head = embed_tokens) once, under its first name, as save_pretrained writes it: vLLM ties
    it again on load, and safetensors refuses two names for one storage."""
    seen, out = set(), {}
    for key, value in state_dict.items():
        if value.data_ptr() not in seen:
            seen.add(value.data_ptr())
            out[key] = value.contiguous()
    return out
