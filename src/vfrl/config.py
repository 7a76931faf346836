"""The one config tree for a run: `model`, `[env]`, `[inference]`, `[trainer]` (TOML, loaded with `@ file.toml`).

Every default lives here. The launcher validates the file before anything starts and writes the
resolved tree to `<run_dir>/config.toml`; `vf-train` and `vf-vllm` read that resolved file back.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vfrl.inference.endpoints import client_host
from vfrl.inference.lora_ranks import VLLM_LORA_RANKS
from vfrl.sections import (
    BatchSection, CheckpointSection, EvalSection, GenerationSection, LearnerSection, LoraSection, LossSection,
    LoopSection, OptimizerSection, RunLogSection, SamplingSection, section,
)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RuleError(ValueError):
    """Cross-field problems of one table: (dotted key relative to the table, bad value, what is allowed).

    The launcher turns each into one line: `file: trainer.args.batch_size = 10 is invalid: <allowed>`.
    """

    def __init__(self, problems: list[tuple[str, Any, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{key} = {value!r} is invalid: {allowed}" for key, value, allowed in problems))


def _multiples_near(value: int, step: int) -> str:
    below, above = value // step * step, (value // step + 1) * step
    return f"e.g. {below} or {above}" if below else f"e.g. {above}"


class EnvConfig(Strict):
    id: str = Field(description="Environment id: an installed package (`reverse-text`) or module name.")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for load_environment().")
    renderer: str | dict[str, Any] | None = Field(
        None, description="verifiers 0.4 packages only: how verifiers turns messages (and tools) into token ids, a "
                          "`renderers` name (\"qwen3\") or table "
                          "({name = \"default\", tool_parser = \"hermes-text\"}). Default: found from the model's "
                          "name, which a local model folder does not match (plain chat template, no tools).")
    workers: int = Field(0, ge=0, description="verifiers 0.4 packages only: run the episodes in verifiers' env server "
                         "with this many worker processes beside the trainer (a host with cores to spare: each "
                         "episode costs the process running it ~5 ms of CPU). 0: in the trainer's process.")
    sandbox: Literal["hosted", "local", "unsandboxed"] = Field(
        "hosted", description="Where verifiers' SandboxEnv creates its sandboxes. hosted: Prime Intellect's service, "
        "which vfrl does not run (such an environment is refused in one line); local: vfrl's local sandbox on this "
        "machine (bubblewrap: no network, the machine's system read-only in place of the package's docker image). "
        "unsandboxed: on a machine that cannot isolate, run the python tool's code without isolation (rlimits and "
        "a fresh folder only), which is otherwise refused.")


# vLLM's --gpu-memory-utilization on a GPU shared with the trainer when vf-rl cannot read the model's size
# (a hub id not downloaded yet) or the GPU's memory: half each, the split that favours neither side
SHARED_UTILIZATION_UNKNOWN_SIZE = 0.5


DEFAULT_API_KEY_VAR = "VFRL_API_KEY"  # vf-rl's own key variable; with base_url, the variable vf-rl reads


class InferenceConfig(Strict):
    gpus: int = Field(1, ge=0, description="GPUs for the vLLM server (first in CUDA order). 0 or no GPU: CPU.")
    share_gpus: Literal["auto", "always", "never"] = Field(
        "auto", description="vLLM and the trainer on the same GPUs, both running at once (the one-step off-policy "
        "overlap stays). auto: only when the machine has fewer GPUs than inference.gpus + trainer.gpus (vf-rl says "
        "so in one line); always; never: refuse instead. On a shared GPU vLLM takes inference.args."
        "gpu_memory_utilization of it, or, left out, what vf-rl derives from the model's config.json (each side its "
        f"estimated need and half of the rest; {SHARED_UTILIZATION_UNKNOWN_SIZE} when the size cannot be read), and "
        "the trainer the rest.")
    host: str = Field("127.0.0.1", description="Address vLLM binds; loopback unless you need it reachable.")
    port: int = Field(8000, ge=0, le=65535, description="Port of the vLLM server; 0: a free one vLLM binds itself, "
                      "written to <run_dir>/inference.port (a Slurm job: one picked at launch).")
    args: dict[str, Any] = Field(
        default_factory=dict, description="Extra vLLM server flags: `enforce_eager = true` -> `--enforce-eager`, "
        "`enable_prefix_caching = false` -> `--no-enable-prefix-caching`."
    )
    enable_scale_out: bool | Literal["auto"] = Field(
        "auto", description="Serve vLLM's scale-out routes (`--enable-scale-out`: `/inference/v1/generate`, "
        "`/render`, behind the API key), which verifiers 0.4 environments sample through. auto: vf-vllm serves them "
        "(one server for every kind of package); a server vf-rl did not start (inference.base_url) must have them "
        "when env.id is a verifiers 0.4 package.")
    max_restarts: int = Field(
        2, ge=0, description="When the vLLM server vf-rl started dies mid-run (killed, the OOM killer, a crash of its "
        "engine), vf-vllm starts it again up to this many times and the trainer pushes its current policy and goes on "
        "(docs/reliability.md). A server that dies before it ever served is not started again. 0: the run stops, as "
        "with a remote server.")
    # ---- a server vf-rl did not start (inference/remote.py, docs/scaling.md) ----
    base_url: str | None = Field(
        None, description="The OpenAI base URL of a vLLM server vf-rl did not start (\"http://host:8000/v1\"): vf-rl "
        "then starts only the trainer, checks the server before training and never stops it. The server must read "
        "the run directory at the same path (shared storage). gpus, share_gpus, host, port and args describe a server "
        "vf-rl starts and are not used.")
    api_key_var: str = Field(
        DEFAULT_API_KEY_VAR, description="With base_url: the environment variable that holds the server's API key "
        "(vLLM's --api-key); unset: no key is sent.")

    @field_validator("base_url")
    @classmethod
    def _openai_base_url(cls, v: str | None) -> str | None:
        from urllib.parse import urlsplit

        if v is None:
            return v
        url = urlsplit(v.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.hostname or not url.path.endswith("/v1"):
            raise ValueError('must be the OpenAI base URL of a vLLM server, http(s)://host:port/v1, '
                             'e.g. "http://gpu-node-3:8000/v1"')
        return v.rstrip("/")

    @field_validator("api_key_var")
    @classmethod
    def _variable_name(cls, v: str) -> str:
        if not v.isidentifier():
            raise ValueError('must be the name of an environment variable that holds the key, e.g. "VLLM_API_KEY", '
                             'not the key itself')
        return v

    @model_validator(mode="after")
    def _key_only_for_a_remote_server(self) -> "InferenceConfig":
        # the default is allowed: the run directory's config.toml, which the trainer re-reads, carries every field
        if self.api_key_var != DEFAULT_API_KEY_VAR and self.base_url is None:
            raise RuleError([("api_key_var", self.api_key_var,
                              "only used with inference.base_url; a server vf-rl starts gets a key vf-rl makes")])
        return self

    @property
    def url(self) -> str:
        """The OpenAI base URL the trainer calls: base_url, else the server vf-rl starts (a wildcard bind
        dialled on loopback)."""
        return self.base_url or f"http://{client_host(self.host)}:{self.port}/v1"


class TrainerArgs(Strict):
    # run / logging
    run_name: str = "vfrl"
    output_dir: str = "outputs"
    report_to: Literal["none", "wandb", "tensorboard"] = "none"
    logging_steps: int = Field(1, ge=1)
    log_completions: bool = True
    num_completions_to_print: int = Field(2, ge=0)
    seed: int = 0
    # batch
    rollouts_per_example: int = Field(8, ge=1)
    micro_batch_size: int = Field(8, ge=1)
    batch_size: int = Field(64, ge=1)
    max_steps: int = Field(100, ge=1)
    max_prompt_len: int = Field(512, ge=1, description="Accepted as verifiers' vf-rl configs write it; vfrl "
                                "cuts no prompt by it: max_seq_len bounds prompt and completion together.")
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
    bf16: bool = Field(False, description=(
        "Compute in bf16 (accelerate's mixed precision). LoRA keeps the base model in bf16 and the adapter in fp32; "
        "full fine-tuning keeps fp32 master weights, since bf16 weights drop updates smaller than their rounding."))
    gradient_checkpointing: bool = False
    use_liger_kernel: bool = Field(False, description=(
        "Liger's fused Triton kernels for RMSNorm, rotary embeddings and SwiGLU in the trainer's model (GPU only; "
        "pip install liger-kernel). The logprobs keep vfrl's chunked lm_head."))
    # ---- algorithm: advantages, loss, masking (see learner/loss.py, normalization.py, batch.py) ----
    loss_type: Literal["ratio_mask", "ppo_clip", "gspo"] = Field(
        "ratio_mask", description="Policy loss: token ratio masking, PPO clipping, or GSPO's sequence ratio.")
    loss_normalization: Literal["dapo", "dr_grpo", "grpo"] = Field(
        "dapo",
        description="Per token over the batch (dapo), / (sequences * max_tokens) (dr_grpo), per sequence (grpo).")
    mask_ratio_low: float = Field(0.125, ge=0, description="ratio_mask: drop tokens whose ratio is below this.")
    mask_ratio_high: float = Field(8.0, gt=0, description="ratio_mask: drop tokens whose ratio is above this.")
    epsilon: float = Field(0.2, gt=0, lt=1, description="ppo_clip/gspo: lower clip 1 - epsilon (GSPO paper: 3e-4).")
    epsilon_high: float | None = Field(
        None, gt=0, description="ppo_clip/gspo: upper clip 1 + epsilon_high; unset = epsilon.")
    beta: float = Field(0.0, ge=0, description="KL penalty weight against the reference policy (the base model).")
    vllm_importance_sampling_correction: bool = Field(False, description=(
        "pi_old is the trainer's policy at the step's start, and the sampler's gap to it weighs each token "
        "(TRL's correction): see vllm_importance_sampling_mode and _cap."))
    vllm_importance_sampling_mode: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = (
        Field("token_truncate", description="truncate (TIS) or mask (MIS) the weight, per token or per sequence."))
    vllm_importance_sampling_cap: float = Field(3.0, gt=0, description="The weight's bound (TIS, MIS).")
    num_iterations: int = Field(1, ge=1, description="Optimizer updates per batch (PPO epochs).")
    scale_rewards: bool = Field(False, description="Divide advantages by the group's reward std.")
    mask_env_responses: bool = Field(True, description="Environment tokens in a completion get no loss.")
    mask_truncated_completions: bool = Field(False, description="Truncated rollouts get no loss.")
    zero_truncated_completions: bool = Field(False, description="Truncated rollouts get reward 0.")
    filter_zero_std_groups: bool = Field(False, description=(
        "Groups whose rollouts all got one reward get no loss and leave the loss normalization (DAPO's dynamic "
        "sampling); zero_std_groups counts them. refill_zero_std_groups samples new prompts in their place."))
    refill_zero_std_groups: int = Field(0, ge=0, description=(
        "Rounds of new prompts sampled in place of the batch's groups whose rollouts all got one reward, so the step "
        "learns from a full batch (DAPO's dynamic sampling; verl's max_num_gen_batches). 0: none; a group still flat "
        "after the last round stays (no loss with filter_zero_std_groups). refilled_groups counts them."))
    logprob_chunk_size: int = Field(1024, ge=1, description="Token positions per lm_head chunk (caps logits memory).")

    @field_validator("loss_type", mode="before")
    @classmethod
    def _trl_loss_type(cls, v: Any) -> Any:
        if v in ("dapo", "dr_grpo", "grpo", "bnpo"):
            raise ValueError(f"{v!r} is a normalization (TRL's loss_type); here that key is "
                             f"loss_normalization = {v!r}, and loss_type picks ratio_mask, ppo_clip or gspo")
        return v

    @model_validator(mode="after")
    def _warmup_has_a_schedule(self) -> "TrainerArgs":
        if self.warmup_steps and self.lr_scheduler_type == "constant":  # transformers' "constant" never warms up
            raise RuleError([("warmup_steps", self.warmup_steps, "the 'constant' schedule has no warm-up: set "
                              "lr_scheduler_type = 'linear' or 'cosine', or warmup_steps = 0")])
        return self

    @model_validator(mode="after")
    def _loss_bounds(self) -> "TrainerArgs":
        if self.mask_ratio_low >= self.mask_ratio_high:
            raise RuleError([("mask_ratio_low", self.mask_ratio_low,
                              f"must be below mask_ratio_high ({self.mask_ratio_high})")])
        return self
    # ---- end of algorithm block ----
    # LoRA
    use_lora: bool = True
    lora_rank: int = Field(8, ge=1)
    lora_alpha: int = Field(16, ge=1)
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    lora_target_modules: list[str] | str = "all-linear"
    lora_modules_to_save: list[str] | None = None
    lora_use_rslora: bool = False
    lora_sync: Literal["adapter", "merged"] = Field(
        "adapter", description="How a LoRA policy reaches vLLM after each step: \"adapter\" loads it as a runtime "
        "LoRA adapter (policy-N); \"merged\" reloads vLLM's weights in place with the adapter merged in, so vLLM "
        "serves no LoRA (its CPU build applies LoRA with unfused torch ops, so merged generation is much faster "
        "there, docs/benchmarks.md; vf-rl says so in a note when it starts vLLM on the CPU with this key left out).")
    # async generation
    num_batches_ahead: int = Field(
        1, ge=0, description="Batches generated ahead of the one training: each is sampled from the newest policy "
        "vLLM serves when it starts, so at most this many policies stale. 1: one-step off-policy; 0: synchronous "
        "(generate, then train); more keeps vLLM busier when generation is the longer half, further off-policy "
        "(see vllm_importance_sampling_correction).")
    max_concurrent: int = Field(
        1024, ge=1, description="Rollouts in flight at most, training and eval together (verifiers' default). At "
        "1024 a whole batch goes out at once and vLLM schedules it; a cap below the batch sends it in waves, each "
        "with engine steps of its own (64 sends the quick start's 128 rollouts in two, at more vLLM CPU a step). "
        "Lower it for environments whose rollouts hold scarce resources (sandboxes, tool servers).")
    generation_timeout: float = Field(600.0, gt=0)
    inference_timeout: float = Field(
        120.0, gt=0, description="Seconds without an answer from vLLM's /health before the trainer treats the "
        "server as hung: it writes an emergency checkpoint and exits with code 3 (as when the server dies).")
    # ---- faulty rollouts (docs/environments.md, "Faulty rollouts") ----
    rollout_timeout: float = Field(
        300.0, gt=0, description="Seconds one rollout may take from when it gets a request slot: its model turns, "
        "environment replies and scoring. One that is not done is dropped and counted (rollouts_timed_out); a reward "
        "function still running then scores 0 instead. At most generation_timeout, the limit of the whole batch.")
    max_reward_error_fraction: float = Field(
        0.5, ge=0, le=1, description="Stop the run when one reward function fails (raises, hangs, returns NaN or "
        "not a number) on more than this fraction of a step's scored rollouts; 1 never stops. Failures below it "
        "score 0, are counted (reward_errors/<function>) and warned about. A verifiers 0.4 taskset whose scoring "
        "raises has its episode dropped (rollouts_scoring_failed): those count against the same limit, of the step's "
        "rollouts.")

    @model_validator(mode="after")
    def _rollout_within_batch_timeout(self) -> "TrainerArgs":
        if self.rollout_timeout > self.generation_timeout:
            raise RuleError([("rollout_timeout", self.rollout_timeout,
                              f"must be at most generation_timeout ({self.generation_timeout:g}), the time limit of "
                              f"a whole batch of rollouts")])
        return self
    # saving / eval
    save_strategy: Literal["no", "steps"] = "no"
    save_steps: int = Field(50, ge=1)
    eval_strategy: Literal["no", "steps"] = "no"
    eval_steps: int = Field(50, ge=1)
    # ---- checkpoint / resume, eval during training, monitoring ----
    keep_last: int | None = Field(None, ge=1, description="Keep only the newest N checkpoints; unset keeps all.")
    resume_from: str | None = Field(None, description="Checkpoint dir to resume from (`vf-rl --resume` sets it).")
    num_eval_examples: int = Field(64, ge=1, description="Eval examples (env.eval_dataset, else held out of dataset).")
    eval_rollouts_per_example: int = Field(1, ge=1)
    mismatch_kl_warn: float = Field(0.1, gt=0, description="Warn when mismatch_kl exceeds this.")
    mismatch_kl_jump: float = Field(10.0, gt=1, description="Warn when mismatch_kl > this x its running median.")

    @model_validator(mode="after")
    def _batch_shapes(self) -> "TrainerArgs":
        problems = []
        if self.batch_size % self.rollouts_per_example:
            problems.append(("batch_size", self.batch_size,
                             f"must be a multiple of rollouts_per_example ({self.rollouts_per_example}), "
                             f"{_multiples_near(self.batch_size, self.rollouts_per_example)}"))
        if self.max_tokens >= self.max_seq_len:
            problems.append(("max_tokens", self.max_tokens,
                             f"must be smaller than max_seq_len ({self.max_seq_len}), which also holds the prompt"))
        if problems:
            raise RuleError(problems)
        return self

    # ---- the sections each part of the trainer is handed (sections.py) ----
    @property
    def loss(self) -> LossSection:
        return section(LossSection, self)

    @property
    def batch(self) -> BatchSection:
        return section(BatchSection, self)

    @property
    def sampling(self) -> SamplingSection:
        return section(SamplingSection, self)

    @property
    def evaluation(self) -> EvalSection:
        return section(EvalSection, self)

    @property
    def generation(self) -> GenerationSection:
        return section(GenerationSection, self, sampling=self.sampling, evaluation=self.evaluation)

    @property
    def optimizer(self) -> OptimizerSection:
        return section(OptimizerSection, self)

    @property
    def lora(self) -> LoraSection:
        return section(LoraSection, self)

    @property
    def checkpointing(self) -> CheckpointSection:
        return section(CheckpointSection, self)

    @property
    def learner(self) -> LearnerSection:
        return section(LearnerSection, self)

    @property
    def loop(self) -> LoopSection:
        return section(LoopSection, self)

    @property
    def run_log(self) -> RunLogSection:
        return section(RunLogSection, self)


ACCELERATE_CONFIGS = ("single_gpu", "ddp", "zero3", "fsdp")  # bundled: configs/accelerate/<name>.yaml


class TrainerConfig(Strict):
    gpus: int = Field(1, ge=0, description="GPUs for the trainer (after the inference GPUs). 0 or no GPU: CPU.")
    accelerate_config: str = Field(
        "ddp", description=f"With several trainer GPUs: `accelerate launch --config-file` this. One of "
        f"{', '.join(ACCELERATE_CONFIGS)} (bundled) or a path to your own accelerate YAML.")
    args: TrainerArgs = Field(default_factory=TrainerArgs)
    share_cpus: bool = Field(
        False, description="No GPU in use: the trainer also runs on vLLM's cores (one thread per core of the "
        "machine, OpenMP threads that sleep when idle instead of spinning), instead of keeping to the cores vLLM does "
        "not use. Faster when training takes longer than generation (vLLM's cores idle part of each step: 19M model, "
        "-28% a step), slower when the two take about as long (quick start, +6%). A Python script's trainer: set "
        "OMP_WAIT_POLICY=PASSIVE before the script starts.")
    # ---- trainer processes (multi-process trainer: learner/distributed.py) ----
    processes: int | None = Field(
        None, ge=1, description="Trainer processes. Left out: one per trainer GPU (one on the CPU). With GPUs it "
        "must equal trainer.gpus; on the CPU (no GPU in use) N > 1 runs N data-parallel CPU processes (gloo), "
        "e.g. to test multi-process training on a laptop.")

    # ---- trainer nodes (multi-node trainer: launcher/plan.py rendezvous_flags, docs/scaling.md) ----
    nodes: int = Field(
        1, ge=1, description="Machines the trainer spans, each running trainer.processes processes (one per trainer "
        "GPU). vf-rl starts node rank 0 beside vLLM and prints the command for each other node rank.")
    main_address: str | None = Field(
        None, min_length=1, description="With nodes > 1: the address of node rank 0, where the trainer processes "
        "meet (torchrun rendezvous). Left out: the first host of the Slurm job (SLURM_JOB_NODELIST), else "
        "127.0.0.1 (every node on this machine).")
    main_port: int = Field(29500, ge=1, le=65535, description="With nodes > 1: the rendezvous port on node rank 0.")

    @field_validator("main_address")
    @classmethod
    def _bare_host(cls, v: str | None) -> str | None:
        if v is not None and ("://" in v or any(c.isspace() for c in v) or v.count(":") == 1):
            raise ValueError("must be a bare host name or IP address (e.g. node-01 or 10.0.0.5), without scheme or "
                             "port; the port is trainer.main_port")
        return v

    @property
    def num_processes(self) -> int:
        """Trainer processes on each node: `processes`, else one per GPU (one on the CPU)."""
        return self.processes or max(1, self.gpus)

    @property
    def total_processes(self) -> int:
        """Trainer processes on all nodes together (the data-parallel world size)."""
        return self.nodes * self.num_processes


class SlurmConfig(Strict):
    """`vf-rl @ cfg.toml --slurm`: the sbatch script's settings (launcher/slurm.py, docs/scaling.md)."""
    partition: str | None = Field(
        None, min_length=1, description="#SBATCH --partition; left out: the cluster's default.")
    account: str | None = Field(None, min_length=1, description="#SBATCH --account; left out: your default account.")
    time: str | None = Field(None, pattern=r"^(\d+-)?\d+(:\d{1,2}){0,2}$",
                             description="#SBATCH --time, as Slurm writes it (e.g. 04:00:00 or 1-00:00:00).")
    gpus_per_node: int | None = Field(
        None, ge=0, description="GPUs on each node of the job; left out: inference.gpus + trainer.gpus (one node). "
        "When they do not fit on one node, vLLM gets node 0 and the trainer node 1.")
    cpus_per_node: int | None = Field(None, ge=1, description="#SBATCH --cpus-per-task (one task per node); left "
                                      "out: the cluster's default (on the CPU: this machine's cores).")
    job_name: str | None = Field(None, min_length=1, description="#SBATCH --job-name; left out: vfrl-<run_name>.")
    extra_sbatch: list[str] = Field(default_factory=list, description='More #SBATCH lines, as options: '
                                    '["--qos=high", "--constraint=h100"].')

    @field_validator("extra_sbatch")
    @classmethod
    def _options(cls, lines: list[str]) -> list[str]:
        for line in lines:
            if not line.startswith("-") or "\n" in line:
                raise ValueError(f'"{line}" is not an sbatch option: write each as "--name=value"')
        return lines


class RLConfig(Strict):
    model: str = Field(description="HF model id or local directory (HF format).")
    env: EnvConfig
    inference: InferenceConfig = Field(default_factory=InferenceConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)

    @property
    def args(self) -> TrainerArgs:
        return self.trainer.args

    @property
    def serves_adapters(self) -> bool:
        """vLLM serves each policy as a runtime LoRA adapter; else it serves full weights, reloaded in place
        (full fine-tuning, or LoRA with lora_sync = "merged")."""
        return self.args.use_lora and self.args.lora_sync == "adapter"

    @model_validator(mode="after")
    def _across_tables(self) -> "RLConfig":
        """Rules that join keys of different tables. GPU presence is checked at launch, not here, so that
        configs written for a GPU machine still validate on a laptop."""
        a, problems = self.args, []
        t = self.trainer
        per_step = a.micro_batch_size * t.total_processes
        if a.batch_size % per_step:
            step = math.lcm(per_step, a.rollouts_per_example)
            processes = f"{t.num_processes}" if t.nodes == 1 else f"{t.nodes} nodes x {t.num_processes} processes"
            problems.append(("trainer.args.batch_size", a.batch_size,
                             f"must be a multiple of trainer.args.micro_batch_size x trainer processes "
                             f"({a.micro_batch_size} x {processes} = {per_step}), "
                             f"{_multiples_near(a.batch_size, step)}"))
        if not a.use_lora and a.lora_sync == "merged":
            problems.append(("trainer.args.lora_sync", a.lora_sync, "applies to LoRA training only (use_lora = true); "
                             "full fine-tuning always reloads every weight: leave lora_sync out"))
        if self.serves_adapters:
            ranks = VLLM_LORA_RANKS  # what vLLM's --max-lora-rank accepts
            served = self.inference.args.get("max_lora_rank")
            if a.lora_rank > ranks[-1]:
                problems.append(("trainer.args.lora_rank", a.lora_rank,
                                 f"vLLM serves LoRA ranks up to {ranks[-1]}; use at most {ranks[-1]}"))
            elif served is not None and (served not in ranks or served < a.lora_rank):
                allowed = ", ".join(str(r) for r in ranks if r >= a.lora_rank)
                problems.append(("inference.args.max_lora_rank", served,
                                 f"must be a vLLM max LoRA rank >= trainer.args.lora_rank ({a.lora_rank}): "
                                 f"{allowed}; or leave it out and vf-rl picks one"))
        if self.trainer.processes is not None and self.trainer.gpus and self.trainer.processes != self.trainer.gpus:
            problems.append(("trainer.processes", self.trainer.processes,
                             f"must equal trainer.gpus ({self.trainer.gpus}), one process per trainer GPU; leave it "
                             f"out, or set trainer.gpus = 0 for CPU processes"))
        util = self.inference.args.get("gpu_memory_utilization")
        if util is not None and (isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1):
            problems.append(("inference.args.gpu_memory_utilization", util,
                             "must be a number above 0 and at most 1: the fraction of each of its GPUs vLLM may take"))
        tp = self.inference.args.get("tensor_parallel_size", 1)
        if self.inference.gpus and isinstance(tp, int) and tp >= 1:
            if self.inference.gpus % tp:
                problems.append(("inference.gpus", self.inference.gpus,
                                 f"must be a multiple of inference.args.tensor_parallel_size ({tp}): vLLM runs "
                                 f"gpus / tensor_parallel_size data-parallel replicas"))
            elif (dp := self.inference.args.get("data_parallel_size")) is not None and dp != self.inference.gpus // tp:
                problems.append(("inference.args.data_parallel_size", dp,
                                 f"must be inference.gpus / tensor_parallel_size = {self.inference.gpus // tp}, "
                                 f"or left out (vf-rl sets it)"))
        if problems:
            raise RuleError(problems)
        return self


def read_toml(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return tomllib.load(f)


def load_config(path: str | Path) -> RLConfig:
    return RLConfig.model_validate(read_toml(Path(path)))


def write_config(config: RLConfig, path: Path) -> None:
    data = config.model_dump(mode="json", exclude_none=True)
    path.write_text(tomli_w.dumps(data))
