"""GPU memory each pane needs, estimated from the model's config.json without importing torch.

When vLLM and the trainer share a GPU, vLLM takes `--gpu-memory-utilization` of it (weights and KV
cache) and the trainer must live in the rest. plan.py decides the split and refuses what cannot fit;
this module only counts bytes. Parts are named so a plan (and an error) can show where they go:

    vLLM      weights (inference dtype) + KV cache of one max_model_len sequence + runtime overhead
    trainer   weights (LoRA: the base in the compute dtype; full fine-tuning: fp32 master weights) + gradients
              and AdamW states of what trains (+ a frozen reference)
              + activations of one micro-batch + the chunked lm_head's logits

The static parts (weights, gradients, optimizer states) are exact up to a few MiB; activations are an
estimate for Llama-style decoder layers (Qwen2, Llama, Mistral), checked on a GPU by
scripts/gpu_check.py.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # scripts/gpu_check.py reads model shapes on machines that may lack pydantic
    from vfrl.config import RLConfig

GIB = 2**30
# the bundled accelerate configs that shard weights, gradients and optimizer states over the trainer processes
SHARDED_CONFIGS = ("zero3", "fsdp")
# CUDA context + cuBLAS workspaces of one process on a recent GPU; torch's allocator does not see it and
# vLLM's --gpu-memory-utilization budget does not include it, so each process on a shared GPU costs this extra.
CUDA_CONTEXT = 0.5 * GIB
# vLLM beside weights and KV cache: the profiling forward pass of max_num_batched_tokens, the sampler,
# CUDA graphs. vLLM refuses to start when its budget leaves no room for the KV cache after these.
VLLM_OVERHEAD = 1.5 * GIB
# peft keeps LoRA weights in fp32 even on a bf16 model (autocast_adapter_dtype); + fp32 grad + 2 AdamW states
LORA_BYTES_PER_PARAM = 4 * 4
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelShape:
    """What the estimates need from a decoder-only model's config.json."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    kv_dim: int  # num_key_value_heads * head_dim: one token's K (or V) per layer
    max_len: int  # max_position_embeddings: vLLM's max_model_len when the config leaves it out
    dtype: str  # as saved: "bfloat16", "float32", ...
    source: str  # where params came from: "safetensors headers" or "config.json"


@dataclass
class Need:
    """Bytes by named part, in the order they are shown."""

    parts: dict[str, float] = field(default_factory=dict)
    static: tuple[str, ...] = ()  # the parts that are certain (the rest is an estimate)

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    @property
    def static_total(self) -> float:
        return sum(v for k, v in self.parts.items() if k in self.static)

    def describe(self, only_static: bool = False) -> str:
        """`weights 0.9 + KV cache 0.1 + overhead 1.5` (GiB)."""
        return " + ".join(f"{k} {gib(v)}" for k, v in self.parts.items() if not only_static or k in self.static)


def gib(n: float) -> str:
    return f"{n / GIB:.1f}"


def hub_cache_config(model: str) -> Path | None:
    """config.json of hub id `model` if an earlier download left it in the Hugging Face cache."""
    cache = (os.environ.get("HF_HUB_CACHE")
             or Path(os.environ.get("HF_HOME", Path.home() / ".cache/huggingface")) / "hub")
    repo = Path(cache) / f"models--{model.replace('/', '--')}"
    ref = repo / "refs" / "main"
    snapshots = ([repo / "snapshots" / ref.read_text().strip()] if ref.is_file()
                 else sorted((repo / "snapshots").glob("*")))
    return next((s / "config.json" for s in snapshots if (s / "config.json").is_file()), None)


def find_model_config(model: str, workdir: Path) -> Path | None:
    """The config.json vf-rl can read offline: a local model folder's, else the hub cache's, else None."""
    path = Path(model).expanduser()
    path = path if path.is_absolute() else workdir / path
    if (path / "config.json").is_file():
        return path / "config.json"
    return hub_cache_config(model) if "/" in model and not model.startswith((".", "/", "~")) else None


def safetensors_params(folder: Path) -> int | None:
    """Exact parameter count from the safetensors headers (8-byte length, then JSON); None when a shard the
    index names is missing or there are none. Counts MoE experts and biases the formula below would not."""
    files = sorted(folder.glob("*.safetensors"))
    index = folder / "model.safetensors.index.json"
    if not files or (index.is_file() and
                     {folder / f for f in json.loads(index.read_text())["weight_map"].values()} - set(files)):
        return None
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, t in header.items():
            if name != "__metadata__":
                count = 1
                for d in t["shape"]:
                    count *= d
                total += count
    return total


def model_shape(config_json: Path) -> ModelShape | None:
    """None when config.json is not a decoder-only language model's (no hidden_size, layers, ...)."""
    raw = json.loads(config_json.read_text())
    c = raw.get("text_config", raw)  # multimodal configs nest the language model's
    try:
        h, layers, vocab, inter = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
        heads = c["num_attention_heads"]
    except KeyError:
        return None
    head_dim = c.get("head_dim") or h // heads
    q, kv = heads * head_dim, (c.get("num_key_value_heads") or heads) * head_dim
    per_layer = 2 * h * q + 2 * h * kv + (q + 2 * kv) + 3 * h * inter + 2 * h  # q,o + k,v + qkv bias + MLP + norms
    tied = c.get("tie_word_embeddings", raw.get("tie_word_embeddings", False))
    formula = layers * per_layer + vocab * h * (1 if tied else 2) + h
    exact = safetensors_params(config_json.parent)
    return ModelShape(
        params=exact or formula, layers=layers, hidden=h, intermediate=inter, vocab=vocab, kv_dim=kv,
        max_len=c.get("max_position_embeddings", 2048), dtype=str(c.get("torch_dtype") or c.get("dtype") or "float32"),
        source="safetensors headers" if exact else "config.json",
    )


def vllm_need(shape: ModelShape, inference_args: dict, reloads_weights: bool = False) -> Need:
    """Per GPU of the server: the least its --gpu-memory-utilization budget must hold to start.
    `reloads_weights` (full weights or merged LoRA pushed each step): vLLM's in-place reload builds one layer
    anew before copying it into place, the largest being the embedding or the fused gate/up projection, and
    its allocator keeps that block (vLLM 0.32 model_loader/reload; read, not yet measured on a GPU)."""
    dtype = str(inference_args.get("dtype", "auto"))
    if dtype == "auto":  # vLLM serves fp32 checkpoints in 16 bits unless told otherwise
        dtype = "bfloat16" if shape.dtype == "float32" else shape.dtype
    b = DTYPE_BYTES.get(dtype, 2)
    kv_b = 1 if str(inference_args.get("kv_cache_dtype", "auto")).startswith("fp8") else b
    tp = int(inference_args.get("tensor_parallel_size", 1))
    max_len = int(inference_args.get("max_model_len") or shape.max_len)
    parts = {"weights": shape.params * b / tp,
             f"KV cache of one {max_len}-token sequence": 2 * shape.layers * shape.kv_dim * kv_b * max_len / tp,
             "overhead": VLLM_OVERHEAD}
    if reloads_weights:
        parts["in-place reload (one layer)"] = max(shape.vocab, 2 * shape.intermediate) * shape.hidden * b / tp
    return Need(parts, static=("weights",))


def lora_params(shape: ModelShape, rank: int, modules_to_save: list[str] | None) -> int:
    """Adapter size for all linear layers of every block (an upper bound for a narrower target list), plus
    full copies of an embedding or lm_head named in lora_modules_to_save."""
    h, i = shape.hidden, shape.intermediate
    per_layer = rank * (9 * h + 2 * shape.kv_dim + 3 * i)  # q, k, v, o, gate, up, down: rank x (in + out) each
    saved = sum(shape.vocab * h for m in modules_to_save or () if m in ("embed_tokens", "lm_head"))
    return shape.layers * per_layer + saved


def activations(shape: ModelShape, tokens: int, b: int, checkpointing: bool) -> float:
    """What autograd keeps for backward over `tokens` positions of a Llama-style decoder.

    Per layer and token, in the compute dtype (b bytes): q, k, v and their rotary copies, the attention
    output and o_proj's input, k and v expanded to all heads (GQA with a padding mask), both norm outputs,
    gate, up, silu(gate) and their product (intermediate-sized); in fp32, RMSNorm's two upcast inputs.
    Gradient checkpointing keeps each layer's input instead and recomputes one layer at a time.
    Plus the per-layer hidden states the logprob pass asks for (output_hidden_states)."""
    h, kv, i = shape.hidden, shape.kv_dim, shape.intermediate
    per_layer = b * (11 * h + 5 * kv + 4 * i) + 2 * 4 * h
    kept = shape.layers * b * h + per_layer if checkpointing else shape.layers * per_layer
    return tokens * (kept + (shape.layers + 1) * b * h)


def trainer_need(shape: ModelShape, cfg: RLConfig, processes: int = 1) -> Need:
    """Per trainer process (one per GPU), at the peak of a micro-batch's forward and backward."""
    a = cfg.args
    b = 2 if a.bf16 else 4
    # ZeRO-3 and FSDP shard weights, gradients and optimizer states over the processes; DDP replicates them
    shards = processes if cfg.trainer.accelerate_config in SHARDED_CONFIGS else 1
    if a.use_lora:  # the frozen base in the compute dtype
        parts = {"weights": shape.params * b / shards}
        parts["LoRA weights, gradients and AdamW states"] = (
            lora_params(shape, a.lora_rank, a.lora_modules_to_save) * LORA_BYTES_PER_PARAM / shards)
    else:  # fp32 master weights (vfrl.learner.policy); torch's AdamW keeps its two states in their dtype
        parts = {"weights": shape.params * 4 / shards, "gradients": shape.params * 4 / shards,
                 "AdamW states": 2 * shape.params * 4 / shards}
        if a.beta > 0:
            parts["frozen reference model"] = shape.params * b
    static = tuple(parts)
    tokens = a.micro_batch_size * a.max_seq_len
    parts[f"activations of {a.micro_batch_size} x {a.max_seq_len} tokens (estimate)"] = activations(
        shape, tokens, b, a.gradient_checkpointing)
    # lm_head over loss positions only (at most max_tokens per rollout), chunk by chunk: the chunk's bf16/fp32
    # output, its fp32 copy and the custom backward's fp32 gradient
    rows = min(a.logprob_chunk_size, a.micro_batch_size * a.max_tokens)
    parts["logit chunks"] = rows * shape.vocab * (b + 4 + 4)
    return Need(parts, static=static)
