"""GRPO-style group advantages: each rollout is compared with the other rollouts of its prompt."""

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, scale_rewards: bool = False) -> torch.Tensor:
    """rewards: (N,) with groups of `group_size` consecutive rollouts -> advantages (N,).

    A = r - mean(group); with `scale_rewards`, also divided by the group's std (+1e-4).
    A group of one has no baseline to compare with: its advantage is 0.
    """
    grouped = rewards.view(-1, group_size)  # (G, group_size)
    adv = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards and group_size > 1:
        adv = adv / (grouped.std(dim=1, keepdim=True) + 1e-4)
    return adv.reshape(-1)


def reward_stats(env_rewards: torch.Tensor, train_rewards: torch.Tensor, group_size: int) -> dict[str, float]:
    """Metrics of a batch. env_rewards: what the rubric gave; train_rewards: what the advantages used
    (they differ only where `zero_truncated_completions` zeroed a truncated rollout)."""
    grouped = train_rewards.view(-1, group_size)
    no_signal = (grouped.max(dim=1).values == grouped.min(dim=1).values).float().mean()
    return {
        "reward_mean": float(env_rewards.mean()),
        "reward_std": float(env_rewards.std()) if len(env_rewards) > 1 else 0.0,
        # groups whose rollouts all got the same reward: advantage 0, no gradient from them
        "zero_std_groups": float(no_signal),
    }
