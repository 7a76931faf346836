"""The LoRA ranks vLLM serves: its `--max-lora-rank` accepts only these values."""

VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def lora_rank_ceiling(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that fits an adapter of rank `rank`."""
    for allowed in VLLM_LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise ValueError(f"lora_rank {rank} is above vLLM's largest max_lora_rank ({VLLM_LORA_RANKS[-1]})")
