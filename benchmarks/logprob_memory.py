"""Peak memory of one logprob forward + backward: naive full-vocabulary logits vs vfrl's chunked lm_head.

    .venv/bin/python benchmarks/logprob_memory.py                    # defaults: 4 x 512 tokens, vocab 151936
    .venv/bin/python benchmarks/logprob_memory.py --batch 2 --seq 256

The model is a random Qwen2-like model built in memory (no download): Qwen's vocabulary (151936,
tied embeddings), hidden 64, 2 layers, fp32, with a peft LoRA as the trainer uses. Each variant runs
in a fresh process. Memory is the process's peak resident set (Linux VmHWM) during the forward +
backward, minus the resident set just before it: the peak is reset via /proc/self/clear_refs after
the model and inputs exist and a tiny warm-up step ran, so imports, set-up and code paged in
by the first step do not count. The loss is the sum of the
logprobs at the loss positions (the last `--completion` tokens of each row, like a completion
after a prompt), as in training.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = ["naive", "chunked:1024:all", "chunked:1024", "chunked:256"]


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def run_one(variant: str, a) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from vfrl.learner.logprobs import naive_sequence_logprobs, sequence_logprobs_and_entropy

    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    config = Qwen2Config(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=2 * a.hidden, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                         max_position_embeddings=a.seq)
    model = get_peft_model(Qwen2ForCausalLM(config), LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    model.train()
    ids = torch.randint(0, a.vocab, (a.batch, a.seq))
    attn = torch.ones_like(ids)
    positions = torch.zeros(a.batch, a.seq - 1, dtype=torch.bool)
    positions[:, -a.completion :] = True

    def step(ids, attn, positions):
        if variant == "naive":
            logprobs, _ = naive_sequence_logprobs(model, ids, attn, with_entropy=a.entropy)
            loss = (logprobs * positions).sum()
        else:
            every = variant.endswith(":all")  # logits at every position, as naive, to isolate the chunking
            logprobs = sequence_logprobs_and_entropy(model, ids, attn, positions=None if every else positions,
                                                     with_entropy=a.entropy, chunk_size=int(variant.split(":")[1]))[0]
            loss = (logprobs * positions).sum()
        loss.backward()
        return loss

    # warm-up: pages in the code paths, thread pools
    step(ids[:1, :16], attn[:1, :16], torch.ones(1, 15, dtype=torch.bool))
    model.zero_grad(set_to_none=True)
    before = rss_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    t0 = time.perf_counter()
    loss = step(ids, attn, positions)
    seconds = time.perf_counter() - t0
    peak = rss_kib("VmHWM")
    return {"variant": variant, "peak_mib": (peak - before) / 1024, "seconds": seconds, "loss": float(loss)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--completion", type=int, default=256, help="loss positions per row (the completion)")
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--entropy", action="store_true", help="also compute the entropy (the trainer's first iteration)")
    p.add_argument("--variants", nargs="+", default=VARIANTS,
                   help="naive, chunked:N (N token positions per chunk, loss positions only), "
                        "chunked:N:all (every position)")
    p.add_argument("--one", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print(json.dumps(run_one(a.one, a)))
        return
    full = a.batch * a.seq * a.vocab * 4 / 2**20
    print(f"shape: batch {a.batch} x {a.seq} tokens ({a.completion} loss positions per row), vocab {a.vocab}, "
          f"hidden {a.hidden}, fp32, entropy {'on' if a.entropy else 'off'}; one (B, T, V) fp32 logits tensor = "
          f"{full:.0f} MiB\n")
    print("| variant | peak memory above baseline (MiB) | forward + backward (s) |")
    print("|---|---|---|")
    losses = []
    for v in a.variants:
        args = [sys.executable, __file__, "--one", v] + [f"--{k}={getattr(a, k)}" for k in
                                                         ("batch", "seq", "completion", "vocab", "hidden", "threads")]
        args += ["--entropy"] if a.entropy else []
        r = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        losses.append(r["loss"])
        print(f"| {v} | {r['peak_mib']:.0f} | {r['seconds']:.2f} |", flush=True)
    spread = max(losses) - min(losses)
    print(f"\nsame loss in every variant: {spread < 1e-2 * abs(losses[0])} (spread {spread:.2e} of {losses[0]:.1f})")


if __name__ == "__main__":
    main()
