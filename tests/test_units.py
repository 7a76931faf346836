"""Fast unit tests: batching alignment, the tokenizer round trip. (Launcher tests: test_launcher_*.py,
test_config_*.py.)"""

import torch

from vfrl.rollout_types import Rollout
from vfrl.learner.batch import collate


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


def test_tiny_tokenizer_survives_save_and_reload(tmp_path):
    from transformers import AutoTokenizer

    from vfrl.tiny_model import build_tiny_model

    _, built = build_tiny_model(tmp_path, seed=0)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    msgs = [{"role": "system", "content": "Reverse the text."}, {"role": "user", "content": "ab c\nd"}]
    a = built.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
    b = loaded.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert a == b
    assert loaded.decode(b) == ("<|im_start|>system\nReverse the text.<|im_end|>\n"
                                "<|im_start|>user\nab c\nd<|im_end|>\n"
                                "<|im_start|>assistant\n")
