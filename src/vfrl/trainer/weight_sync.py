"""Push the trained LoRA adapter into the running vLLM server.

Each policy version gets its own adapter name (`policy-<version>`): requests name the version they
sample from, the prefix cache never mixes versions, and vLLM never re-reads an adapter in place.
The adapter directory is written under a temporary name and renamed, so a crash never leaves a
half-written adapter that looks complete.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx


class AdapterSync:
    def __init__(self, base_url: str, api_key: str, adapters_dir: Path, timeout: float = 120.0):
        self.http = httpx.Client(base_url=base_url.rstrip("/").removesuffix("/v1"), headers={"Authorization": f"Bearer {api_key}"},
                                 timeout=timeout)
        self.adapters_dir = adapters_dir
        self.loaded: list[str] = []

    @staticmethod
    def name(version: int) -> str:
        return f"policy-{version}"

    def save(self, model, version: int) -> Path:
        final = self.adapters_dir / self.name(version)
        tmp = self.adapters_dir / f".{self.name(version)}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return final

    def push(self, model, version: int, keep: int = 2) -> tuple[str, float]:
        """Save + load version `version`; unload versions older than the last `keep`. Returns (name, seconds)."""
        t0 = time.perf_counter()
        path = self.save(model, version)
        name = self.name(version)
        r = self.http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path.resolve())})
        if r.status_code != 200:
            raise RuntimeError(f"vLLM refused adapter {name}: {r.status_code} {r.text}")
        self.loaded.append(name)
        while len(self.loaded) > keep:
            old = self.loaded.pop(0)
            self.http.post("/v1/unload_lora_adapter", json={"lora_name": old})
            shutil.rmtree(self.adapters_dir / old, ignore_errors=True)
        return name, time.perf_counter() - t0

    def served_models(self) -> list[str]:
        return [m["id"] for m in self.http.get("/v1/models").json()["data"]]
