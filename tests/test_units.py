"""Fast unit tests: batching alignment, plans, pane scripts, config messages, the tokenizer round trip."""

from pathlib import Path

import pytest
import torch

from vfrl.config import RLConfig
from vfrl.environments.environment import Rollout
from vfrl.launcher.config_errors import ConfigError, load_user_config
from vfrl.launcher.plan import make_plan, split_gpus
from vfrl.trainer.batch import collate

ROOT = Path(__file__).resolve().parents[1]


def rollout(prompt, completion, logprobs):
    return Rollout(example_id=0, prompt=[], completion=[], answer="", prompt_ids=prompt, completion_ids=completion,
                   completion_logprobs=logprobs, completion_mask=[1] * len(completion), policy="p")


def test_collate_aligns_completion_tokens_with_predicting_positions():
    b = collate([rollout([5, 6, 7], [8, 9], [-0.1, -0.2]), rollout([5], [8], [-0.3])],
                torch.tensor([1.0, -1.0]), max_seq_len=16, pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 8, 0, 0, 0]]
    # position t predicts token t+1: the completion of row 0 is predicted from positions 2 and 3
    assert b.loss_mask.tolist() == [[0, 0, 1, 1], [1, 0, 0, 0]]
    assert torch.allclose(b.sampling_logprobs[0], torch.tensor([0, 0, -0.1, -0.2]))


def test_collate_truncates_to_max_seq_len():
    b = collate([rollout([1, 2], [3, 4, 5], [-1.0, -2.0, -3.0])], torch.tensor([0.5]), max_seq_len=4, pad_id=0)
    assert b.input_ids.tolist() == [[1, 2, 3, 4]]
    assert b.loss_mask.tolist() == [[0, 1, 1]]


def test_gpu_split_is_contiguous_inference_first():
    assert split_gpus(6, 2, 8) == ([0, 1, 2, 3, 4, 5], [6, 7])
    with pytest.raises(ValueError, match="3 GPUs requested, 2 present"):
        split_gpus(2, 1, 2)


def cfg(**trainer_args):
    return RLConfig.model_validate({"model": "m", "env": {"id": "e"}, "inference": {"gpus": 6},
                                    "trainer": {"gpus": 2, "args": trainer_args}})


def test_plan_on_eight_gpus(tmp_path):
    plan = make_plan(cfg(), tmp_path, "s", gpus_present=8, ncpu=64)
    assert plan.inference.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5"
    assert plan.trainer.env["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert plan.trainer.command[1:4] == ["launch", "--num-processes", "2"]


def test_plan_without_gpu_splits_cpu_cores(tmp_path):
    plan = make_plan(cfg(), tmp_path, "s", gpus_present=0, ncpu=2)
    assert plan.device == "cpu"
    assert plan.inference.env["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert plan.trainer.env["OMP_NUM_THREADS"] == "1"
    assert plan.trainer.command[0].endswith("vf-train")


@pytest.mark.parametrize("body, message", [
    ('model = "m"\n[env]\nid = "e"\n[trainer.args]\nbatch_sise = 8\n',
     "unknown key 'trainer.args.batch_sise'; did you mean 'trainer.args.batch_size'?"),
    ('model = "m"\n[env]\nid = "e"\n[trainer.args]\nbatch_size = 10\nrollouts_per_example = 4\n',
     "batch_size (10) must be divisible by rollouts_per_example (4)"),
    ('[env]\nid = "e"\n', "missing required key 'model'"),
    ('model = "m"\n[env]\nid = "e"\n[trainer.args]\nlearning_rate = -1\n',
     "'trainer.args.learning_rate' = -1 is invalid"),
    ('model = "m"\n[env\n', "not valid TOML"),
])
def test_bad_configs_give_one_clear_line(tmp_path, body, message):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as e:
        load_user_config(path)
    assert str(e.value).startswith(str(path))
    assert message in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "rl").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path):
    load_user_config(path)


def test_tiny_tokenizer_survives_save_and_reload(tmp_path):
    from transformers import AutoTokenizer

    from vfrl.tiny_model import build_tiny_model

    _, built = build_tiny_model(tmp_path, seed=0)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    msgs = [{"role": "system", "content": "Reverse the text."}, {"role": "user", "content": "ab c\nd"}]
    a = built.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
    b = loaded.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert a == b
    assert loaded.decode(b) == "<|im_start|>system\nReverse the text.<|im_end|>\n<|im_start|>user\nab c\nd<|im_end|>\n<|im_start|>assistant\n"
