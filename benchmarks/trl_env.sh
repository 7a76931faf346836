#!/usr/bin/env bash
# Makes the separate venv that benchmarks/trl_grpo.py runs in (TRL must not share vfrl's .venv: its vLLM
# extra pins another vLLM, and the comparison should not change what vfrl runs on). Prints the venv's python.
# Idempotent: a venv whose stamp is newer than this script is reused.
#
#   bash benchmarks/trl_env.sh            # -> .bench/trl-venv (override with TRL_VENV=...)
#
# CPU: torch, transformers, peft and accelerate at the versions vfrl's .venv has (same kernels on both sides),
# TRL 1.16 with its default generation path. The CPU torch (2.13.0+cpu) is not on PyPI: uv takes it from the
# machine's wheel directory (pip's find-links, /opt/wheels here) as install.sh's pip does.
# GPU (nvidia-smi sees one): trl[vllm], whose vLLM (<= 0.31) brings its own CUDA torch. Not yet run on a GPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${TRL_VENV:-.bench/trl-venv}
MAIN=${VFRL_VENV:-.venv}
stamp="$VENV/.trl-installed"
if [ -f "$stamp" ] && [ "$stamp" -nt benchmarks/trl_env.sh ]; then echo "$VENV/bin/python"; exit 0; fi

UV=$(command -v uv || true)
[ -n "$UV" ] || [ ! -x "$MAIN/bin/uv" ] || UV=$MAIN/bin/uv
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
# The versions vfrl runs with, so both sides use the same torch/transformers/peft/accelerate.
pins=(transformers==5.19.0 peft==0.21.2 accelerate==1.15.0)
torch_pin=torch==2.13.0+cpu
if [ -x "$MAIN/bin/python" ]; then
  mapfile -t pins < <("$MAIN/bin/python" - <<'EOF'
import importlib.metadata as m
for p in ("transformers", "peft", "accelerate"):
    print(f"{p}=={m.version(p)}")
EOF
)
  torch_pin=torch==$("$MAIN/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  reqs=("trl[vllm,peft]==1.16.*")   # vLLM pins the CUDA torch it was built for
else
  reqs=("trl[peft]==1.16.*" "$torch_pin" "${pins[@]}")
fi
find_links=()
for d in $(printf "%s\n" ${PIP_FIND_LINKS:-} /opt/wheels | sort -u); do
  if [ -d "$d" ]; then find_links+=(--find-links "$d"); fi
done

echo "benchmarks/trl_env.sh: installing ${reqs[*]} into $VENV" >&2
if [ -n "$UV" ]; then
  [ -x "$VENV/bin/python" ] || "$UV" venv -q --python "$PY" "$VENV" >&2
  "$UV" pip install -q --python "$VENV/bin/python" "${find_links[@]}" "${reqs[@]}" >&2
else
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${reqs[@]}" >&2
fi
"$VENV/bin/python" -c "import trl, peft, torch" >&2
touch "$stamp"
echo "$VENV/bin/python"
