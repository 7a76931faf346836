"""Cost of one full-weight sync (use_lora = false): save safetensors + reload them into a running vLLM.

    .venv/bin/python benchmarks/full_weight_sync.py                 # tiny-reverse and a random 50M Qwen2
    .venv/bin/python benchmarks/full_weight_sync.py --models tiny --pushes 10

For each model: start `vf-vllm` in full-weight mode (fp32, CPU), then `--pushes` times: move every
parameter by 1e-3 in a random direction (an Adam step at lr 1e-3) and call `FullWeightSync.push`, which
saves (`save_pretrained`, atomic rename) and reloads in place (pause, /collective_rpc
vfrl_reload_weights, reset prefix cache, resume). After the last push it samples a few completions
and reports the largest |vLLM - trainer| sampled-token logprob, so the timed path is also the
correct one; as controls, the same gap before any sync (vLLM's CPU kernels vs HF alone) and the
gap between the synced server and a second server started on the last pushed weights (same seeded
requests, so the same tokens). The 50M model is a Qwen2 built in memory from a config (random
weights, tiny-reverse's character tokenizer, vocabulary padded to 32000, tied embeddings) and
written to a temp dir, since vLLM loads from disk. Medians over the pushes; the first is included.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

from vfrl.testing import BIN, free_port, write_config  # noqa: E402

API_KEY = "bench"


def random_qwen2(out: Path, tiny: Path) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=10,
                         num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True,
                         max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    Qwen2ForCausalLM(config).save_pretrained(out)
    copy_tokenizer(tiny, out)
    return out


TOKENIZER_FILES = ("tokenizer", "special_tokens", "chat_template", "generation_config")


def copy_tokenizer(src: Path, out: Path) -> None:
    for f in src.iterdir():
        if f.name.startswith(TOKENIZER_FILES):
            shutil.copy(f, out / f.name)


@contextmanager
def serve(model_dir: Path, tmp: Path):
    """A vf-vllm server in full-weight mode on `model_dir`; yields (base_url, start-up seconds)."""
    from test_full_ft_parity import API_KEY

    from vfrl.trainer.inference_watch import wait_for_server

    port = free_port()
    cfg = write_config(tmp / f"config-{port}.toml", model_dir, port=port, output_dir=tmp, use_lora=False)
    env = {**os.environ, "VFRL_API_KEY": API_KEY, "CUDA_VISIBLE_DEVICES": ""}
    log = open(tmp / f"server-{port}.log", "w")
    proc = subprocess.Popen([str(BIN / "vf-vllm"), "@", str(cfg)], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        t0 = time.time()
        wait_for_server(f"http://127.0.0.1:{port}/v1", timeout=600)
        yield f"http://127.0.0.1:{port}/v1", time.time() - t0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
        log.close()


def adam_like_step(model, seed: int, size: float = 1e-3) -> None:
    """Every parameter moves by `size` in a random direction, as in an Adam step at lr = size."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g).sign() * size)


def same_tokens_gap(a, b) -> float:
    """Largest logprob difference between two servers' answers to the same seeded requests."""
    assert [r.completion_ids for r in a] == [r.completion_ids for r in b], "the two servers sampled different tokens"
    return max((torch.tensor(x.completion_logprobs) - torch.tensor(y.completion_logprobs)).abs().max().item()
               for x, y in zip(a, b))


def bench(model_dir: Path, pushes: int, tmp: Path) -> dict:
    from test_full_ft_parity import API_KEY, load, max_logprob_gap, sample

    from vfrl.rollouts.weight_sync import FullWeightSync

    model = load(model_dir)
    (tmp / "weights").mkdir()
    with serve(model_dir, tmp) as (url, start_s):
        sync = FullWeightSync(url, API_KEY, tmp / "weights", served_name=str(model_dir))
        base_gap = max_logprob_gap(model, sample(url, str(model_dir), n=4))
        rows = []
        for version in range(1, pushes + 1):
            adam_like_step(model, seed=version)
            _, total = sync.push(model, version)
            rows.append({**{k: v for k, v in sync.last.items() if k != "repacked"}, "total_s": total})
        synced = sample(url, str(model_dir), n=4)
        repacked = sync.last["repacked"]
    last = tmp / "weights" / f"step-{pushes}"
    copy_tokenizer(model_dir, last)
    with serve(last, tmp) as (url, _):  # control: a server started on the synced weights
        fresh = sample(url, str(last), n=4)
    files = list(last.glob("*.safetensors"))
    return {
        "params_M": sum(p.numel() for p in model.parameters()) / 1e6,
        "safetensors_MB": sum(f.stat().st_size for f in files) / 1e6,
        "server_start_s": start_s,
        **{k: statistics.median(r[k] for r in rows) for k in rows[0]},
        "gap_vs_trainer_before_sync": base_gap,  # start-up weights: vLLM's CPU kernels vs HF
        "gap_vs_trainer_after_syncs": max_logprob_gap(model, synced),
        "gap_fresh_server_vs_trainer": max_logprob_gap(model, fresh),
        "gap_synced_vs_fresh_server": same_tokens_gap(synced, fresh),
        "repacked": repacked,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["tiny", "qwen2-50m"], choices=["tiny", "qwen2-50m"])
    ap.add_argument("--pushes", type=int, default=5)
    a = ap.parse_args()
    tiny = ROOT / "models" / "tiny-reverse"
    for name in a.models:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            model_dir = tiny if name == "tiny" else random_qwen2(tmp / "qwen2-50m", tiny)
            print(json.dumps({"model": name, "pushes": a.pushes, **bench(model_dir, a.pushes, tmp)}), flush=True)


if __name__ == "__main__":
    main()
