"""Cost of one full-weight sync (use_lora = false): save safetensors + reload them into a running vLLM.

    .venv/bin/python benchmarks/full_weight_sync.py                 # tiny-reverse and a random 50M Qwen2
    .venv/bin/python benchmarks/full_weight_sync.py --models tiny --pushes 10

For each model: start `vf-vllm` in full-weight mode (fp32, CPU), then `--pushes` times: move every
parameter a little (so every push really changes the weights) and call `FullWeightSync.push`, which
saves (`save_pretrained`, atomic rename) and reloads in place (pause, /collective_rpc
vfrl_reload_weights, reset prefix cache, resume). After the last push it samples a few completions
and reports the largest |vLLM - trainer| sampled-token logprob, so the timed path is also the
correct one (and the same gap before any sync: what vLLM's CPU kernels alone give). The 50M model
is a Qwen2 built in memory from a config (random weights, tiny-reverse's character tokenizer,
vocabulary padded to 32000, tied embeddings) and written to a temp dir, since vLLM loads from disk. Medians over the pushes; the first push is included.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import BIN, free_port, write_config  # noqa: E402

API_KEY = "bench"


def random_qwen2(out: Path, tiny: Path) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=10,
                         num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True,
                         max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    Qwen2ForCausalLM(config).save_pretrained(out)
    for f in tiny.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template", "generation_config")):
            shutil.copy(f, out / f.name)
    return out


def bench(model_dir: Path, pushes: int, tmp: Path) -> dict:
    from test_full_ft_parity import API_KEY, load, max_logprob_gap, perturbed, sample

    from vfrl.trainer.trainer import wait_for_server
    from vfrl.trainer.weight_sync import FullWeightSync

    port = free_port()
    cfg = write_config(tmp / "config.toml", model_dir, port=port, output_dir=tmp, use_lora=False)
    env = {**os.environ, "VFRL_API_KEY": API_KEY, "CUDA_VISIBLE_DEVICES": ""}
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen([str(BIN / "vf-vllm"), "@", str(cfg)], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        t0 = time.time()
        wait_for_server(f"http://127.0.0.1:{port}/v1", timeout=600)
        start_s = time.time() - t0
        (tmp / "weights").mkdir()
        sync = FullWeightSync(f"http://127.0.0.1:{port}/v1", API_KEY, tmp / "weights", served_name=str(model_dir))
        model = load(model_dir)
        base_gap = max_logprob_gap(model, sample(f"http://127.0.0.1:{port}/v1", str(model_dir), n=4))
        rows = []
        for version in range(1, pushes + 1):
            perturbed(model, seed=version)
            _, total = sync.push(model, version)
            rows.append({**{k: v for k, v in sync.last.items() if k != "repacked"}, "total_s": total})
        gap = max_logprob_gap(model, sample(f"http://127.0.0.1:{port}/v1", str(model_dir), n=4))
        files = list((tmp / "weights" / f"step-{pushes}").glob("*.safetensors"))
        return {
            "params_M": sum(p.numel() for p in model.parameters()) / 1e6,
            "safetensors_MB": sum(f.stat().st_size for f in files) / 1e6,
            "server_start_s": start_s,
            **{k: statistics.median(r[k] for r in rows) for k in rows[0]},
            "max_logprob_gap_before_sync": base_gap,  # the served start-up weights: kernels alone
            "max_logprob_gap": gap,
            "repacked": sync.last["repacked"],
        }
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
        log.close()


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
