"""The mismatch-KL watch: a trainer that no longer agrees with vLLM on the sampled tokens' logprobs."""

from __future__ import annotations

import math
from collections import deque
from statistics import median


class MismatchWatch:
    """Flags a trainer-vs-sampler KL that is too high or jumps. The trainer gives it sampler_mismatch_kl (the same
    policy on both sides, sampler_check.py) where it measured it, else mismatch_kl.

    Too high: above `warn_at`. A jump: above `jump` x the running median of the last `window` steps
    (the median ignores the jumps themselves; values below `warn_at / 100` are never called a jump,
    so fp32 noise around 1e-9 cannot raise alarms). The jump rule starts after `min_history` steps:
    mismatch_kl also holds one step of policy change (one-step off-policy), which grows from ~1e-9
    through the first learning-rate warm-up steps. A broken weight sync or a chat-template bug shows up here
    first.
    """

    def __init__(self, warn_at: float, jump: float, window: int = 20, min_history: int = 10):
        self.warn_at, self.jump, self.min_history = warn_at, jump, min_history
        self.history: deque[float] = deque(maxlen=window)

    def check(self, value: float) -> str | None:
        reason = None
        if not math.isfinite(value):
            reason = f"mismatch_kl is {value}"
        elif value > self.warn_at:
            reason = f"mismatch_kl {value:.3g} is above mismatch_kl_warn = {self.warn_at:g}"
        elif len(self.history) >= self.min_history:
            med = median(self.history)
            if value > self.jump * max(med, self.warn_at / 100):
                reason = (f"mismatch_kl jumped to {value:.3g}, {value / max(med, 1e-30):.0f}x its running median "
                          f"{med:.3g}")
        if reason is None:
            self.history.append(value)
        return reason and reason + " (broken weight sync, chat template or tokenizer mismatch?)"
