"""The parts of `[trainer.args]` each part of the trainer reads, typed.

Users write one flat table with the seed's keys (`learning_rate`, `beta`, `max_tokens`, ...), so configs copy
between vfrl, verifiers' vf-rl and TRL. Inside, each part is handed only its section (`args.loss`,
`args.sampling`, ...): compute_loss sees the loss's settings, not all of the run's. A section keeps the keys'
names, so a reader greps one name from the TOML file to the code that reads it. Every key of `[trainer.args]` is
in a section (tests/test_sections.py), so none can be added and forgotten.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

S = TypeVar("S")


def section(cls: type[S], args: Any, **nested: Any) -> S:
    """`cls` filled from the same-named keys of `args` (TrainerArgs); `nested`: the sections it holds."""
    return cls(**{f.name: nested[f.name] if f.name in nested else getattr(args, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class LossSection:
    """The objective (learner/loss.py)."""
    loss_type: str
    mask_ratio_low: float
    mask_ratio_high: float
    epsilon: float
    epsilon_high: float | None
    beta: float
    vllm_importance_sampling_correction: bool
    vllm_importance_sampling_mode: str
    vllm_importance_sampling_cap: float

    @property
    def upper_epsilon(self) -> float:
        """The upper clip bound's epsilon: epsilon_high, else epsilon (symmetric)."""
        return self.epsilon_high if self.epsilon_high is not None else self.epsilon


@dataclass(frozen=True)
class BatchSection:
    """A step's rollouts as training rows: rewards, advantages, masks and loss weights (learner/batch.py)."""
    batch_size: int
    rollouts_per_example: int
    max_seq_len: int
    max_tokens: int
    loss_normalization: str
    scale_rewards: bool
    mask_env_responses: bool
    mask_truncated_completions: bool
    zero_truncated_completions: bool
    filter_zero_std_groups: bool


@dataclass(frozen=True)
class SamplingSection:
    """What every request to vLLM asks for (the OpenAI sampling parameters vLLM takes)."""
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    presence_penalty: float
    frequency_penalty: float
    max_tokens: int

    def request(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EvalSection:
    """Eval during training: when, on which rows, how many samples (rollouts/evaluation.py)."""
    eval_strategy: str
    eval_steps: int
    max_steps: int
    num_eval_examples: int
    eval_rollouts_per_example: int


@dataclass(frozen=True)
class GenerationSection:
    """The orchestrator's: which examples a step takes, how its rollouts are sampled and when they have failed
    (rollouts/orchestrator.py, step_faults.py), and eval's rollouts, sampled the same way."""
    seed: int
    batch_size: int
    rollouts_per_example: int
    max_concurrent: int
    generation_timeout: float
    rollout_timeout: float
    max_reward_error_fraction: float
    refill_zero_std_groups: int
    sampling: SamplingSection
    evaluation: EvalSection


@dataclass(frozen=True)
class OptimizerSection:
    """AdamW and its LR schedule, which counts batches (learner/policy.py, learner.py)."""
    learning_rate: float
    weight_decay: float
    lr_scheduler_type: str
    warmup_steps: int
    max_steps: int
    max_grad_norm: float


@dataclass(frozen=True)
class LoraSection:
    """The adapter trained in place of every weight when use_lora (learner/policy.py: peft's LoraConfig)."""
    use_lora: bool
    lora_rank: int
    lora_alpha: int
    lora_dropout: float
    lora_target_modules: list[str] | str
    lora_modules_to_save: list[str] | None
    lora_use_rslora: bool


@dataclass(frozen=True)
class CheckpointSection:
    """When checkpoints are written, how many are kept, which one the run resumes (learner/checkpoint.py)."""
    save_strategy: str
    save_steps: int
    keep_last: int | None
    resume_from: str | None


@dataclass(frozen=True)
class LearnerSection:
    """How the learner runs a step on its device (learner/learner.py, policy.py, logprobs.py): the sampling
    temperature its logprobs divide by is the one vLLM sampled with (SamplingSection's)."""
    seed: int
    bf16: bool
    micro_batch_size: int
    gradient_checkpointing: bool
    use_liger_kernel: bool
    num_iterations: int
    logprob_chunk_size: int
    temperature: float


@dataclass(frozen=True)
class LoopSection:
    """The training loop's: how many steps, how far ahead of training batches are sampled, how policies reach vLLM
    and how long a silent server is waited for (trainer/trainer.py, rollouts/weight_sync.py, inference_watch.py)."""
    max_steps: int
    num_batches_ahead: int
    lora_sync: str
    inference_timeout: float


@dataclass(frozen=True)
class RunLogSection:
    """What a run writes as it goes and where (trainer/run_log.py, console.py, wandb_sink.py, mismatch.py)."""
    run_name: str
    output_dir: str
    report_to: str
    logging_steps: int
    log_completions: bool
    num_completions_to_print: int
    mismatch_kl_warn: float
    mismatch_kl_jump: float
