"""GRPO-style group advantages: each rollout is compared with the other rollouts of its prompt."""

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, scale_rewards: bool = False) -> torch.Tensor:
    """rewards: (N,) with groups of `group_size` consecutive rollouts -> advantages (N,).

    A = r - mean(group); with `scale_rewards`, also divided by the group's std (+1e-4).
    """
    grouped = rewards.view(-1, group_size)  # (G, group_size)
    adv = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards:
        adv = adv / (grouped.std(dim=1, keepdim=True) + 1e-4)
    return adv.reshape(-1)
