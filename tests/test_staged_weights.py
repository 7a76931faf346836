"""vfrl.inference.staged_weights on a stand-in model shaped like vLLM's: a fused qkv weight loaded from three
checkpoint tensors by a weight_loader with shard ids, a norm loaded by vLLM's default loader, and linear
layers that compute through a handle packed from their weight (as the CPU build's `cpu_linear`). The real
staged push, into a real vf-vllm, is test_full_ft_parity.py's (the second push of a run is staged, and its
logprobs match the trainer's)."""

import threading

import pytest
import torch

from vfrl.inference.staged_weights import StagedWeights, record_load, stageable


class Packing:
    """What vLLM's quant_method does on the CPU build: pack the layer's weight into a handle (here a copy)."""

    def process_weights_after_loading(self, layer):
        packed = layer.weight.detach().clone()
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, packed, bias)


class QKV(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(6, 4), requires_grad=False)
        self.weight.weight_loader = self.weight_loader
        self.quant_method = Packing()

    def weight_loader(self, param, loaded, shard):
        start = {"q": 0, "k": 2, "v": 4}[shard]
        param.data[start:start + 2].copy_(loaded)


class Model(torch.nn.Module):
    def __init__(self, transform=False, asks_for_a_loader=False):
        super().__init__()
        self.qkv = QKV()
        self.norm = torch.nn.Parameter(torch.zeros(4), requires_grad=False)  # vLLM's default loader
        self.transform, self.asks_for_a_loader = transform, asks_for_a_loader

    def load_weights(self, weights):
        loaded = set()
        params = dict(self.named_parameters())
        for name, tensor in weights:
            if name.endswith("_proj"):
                param = params["qkv.weight"]
                param.weight_loader(param, tensor.clone() if self.transform else tensor, name[0])
                loaded.add("qkv.weight")
            else:
                param = params[name]
                if self.asks_for_a_loader and hasattr(param, "weight_loader"):  # a model that checks first
                    param.weight_loader(param, tensor, "its own loaders take a shard")
                else:
                    getattr(param, "weight_loader", lambda p, t: p.data.copy_(t))(param, tensor)
                loaded.add(name)
        return loaded

    def forward(self, x):
        return self.qkv.cpu_linear(x, self.qkv.weight, None) * self.norm.sum()


def checkpoint(seed):
    g = torch.Generator().manual_seed(seed)
    return {"q_proj": torch.randn(2, 4, generator=g), "k_proj": torch.randn(2, 4, generator=g),
            "v_proj": torch.randn(2, 4, generator=g), "norm": torch.randn(4, generator=g)}


def loaded_model(files, version, transform=False, asks_for_a_loader=False):
    """A model after its first, in-place push of version `version`: recorded, repacked."""
    model = Model(transform, asks_for_a_loader)
    _, plan = record_load(model, files[version].items())
    model.qkv.quant_method.process_weights_after_loading(model.qkv)
    return model, plan


@pytest.fixture
def files():
    return {v: checkpoint(v) for v in range(4)}


def expected(files, version):
    w = torch.cat([files[version][k] for k in ("q_proj", "k_proj", "v_proj")])
    return lambda x: torch.nn.functional.linear(x, w) * files[version]["norm"].sum()


def test_a_staged_load_replays_the_recorded_one_and_the_swap_serves_it(files):
    model, plan = loaded_model(files, 0)
    assert plan is not None and "weight_loader" not in model.norm.__dict__  # the recording left no loader behind
    assert model.qkv.weight.weight_loader == model.qkv.weight_loader
    staged = StagedWeights(model, plan, [("qkv", model.qkv)])
    staged.load("v0", lambda d: files[0].items())  # what the first push checks: a replay matches the load
    assert staged.matches() == []
    x = torch.randn(3, 4)
    for version in (1, 2, 3):
        staged.start(f"v{version}", version, lambda d: files[int(d[1:])].items())
        assert staged.take(f"v{version}", version) is True
        torch.testing.assert_close(model(x), expected(files, version)(x), rtol=0, atol=0)
        assert staged.times["load_s"] >= 0 and staged.times["repack_s"] >= 0
    # the copy now holds the policy before, whose buffers the next stage loads into
    assert torch.equal(staged.copy["norm"], files[2]["norm"]) and staged.matches() != []


def test_the_staged_load_runs_in_its_own_thread(files):
    model, plan = loaded_model(files, 0)
    staged = StagedWeights(model, plan, [("qkv", model.qkv)])
    threads = []

    def weights(directory):
        threads.append(threading.current_thread())
        return files[1].items()

    staged.start("v1", 1, weights)
    assert staged.take("v1", 1) is True and threads[0] is not threading.current_thread()


def test_a_reload_of_what_was_not_staged_or_failed_to_stage_swaps_nothing(files):
    model, plan = loaded_model(files, 0)
    staged = StagedWeights(model, plan, [("qkv", model.qkv)])
    before = model.qkv.weight.clone()
    assert staged.take("v1", 1) is False  # nothing staged
    staged.start("v1", 1, lambda d: files[1].items())
    assert staged.take("v1", 2) is False and staged.take("v2", 1) is False  # another version, another directory
    staged.start("v2", 2, lambda d: (_ for _ in ()).throw(FileNotFoundError("no *.safetensors files in v2")))
    assert isinstance(staged.take("v2", 2), FileNotFoundError)
    assert torch.equal(model.qkv.weight, before)


def test_a_checkpoint_unlike_the_recorded_one_fails_the_stage(files):
    model, plan = loaded_model(files, 0)
    staged = StagedWeights(model, plan, [("qkv", model.qkv)])
    staged.start("v1", 1, lambda d: [(k, t) for k, t in files[1].items() if k != "norm"])
    assert isinstance(staged.take("v1", 1), KeyError)
    staged.start("v1", 1, lambda d: [*files[1].items(), ("extra", torch.zeros(1))])
    assert isinstance(staged.take("v1", 1), KeyError)


def test_a_load_that_hands_a_loader_another_tensor_than_the_files_is_not_replayed(files):
    model, plan = loaded_model(files, 0, transform=True)
    assert plan is None
    assert torch.equal(model.qkv.weight[:2], files[0]["q_proj"])  # the load itself went through


def test_a_replay_that_misses_what_the_load_did_is_caught(files):
    model, plan = loaded_model(files, 0)
    staged = StagedWeights(model, plan, [("qkv", model.qkv)])
    plan.calls["norm"] = []  # as if a loader wrote somewhere the recording did not see
    staged.copy["norm"].data.add_(1)  # the copy holds another policy's values (after a swap, the one before)
    staged.load("v0", lambda d: files[0].items())
    assert staged.matches() == ["norm"]
    staged.copy["norm"].data.copy_(files[0]["norm"])
    staged.packed[0][2].cpu_linear = lambda x, weight, bias: x @ weight.T + 1
    assert staged.matches() == ["qkv (packed)"]


class Config:
    def __init__(self, enforce_eager):
        self.model_config = type("ModelConfig", (), {"enforce_eager": enforce_eager})()


def test_staging_applies_to_small_models_run_eagerly(monkeypatch):
    import vfrl.inference.staged_weights as staged_weights

    model = Model()
    assert stageable(model, Config(True)) is None
    assert "enforce_eager" in stageable(model, Config(False))
    monkeypatch.setattr(staged_weights, "STAGE_MAX_BYTES", 64)
    assert "over" in stageable(model, Config(True))


def test_a_parameter_of_no_loader_of_its_own_loads_as_without_the_recording(files):
    """The recording gives every parameter a weight_loader for the load; one that had none is loaded by vLLM's
    default loader, also where the model asks `hasattr(param, "weight_loader")` first and passes more."""
    model, plan = loaded_model(files, 0, asks_for_a_loader=True)
    assert plan is not None and torch.equal(model.norm, files[0]["norm"])
    assert not hasattr(model.norm, "weight_loader")
    staged = StagedWeights(model, plan, [("qkv", model.qkv)])
    staged.start("v1", 1, lambda d: files[1].items())
    assert staged.take("v1", 1) is True and torch.equal(model.norm, files[1]["norm"])
