"""TRL's GRPOTrainer on one of our workloads, for benchmarks/side_by_side.py. Runs in the TRL venv
(benchmarks/trl_env.sh), which has no vfrl: the harness hands over the dataset as a JSON file.

    .bench/trl-venv/bin/python benchmarks/trl_grpo.py --model models/tiny-reverse --data rows.json \
        --out steps.jsonl --steps 160 --rollouts 128 --micro-batch 64 --max-tokens 16

The harness passes what the workload's vf-rl config sets: reward (`lcs`: reverse-text's; `last_number`:
arithmetic's with style="bare"), LoRA rank and alpha (on all linear layers), AdamW learning rate, its schedule
and warm-up steps (vf-rl's scheduler name, which both sides hand to transformers' `get_scheduler`: `constant`
has no warm-up on either), `--rollouts` rollouts per optimizer step (`--rollouts / --micro-batch`
micro-batches of gradient accumulation, one generation per step), `--num-generations` per prompt, max tokens and
temperature. Fixed as in vf-rl's configs: fp32, no gradient checkpointing, advantages not divided by the group
std (our `scale_rewards = false`), beta 0. TRL keeps its own loss (`dapo` normalization, PPO clip); generation
is TRL's default (`model.generate` in the training process) unless `--vllm colocate|server`.

With `--eval-data`: TRL's eval on those prompts before the first step (`eval_on_start`), every `--eval-steps`
steps and after the last (as vf-rl's `is_eval_step`), `--eval-generations` rollouts per prompt sampled as in
training (same temperature). Unlike vf-rl's eval, which reuses the same per-request seeds at every eval and runs
on vLLM beside the next training step, TRL's draws fresh samples from the training process's RNG and stops
training while it runs: its time lands in the next step's `step_s`. Eval batches hold whole prompt groups and
split the eval into equal parts, so TRL's `eval_reward` (the mean of its batches' means) is the mean over all
eval rollouts, as vf-rl's `eval/reward_mean`.

Writes one JSON line per optimizer step: `t` (time.time() at the step's end), `step_s` (wall time since the
previous step's end, the first from the start of training), TRL's own `step_time` (generation + forward/backward
of the step's micro-batches, no optimizer step), `cpu_s` (CPU seconds, user + system, of the whole process since the
previous step's end: generation and training both run in it), `reward_mean`, `completion_len`, `loss`; and one
per eval: `{"eval": true, "step": optimizer steps done, "t": time.time() at its end, "eval_reward": ...}`.
"""

import argparse
import hashlib
import json
import os
import re
import time
from difflib import SequenceMatcher

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")  # environments/arithmetic's


def lcs_reward(completions, answer, **_) -> list[float]:
    """environments/reverse_text's lcs_reward (difflib ratio of the stripped reply and the reversed text), in
    TRL's reward-function shape: one list of conversational completions, the dataset's `answer` column."""
    return [SequenceMatcher(None, c[-1]["content"].strip() if c else "", a).ratio()
            for c, a in zip(completions, answer)]


def last_number(text: str) -> str | None:
    """environments/arithmetic's last_number: the last number written in `text` ("1,200" -> "1200", "7." -> "7")."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "").removesuffix(".0") if found else None


def last_number_reward(completions, answer, **_) -> list[float]:
    """environments/arithmetic's correct_number (style="bare"): 1.0 when the last number of the reply is the
    answer, else 0.0; in TRL's reward-function shape, as lcs_reward."""
    return [float(last_number(c[-1]["content"] if c else "") == a) for c, a in zip(completions, answer)]


REWARDS = {"lcs": lcs_reward, "last_number": last_number_reward}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a local model folder")
    ap.add_argument("--data", required=True, help="JSON list of rows with `prompt` (chat messages) and `answer`")
    ap.add_argument("--out", required=True, help="JSON lines, one per step and one per eval")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--rollouts", type=int, default=128, help="rollouts per optimizer step")
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=64, help="rollouts per forward/backward")
    ap.add_argument("--max-tokens", type=int, default=16, help="max completion tokens")
    ap.add_argument("--reward", choices=sorted(REWARDS), default="lcs",
                    help="lcs: reverse-text's; last_number: arithmetic's (style=\"bare\")")
    ap.add_argument("--lora-rank", type=int, default=8)
    ap.add_argument("--lora-alpha", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--scheduler", choices=["constant", "linear", "cosine"], default="cosine",
                    help="vf-rl's lr_scheduler_type; both hand it to transformers' get_scheduler")
    ap.add_argument("--warmup-steps", type=int, default=5)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--eval-data", help="JSON list of eval rows, as --data; no eval without it")
    ap.add_argument("--eval-steps", type=int, default=50, help="eval every N steps (and at step 0 and the end)")
    ap.add_argument("--eval-generations", type=int, default=1, help="rollouts per eval prompt")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (CPU)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vllm", choices=["none", "colocate", "server"], default="none",
                    help="GPU only: TRL's vLLM generation modes (server: a `trl vllm-serve` already running)")
    ap.add_argument("--vllm-port", type=int, default=8000)
    args = ap.parse_args(argv)
    if args.rollouts % args.micro_batch:
        ap.error(f"--rollouts {args.rollouts} is not a multiple of --micro-batch {args.micro_batch}")
    return args


def eval_batch_size(prompts: int, generations: int, micro_batch: int) -> int:
    """The largest eval batch of at most `micro_batch` rollouts (`generations` at least) that holds whole prompt
    groups and splits the eval's `prompts * generations` rollouts into equal batches."""
    total = prompts * generations
    return max((b for b in range(generations, micro_batch + 1, generations) if total % b == 0), default=generations)


def grpo_settings(args: argparse.Namespace, eval_prompts: int = 0) -> dict:
    """GRPOConfig's arguments, less output_dir and use_cpu; eval ones when there are `eval_prompts`."""
    settings = dict(
        max_steps=args.steps,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=args.rollouts // args.micro_batch,
        num_generations=args.num_generations,
        max_completion_length=args.max_tokens,
        temperature=args.temperature,
        learning_rate=args.lr,
        lr_scheduler_type=args.scheduler,
        warmup_steps=args.warmup_steps,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        scale_rewards="none",
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=1,
        log_completions=False,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=args.seed,
        use_vllm=args.vllm != "none",
        vllm_mode=args.vllm if args.vllm != "none" else "colocate",
        vllm_server_port=args.vllm_port,
    )
    if eval_prompts:
        settings |= dict(eval_strategy="steps", eval_steps=args.eval_steps, eval_on_start=True,
                         num_generations_eval=args.eval_generations,
                         per_device_eval_batch_size=eval_batch_size(eval_prompts, args.eval_generations,
                                                                    args.micro_batch))
    return settings


def main() -> None:
    args = parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import pyarrow as pa
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    def rows(path):
        # Made with its fingerprint: datasets' own hashes the Arrow table with dill, which fails under Python 3.12
        # with pyarrow 26 (`Can't pickle <class 'MonthDayNano'>`), the GPU machine's Python
        text = open(path, "rb").read()
        table = pa.Table.from_pylist([{"prompt": r["prompt"], "answer": r["answer"]} for r in json.loads(text)])
        return Dataset(table, fingerprint=hashlib.sha256(text).hexdigest()[:16])

    dataset = rows(args.data)
    eval_dataset = rows(args.eval_data) if args.eval_data else None
    out = open(args.out, "w")

    def write(row: dict) -> None:
        out.write(json.dumps(row) + "\n")
        out.flush()

    class StepLog(TrainerCallback):
        """One line per optimizer step; wall time between step ends, so nothing of a step is missed."""

        def on_train_begin(self, *_, **__):
            self.last, self.last_cpu = time.time(), time.process_time()

        def on_step_end(self, _args, state, *_, **__):
            now, cpu = time.time(), time.process_time()
            self.row = {"step": state.global_step, "t": now, "step_s": now - self.last, "cpu_s": cpu - self.last_cpu}
            self.last, self.last_cpu = now, cpu

        last_eval_step = None

        def on_log(self, _args, state, _control, logs=None, **__):
            if logs and "eval_reward" in logs:
                self.last_eval_step = state.global_step
                write({"eval": True, "step": state.global_step, "t": time.time(), "eval_reward": logs["eval_reward"]})
            if not logs or "reward" not in logs:
                return  # an eval line or the closing train_runtime line
            write(self.row | {"reward_mean": logs["reward"], "completion_len": logs.get("completions/mean_length"),
                              "step_time": logs.get("step_time"), "loss": logs.get("loss")})

    config = GRPOConfig(output_dir=os.path.join(os.path.dirname(os.path.abspath(args.out)), "trl-output"),
                        use_cpu=not torch.cuda.is_available(),
                        **grpo_settings(args, len(eval_dataset) if eval_dataset is not None else 0))
    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=REWARDS[args.reward],
        args=config,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        processing_class=AutoTokenizer.from_pretrained(args.model),
        peft_config=LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0,
                               target_modules="all-linear", task_type="CAUSAL_LM"),
        callbacks=[log := StepLog()],
    )
    trainer.train()
    # vf-rl also evaluates the last policy; transformers 5 does it too after a last step off the eval cadence
    if eval_dataset is not None and log.last_eval_step != args.steps:
        trainer.evaluate()
    out.close()


if __name__ == "__main__":
    main()
