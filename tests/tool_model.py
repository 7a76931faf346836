"""A tiny chat model that calls tools, made on the spot for the tool tests (nothing is downloaded).

The embedded model's tokenizer has no `<tool_call>` token, and tool parsers (renderers' `qwen3`, vLLM's
`hermes`) find calls by that token. This one is the embedded model's recipe (vfrl.tiny_model) with
`<tool_call>` and `</tool_call>` as special tokens, a ChatML template that renders tool calls and tool
messages the way Qwen's does, and a short supervised pass on the conversations it must hold: asked to
`add A B`, it calls `add` with a and b; shown the tool's result, it says it.
"""

from __future__ import annotations

import json
from pathlib import Path

TOOL_TOKENS = ("<tool_call>", "</tool_call>")
TOOL_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% for call in message.get('tool_calls') or [] %}"
    "{{ '<tool_call>' + ({'name': call['function']['name'], 'arguments': call['function']['arguments']} | tojson)"
    " + '</tool_call>' }}"
    "{% endfor %}"
    "{{ '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SUMS = [(2, 3)]  # the tool taskset's one question, "add 2 3" (two would need a model that learned to copy)


def call_text(a: int, b: int) -> str:
    return "<tool_call>" + json.dumps({"name": "add", "arguments": {"a": a, "b": b}}) + "</tool_call>"


def make_tool_model(out: Path, steps: int = 300, seed: int = 0, lr: float = 3e-3) -> Path:
    """The model, saved at `out`: 300 steps give the whole call a probability of about 0.92 (sampled at
    temperature 1, a rollout now and then says something else, scored 0)."""
    from vfrl.make_tiny_model import sft
    from vfrl.tiny_model import build_tiny_model, build_tokenizer, save

    tok = build_tokenizer(extra_special=TOOL_TOKENS, chat_template=TOOL_TEMPLATE)
    model, tok = build_tiny_model(out, seed=seed, tokenizer=tok)
    eos = [tok.eos_token_id]

    def render(m):
        return tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=False)

    seqs = []
    for a, b in SUMS:
        ask = [{"role": "user", "content": f"add {a} {b}"}]
        called = ask + [{"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": {"a": a, "b": b}}}]},
            {"role": "tool", "content": str(a + b), "tool_call_id": "call_0"}]
        seqs.append((render(ask), tok.encode(call_text(a, b), add_special_tokens=False) + eos))
        seqs.append((render(called), tok.encode(str(a + b), add_special_tokens=False) + eos))
    sft(model, tok, seqs, steps, batch_size=4, lr=lr, seed=seed)
    save(model, tok, out)
    return out
