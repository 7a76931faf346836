"""The embedded tiny model is shipped, not made on each machine: `python -m vfrl.make_tiny_model` gives other
bytes with another thread count or CPU (float sums of its warm-up training), and the quick start's numbers
moved with them. models/tiny-reverse is in the repository and in the wheel (vf-setup writes it)."""

import json
from pathlib import Path

from vfrl.bundle import bundled_files
from vfrl.make_smollm2 import sha256_prefix
from vfrl.tiny_model import TINY_REVERSE_SHA256

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "models" / "tiny-reverse"


def test_the_tiny_model_is_the_shipped_bytes():
    assert sha256_prefix(TINY / "model.safetensors") == TINY_REVERSE_SHA256, (
        "models/tiny-reverse/model.safetensors is not the shipped file: `git checkout models/tiny-reverse` "
        "restores it (make_tiny_model writes machine-dependent bytes)")


def test_the_tiny_model_loads_and_says_how_it_was_made():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(TINY)
    tok = AutoTokenizer.from_pretrained(TINY)
    assert model.config.model_type == "qwen2" and len(tok) == model.config.vocab_size
    made = json.loads((TINY / "vfrl_tiny.json").read_text())
    assert {"seed", "sft_steps", "batch_size", "lr"} <= set(made)


def test_vf_setup_ships_the_tiny_model_the_configs_name():
    files = {str(p) for p in bundled_files(ROOT)}
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert f"models/tiny-reverse/{name}" in files
    assert 'model = "./models/tiny-reverse"' in (ROOT / "configs/rl/quickstart.toml").read_text()
