"""What a LoRA push writes (push_files.py, safetensors_rewrite.py): the planned tensors follow training, and a
file rewritten in place over a recycled directory is, byte for byte, what safetensors and peft write anew."""

import copy
import json
import struct

import pytest
import torch

from vfrl.rollouts.push_files import (adapter_tensors, merged_state_dict, parameters_behind, save_adapter,
                                     tied_once)
from vfrl.rollouts.safetensors_rewrite import rewrite, save_file


def lora_model(tiny_model, seed=0, targets="all-linear"):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(r=4, target_modules=targets))
    train_a_little(model, seed)
    return model


def train_a_little(model, seed):
    """Move every trainable parameter in place, as an optimizer step does."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=g) * 0.05)


def tensors(seed, shapes=((3, 4), (5,), (2, 2, 2))):
    g = torch.Generator().manual_seed(seed)
    out = {f"t{i}": torch.randn(s, generator=g) for i, s in enumerate(shapes)}
    out["ids"] = torch.arange(6, dtype=torch.int64) * seed
    out["half"] = torch.randn(4, generator=g).to(torch.bfloat16)
    return out


def test_a_rewrite_is_byte_for_byte_what_save_file_writes(tmp_path):
    from safetensors.torch import save_file as write_new

    path = tmp_path / "w.safetensors"
    write_new(tensors(1), str(path), metadata={"format": "pt"})
    assert rewrite(tensors(2), path, metadata={"format": "pt"})
    write_new(tensors(2), str(tmp_path / "new.safetensors"), metadata={"format": "pt"})
    assert path.read_bytes() == (tmp_path / "new.safetensors").read_bytes()


@pytest.mark.parametrize("change", ["shape", "dtype", "name", "metadata", "cut short", "no file", "not safetensors"])
def test_a_file_of_another_layout_is_written_anew(tmp_path, change):
    from safetensors.torch import load_file, save_file as write_new

    path = tmp_path / "w.safetensors"
    new, metadata = tensors(2), {"format": "pt"}
    if change != "no file":
        write_new(tensors(1), str(path), metadata=metadata)
    if change == "shape":
        new["t0"] = torch.randn(4, 3)
    elif change == "dtype":
        new["t1"] = new["t1"].double()
    elif change == "name":
        new["t3"] = new.pop("t2")
    elif change == "metadata":
        metadata = None
    elif change == "cut short":
        path.write_bytes(path.read_bytes()[:-4])
    elif change == "not safetensors":
        path.write_bytes(struct.pack("<Q", 5) + b"hello")
    before = path.read_bytes() if path.exists() else None
    assert not rewrite(new, path, metadata)
    assert (path.read_bytes() if path.exists() else None) == before  # a refused rewrite writes nothing
    save_file(new, path, metadata)
    loaded = load_file(path)
    assert loaded.keys() == new.keys() and all(torch.equal(loaded[k], new[k]) for k in new)


def test_the_planned_adapter_tensors_follow_training(tiny_model):
    from peft import get_peft_model_state_dict

    model = lora_model(tiny_model)
    before = {k: v.clone() for k, v in adapter_tensors(model).items()}  # asks peft, and plans
    train_a_little(model, seed=1)
    planned = adapter_tensors(model)
    fresh = get_peft_model_state_dict(model)
    assert planned.keys() == fresh.keys() == before.keys()
    assert all(torch.equal(planned[k], fresh[k]) for k in fresh)
    assert not any(torch.equal(planned[k], before[k]) for k in fresh)  # training moved every one


def test_the_planned_merged_weights_follow_training(tiny_model):
    model = lora_model(tiny_model)
    merged_state_dict(model)  # plans
    train_a_little(model, seed=2)
    expected = copy.deepcopy(model).merge_and_unload().state_dict()
    merged = merged_state_dict(model)
    assert merged.keys() == expected.keys()
    assert all(torch.allclose(merged[k], expected[k], atol=1e-6) for k in expected)


def test_a_tensor_that_is_not_a_parameter_s_own_storage_leaves_no_plan(tiny_model):
    model = lora_model(tiny_model)
    named = {n: p.detach() for n, p in model.named_parameters() if "lora_" in n}
    assert parameters_behind(model, named) is not None
    assert parameters_behind(model, {**named, "copy": next(iter(named.values())).clone()}) is None
    assert parameters_behind(model, {"cast": next(iter(named.values())).double()}) is None
    first = next(iter(named.values()))
    assert parameters_behind(model, {"view": first[:1]}) is None  # a slice: another shape


@pytest.mark.parametrize("targets", [["q_proj", "v_proj"], ["q_proj", "embed_tokens"]])
def test_an_adapter_rewritten_over_a_recycled_directory_is_what_peft_writes(tiny_model, tmp_path, targets):
    import warnings

    model = lora_model(tiny_model, targets=targets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft's "Setting save_embedding_layers to True" for the embeddings
        save_adapter(model, tmp_path / "recycled")  # peft writes it
        train_a_little(model, seed=3)
        save_adapter(model, tmp_path / "recycled")  # in place
        model.save_pretrained(tmp_path / "peft")
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        assert (tmp_path / "recycled" / name).read_bytes() == (tmp_path / "peft" / name).read_bytes(), name


def test_merged_pushes_recycle_the_oldest_kept_directory(tiny_model, tmp_path):
    """MergedLoraSync keeps the last 2 of weights/step-N and adapters/policy-N; a third save reuses the oldest
    one's files: the same bytes as written anew, and the same directories left as before."""
    from safetensors.torch import save_file as write_new

    from vfrl.rollouts.weight_sync import MergedLoraSync

    model = lora_model(tiny_model)
    sync = MergedLoraSync("http://unused", "key", tmp_path / "weights", tmp_path / "adapters", served_name="m")
    files = {}
    for version in range(4):
        train_a_little(model, seed=10 + version)
        sync.save(model, version)
        sync.save_aside(model, version)
        files[version] = [(tmp_path / f"weights/step-{version}/model.safetensors").stat().st_ino,
                          (tmp_path / f"adapters/policy-{version}/adapter_model.safetensors").stat().st_ino]
    assert files[3] == files[1] and files[2] == files[0]  # the same files, rewritten
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["step-2", "step-3"]
    assert sorted(p.name for p in (tmp_path / "adapters").iterdir()) == ["policy-2", "policy-3"]
    write_new(tied_once(merged_state_dict(model)), str(tmp_path / "anew.safetensors"))
    assert (tmp_path / "weights/step-3/model.safetensors").read_bytes() == (tmp_path / "anew.safetensors").read_bytes()
    header_len = struct.unpack("<Q", (tmp_path / "anew.safetensors").read_bytes()[:8])[0]
    assert "lm_head.weight" not in json.loads((tmp_path / "anew.safetensors").read_bytes()[8:8 + header_len])
