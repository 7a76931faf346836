"""What a step does with its faulty rollouts (envs/faults.py says which those are).

Every step logs the counts (always the same keys, 0 when nothing went wrong, so curves have no gaps):
`rollouts_dropped` = `rollouts_rejected` + `rollouts_timed_out` + `rollouts_scoring_failed` (+ verifiers
0.4 episodes that failed otherwise), `rollouts_ended_early` (kept: a later turn was refused), and
`reward_errors/<function>` (scored rollouts on which that reward function failed). A step with any of
them gets one warning line. Two conditions stop the run with one line: every rollout of the batch was
lost, and a reward function failing on more than `max_reward_error_fraction` of the scored rollouts (a
broken function would otherwise train the policy on zeros, quietly); a verifiers 0.4 taskset's scoring
that failed, which drops its episode, is held to the same limit, of the rollouts asked for.
"""

from __future__ import annotations

from vfrl.rollout_types import Rollout
from vfrl.envs.faults import RolloutFaults, first_reason, one_line, reward_error_counts


class RolloutFaultError(RuntimeError):
    """Faulty rollouts stop the run; the message is one line for the console."""

    worded_for_users = True  # vf-train prints the message alone (trainer/failure.py: describe)


class BatchLost(RolloutFaultError):
    pass


class RewardFunctionFailing(RolloutFaultError):
    pass


class BatchTimedOut(RolloutFaultError):
    pass


def check_step(step: int, rollouts: list[Rollout], faults: RolloutFaults, requested: int,
               max_reward_error_fraction: float) -> tuple[dict[str, float], str | None]:
    """(metrics, warning line or None) of training step `step` (as the console numbers it).

    Raises BatchLost when no rollout is left, RewardFunctionFailing above the reward-error limit."""
    scoring = faults.dropped["scoring_failed"]
    if scoring > max_reward_error_fraction * requested:
        raise RewardFunctionFailing(
            f"step {step}: the environment's scoring failed on {scoring} of {requested} rollouts (more than "
            f"trainer.args.max_reward_error_fraction = {max_reward_error_fraction:g}), e.g. "
            f"{faults.first['scoring_failed']}; fix the @vf.reward or @vf.metric, or raise the limit to train on "
            f"through it")
    if not rollouts:
        raise BatchLost(f"step {step}: all {requested} rollouts were dropped: {faults.describe()}; "
                        f"nothing to train on, the run stops")
    errors = reward_error_counts(rollouts)
    for name, n in errors.items():
        if n > max_reward_error_fraction * len(rollouts):
            raise RewardFunctionFailing(
                f"step {step}: reward function {name!r} failed on {n} of {len(rollouts)} rollouts "
                f"(more than trainer.args.max_reward_error_fraction = {max_reward_error_fraction:g}), e.g. it "
                f"{first_reason(rollouts, name)}; fix the function, or raise the limit to train on through it")
    ended_early = [r for r in rollouts if r.error is not None]
    metrics = {"rollouts_dropped": float(faults.total), "rollouts_rejected": float(faults.dropped["rejected"]),
               "rollouts_timed_out": float(faults.dropped["timed_out"]),
               "rollouts_scoring_failed": float(scoring),
               "rollouts_ended_early": float(len(ended_early))}
    metrics |= {f"reward_errors/{name}": float(n) for name, n in errors.items()}
    parts = []
    if faults.total:
        parts.append(f"{faults.total} of {requested} rollouts dropped: {faults.describe()}")
    if ended_early:
        parts.append(f"{len(ended_early)} ended early ({one_line(ended_early[0].error)})")
    parts += [f"reward function {name!r} failed on {n} of {len(rollouts)}, scored 0 ({first_reason(rollouts, name)})"
              for name, n in errors.items() if n]
    return metrics, (f"step {step}: " + "; ".join(parts)) if parts else None
