"""The trainer's forward + backward of one batch at several micro-batch sizes, alone on the machine.

    .venv/bin/python benchmarks/micro_batch_size.py ROLLOUTS_DIR [--model models/bench-19m] [--threads 2]
        [--sizes 64,32,16,8] [--rollouts 64] [--max-tokens 64]

ROLLOUTS_DIR: a run's `rollouts/` (e.g. of `AB_CONFIG=benchmarks/configs/19m.toml benchmarks/quickstart_ab.py 3 x`):
its first step's rows, rendered with the model's chat template, are the batch. Each size runs the whole batch
as the trainer does (its collate and TrainBatch.micro_batches: rows sorted by length, each micro-batch cut to
its longest row; LoRA r8 on every linear layer, chunked logprobs of the completion tokens, backward), once to warm
up, then 3 times; the median is printed. No vLLM, no loss beyond the mean logprob: this times the arithmetic only.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from vfrl.rollout_types import Rollout  # noqa: E402
from vfrl.learner.batch import collate  # noqa: E402
from vfrl.learner.logprobs import sequence_logprobs_and_entropy  # noqa: E402


def rollouts(rollouts_dir: Path, tokenizer, count: int, max_tokens: int) -> list[Rollout]:
    """The first `count` rollouts of the earliest step file, their token ids rendered with the chat template."""
    first = min(rollouts_dir.glob("step_*.jsonl"), key=lambda p: int(p.stem.split("_")[1]))
    out = []
    for line in first.read_text().splitlines()[:count]:
        r = json.loads(line)
        text = tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True)
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        completion = tokenizer(r["completion"][0]["content"], add_special_tokens=False)["input_ids"][:max_tokens]
        out.append(Rollout(example_id=r["example_id"], prompt=r["prompt"], completion=r["completion"],
                           answer=r["answer"], prompt_ids=list(prompt), completion_ids=list(completion),
                           completion_logprobs=[0.0] * len(completion), completion_mask=[1] * len(completion),
                           policy="bench"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rollouts_dir", type=Path)
    ap.add_argument("--model", default="models/bench-19m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sizes", default="64,32,16,8")
    ap.add_argument("--rollouts", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    rows = rollouts(args.rollouts_dir, tokenizer, args.rollouts, args.max_tokens)
    batch = collate(rows, torch.zeros(len(rows)), max_seq_len=10**6, pad_id=tokenizer.pad_token_id or 0)
    lengths = [len(r.prompt_ids) + len(r.completion_ids) for r in rows]
    print(f"{len(rows)} rows of {min(lengths)}-{max(lengths)} tokens (mean {sum(lengths) / len(lengths):.1f}); "
          f"{args.threads} torch threads; {args.model}")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32),
                           LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    model.train()

    def step(size: int) -> float:
        t0 = time.perf_counter()
        for mb in batch.micro_batches(size):  # the trainer's: sorted by length, each cut to its longest row
            positions = mb.loss_mask > 0
            logprobs, _ = sequence_logprobs_and_entropy(model, mb.input_ids, mb.attention_mask, 1.0, positions, 1024,
                                                        with_entropy=True)
            (-(logprobs * positions).sum() / positions.sum()).backward()
        return time.perf_counter() - t0

    for size in (int(s) for s in args.sizes.split(",")):
        step(size)
        times = sorted(step(size) for _ in range(3))
        print(f"micro-batch {size}: forward + backward of the batch {times[1]:.2f} s (3 runs: "
              + ", ".join(f"{t:.2f}" for t in times) + ")")


if __name__ == "__main__":
    main()
