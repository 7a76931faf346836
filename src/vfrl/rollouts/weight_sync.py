"""Push the trained policy into the running vLLM server: the WeightSync interface and its two kinds.

    AdapterSync      use_lora = true: each version is a new LoRA adapter with its own name
    FullWeightSync   use_lora = false: every weight is reloaded in place under the one served name
    MergedLoraSync   use_lora = true, lora_sync = "merged": the base weights with the adapter merged in,
                     reloaded in place like FullWeightSync's (vLLM serves no LoRA)

All write what vLLM reads with run_dir.atomic_directory, so a crash never leaves a half-written
directory that looks complete. The full-weight kinds keep the last `keep` versions and write each new one
over the files of the oldest (`recycled`): a LoRA push then rewrites its files in place (push_files.py).
"""

from __future__ import annotations

import shutil
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

import httpx

from vfrl.config import RLConfig
from vfrl.run_dir import RunDir, atomic_directory
from vfrl.inference.endpoints import server_root
from vfrl.inference.lora_ranks import adapters_served
from vfrl.inference.reload_route import RELOAD_PATH, STAGE_PATH
from vfrl.rollouts.push_files import merged_state_dict, save_adapter, tied_once
from vfrl.rollouts.safetensors_rewrite import save_file


class WeightSync(ABC):
    """What the training loop needs of a sync, whatever it pushes."""

    # True when vLLM serves every version under one name: the name cannot say which policy sampled a
    # request, so vLLM loads a pushed version only once the generation in flight has finished (Pipeline.push's
    # `after`; no batch mixes two). The save does not wait for it.
    drain_before_push: ClassVar[bool] = False

    def __init__(self, base_url: str | None, api_key: str, timeout: float):
        """`base_url` None: not known until the server listens (inference.port = 0); `serve_at` gives it."""
        self.http = httpx.Client(base_url=server_root(base_url) if base_url else "",
                                 headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout)

    def serve_at(self, base_url: str) -> None:
        self.http.base_url = server_root(base_url)

    @abstractmethod
    def save(self, model, version: int) -> Path:
        """Write policy `version` (the trainer's `model`) where vLLM can read it. Torch only, no server call."""

    @abstractmethod
    def name_of(self, version: int) -> str:
        """The model name vLLM serves policy `version` under, once loaded."""

    @abstractmethod
    def load(self, path: Path, version: int) -> str:
        """Make vLLM serve what `save` wrote. HTTP only, no torch: the trainer runs it in a thread it can
        abandon when the server hangs, and a thread abandoned inside torch aborts the interpreter at exit."""

    def stage(self, path: Path, version: int) -> None:
        """Let vLLM start loading what `save` wrote while it still samples from the policy before; `load` then
        makes it served. HTTP only, like `load`; a no-op where there is nothing to stage."""

    def save_aside(self, model, version: int) -> None:
        """Write what the run keeps of policy `version` that vLLM does not read. Torch only: the trainer runs it
        while vLLM loads (Pipeline.push), so it costs the step nothing when it is the shorter of the two."""

    def push(self, model, version: int) -> tuple[str, float]:
        """save, stage, then load and save_aside. Returns (the model name to request, seconds)."""
        t0 = time.perf_counter()
        path = self.save(model, version)
        self.stage(path, version)
        name = self.load(path, version)
        self.save_aside(model, version)
        return name, time.perf_counter() - t0

    def served_models(self) -> list[str]:
        return [m["id"] for m in self.http.get("/v1/models").json()["data"]]


class AdapterSync(WeightSync):
    """Each policy version gets its own adapter name (`policy-<version>`): requests name the version they
    sample from, the prefix cache never mixes versions, and vLLM never re-reads an adapter in place.

    A server that outlives runs (inference.base_url) may still serve `policy-N` adapters of an earlier run,
    or of this run before a resume; vLLM refuses to load a name it has, so the first load unloads them.
    Runs of a sweep share one server: each serves its adapters under its own `run` name (`<run>/policy-N`), and
    loads and unloads only those."""

    PREFIX = "policy-"

    def __init__(self, base_url: str | None, api_key: str, adapters_dir: Path, keep: int = 2, timeout: float = 120.0,
                 run: str | None = None):
        super().__init__(base_url, api_key, timeout)
        self.adapters_dir = adapters_dir
        self.keep = keep
        self.served_prefix = f"{run}/{self.PREFIX}" if run else self.PREFIX
        self.loaded: list[int] | None = None  # versions served; None until the first load cleared earlier runs'

    @classmethod
    def name(cls, version: int) -> str:
        """The adapter's folder under adapters/ (and its served name outside a sweep)."""
        return f"{cls.PREFIX}{version}"

    def save(self, model, version: int) -> Path:
        return write_adapter(model, self.adapters_dir, version)

    def name_of(self, version: int) -> str:
        return f"{self.served_prefix}{version}"

    def load(self, path: Path, version: int) -> str:
        """Load version `version`; unload versions older than the last `keep`."""
        name = self.name_of(version)
        if self.loaded is None:
            for old in (m for m in self.served_models() if m.startswith(self.served_prefix)):
                self.http.post("/v1/unload_lora_adapter", json={"lora_name": old})
            self.loaded = []
        r = self.http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path.resolve())})
        if r.status_code != 200:
            unseen = ("; a vLLM server on another machine must read the trainer's run directory at the same path "
                      "(shared storage, docs/scaling.md)" if "No adapter found" in r.text else "")
            raise RuntimeError(f"vLLM refused adapter {name}: {r.status_code} {r.text}{unseen}")
        self.loaded = [v for v in self.loaded if v != version] + [version]  # pushed again: to a server started again
        while len(self.loaded) > self.keep:
            old = self.loaded.pop(0)
            self.http.post("/v1/unload_lora_adapter", json={"lora_name": self.name_of(old)})
            shutil.rmtree(self.adapters_dir / self.name(old), ignore_errors=True)
        return name


def write_adapter(model, adapters_dir: Path, version: int, reuse: Path | None = None) -> Path:
    """The trained adapter of policy `version`, written atomically to adapters_dir/policy-<version>, over
    the files of `reuse` (an older adapter's directory) where it can."""
    final = adapters_dir / AdapterSync.name(version)
    with atomic_directory(final, reuse) as tmp:
        save_adapter(model, tmp)
    return final


def recycled(kept: list[Path], keep: int) -> Path | None:
    """The oldest of the directories `kept` (oldest first), taken off the list when `keep` are kept already,
    so that the next write reuses its files instead of allocating new ones (safetensors_rewrite.py)."""
    return kept.pop(0) if len(kept) >= keep else None


class FullWeightSync(WeightSync):
    """use_lora = false: write every weight as safetensors and reload them into the running vLLM in place.

    One push, version N:
      1. `save_pretrained` into `weights/.step-N.tmp` (the oldest kept `weights/step-M`, renamed), renamed to
         `weights/step-N` (atomic; last `keep` kept);
      2. POST /vfrl/stage_weights (the CPU build, small models run eagerly: vfrl.inference.staged_weights),
         while the batch before is still sampled: the workers load the files into a second copy of the
         weights and pack it, in a thread; a server that cannot stage says so and step 3 loads in place;
      3. POST /vfrl/reload_weights (vfrl.inference.reload_route), which in the server: pauses (vLLM stops
         admitting requests and lets the running ones finish on the old weights, so no request ever mixes
         two policies); calls the workers' `vfrl_reload_weights(dir, N)` (vfrl.inference.worker_extension:
         the files loaded in place, the CPU build's packed GEMM handles rebuilt; each returns N); resets the
         prefix cache, if vLLM keeps one (no KV block computed by the old weights is reused); resumes.
    vLLM serves one model name throughout, so the name cannot carry the version: the trainer's
    counter does (`policy_version` per batch). It holds because the trainer loads a version only once the
    batch in flight has finished (`drain_before_push`), and the pause covers any other request still running.
    """

    drain_before_push = True

    def __init__(self, base_url: str, api_key: str, weights_dir: Path, served_name: str, keep: int = 2,
                 timeout: float = 600.0):
        super().__init__(base_url, api_key, timeout)
        self.weights_dir = weights_dir
        self.served_name = served_name
        self.keep = keep
        self.saved: list[Path] = []
        self.last: dict = {}  # timings and what the workers reported for the latest push
        self.stages = True  # until the server says it cannot (no staging there, or a vf-vllm without the route)

    def save(self, model, version: int) -> Path:
        t0 = time.perf_counter()
        final = self.weights_dir / f"step-{version}"
        # the oldest kept version was loaded before this push began (Pipeline.push awaits each load)
        with atomic_directory(final, recycled(self.saved, self.keep)) as tmp:
            self.write(model, tmp)
        self.saved.append(final)
        self.last = {"save_s": time.perf_counter() - t0}
        return final

    def write(self, model, directory: Path) -> None:
        model.save_pretrained(directory, safe_serialization=True)

    def name_of(self, version: int) -> str:
        return self.served_name

    def _post(self, path: str, **kw) -> httpx.Response:
        r = self.http.post(path, **kw)
        if r.status_code != 200:
            raise RuntimeError(f"vLLM {path} failed: {r.status_code} {r.text[:500]}"
                               + (" (is it a vf-vllm of this vfrl, serving full weights: use_lora = false or "
                                  'lora_sync = "merged"?)' if r.status_code == 404 else ""))
        return r

    def stage(self, path: Path, version: int) -> None:
        if not self.stages:
            return
        r = self.http.post(STAGE_PATH, json={"directory": str(path.resolve()), "version": version})
        # the reload loads in place whatever was not staged, so a server that cannot stage is asked no more
        # (each worker's "staged": None until its first push has decided)
        self.stages = r.status_code == 200 and all(w.get("staged") is not False for w in r.json()["results"])

    def load(self, path: Path, version: int) -> str:
        """Reload the weights `save` wrote for version `version`; the served name stays the same."""
        t_saved = time.perf_counter()
        # no timeout of vLLM's own on the reload (the HTTP client's is the limit): under the multiprocess executor
        # (tensor or data parallel) a timed-out call leaves the workers reloading and their late replies queued,
        # where the next step would read them. A reload that failed leaves the served model half loaded, so
        # vLLM stays paused: generation must not go on with it (the trainer stops on this error)
        r = self._post(RELOAD_PATH, json={"directory": str(path.resolve()), "version": version})
        workers = r.json()["results"]
        self.last |= {"reload_s": time.perf_counter() - t_saved, "load_s": workers[0]["load_s"],
                      "repack_s": workers[0]["repack_s"], "repacked": workers[0]["repacked"],
                      "in_place": workers[0].get("in_place"), "staged": workers[0].get("staged")}
        return self.served_name

    def loaded_version(self) -> int:
        """The version the vLLM workers report as loaded (-1 before the first push)."""
        return int(self._post("/collective_rpc", json={"method": "vfrl_loaded_version"}).json()["results"][0])


class MergedLoraSync(FullWeightSync):
    """A LoRA policy served as full weights: W + scale * B @ A for every adapted layer, written as the base
    model's checkpoint and reloaded in place (FullWeightSync.load). vLLM then runs the plain model: its
    CPU build applies runtime LoRA with unfused torch ops, about half the quick start's generation time.
    The trainer's own weights stay unmerged: merging in place and back would leave rounding in the frozen
    base weights at every step. The adapter itself is written too (save_aside, while vLLM reloads), to
    adapters/policy-N as AdapterSync leaves it (last `keep` kept): what a LoRA run hands its user does not
    depend on how vLLM was fed."""

    def __init__(self, base_url: str, api_key: str, weights_dir: Path, adapters_dir: Path, served_name: str,
                 keep: int = 2, timeout: float = 600.0):
        super().__init__(base_url, api_key, weights_dir, served_name, keep, timeout)
        self.adapters_dir = adapters_dir
        self.adapters: list[Path] = []

    def write(self, model, directory: Path) -> None:
        """One safetensors file, all vLLM's reload reads (it keeps the served model's config), written over the
        recycled directory's file in place (safetensors_rewrite.py): save_pretrained would also write the config,
        the generation config and shards, and a new file costs more than an overwrite."""
        directory.mkdir(parents=True, exist_ok=True)  # atomic_directory's tmp, made by its writer
        save_file(tied_once(merged_state_dict(model)), directory / "model.safetensors")

    def save_aside(self, model, version: int) -> None:
        self.adapters.append(write_adapter(model, self.adapters_dir, version, recycled(self.adapters, self.keep)))


def weight_sync_for(config: RLConfig, paths: RunDir, base_url: str | None, api_key: str,
                    run: str | None = None) -> WeightSync:
    """The run's sync: adapters under <run_dir>/adapters (use_lora), else full weights under <run_dir>/weights
    (use_lora = false, or LoRA merged into them: lora_sync = "merged"). `run`: the run's name on a server it shares
    with other runs (a sweep's), which its adapters are served under."""
    if config.serves_adapters:
        paths.adapters.mkdir(parents=True, exist_ok=True)
        return AdapterSync(base_url, api_key, paths.adapters, keep=adapters_served(config.args.loop.num_batches_ahead),
                           run=run)
    paths.weights.mkdir(parents=True, exist_ok=True)
    if config.args.lora.use_lora:
        paths.adapters.mkdir(parents=True, exist_ok=True)
        return MergedLoraSync(base_url, api_key, paths.weights, paths.adapters, served_name=config.model)
    return FullWeightSync(base_url, api_key, paths.weights, served_name=config.model)
