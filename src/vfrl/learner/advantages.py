"""GRPO-style group advantages: each rollout is compared with the other rollouts of its prompt."""

import torch


def group_ids(group_sizes: int | list[int], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sizes (G,), group index of each of the n rollouts (n,)). An int is every group's size; a list
    gives each group's, possibly fewer (faults dropped rollouts) or 0 (the whole group lost)."""
    sizes = torch.tensor([group_sizes] * (n // group_sizes) if isinstance(group_sizes, int) else group_sizes)
    if int(sizes.sum()) != n:
        raise ValueError(f"group sizes {sizes.tolist()} do not add up to the {n} rollouts")
    return sizes, torch.repeat_interleave(torch.arange(len(sizes)), sizes)


def group_advantages(rewards: torch.Tensor, group_sizes: int | list[int], scale_rewards: bool = False) -> torch.Tensor:
    """rewards: (N,), consecutive groups of `group_sizes` rollouts -> advantages (N,).

    A = r - mean(group); with `scale_rewards`, also divided by the group's std (+1e-4).
    A group of one has no baseline to compare with: its advantage is 0.
    """
    sizes, gid = group_ids(group_sizes, len(rewards))
    sums = torch.zeros(len(sizes), dtype=rewards.dtype).index_add_(0, gid, rewards)  # (G,)
    adv = rewards - (sums / sizes.clamp(min=1))[gid]  # (N,)
    if scale_rewards:
        var = torch.zeros(len(sizes), dtype=rewards.dtype).index_add_(0, gid, adv**2) / (sizes - 1).clamp(min=1)
        adv = torch.where(sizes[gid] > 1, adv / (var.sqrt()[gid] + 1e-4), adv)  # unbiased std, as torch.std
    return adv


def flat_groups(rewards: torch.Tensor, group_sizes: int | list[int]) -> torch.Tensor:
    """(N,) bool: the rollout's group got one reward throughout (a group of one too): advantage 0, no gradient."""
    sizes, _ = group_ids(group_sizes, len(rewards))
    flat = [bool(g.max() == g.min()) if len(g) else True for g in torch.split(rewards, sizes.tolist())]
    return torch.repeat_interleave(torch.tensor(flat, dtype=torch.bool), sizes)


def reward_stats(env_rewards: torch.Tensor, train_rewards: torch.Tensor,
                 group_sizes: int | list[int]) -> dict[str, float]:
    """Metrics of a batch. env_rewards: what the rubric gave; train_rewards: what the advantages used
    (they differ only where `zero_truncated_completions` zeroed a truncated rollout)."""
    sizes, _ = group_ids(group_sizes, len(train_rewards))
    groups = [g for g in torch.split(train_rewards, sizes.tolist()) if len(g)]
    no_signal = sum(float(g.max() == g.min()) for g in groups) / max(len(groups), 1)
    return {
        "reward_mean": float(env_rewards.mean()),
        "reward_std": float(env_rewards.std()) if len(env_rewards) > 1 else 0.0,
        # groups whose rollouts all got the same reward: advantage 0, no gradient from them
        "zero_std_groups": no_signal,
    }
