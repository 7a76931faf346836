"""A GPU that vLLM and the trainer share: the trainer loads its model only once vLLM is up.

vLLM sizes its KV cache by how much the GPU's free memory drops while it starts, whoever allocated it: weights
the trainer loaded meanwhile would count as vLLM's and could leave it no cache. The launch plan
(launcher/plan.py) sets this variable in the trainer pane when the two share a GPU; vf-train (trainer/cli.py)
then waits for vLLM's /health before it loads anything. How the GPU's memory is split: launcher/memory.py.
"""

TRAINER_LOADS_AFTER_VLLM_ENV = "VFRL_TRAINER_LOADS_AFTER_VLLM"
