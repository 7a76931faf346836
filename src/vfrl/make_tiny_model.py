"""Make a tiny Qwen2 chat model, warm-started on reverse-text: how the embedded models/tiny-reverse was made.

    python -m vfrl.make_tiny_model --out DIR

The repository ships models/tiny-reverse itself (its sha256 in tiny_model.TINY_REVERSE_SHA256): the warm-up's
float sums depend on the thread count and the CPU, so this script writes other bytes on other machines. It is
here to make variants (seed, steps) and to say how the shipped one was made (its vfrl_tiny.json).

A short supervised pass on the reverse-text environment's train split gives the random model the format
(reply, then <|im_end|>) and partial skill, so that the quick start's RL run has something to improve. Needs the
reverse-text environment installed (`vf-install reverse-text` in a folder made by vf-setup).
"""

import argparse
import json
import time

import torch

from vfrl import load_environment
from vfrl.tiny_model import build_tiny_model, save


def reverse_text_pairs(tok, rows) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, reply ids) of each reverse-text row: the chat prompt, then the answer and <|im_end|>."""
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    seqs = []
    for row in rows:
        prompt = tok.apply_chat_template(
            [{"role": "system", "content": "Reverse the text."}, {"role": "user", "content": row["question"]}],
            add_generation_prompt=True, tokenize=True, return_dict=False,
        )
        answer = tok(row["answer"], add_special_tokens=False)["input_ids"] + [eos]
        seqs.append((prompt, answer))
    return seqs


def sft(model, tok, seqs: list[tuple[list[int], list[int]]], steps: int, batch_size: int, lr: float,
        seed: int) -> list[float]:
    """Supervised steps on (prompt ids, reply ids) pairs: loss on the reply only. Returns the losses."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    model.train()
    for step in range(steps):
        idx = torch.randint(len(seqs), (batch_size,), generator=g).tolist()
        T = max(len(seqs[i][0]) + len(seqs[i][1]) for i in idx)
        ids = torch.full((batch_size, T), tok.pad_token_id)
        labels = torch.full((batch_size, T), -100)
        attn = torch.zeros((batch_size, T), dtype=torch.long)
        for b, i in enumerate(idx):
            p, a = seqs[i]
            ids[b, : len(p) + len(a)] = torch.tensor(p + a)
            labels[b, len(p) : len(p) + len(a)] = torch.tensor(a)
            attn[b, : len(p) + len(a)] = 1
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def main() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="models/tiny-reverse")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    t0 = time.time()
    model, tok = build_tiny_model(args.out, seed=args.seed)
    if args.sft_steps:
        rows = load_environment("reverse-text").dataset
        losses = sft(model, tok, reverse_text_pairs(tok, rows), args.sft_steps, args.batch_size, args.lr, args.seed)
        save(model, tok, args.out)
        print(f"warm start: {args.sft_steps} steps, loss {losses[0]:.3f} -> {sum(losses[-10:]) / 10:.3f}")
    with open(f"{args.out}/vfrl_tiny.json", "w") as f:
        json.dump(vars(args), f)
    print(f"wrote {args.out} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
