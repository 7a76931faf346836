"""The next policy loaded and packed while vLLM still samples from the one before (CPU build).

A full-weight push pauses vLLM while the worker loads every tensor into the served model and rebuilds each
linear layer's packed CPU handle (worker_extension.py): most of what the next batch's generation waits for
between two batches (docs/benchmarks.md). The trainer writes a policy's file while the batch before it
is still being sampled, so the worker can do that work then: into a second copy of the weights and handles,
in a thread free to run on a core the engine core does not use. The paused reload then only swaps the two
copies (`StagedWeights.take`): each parameter's storage and each layer's packed handle, pointer moves.

How the second copy is loaded: a model's `load_weights` is Python that maps the checkpoint's names onto
parameters (q, k and v into one qkv_proj, say) and calls each parameter's `weight_loader`. The first push, in
place, records those calls (`record_load`); a staged load replays them with the new file's tensors into the
copy. The copy is used only if replaying the first push's file into it gives every parameter, and every packed
handle, what the in-place load gave the served model (`StagedWeights.matches`, checked once), and only if
every loader call got a tensor exactly as the file yielded it.

Where it applies: the CPU build's in-place reload, a model run eagerly (its weights read at each forward, not
captured in a compiled graph), weights of at most STAGE_MAX_BYTES (the copy doubles them in host memory).
Anything else reloads in place, paused.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable, Iterable

import torch

STAGE_MAX_BYTES = 1 << 30


class LoadPlan:
    """What `model.load_weights` did with each checkpoint tensor: (parameter name, weight_loader, extra args)
    per call, in order."""

    def __init__(self, calls: dict[str, list[tuple[str, Callable, tuple, dict]]]):
        self.calls = calls

    def replay(self, params: dict[str, torch.nn.Parameter], weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load `weights` into `params` (a copy of the model's, by name) as the recorded load did."""
        seen = set()
        for name, tensor in weights:
            if name not in self.calls:
                raise KeyError(f"{name} was not in the checkpoint the load plan was recorded from")
            seen.add(name)
            for param_name, loader, args, kwargs in self.calls[name]:
                loader(params[param_name], tensor, *args, **kwargs)
        if missing := self.calls.keys() - seen:
            raise KeyError(f"no tensors for {sorted(missing)}, which the recorded checkpoint had")


def record_load(model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> tuple[set, LoadPlan | None]:
    """`model.load_weights(weights)`, recording each parameter's weight_loader call. Returns what load_weights
    returns and the plan, or None when a call cannot be replayed (a loader given another parameter than its
    own, or a tensor the model transformed on the way)."""
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader

    params = dict(model.named_parameters())
    calls: dict[str, list] = {}
    current: list = [None, None]  # the checkpoint tensor being loaded: name, tensor
    replayable = True

    def recording(name: str, param: torch.nn.Parameter, loader: Callable | None) -> Callable:
        def load(target, tensor, *args, **kwargs):
            nonlocal replayable
            if loader is None:  # a parameter of no loader of its own: what `getattr(param, "weight_loader",
                args, kwargs = (), {}  # default_weight_loader)` calls, and `hasattr`'s other branch would too
            call = (name, loader or default_weight_loader, args, kwargs)
            if target is param and same_view(tensor, current[1]):
                calls[current[0]].append(call)
            else:
                replayable = False
            return call[1](target, tensor, *args, **kwargs)
        return load

    def tracked():
        for name, tensor in weights:
            current[:] = name, tensor
            calls.setdefault(name, [])
            yield name, tensor

    own = {name: getattr(p, "weight_loader", None) for name, p in params.items()}  # vLLM's own, or none
    for name, p in params.items():
        p.weight_loader = recording(name, p, own[name])
    try:
        loaded = model.load_weights(tracked())
    finally:
        for name, p in params.items():
            if own[name] is None:
                del p.weight_loader
            else:
                p.weight_loader = own[name]
    return loaded, (LoadPlan(calls) if replayable and (set(loaded or ()) <= params.keys()) else None)


def same_view(a, b) -> bool:
    return a is b or (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.data_ptr() == b.data_ptr()
                      and a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype)


class StagedWeights:
    """A second copy of the served model's parameters and packed handles, loaded in a thread (`start`) and
    swapped in by the paused reload (`take`). After a swap the copy holds the policy before, the next one's
    buffers."""

    def __init__(self, model: torch.nn.Module, plan: LoadPlan, packed: list[tuple[str, torch.nn.Module]]):
        self.plan = plan
        self.live = dict(model.named_parameters())
        self.copy = {name: twin(p) for name, p in self.live.items()}
        by_id = {id(p): self.copy[name] for name, p in self.live.items()}
        self.packed = [(name, module, holder(module, by_id)) for name, module in packed]
        self.key: tuple[str, int] | None = None
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.times: dict = {}

    def start(self, directory: str, version: int, weights: Callable[[str], Iterable]) -> None:
        """Load `directory` into the copy in a thread; `weights(directory)` yields its tensors."""
        self.wait()
        self.key, self.error, self.times = (directory, version), None, {}
        self.thread = threading.Thread(target=self._load, args=(directory, weights), name="vfrl-stage", daemon=True)
        self.thread.start()

    def _load(self, directory: str, weights: Callable[[str], Iterable]) -> None:
        free_of_the_engine_core()
        try:
            self.load(directory, weights)
        except BaseException as err:  # taken by `take`: the reload then loads in place
            self.error = err

    def load(self, directory: str, weights: Callable[[str], Iterable]) -> None:
        t0 = time.perf_counter()
        with torch.no_grad():
            self.plan.replay(self.copy, weights(directory))
            t1 = time.perf_counter()
            for _, _, held in self.packed:
                held.quant_method.process_weights_after_loading(held)
        self.times = {"load_s": t1 - t0, "repack_s": time.perf_counter() - t1}

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None

    def take(self, directory: str, version: int) -> BaseException | None | bool:
        """Serve what `start(directory, version)` loaded: True once swapped, False when nothing was staged for
        it, or the staged load's error (nothing swapped)."""
        if self.key != (directory, version):
            return False
        self.wait()
        self.key = None
        if self.error is not None:
            return self.error
        for name, live in self.live.items():
            live.data, self.copy[name].data = self.copy[name].data, live.data
        for _, module, held in self.packed:
            module.cpu_linear, held.cpu_linear = held.cpu_linear, module.cpu_linear
        return True

    @torch.no_grad()
    def matches(self) -> list[str]:
        """What in the copy differs from the served model (parameters, then packed handles run on one input)."""
        differ = [name for name, p in self.live.items() if not torch.equal(p, self.copy[name])]
        for name, module, held in self.packed:
            x = probe_input(module.weight)
            served = module.cpu_linear(x, module.weight, getattr(module, "bias", None))
            if not torch.equal(served, held.cpu_linear(x, held.weight, getattr(held, "bias", None))):
                differ.append(f"{name} (packed)")
        return differ


def probe_input(weight: torch.Tensor) -> torch.Tensor:
    """The fixed input a packed layer's handle is checked on: 4 rows for `weight`'s inputs, seeded."""
    return torch.randn(4, weight.shape[1], dtype=weight.dtype, generator=torch.Generator().manual_seed(0))


def twin(p: torch.nn.Parameter) -> torch.nn.Parameter:
    """A parameter of `p`'s class (vLLM's own load their shards: `load_qkv_weight`, ...) with a copy of its values
    and its attributes (weight_loader, output_dim, ...)."""
    out = torch.Tensor._make_subclass(type(p), p.detach().clone(), False)
    out.__dict__.update(p.__dict__)
    return out


def holder(module: torch.nn.Module, copies: dict[int, torch.nn.Parameter]) -> torch.nn.Module:
    """`module` with the copy's parameters in place of its own, to pack them as vLLM packs the module's
    (`process_weights_after_loading` sets `cpu_linear` on what it is given); shares nothing it changes."""
    held = copy.copy(module)  # a shallow copy: its own __dict__, so its own cpu_linear
    held._parameters = {name: None if p is None else copies[id(p)] for name, p in module._parameters.items()}
    return held


def stageable(model: torch.nn.Module, vllm_config) -> str | None:
    """Why `model`'s pushes cannot be staged, or None."""
    if not vllm_config.model_config.enforce_eager:
        return "vLLM compiles the model (enforce_eager = false)"
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    if size > STAGE_MAX_BYTES:
        return f"its weights ({size / 2**30:.1f} GiB) are over {STAGE_MAX_BYTES / 2**30:.0f} GiB"
    return None


def free_of_the_engine_core() -> None:
    """Let this thread run on every core the API server may use (its parent: once vLLM serves, vf-vllm lets it
    onto the trainer's cores too, cpu_cores.py), not only on the engine core's."""
    try:
        os.sched_setaffinity(0, os.sched_getaffinity(os.getppid()))
    except (AttributeError, OSError):
        pass
