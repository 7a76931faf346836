"""The one config tree for a run: `model`, `[env]`, `[inference]`, `[trainer]` (TOML, loaded with `@ file.toml`).

Every default lives here. The launcher validates the file before anything starts and writes the
resolved tree to `<run_dir>/config.toml`; `vf-train` and `vf-vllm` read that resolved file back.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EnvConfig(Strict):
    id: str = Field(description="Environment id: an installed package (`reverse-text`) or module name.")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for load_environment().")


class InferenceConfig(Strict):
    gpus: int = Field(1, ge=0, description="GPUs for the vLLM server (first in CUDA order). 0 or no GPU: CPU.")
    host: str = Field("127.0.0.1", description="Address vLLM binds; loopback unless you need it reachable.")
    port: int = Field(8000, ge=0, le=65535, description="Port of the vLLM server; 0 picks a free one.")
    args: dict[str, Any] = Field(
        default_factory=dict, description="Extra vLLM server flags: `enforce_eager = true` -> `--enforce-eager`."
    )


class TrainerArgs(Strict):
    # run / logging
    run_name: str = "vfrl"
    output_dir: str = "outputs"
    report_to: Literal["none", "wandb"] = "none"
    logging_steps: int = Field(1, ge=1)
    log_completions: bool = True
    num_completions_to_print: int = Field(2, ge=0)
    seed: int = 0
    # batch
    rollouts_per_example: int = Field(8, ge=1)
    micro_batch_size: int = Field(8, ge=1)
    batch_size: int = Field(64, ge=1)
    max_steps: int = Field(100, ge=1)
    max_prompt_len: int = Field(512, ge=1)
    max_seq_len: int = Field(1024, ge=2)
    max_tokens: int = Field(256, ge=1)
    # sampling
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1)
    min_p: float = Field(0.0, ge=0, le=1)
    repetition_penalty: float = Field(1.0, gt=0)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    # optimisation
    learning_rate: float = Field(1e-5, gt=0)
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    bf16: bool = False
    gradient_checkpointing: bool = False
    # loss
    mask_ratio_low: float = Field(0.125, ge=0)
    mask_ratio_high: float = Field(8.0, gt=0)
    scale_rewards: bool = False
    # LoRA
    use_lora: bool = True
    lora_rank: int = Field(8, ge=1)
    lora_alpha: int = Field(16, ge=1)
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    lora_target_modules: list[str] | str = "all-linear"
    lora_modules_to_save: list[str] | None = None
    lora_use_rslora: bool = False
    # async generation
    max_concurrent: int = Field(64, ge=1)
    generation_timeout: float = Field(600.0, gt=0)
    # saving / eval
    save_strategy: Literal["no", "steps"] = "no"
    save_steps: int = Field(50, ge=1)
    eval_strategy: Literal["no", "steps"] = "no"
    eval_steps: int = Field(50, ge=1)
    # ---- checkpoint / resume, eval during training, monitoring (issue 5) ----
    keep_last: int | None = Field(None, ge=1, description="Keep only the newest N checkpoints; unset keeps all.")
    resume_from: str | None = Field(None, description="Checkpoint dir to resume from (`vf-rl --resume` sets it).")
    num_eval_examples: int = Field(64, ge=1, description="Eval examples (env.eval_dataset, else held out of dataset).")
    eval_rollouts_per_example: int = Field(1, ge=1)
    mismatch_kl_warn: float = Field(0.1, gt=0, description="Warn when mismatch_kl exceeds this.")
    mismatch_kl_jump: float = Field(10.0, gt=1, description="Warn when mismatch_kl > this x its running median.")

    @model_validator(mode="after")
    def _batch_shapes(self) -> "TrainerArgs":
        if self.batch_size % self.rollouts_per_example:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be divisible by rollouts_per_example ({self.rollouts_per_example})"
            )
        if self.max_tokens >= self.max_seq_len:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be smaller than max_seq_len ({self.max_seq_len})")
        return self


class TrainerConfig(Strict):
    gpus: int = Field(1, ge=0, description="GPUs for the trainer (after the inference GPUs). 0 or no GPU: CPU.")
    args: TrainerArgs = Field(default_factory=TrainerArgs)


class RLConfig(Strict):
    model: str = Field(description="HF model id or local directory (HF format).")
    env: EnvConfig
    inference: InferenceConfig = Field(default_factory=InferenceConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)

    @property
    def args(self) -> TrainerArgs:
        return self.trainer.args


def read_toml(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return tomllib.load(f)


def load_config(path: str | Path) -> RLConfig:
    return RLConfig.model_validate(read_toml(Path(path)))


def write_config(config: RLConfig, path: Path) -> None:
    data = config.model_dump(mode="json", exclude_none=True)
    path.write_text(tomli_w.dumps(data))
