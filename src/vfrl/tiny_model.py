"""The embedded default model: a tiny Qwen2 causal LM with a character-level tokenizer and a chat template.

The model hub is out of reach on CPU machines and in CI, so the project makes its own model,
deterministically from a seed, and saves it in HF format (config.json, model.safetensors,
tokenizer.json, tokenizer_config.json with a ChatML template) so that vLLM and transformers load
it like any hub model.
"""

from __future__ import annotations

import string
from pathlib import Path

# first 16 hex digits of the sha256 of the shipped models/tiny-reverse/model.safetensors (make_tiny_model.py,
# seed 0, 300 warm-up steps, made with 2 threads on an x86_64 CPU; other machines make other bytes)
TINY_REVERSE_SHA256 = "a88de328344abad9"
BOS, EOS, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
SPECIAL_TOKENS = [PAD, BOS, EOS]
# Printable ASCII plus newline, spelled the byte-level way (space = "Ġ", newline = "Ċ") as in Qwen2's
# tokenizer: transformers loads a qwen2 model's tokenizer.json through Qwen2Tokenizer, which rebuilds a
# byte-level pipeline; with byte-level symbols the rebuilt tokenizer is the same as the one built here.
CHARS = [c for c in string.printable[:-6] if c != " "] + ["\u0120", "\u010a"]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_tokenizer(vocab_size: int | None = None, extra_special: tuple[str, ...] = (),
                    chat_template: str = CHAT_TEMPLATE):
    """Each printable character is one token; ChatML markers (and `extra_special`, after the characters)
    are special tokens. `vocab_size` pads the vocabulary with placeholder tokens (`<123>`, never produced
    by encoding) to that many ids, for a model of a real vocabulary's size: whatever id it samples still
    decodes."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARS + list(extra_special))}
    vocab.update({f"<{i}>": i for i in range(len(vocab), vocab_size or 0)})
    # BPE with no merges splits every pre-tokenized word into single characters.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(SPECIAL_TOKENS + list(extra_special))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=None, eos_token=EOS, pad_token=PAD, unk_token=None,
        model_max_length=1024, clean_up_tokenization_spaces=False,
    )
    tok.chat_template = chat_template
    return tok


def build_tiny_model(out_dir: str | Path, *, seed: int = 0, hidden_size: int = 128, num_layers: int = 2,
                     tokenizer=None):
    """Create and save a randomly initialised tiny Qwen2 chat model (with `tokenizer`, default
    build_tokenizer()); returns (model, tokenizer)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = tokenizer or build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tok.convert_tokens_to_ids(BOS),
        eos_token_id=tok.convert_tokens_to_ids(EOS),
        pad_token_id=tok.convert_tokens_to_ids(PAD),
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    save(model, tok, out_dir)
    return model, tok


def save(model, tok, out_dir: str | Path) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = model.config.eos_token_id
    model.generation_config.pad_token_id = model.config.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
