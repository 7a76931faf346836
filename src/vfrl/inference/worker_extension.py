"""Full-weight reload inside the vLLM workers (`--worker-extension-cls`, reached through /collective_rpc).

vLLM mixes this class into its worker, so `self.model_runner` is the running model runner. The
trainer writes safetensors to a directory and calls `vfrl_reload_weights(dir, version)`.

Why not just `model_runner.reload_weights`: on the CPU build, linear and embedding layers compute
through a prepacked copy of their weight (`layer.cpu_linear`, a oneDNN/sgl handle built by
`dispatch_cpu_unquantized_gemm` in `process_weights_after_loading`). vLLM's in-place reload rebuilds
that handle for every layer it loads weights into, but a tied `lm_head` loads nothing (the
checkpoint has no `lm_head.weight`; it shares `embed_tokens.weight`), so it keeps computing logits
with the handle packed from the *old* embedding. After the reload we therefore re-run
`process_weights_after_loading` for every layer whose packed handle is built from a weight that is
still attached to the layer (embeddings and heads, and with the in-place reload below every linear layer).
`vfrl_stale_packed_layers` is the check: it runs each handle and the plain `F.linear` on the
layer's current weight and names the layers that disagree.

On the CPU build the reload is our own, in place (`reloads_in_place`): at start-up `keep_weights_when_packing`
makes vLLM keep each linear layer's weight beside its packed handle (they are dropped otherwise), so a push
is the model's own `load_weights` into those weights plus a repack of every handle. vLLM's layerwise reload
(moving every layer to the meta device and back, wrapping each weight loader) is Python with a fixed cost per
layer, most of a push for a small model. The price is the linear weights held twice in host memory (plain and
packed). Quantized or MoE models, and any layer packed without its weight, go through vLLM's reload.

Where the in-place reload applies to a small model run eagerly, the first push also decides whether later ones
can be staged (`staged_copy`, vfrl.inference.staged_weights): `vfrl_stage_weights(dir, version)` loads and packs
them into a second copy in a thread while vLLM still samples, and the reload of the same directory and version
swaps that copy in.

On GPU there is no packing: `process_weights_after_loading` is a no-op for unquantized layers and
the re-dispatch step does nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import torch

from vfrl.inference.staged_weights import LoadPlan, StagedWeights, probe_input, record_load, stageable
from vllm.logger import init_logger
from vllm.platforms import current_platform

logger = init_logger("vllm.vfrl_worker_extension")  # under "vllm": vLLM configures that logger tree

def safetensors_weights(directory: str) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor in every *.safetensors file of `directory`, one at a time. The files are
    found (or their absence raised) here, before vLLM's reload starts: once started, it has moved every layer
    to the meta device, and a reload that fails then leaves a model that cannot serve."""
    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {directory}")
    return _tensors(files)


def _tensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def packed_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """Layers that compute through a CPU-packed copy of a weight they still hold (CPU build only)."""
    out = []
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if (
            hasattr(module, "cpu_linear")
            and hasattr(module, "quant_method")
            and isinstance(weight, torch.Tensor)
            and weight.ndim == 2
            and weight.numel() > 0
        ):
            out.append((name, module))
    return out


def keep_weights_when_packing() -> None:
    """CPU build: vLLM packs each linear layer's weight for its CPU kernels and then drops the weight; make it keep
    the weight (so a push can load into it in place). Runs when vLLM imports this module, in the engine's process,
    before the model is loaded (the worker extension is resolved when the worker is created)."""
    from vllm.model_executor.layers import utils

    dispatch = utils.dispatch_cpu_unquantized_gemm
    if getattr(dispatch, "vfrl_keeps_weights", False):
        return

    def dispatch_keeping_the_weight(layer: torch.nn.Module, remove_weight: bool) -> None:
        dispatch(layer, remove_weight=False)

    dispatch_keeping_the_weight.vfrl_keeps_weights = True
    utils.dispatch_cpu_unquantized_gemm = dispatch_keeping_the_weight  # read at call time by vLLM's layers


def reloads_in_place(model: torch.nn.Module, vllm_config, packed: list[tuple[str, torch.nn.Module]]) -> bool:
    """Can a push load straight into `model`'s weights? The CPU build, no quantization, no fused MoE, and every
    layer that computes through a packed handle one of `packed` (`packed_layers(model)`, rebuilt after the
    load): it kept its weight (see keep_weights_when_packing)."""
    if not current_platform.is_cpu() or vllm_config.model_config.quantization is not None:
        return False
    modules = list(model.modules())
    if any("MoE" in type(module).__name__ for module in modules):
        return False
    return sum(hasattr(module, "cpu_linear") for module in modules) == len(packed)


def staged_copy(model, vllm_config, plan: LoadPlan | None, packed: list, directory: str) -> StagedWeights | None:
    """The second copy later pushes load into, once it is shown to load what the in-place push loaded; or
    None, with the reason in the log."""
    why = "its in-place load could not be recorded" if plan is None else stageable(model, vllm_config)
    staged = None
    if why is None:
        staged = StagedWeights(model, plan, packed)
        try:
            staged.load(directory, safetensors_weights)
            differ = staged.matches()
        except Exception as err:
            differ = [repr(err)]
        if differ:
            why, staged = f"a replay of its load differs from vLLM's in {differ[:5]}", None
    if staged is None:
        logger.info("vfrl: pushes load while generation is paused: %s", why)
    else:
        logger.info("vfrl: pushes load beside generation (vfrl.inference.staged_weights)")
    return staged


class WeightReloadExtension:
    """Methods callable as POST /collective_rpc {"method": "vfrl_...", "args": [...]} (string args only)."""

    vfrl_version: int = -1
    vfrl_staged: StagedWeights | None = None  # set by the first in-place push where staging applies
    vfrl_stage_decided: bool = False

    def vfrl_stage_weights(self, directory: str, version: str) -> dict:
        """Start loading `directory` (policy `version`) beside generation, for its reload to swap in
        (staged_weights.py). {"staged": False} where pushes load in place only, None before the first push, which
        decides that."""
        if self.vfrl_staged is None:
            return {"staged": False if self.vfrl_stage_decided else None}
        self.vfrl_staged.start(directory, int(version), safetensors_weights)
        return {"staged": True}

    def vfrl_reload_weights(self, directory: str, version: str) -> dict:
        """Serve the tensors of `directory` as policy `version`: swapped in where they were staged, else loaded
        into the served model in place; returns what was done."""
        t0 = time.perf_counter()
        model = self.model_runner.get_model()
        taken = self.vfrl_staged.take(directory, int(version)) if self.vfrl_staged is not None else False
        if taken is True:
            self.vfrl_version = int(version)
            staged = self.vfrl_staged.times
            logger.info("vfrl: loaded weights version %s from %s (staged: loaded in %.1f ms and packed in %.1f ms "
                        "beside generation)", version, directory, 1e3 * staged["load_s"], 1e3 * staged["repack_s"])
            return {"version": self.vfrl_version, "load_s": time.perf_counter() - t0, "repack_s": 0.0,
                    "repacked": [name for name, _, _ in self.vfrl_staged.packed], "in_place": True, "staged": staged}
        if taken is not False:
            logger.warning("vfrl: the staged load of weights version %s failed (%r); loading them in place",
                           version, taken)
        weights = safetensors_weights(directory)
        packed = packed_layers(model)
        in_place = reloads_in_place(model, self.vllm_config, packed)
        plan = None
        if in_place:
            from vllm.config import set_current_vllm_config

            with set_current_vllm_config(self.vllm_config), torch.no_grad():
                if self.vfrl_stage_decided:
                    loaded = model.load_weights(weights)
                else:
                    loaded, plan = record_load(model, weights)
            if missing := {name for name, _ in model.named_parameters()} - set(loaded or ()):
                logger.warning("vfrl: weights version %s has no tensors for %s; they keep their old values",
                               version, sorted(missing))
        else:
            # the Worker's own reload, under vLLM's current config, which quantized and MoE layers read on a GPU (vLLM
            # 0.29+'s Worker sets it itself; 0.25's does not: vllm_version.py)
            from vllm.config import set_current_vllm_config

            with set_current_vllm_config(self.vllm_config):
                self.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
        t_load = time.perf_counter()
        with torch.no_grad():
            for _, module in packed:
                module.quant_method.process_weights_after_loading(module)
        if torch.cuda.is_available():  # the reload's one-layer scratch block, kept by the allocator otherwise
            torch.cuda.empty_cache()
        self.vfrl_version = int(version)
        logger.info("vfrl: loaded weights version %s from %s (%s, %d packed layers rebuilt)", version, directory,
                    "in place" if in_place else "vLLM's reload", len(packed))
        result = {"version": self.vfrl_version, "load_s": t_load - t0, "repack_s": time.perf_counter() - t_load,
                  "repacked": [name for name, _ in packed], "in_place": in_place, "staged": None}
        if not self.vfrl_stage_decided:
            self.vfrl_stage_decided = True
            self.vfrl_staged = staged_copy(model, self.vllm_config, plan, packed, directory) if in_place else None
        return result

    def vfrl_loaded_version(self) -> int:
        return self.vfrl_version

    @torch.no_grad()
    def vfrl_stale_packed_layers(self, tolerance: str = "1e-3") -> dict:
        """Layers whose packed handle no longer computes `x @ weight.T` for their current weight."""
        model = self.model_runner.get_model()
        stale, packed = {}, packed_layers(model)
        for name, module in packed:
            w = module.weight
            x = probe_input(w)
            bias = getattr(module, "bias", None)
            diff = (module.cpu_linear(x, w, bias) - torch.nn.functional.linear(x, w, bias)).abs().max().item()
            if diff > float(tolerance):
                stale[name] = diff
        return {"checked": len(packed), "stale": stale}


if current_platform.is_cpu():
    keep_weights_when_packing()
