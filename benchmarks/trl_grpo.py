"""TRL's GRPOTrainer on one of our workloads, for benchmarks/side_by_side.py. Runs in the TRL venv
(benchmarks/trl_env.sh), which has no vfrl: the harness hands over the dataset as a JSON file.

    .bench/trl-venv/bin/python benchmarks/trl_grpo.py --model models/tiny-reverse --data rows.json \
        --out steps.jsonl --steps 160 --rollouts 128 --micro-batch 64 --max-tokens 16

Settings match vf-rl's config of the same workload: LoRA r8 alpha 16 on all linear layers, AdamW lr 3e-3 with
cosine decay and 5 warm-up steps, `--rollouts` rollouts per optimizer step (`--rollouts / --micro-batch`
micro-batches of gradient accumulation, one generation per step), 8 per prompt, temperature 1.0, fp32, no
gradient checkpointing, advantages not divided by the group std (our `scale_rewards = false`), beta 0.
TRL keeps its own loss (`dapo` normalization, PPO clip); generation is TRL's default (`model.generate` in the
training process) unless `--vllm colocate|server`.

Writes one JSON line per optimizer step: `t` (time.time() at the step's end), `step_s` (wall time since the
previous step's end, the first from the start of training), TRL's own `step_time` (generation + forward/backward
of the step's micro-batches, no optimizer step), `cpu_s` (CPU seconds, user + system, of the whole process since the
previous step's end: generation and training both run in it), `reward_mean`, `completion_len`, `loss`.
"""

import argparse
import json
import os
import time
from difflib import SequenceMatcher


def lcs_reward(completions, answer, **_) -> list[float]:
    """environments/reverse_text's lcs_reward (difflib ratio of the stripped reply and the reversed text), in
    TRL's reward-function shape: one list of conversational completions, the dataset's `answer` column."""
    return [SequenceMatcher(None, c[-1]["content"].strip() if c else "", a).ratio() for c, a in zip(completions, answer)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a local model folder")
    ap.add_argument("--data", required=True, help="JSON list of rows with `prompt` (chat messages) and `answer`")
    ap.add_argument("--out", required=True, help="JSON lines, one per step")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--rollouts", type=int, default=128, help="rollouts per optimizer step")
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=64, help="rollouts per forward/backward")
    ap.add_argument("--max-tokens", type=int, default=16, help="max completion tokens")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (CPU)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vllm", choices=["none", "colocate", "server"], default="none",
                    help="GPU only: TRL's vLLM generation modes (server: a `trl vllm-serve` already running)")
    ap.add_argument("--vllm-port", type=int, default=8000)
    args = ap.parse_args()
    if args.rollouts % args.micro_batch:
        ap.error(f"--rollouts {args.rollouts} is not a multiple of --micro-batch {args.micro_batch}")

    import torch

    torch.set_num_threads(args.threads)
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rows = json.load(open(args.data))
    dataset = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in rows])
    out = open(args.out, "w")

    class StepLog(TrainerCallback):
        """One line per optimizer step; wall time between step ends, so nothing of a step is missed."""

        def on_train_begin(self, *_, **__):
            self.last, self.last_cpu = time.time(), time.process_time()

        def on_step_end(self, _args, state, *_, **__):
            now, cpu = time.time(), time.process_time()
            self.row = {"step": state.global_step, "t": now, "step_s": now - self.last, "cpu_s": cpu - self.last_cpu}
            self.last, self.last_cpu = now, cpu

        def on_log(self, _args, state, _control, logs=None, **__):
            if not logs or "reward" not in logs:
                return  # the closing train_runtime line
            row = self.row | {"reward_mean": logs["reward"], "completion_len": logs.get("completions/mean_length"),
                              "step_time": logs.get("step_time"), "loss": logs.get("loss")}
            out.write(json.dumps(row) + "\n")
            out.flush()

    on_gpu = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=os.path.join(os.path.dirname(os.path.abspath(args.out)), "trl-output"),
        max_steps=args.steps,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=args.rollouts // args.micro_batch,
        num_generations=args.num_generations,
        max_completion_length=args.max_tokens,
        temperature=args.temperature,
        learning_rate=args.lr,
        lr_scheduler_type="cosine",
        warmup_steps=5,
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
        use_cpu=not on_gpu,
    )
    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=lcs_reward,
        args=config,
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(args.model),
        peft_config=LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"),
        callbacks=[StepLog()],
    )
    trainer.train()
    out.close()


if __name__ == "__main__":
    main()
