"""GPU memory estimates from a model's config.json (no torch): parameter counts, the hub cache, each pane's need."""

import json
import struct
from pathlib import Path

from vfrl.config import RLConfig
from vfrl.launcher.memory import (
    GIB, find_model_config, lora_params, model_shape, safetensors_params, trainer_need, vllm_need,
)

QWEN_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
            "tie_word_embeddings": True, "torch_dtype": "bfloat16"}


def folder(tmp_path: Path, config: dict, name: str = "m") -> Path:
    (tmp_path / name).mkdir(parents=True, exist_ok=True)
    (tmp_path / name / "config.json").write_text(json.dumps(config))
    return tmp_path / name


def write_safetensors_header(path: Path, shapes: dict[str, list[int]]) -> None:
    """A safetensors file's header (what the count reads); the data bytes are irrelevant here."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def test_qwen_05b_parameter_count_from_config_json_is_the_published_one(tmp_path):
    shape = model_shape(folder(tmp_path, QWEN_05B) / "config.json")
    assert shape.params == 494_032_768 and shape.source == "config.json"  # Qwen2.5-0.5B: 494,032,768
    assert (shape.kv_dim, shape.dtype) == (128, "bfloat16")


def test_safetensors_headers_win_over_the_formula_when_every_shard_is_there(tmp_path):
    m = folder(tmp_path, QWEN_05B)
    write_safetensors_header(m / "model-00001-of-00002.safetensors", {"a": [10, 20], "b": [5]})
    (m / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}}))
    assert safetensors_params(m) is None  # a shard is missing: no exact count
    write_safetensors_header(m / "model-00002-of-00002.safetensors", {"c": [3, 3]})
    assert safetensors_params(m) == 214
    assert model_shape(m / "config.json").source == "safetensors headers"


def test_a_config_that_is_not_a_decoder_language_model_has_no_shape(tmp_path):
    assert model_shape(folder(tmp_path, {"model_type": "clip"}) / "config.json") is None


def test_multimodal_configs_are_read_from_their_text_config(tmp_path):
    shape = model_shape(folder(tmp_path, {"text_config": QWEN_05B}) / "config.json")
    assert shape.params == 494_032_768


def test_a_hub_id_is_read_from_the_hugging_face_cache_if_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert find_model_config("Qwen/Qwen2.5-0.5B-Instruct", tmp_path) is None
    repo = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct"
    folder(repo / "snapshots", QWEN_05B, name="abc123")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    assert find_model_config("Qwen/Qwen2.5-0.5B-Instruct", tmp_path) == repo / "snapshots" / "abc123" / "config.json"
    assert find_model_config("./models/tiny-reverse", tmp_path) is None  # a local path is never looked up there


def cfg(**args) -> RLConfig:
    return RLConfig.model_validate({"model": "m", "env": {"id": "e"}, "trainer": {"args": {
        "batch_size": 64, "micro_batch_size": 16, "max_seq_len": 1024, "max_tokens": 256, **args}}})


def test_vllm_needs_its_weights_in_the_served_dtype_and_one_sequence_of_kv_cache(tmp_path):
    shape = model_shape(folder(tmp_path, QWEN_05B) / "config.json")
    need = vllm_need(shape, {"max_model_len": 2048})
    assert need.parts["weights"] == 494_032_768 * 2
    assert need.parts["KV cache of one 2048-token sequence"] == 2 * 24 * 128 * 2 * 2048  # K and V, 24 layers, bf16
    assert vllm_need(shape, {"dtype": "float32"}).parts["weights"] == 494_032_768 * 4
    fp32 = model_shape(folder(tmp_path, {**QWEN_05B, "torch_dtype": "float32"}, "f") / "config.json")
    assert vllm_need(fp32, {}).parts["weights"] == 494_032_768 * 2  # vLLM's "auto" serves fp32 in 16 bits
    assert vllm_need(shape, {"tensor_parallel_size": 2}).parts["weights"] == 494_032_768  # per GPU
    # weights reloaded in place each step (full fine-tuning, merged LoRA): one layer built anew, here the embedding
    assert "in-place reload (one layer)" not in need.parts
    assert vllm_need(shape, {}, reloads_weights=True).parts["in-place reload (one layer)"] == 151936 * 896 * 2


def test_trainer_full_fine_tuning_holds_fp32_weights_gradients_and_two_adamw_states(tmp_path):
    """bf16 or not, full fine-tuning trains fp32 master weights (a bf16 weight drops small updates): measured on an
    H100, 9.28 GiB after the first step, this estimate 7.36 + 1.84 of the check's own copy of the weights."""
    shape = model_shape(folder(tmp_path, QWEN_05B) / "config.json")
    full = trainer_need(shape, cfg(use_lora=False, bf16=True))
    p = 494_032_768
    assert (full.parts["weights"], full.parts["gradients"], full.parts["AdamW states"]) == (4 * p, 4 * p, 8 * p)
    assert full.static_total == 16 * p
    with_ref = trainer_need(shape, cfg(use_lora=False, bf16=True, beta=0.04))
    assert with_ref.parts["frozen reference model"] == 2 * p  # in the compute dtype
    fp32 = trainer_need(shape, cfg(use_lora=False))
    assert fp32.static_total == 16 * p


def test_trainer_lora_holds_the_frozen_model_and_a_small_fp32_adapter(tmp_path):
    shape = model_shape(folder(tmp_path, QWEN_05B) / "config.json")
    lora = trainer_need(shape, cfg(bf16=True, lora_rank=16))
    adapter = lora_params(shape, 16, None)
    assert adapter == 24 * 16 * (9 * 896 + 2 * 128 + 3 * 4864)  # peft's all-linear r=16 on Qwen2.5-0.5B: 8.8M
    assert lora.parts["LoRA weights, gradients and AdamW states"] == adapter * 16
    assert lora.static_total < 1.2 * GIB


def test_activations_shrink_with_gradient_checkpointing_and_grow_with_the_micro_batch(tmp_path):
    shape = model_shape(folder(tmp_path, QWEN_05B) / "config.json")

    def act(**a):
        need = trainer_need(shape, cfg(bf16=True, **a))
        return next(v for k, v in need.parts.items() if k.startswith("activations"))

    assert act(gradient_checkpointing=True) < act() / 5
    assert act(micro_batch_size=32) == 2 * act()


def test_sharded_trainers_split_their_static_memory_over_processes(tmp_path):
    shape = model_shape(folder(tmp_path, QWEN_05B) / "config.json")
    c = cfg(use_lora=False, bf16=True, batch_size=64, micro_batch_size=8)
    one = trainer_need(shape, c).static_total
    c.trainer.accelerate_config = "fsdp"
    assert trainer_need(shape, c, processes=4).static_total == one / 4
    c.trainer.accelerate_config = "ddp"
    assert trainer_need(shape, c, processes=4).static_total == one
