"""What vLLM's LoRA serving is sized by: the ranks its `--max-lora-rank` accepts, and the adapters held at once."""

VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def lora_rank_ceiling(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that fits an adapter of rank `rank`."""
    for allowed in VLLM_LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise ValueError(f"lora_rank {rank} is above vLLM's largest max_lora_rank ({VLLM_LORA_RANKS[-1]})")


def adapters_served(num_batches_ahead: int) -> int:
    """Adapters vLLM holds at once (`--max-loras`, AdapterSync's keep): one per policy a batch in flight samples
    from, and the one just loaded."""
    return max(2, num_batches_ahead + 1)
