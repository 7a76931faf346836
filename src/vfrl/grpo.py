"""Train from a Python script, with the names of verifiers' GRPOTrainer guide (docs/python_api.md).

    import vfrl as vf
    env = vf.load_environment("reverse-text")
    model, tokenizer = vf.get_model_and_tokenizer("./models/tiny-reverse")
    args = vf.grpo_defaults(run_name="my-experiment")
    args.max_steps = 100
    trainer = vf.GRPOTrainer(model=model, processing_class=tokenizer, env=env, args=args,
                             peft_config=vf.lora_defaults())
    trainer.train()

One config model behind both ways in: the args are `[trainer.args]` of a TOML file (RLConfig), under
our names or the guide's (`GUIDE_NAMES`), validated with the same one-line errors. `train()` runs the
loop vf-rl's trainer pane runs (RLTrainer), in this process, against `vf-vllm`, which it starts on the
devices the launch plan gives it (once per trainer object: `evaluate()` before and after `train()` use
the same server; `close()`, the end of a `with` block or the end of the script stops it), or against
a server the user names (`vllm_base_url`, i.e. `inference.base_url`: checked first, never stopped).
"""

from __future__ import annotations

import asyncio
import atexit
import difflib
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from vfrl.config import RLConfig, TrainerArgs, write_config

# the guide's (TRL's) name -> ours, in [trainer.args]
GUIDE_NAMES = {
    "num_generations": "rollouts_per_example",
    "per_device_train_batch_size": "micro_batch_size",
    "max_prompt_length": "max_prompt_len",
    "max_completion_length": "max_tokens",
}
ARGS_WHERE = "grpo args"  # where an error is, in place of a TOML file's path


class ArgsError(SystemExit):
    """A script's args are invalid: the one line a TOML file's would give, without a traceback (a SystemExit
    prints its message and exits 1); `except ArgsError` catches it."""


class GRPOArgs:
    """`[trainer.args]` under our names or the guide's: both spellings set the same field, and reading one
    gives what the other set. `gradient_accumulation_steps` has no field of its own: a step trains on
    per_device_train_batch_size x gradient_accumulation_steps x processes completions (our batch_size)."""

    def __init__(self, **values: Any):
        object.__setattr__(self, "values", {})
        object.__setattr__(self, "gradient_accumulation_steps", None)
        for name, value in values.items():
            setattr(self, name, value)

    @staticmethod
    def field(name: str) -> str:
        key = GUIDE_NAMES.get(name, name)
        if key not in TrainerArgs.model_fields:
            close = difflib.get_close_matches(name, [*TrainerArgs.model_fields, *GUIDE_NAMES], n=1)
            raise ArgsError(f"vfrl: {ARGS_WHERE}: unknown argument '{name}'"
                            + (f"; did you mean '{close[0]}'?" if close else ""))
        return key

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "gradient_accumulation_steps":
            object.__setattr__(self, name, value)
        else:
            self.values[self.field(name)] = value

    def __getattr__(self, name: str) -> Any:
        key = self.field(name)
        return self.values[key] if key in self.values else TrainerArgs.model_fields[key].default

    def trainer_args(self, processes: int = 1) -> dict[str, Any]:
        args = dict(self.values)
        if self.gradient_accumulation_steps is not None:
            args["batch_size"] = self.per_device_train_batch_size * self.gradient_accumulation_steps * processes
        return args


def grpo_defaults(**values: Any) -> GRPOArgs:
    """Our defaults (those of a TOML file that sets nothing), then `values`."""
    return GRPOArgs(**values)


def lora_defaults(**overrides: Any):
    """A peft LoraConfig with our LoRA defaults (rank 8, alpha 16, every linear layer)."""
    from peft import LoraConfig

    d = TrainerArgs.model_fields
    return LoraConfig(**{"r": d["lora_rank"].default, "lora_alpha": d["lora_alpha"].default,
                         "lora_dropout": d["lora_dropout"].default, "target_modules": d["lora_target_modules"].default,
                         "task_type": "CAUSAL_LM", **overrides})


def get_model_and_tokenizer(model_name: str, **kwargs: Any):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(model_name, **kwargs), AutoTokenizer.from_pretrained(model_name)


def rl_config(model: Any, env: Any, args: GRPOArgs, peft_config: Any = None, inference: dict | None = None) -> RLConfig:
    """The RLConfig a TOML file with the same settings would give, or ArgsError with its lines."""
    from pydantic import ValidationError

    from vfrl.launcher.config_errors import describe

    trainer_args = args.trainer_args(processes=launched_rank()[1])  # under accelerate launch: every process
    trainer_args["use_lora"] = peft_config is not None  # the guide: LoRA when a peft_config is given
    if peft_config is not None:
        targets = peft_config.target_modules
        trainer_args.update(lora_rank=peft_config.r, lora_alpha=peft_config.lora_alpha,
                            lora_dropout=peft_config.lora_dropout, lora_use_rslora=bool(peft_config.use_rslora),
                            lora_target_modules=sorted(targets) if isinstance(targets, (set, list)) else targets,
                            lora_modules_to_save=peft_config.modules_to_save)
    model_name = model if isinstance(model, str) else model.name_or_path
    env_id = env if isinstance(env, str) else getattr(env, "env_id", None) or type(env).__name__
    data = {"model": str(model_name), "env": {"id": env_id}, "trainer": {"args": trainer_args},
            **({"inference": inference} if inference else {})}
    try:
        return RLConfig.model_validate(data)
    except ValidationError as e:
        raise ArgsError("\n".join(f"vfrl: {line}" for line in describe(Path(ARGS_WHERE), e).splitlines())) from None


class GRPOTrainer:
    def __init__(self, model: Any, env: Any, args: GRPOArgs | None = None, processing_class: Any = None,
                 peft_config: Any = None, vllm_base_url: str | None = None, inference: dict | None = None):
        """`model`: a transformers model (its weights are read again from `model.name_or_path`) or a path;
        `env`: an environment object or an installed environment's id; `vllm_base_url`: a running vLLM server
        (inference.base_url; API key from $VFRL_API_KEY, or inference.api_key_var) instead of one this trainer
        starts; `inference`: `[inference]` keys."""
        if vllm_base_url:
            inference = {**(inference or {}), "base_url": vllm_base_url}
        self.config = rl_config(model, env, args or grpo_defaults(), peft_config, inference)
        self.env = None if isinstance(env, str) else env
        self.trainer = None
        self.plan = None  # the run: its directory and devices, made by the first train() or evaluate()
        self.server: subprocess.Popen | None = None  # the vf-vllm this trainer started, until close()
        self.url = self.api_key = None

    def _serve(self):
        """The run's plan and a server to sample from: the named one, or vf-vllm started once for this trainer
        (kept for later train()/evaluate() calls, stopped by close(), at the end of a `with` block or at exit).
        Under `accelerate launch --num-processes N script.py` process 0 does this and hands the plan, the URL
        and the key to the others, as vf-rl hands one config to every vf-train rank."""
        rank, world = launched_rank()
        if world > 1 and self.plan is None:
            from accelerate import PartialState
            from torch import distributed as dist

            PartialState()  # the launcher's process group (RLTrainer's Accelerator joins the same one)
            box = [self._serve_here() if rank == 0 else None, self.url, self.api_key]
            dist.broadcast_object_list(box, src=0)
            self.plan, self.url, self.api_key = box
            return self.plan
        if rank > 0:  # the plan is known; only process 0 has a server
            return self.plan
        return self._serve_here()

    def _serve_here(self):
        from vfrl.launcher.cli import new_run_dir
        from vfrl.launcher.machine import detect_machine
        from vfrl.launcher.plan import make_plan
        from vfrl.run_dir import RunDir

        remote = self.config.inference.base_url
        if self.plan is None:
            if remote:  # before anything is written: the same checks, the same lines as vf-rl's
                from vfrl.inference.remote import server_problems

                if problems := server_problems(self.config):
                    raise SystemExit("\n".join(f"vfrl: {problem}" for problem in problems))
            cfg = self.config.model_copy(deep=True)
            run_dir = new_run_dir(Path(cfg.args.output_dir) / cfg.args.run_name).resolve()
            RunDir(run_dir).logs.mkdir(parents=True, exist_ok=True)
            self.plan = make_plan(cfg, run_dir, cfg.args.run_name, detect_machine())
            write_config(self.plan.config, RunDir(run_dir).config)  # what vf-vllm reads, and the run's record
        if remote:
            from vfrl.inference.remote import api_key

            self.url, self.api_key = remote, api_key(self.config)
        elif self.server is None or self.server.poll() is not None:
            self.server, self.url, self.api_key = start_server(self.plan, RunDir(self.plan.run_dir))
            atexit.register(self.close)
        return self.plan

    def train(self) -> Path:
        """Train to max_steps; returns the run directory. A failure stops with vf-train's one line and exit code."""
        from vfrl.trainer.failure import TrainingStopped
        from vfrl.trainer.trainer import RLTrainer

        plan = self._serve()
        try:
            from vfrl.cpu_cores import TRAINER_CORES_ENV, pin

            pin(plan.trainer.env.get(TRAINER_CORES_ENV))  # no GPU: off vLLM's cores, as vf-train keeps (cpu_cores.py)
            threads = plan.trainer.env.get("OMP_NUM_THREADS")
            if threads:  # the trainer's share of the CPU cores, as its pane would get it, split over its processes
                import torch

                torch.set_num_threads(max(1, int(threads) // launched_rank()[1]))
            self.trainer = RLTrainer(plan.config, plan.run_dir, self.url, self.api_key, env=self.env)
            self.trainer.train()
        except TrainingStopped as e:
            self.close()
            print(e.line, file=sys.stderr, flush=True)
            raise SystemExit(e.code) from None
        return plan.run_dir

    def evaluate(self) -> dict[str, float]:
        """The eval split with the current policy (the base model before train()), as eval during training
        runs it: `num_eval_examples` examples x `eval_rollouts_per_example`, the same seeds every time.
        Eval rows: env.eval_dataset; else the rows held out of training (eval_strategy = "steps"); else the
        last `num_eval_examples` rows of env.dataset, which training also samples. Also appended to
        metrics.jsonl as an eval line of the steps trained so far. Under `accelerate launch` process 0
        evaluates (it alone talks to vLLM, as in training); the other processes get {}."""
        from openai import AsyncOpenAI

        from vfrl.envs.loader import load_configured_environment
        from vfrl.run_dir import RunDir, append_jsonl
        from vfrl.rollouts.evaluation import examples_to_evaluate
        from vfrl.trainer.inference_watch import InferenceLost
        from vfrl.rollouts.orchestrator import Orchestrator
        from vfrl.trainer.inference_watch import own_server_url, wait_for_server

        plan = self._serve()
        if launched_rank()[0] > 0:
            return {}
        cfg = plan.config
        try:
            self.url = self.url or own_server_url(cfg.inference, RunDir(plan.run_dir), 900)
            wait_for_server(self.url, 900, RunDir(plan.run_dir).inference_pid if self.server is not None else None,
                            self.api_key)
        except InferenceLost as e:
            self.close()
            raise SystemExit(f"vfrl: evaluate: the inference server is lost: {e} "
                             f"(see {plan.run_dir}/logs/inference.log)")
        env = self.env or load_configured_environment(cfg.env.id, cfg.env.args, cfg.env.renderer, cfg.env.workers,
                                                      cfg.env.sandbox)
        examples = examples_to_evaluate(env, cfg.args.evaluation)
        model = (self.trainer.pipeline.served if self.trainer is not None and self.trainer.pipeline is not None
                 else None) or cfg.model

        async def run() -> dict[str, float]:
            client = AsyncOpenAI(base_url=self.url, api_key=self.api_key, timeout=cfg.args.generation_timeout)
            try:
                stats, _ = await Orchestrator(env, client, cfg.args.generation).evaluate(model, examples)
                return stats
            finally:
                await client.close()

        stats = asyncio.run(run())
        steps = self.trainer.learner.steps_done if self.trainer is not None else 0
        append_jsonl(RunDir(plan.run_dir).metrics, {"step": steps, "max_steps": cfg.args.max_steps, **stats})
        return stats

    def close(self) -> None:
        """Stop the vf-vllm this trainer started (if any); a later train()/evaluate() starts a new one."""
        if self.server is not None:
            stop_server(self.server)
            self.server = None

    def __enter__(self) -> "GRPOTrainer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def save_model(self, path: str | Path) -> None:
        """The trained adapter (use_lora) or model, as save_pretrained writes it."""
        if self.trainer is None:
            raise RuntimeError("save_model() saves what train() trained: call train() first")
        if self.trainer.ranks.is_main:  # every process holds the same weights; one writes them
            self.trainer.learner.policy.save_pretrained(str(path))


def launched_rank() -> tuple[int, int]:
    """(this process's rank, how many processes) as `accelerate launch` / torchrun set them; (0, 1) alone."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def start_server(plan, paths) -> tuple[subprocess.Popen, str | None, str]:
    """vf-vllm on the plan's devices and the config at paths.config (its own process group, log in
    logs/inference.log); returns (its process, its URL, its API key). The trainer loads its model meanwhile and
    waits for /health (as the two panes of vf-rl do). The URL is None with inference.port = 0: vLLM binds a free
    port, which vf-vllm writes to paths.inference_port (trainer/inference_watch.py's own_server_url reads it)."""
    from vfrl.launcher.plan import console_script

    paths.inference_port.unlink(missing_ok=True)  # an earlier server's
    api_key = secrets.token_urlsafe(24)
    env = {**os.environ, **plan.inference.env, "VFRL_API_KEY": api_key}
    with open(paths.log("inference"), "w") as log:
        proc = subprocess.Popen([console_script("vf-vllm"), "@", str(paths.config),
                                 "--pid-file", str(paths.inference_pid)],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, plan.config.inference.url if plan.config.inference.port else None, api_key


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM to vf-vllm's group (it ends vLLM and whatever vLLM started), SIGKILL after 60 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
