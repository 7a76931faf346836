"""Launch plans on paper (no GPU needed), the --dry-run golden output, and a launcher that never imports torch."""

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

from vfrl.bundle import bundle_root
from vfrl.config import RLConfig
from vfrl.launcher import cli
from vfrl.launcher.config_errors import load_user_config
from vfrl.launcher import machine as machine_module
from vfrl.launcher import preflight
from vfrl.launcher.machine import Machine, detect_machine, gpu_memory_mib, visible_gpu_ids
from vfrl.launcher.plan import CPU_ADAPTER_NOTE, PlanError, make_plan, split_gpus
from vfrl.launcher.render import render_plan

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
BIN = str(Path(sys.executable).parent)


def cfg(inference_gpus=6, trainer_gpus=2, inference_args=None, **trainer):
    trainer = {"batch_size": 64, "micro_batch_size": 8, **trainer}
    return RLConfig.model_validate({"model": "m", "env": {"id": "e"},
                                    "inference": {"gpus": inference_gpus, "args": inference_args or {}},
                                    "trainer": {"gpus": trainer_gpus, "args": trainer}})


def ids(n):
    return [str(i) for i in range(n)]


def test_gpu_split_is_contiguous_inference_first():
    assert split_gpus(6, 2, ids(8)) == (ids(6), ["6", "7"])
    assert split_gpus(1, 1, ids(8)) == (["0"], ["1"])
    with pytest.raises(PlanError, match="this machine has 2 GPUs; lower inference.gpus"):
        split_gpus(2, 1, ids(2), share="never")


def test_gpu_split_uses_the_users_gpu_ids():
    assert split_gpus(1, 1, ["2", "3"]) == (["2"], ["3"])
    assert split_gpus(1, 1, ["GPU-aa", "GPU-bb"]) == (["GPU-aa"], ["GPU-bb"])


@pytest.mark.parametrize("share, present, expected", [
    ("auto", 1, (["0"], ["0"])),  # too few for both: shared
    ("auto", 2, (["0"], ["1"])),  # enough: separate
    ("always", 2, (["0"], ["0"])),
    ("never", 2, (["0"], ["1"])),
])
def test_inference_and_trainer_share_gpus_when_asked_or_when_too_few(share, present, expected):
    assert split_gpus(1, 1, ids(present), share) == expected


def test_sharing_takes_both_panes_from_the_first_gpus():
    assert split_gpus(2, 1, ids(2)) == (["0", "1"], ["0"])
    assert split_gpus(6, 2, ids(6)) == (ids(6), ["0", "1"])


def test_too_few_gpus_even_to_share_or_sharing_refused_is_one_line():
    with pytest.raises(PlanError) as e:
        split_gpus(1, 1, ids(1), share="never")
    assert str(e.value) == ('inference.gpus + trainer.gpus = 2 is invalid: this machine has 1 GPU; lower '
                            'inference.gpus (1) or trainer.gpus (1), or let vLLM and the trainer share GPUs '
                            '(inference.share_gpus = "auto")')
    with pytest.raises(PlanError, match=r"= 3 is invalid: this machine has 1 GPU; lower inference.gpus \(2\)"):
        split_gpus(2, 1, ids(1))


def test_plan_on_eight_gpus_six_for_vllm_two_for_the_trainer(tmp_path):
    plan = make_plan(cfg(inference_args={"tensor_parallel_size": 2}), tmp_path / "run", "s", Machine(8, 64), tmp_path)
    assert plan.inference.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5"
    assert plan.trainer.env["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert (plan.tensor_parallel, plan.data_parallel) == (2, 3)
    assert plan.config.inference.args["data_parallel_size"] == 3  # what vf-vllm reads from the resolved config
    cmd = plan.trainer.command
    assert cmd[1:3] == ["launch", "--config-file"] and cmd[4:6] == ["--num-processes", "2"]
    assert Path(cmd[3]) == bundle_root() / "configs" / "accelerate" / "ddp.yaml"
    assert cmd[6].endswith("vf-train") and cmd[7:] == ["@", str(tmp_path / "run" / "config.toml")]


@pytest.mark.parametrize("gpus, tp, dp", [(1, 1, 1), (2, 1, 2), (4, 2, 2), (4, 4, 1), (8, 2, 4)])
def test_vllm_data_parallel_is_gpus_over_tensor_parallel(tmp_path, gpus, tp, dp):
    plan = make_plan(cfg(gpus, 1, {"tensor_parallel_size": tp}), tmp_path, "s", Machine(gpus + 1, 8), tmp_path)
    assert plan.data_parallel == dp
    assert plan.config.inference.args.get("data_parallel_size", 1) == dp


def test_one_trainer_gpu_runs_vf_train_without_accelerate(tmp_path):
    plan = make_plan(cfg(1, 1), tmp_path, "s", Machine(2, 8), tmp_path)
    assert plan.trainer.command[0].endswith("vf-train") and plan.trainer_processes == 1
    assert (plan.inference.env["CUDA_VISIBLE_DEVICES"], plan.trainer.env["CUDA_VISIBLE_DEVICES"]) == ("0", "1")


@pytest.mark.parametrize("name", ["single_gpu", "ddp"])
def test_accelerate_config_by_name_is_the_bundled_yaml(tmp_path, name):
    c = cfg()
    c.trainer.accelerate_config = name
    plan = make_plan(c, tmp_path, "s", Machine(8, 8), tmp_path)
    assert plan.trainer.command[3] == str(bundle_root() / "configs" / "accelerate" / f"{name}.yaml")


@pytest.mark.parametrize("name", ["zero3", "fsdp"])
def test_sharding_configs_over_several_trainer_processes_are_refused_in_one_line(tmp_path, name):
    """Rank 0 alone writes each step's policy for vLLM, from its own copy of the weights: sharded, that copy is
    partitioned (an empty adapter) or DTensor shards (a hang). One process holds the whole model: allowed."""
    c = cfg()  # 2 trainer GPUs
    c.trainer.accelerate_config = name
    with pytest.raises(PlanError) as e:
        make_plan(c, tmp_path, "s", Machine(8, 8), tmp_path)
    assert f'trainer.accelerate_config = "{name}"' in str(e.value) and 'use "ddp"' in str(e.value)
    assert "\n" not in str(e.value)
    one = cfg(6, 1)
    one.trainer.accelerate_config = name
    assert Path(make_plan(one, tmp_path, "s", Machine(8, 8), tmp_path).trainer.command[0]).name == "vf-train"


def test_accelerate_config_path_must_exist(tmp_path):
    c = cfg()
    c.trainer.accelerate_config = "mine.yaml"
    with pytest.raises(PlanError, match=r'trainer.accelerate_config = "mine.yaml" is invalid: no such file'):
        make_plan(c, tmp_path, "s", Machine(8, 8), tmp_path)
    (tmp_path / "mine.yaml").write_text("distributed_type: MULTI_GPU\n")
    assert make_plan(c, tmp_path, "s", Machine(8, 8), tmp_path).trainer.command[3] == str(tmp_path / "mine.yaml")


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_accelerate_configs_load_in_accelerate(path):
    from accelerate.commands.config.config_args import ClusterConfig

    assert ClusterConfig.from_yaml_file(path).num_machines == 1


def test_more_gpus_requested_than_present_is_refused_at_launch_only(tmp_path):
    c = cfg(6, 2)  # valid on paper: shipped 8-GPU configs validate on a laptop
    with pytest.raises(PlanError) as e:
        make_plan(c, tmp_path, "s", Machine(4, 8), tmp_path)
    assert str(e.value) == ("inference.gpus + trainer.gpus = 8 is invalid: this machine has 4 GPUs; "
                            "lower inference.gpus (6) or trainer.gpus (2)")


def test_without_gpu_the_cores_are_split(tmp_path):
    plan = make_plan(cfg(), tmp_path, "s", Machine(0, 8), tmp_path)
    assert plan.device == "cpu"
    assert plan.inference.env == {"CUDA_VISIBLE_DEVICES": "", "VLLM_CPU_OMP_THREADS_BIND": "0-3"}
    # the trainer's cores: the rest (vf-train pins itself there, vf-vllm to vLLM's: vfrl/cpu_cores.py)
    assert plan.trainer.env == {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "4", "VFRL_TRAINER_CORES": "4-7"}
    assert plan.trainer.command[0].endswith("vf-train")
    two = make_plan(cfg(), tmp_path, "s", Machine(0, 2), tmp_path)
    assert two.inference.env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and two.trainer.env["OMP_NUM_THREADS"] == "1"
    assert two.trainer.env["VFRL_TRAINER_CORES"] == "1"


def test_share_cpus_puts_the_trainer_on_every_core_with_sleeping_threads(tmp_path):
    c = cfg()
    c.trainer.share_cpus = True
    plan = make_plan(c, tmp_path, "s", Machine(0, 8), tmp_path)
    assert plan.inference.env["VLLM_CPU_OMP_THREADS_BIND"] == "0-3"  # vLLM keeps its half
    # no VFRL_TRAINER_CORES: vf-train does not pin itself; OpenMP's idle threads sleep instead of spinning
    assert plan.trainer.env == {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "8", "OMP_WAIT_POLICY": "PASSIVE"}
    assert "trainer with 8 thread(s) on every core, vLLM's too (trainer.share_cpus)" in render_plan(
        plan, tmp_path, Machine(0, 8), "s")
    c.trainer.processes = 2  # two CPU processes share the threads
    assert make_plan(c, tmp_path, "s", Machine(0, 8), tmp_path).trainer.env["OMP_NUM_THREADS"] == "4"


# ---- the user's CUDA_VISIBLE_DEVICES ----

@pytest.mark.parametrize("visible, expected", [
    ("2,3", ("2", "3")), (" 1 , 0", ("1", "0")), ("", ()), ("-1", ()),
    ("0,-1,1", ("0",)),  # CUDA stops at the first invalid entry
    ("GPU-8f3c,GPU-11aa", ("GPU-8f3c", "GPU-11aa")),
])
def test_visible_gpus_are_named_as_cuda_visible_devices_names_them(visible, expected):
    assert visible_gpu_ids(visible, "") == expected


def test_without_cuda_visible_devices_nvidia_smi_counts_the_gpus():
    listing = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\n"
    assert visible_gpu_ids(None, listing) == ("0", "1")
    assert visible_gpu_ids(None, "") == ()


SMI_QUERY = "0, GPU-aaaa-1111, 81559\n1, GPU-bbbb-2222, 81559\n2, GPU-cccc-3333, 40960\n3, GPU-dddd-4444, 81559\n"


def test_gpu_memory_is_the_smallest_total_among_the_visible_gpus():
    assert gpu_memory_mib(("GPU-aaaa",), SMI_QUERY) == 81559
    assert gpu_memory_mib(("GPU-aaaa", "GPU-cccc"), SMI_QUERY) == 40960
    assert gpu_memory_mib(("3",), SMI_QUERY) == 40960  # CUDA's index 3 may be nvidia-smi's 2: the smallest of all
    assert gpu_memory_mib(("MIG-1234",), SMI_QUERY) is None  # a MIG slice: not listed, not checked
    assert gpu_memory_mib(("7",), SMI_QUERY) is None
    assert gpu_memory_mib(("0",), "") is None


def test_the_cpu_build_serving_an_adapter_by_default_is_pointed_at_merged(tmp_path):
    """vLLM's CPU build runs runtime LoRA unfused: a run left at lora_sync's default hears of "merged" in one note;
    a lora_sync written out (either value), full fine-tuning, a GPU or a remote server's own choice do not."""
    def notes(machine=Machine(0, 2), **trainer):
        return make_plan(cfg(1, 1, **trainer), tmp_path / "run", "s", machine, tmp_path).notes

    assert notes() == [CPU_ADAPTER_NOTE]
    assert notes(lora_sync="adapter") == notes(lora_sync="merged") == notes(use_lora=False) == []
    assert notes(Machine(2, 16, gpu_memory_mib=81559)) == []
    remote = cfg(1, 1)
    remote.inference.base_url = "http://10.0.0.5:8000/v1"
    assert CPU_ADAPTER_NOTE not in make_plan(remote, tmp_path / "r", "s", Machine(0, 2), tmp_path).notes


def test_panes_get_the_users_gpu_ids_not_0_to_n(tmp_path, monkeypatch):
    """Started with CUDA_VISIBLE_DEVICES=2,3: vLLM gets physical GPU 2 and the trainer 3."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    monkeypatch.setattr(machine_module, "nvidia_smi", lambda *args: SMI_QUERY.replace("40960", "81559"))
    machine = detect_machine()
    assert (machine.gpus, machine.gpu_ids, machine.gpu_memory_mib) == (2, ("2", "3"), 81559)
    plan = make_plan(cfg(1, 1), tmp_path / "run", "s", machine, tmp_path)
    assert (plan.inference.env["CUDA_VISIBLE_DEVICES"], plan.trainer.env["CUDA_VISIBLE_DEVICES"]) == ("2", "3")
    assert plan.memory is None and plan.notes == []
    rendered = render_plan(plan, tmp_path, machine, None)
    assert "machine:        2 GPU(s) (CUDA_VISIBLE_DEVICES=2,3) of 79.6 GiB, " in rendered
    assert "inference GPUs 2 (vLLM" in rendered and "trainer GPUs 3 (1 process)" in rendered


# ---- one GPU: vLLM and the trainer share it ----

QWEN_05B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
            "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
            "max_position_embeddings": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
QWEN_14B = {**QWEN_05B, "hidden_size": 5120, "intermediate_size": 13824, "num_hidden_layers": 48,
            "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064, "tie_word_embeddings": False}
TINY = {**QWEN_05B, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "vocab_size": 99, "max_position_embeddings": 1024, "torch_dtype": "float32"}
H100 = Machine(1, 16, gpu_memory_mib=81559)


def local_model(workdir: Path, name: str, config: dict) -> str:
    (workdir / "models" / name).mkdir(parents=True, exist_ok=True)
    (workdir / "models" / name / "config.json").write_text(json.dumps(config))
    return f"models/{name}"


def shipped(name: str, workdir: Path, model_config: dict | None = None, **trainer_args) -> RLConfig:
    c = load_user_config(ROOT / "configs" / "rl" / name)
    if model_config:
        c.model = local_model(workdir, name.removesuffix(".toml"), model_config)
    for k, v in trainer_args.items():
        setattr(c.trainer.args, k, v)
    return c


AUTO_NOTE = ('this machine has 1 GPU, fewer than inference.gpus + trainer.gpus = 2: vLLM and the trainer share GPU 0 '
             '(inference.share_gpus = "never" refuses instead)')


def test_quickstart_on_one_gpu_shares_it_and_vllm_gets_half(tmp_path):
    plan = make_plan(shipped("quickstart.toml", tmp_path, TINY), tmp_path / "run", "s", H100, tmp_path)
    assert (plan.device == "cuda"
            and plan.inference.env["CUDA_VISIBLE_DEVICES"] == plan.trainer.env["CUDA_VISIBLE_DEVICES"] == "0")
    assert plan.shared_devices == ["0"] and plan.notes == [AUTO_NOTE]
    assert plan.memory.derived and plan.memory.utilization == 0.5  # a tiny model: each side gets about half
    assert plan.config.inference.args["gpu_memory_utilization"] == 0.5  # the resolved config vf-vllm reads
    # vLLM sizes its KV cache from the GPU's free memory while it starts: the trainer loads its model after
    assert plan.trainer.env["VFRL_TRAINER_LOADS_AFTER_VLLM"] == "1"
    assert "VFRL_TRAINER_LOADS_AFTER_VLLM" not in plan.inference.env


@pytest.mark.parametrize("dtype", ["float32", "float"])
def test_runtime_lora_in_float32_on_a_gpu_is_refused_in_one_line(tmp_path, dtype):
    # vLLM's LoRA kernels take float16/bfloat16 only: on an H200 the quick start with lora_sync = "adapter" died in
    # vLLM's start-up profile (AssertionError in lora_shrink). Merged adapters, the CPU and bfloat16 are fine.
    c = shipped("quickstart.toml", tmp_path, TINY, lora_sync="adapter")
    c.inference.args["dtype"] = dtype
    with pytest.raises(PlanError) as e:
        make_plan(c, tmp_path / "run", "s", H100, tmp_path)
    assert str(e.value).startswith(f'inference.args.dtype = "{dtype}" is invalid: vLLM serves runtime LoRA adapters '
                                   "on a GPU in float16 or bfloat16 only")
    assert make_plan(c, tmp_path / "cpu", "s", Machine(0, 8), tmp_path).device == "cpu"
    c.inference.args["dtype"] = "bfloat16"
    assert make_plan(c, tmp_path / "bf16", "s", H100, tmp_path).device == "cuda"
    merged = shipped("quickstart.toml", tmp_path, TINY)  # lora_sync = "merged", float32: what ran on the H200
    assert merged.inference.args["dtype"] == "float32" and make_plan(merged, tmp_path / "m", "s", H100, tmp_path)


def test_qwen_05b_on_one_gpu_gives_the_trainer_its_estimate_and_vllm_the_kv_cache(tmp_path):
    plan = make_plan(shipped("qwen2.5-0.5b-instruct.toml", tmp_path, QWEN_05B), tmp_path / "run", "s", H100, tmp_path)
    m = plan.memory
    gpu = 81559 * 2**20
    assert m.vllm.parts["weights"] == 494_032_768 * 2
    assert m.utilization * gpu >= m.vllm.total and gpu * (1 - m.utilization) - 2**30 >= m.trainer.total
    assert plan.config.inference.args["gpu_memory_utilization"] == m.utilization == 0.33
    assert plan.notes == [AUTO_NOTE]


def test_on_two_gpus_the_shipped_one_gpu_each_configs_do_not_share(tmp_path):
    for name in ("quickstart.toml", "qwen2.5-0.5b-instruct.toml"):
        plan = make_plan(shipped(name, tmp_path, TINY), tmp_path / "run", "s", Machine(2, 16, gpu_memory_mib=81559),
                         tmp_path)
        assert plan.shared_devices == [] and plan.memory is None and plan.notes == []
        assert "gpu_memory_utilization" not in plan.config.inference.args
        assert "VFRL_TRAINER_LOADS_AFTER_VLLM" not in plan.trainer.env  # GPUs of its own: both start at once


def test_share_gpus_always_shares_even_with_enough_gpus(tmp_path):
    c = shipped("quickstart.toml", tmp_path, TINY)
    c.inference.share_gpus = "always"
    plan = make_plan(c, tmp_path / "run", "s", Machine(2, 16, gpu_memory_mib=81559), tmp_path)
    assert plan.shared_devices == ["0"] and plan.trainer.env["CUDA_VISIBLE_DEVICES"] == "0"
    assert plan.notes == []  # asked for: nothing to point out


def test_full_fine_tuning_that_cannot_fit_beside_vllm_is_refused_with_the_numbers(tmp_path):
    c = shipped("qwen2.5-0.5b-instruct.toml", tmp_path, QWEN_14B, use_lora=False)
    with pytest.raises(PlanError) as e:
        make_plan(c, tmp_path / "run", "s", H100, tmp_path)
    assert str(e.value) == (
        "trainer.args.use_lora = false is invalid: full fine-tuning of models/qwen2.5-0.5b-instruct "
        "(14.77B parameters) needs 220.1 GiB before activations (weights 55.0 + gradients 55.0 + AdamW states "
        "110.0) and vLLM 30.8 GiB (weights 27.5 + KV cache of one 2048-token sequence 0.4 + overhead 1.5 + in-place "
        "reload (one layer) 1.5); with two CUDA contexts (1.0 GiB) that is more than one 79.6 GiB GPU holds; use "
        "LoRA (trainer.args.use_lora = true) or give the trainer GPUs of its own")
    c.trainer.args.use_lora = True  # LoRA of the same model fits (its activations are only noted)
    assert make_plan(c, tmp_path / "run", "s", H100, tmp_path).memory.utilization >= 0.37


@pytest.mark.parametrize("util, message", [
    (0.01, "inference.args.gpu_memory_utilization = 0.01 is invalid: must be at least 0.04 on the 79.6 GiB GPU it "
           "shares with the trainer: vLLM needs 2.7 GiB (weights 0.9 + KV cache of one 2048-token sequence 0.0 + "
           "overhead 1.5 + in-place reload (one layer) 0.3)"),
    (0.98, "inference.args.gpu_memory_utilization = 0.98 is invalid: must be at most 0.89 on the 79.6 GiB GPU it "
           "shares with the trainer: the trainer needs 7.4 GiB before activations (weights 1.8 + gradients 1.8 + "
           "AdamW states 3.7), plus 1.0 GiB for two CUDA contexts"),
])
def test_a_given_vllm_share_that_cannot_fit_is_refused_with_the_bounds(tmp_path, util, message):
    c = shipped("qwen2.5-0.5b-instruct.toml", tmp_path, QWEN_05B, use_lora=False)
    c.inference.args["gpu_memory_utilization"] = util
    with pytest.raises(PlanError) as e:
        make_plan(c, tmp_path / "run", "s", H100, tmp_path)
    assert str(e.value) == message


def test_a_given_vllm_share_that_leaves_too_little_for_activations_is_a_note(tmp_path):
    c = shipped("qwen2.5-0.5b-instruct.toml", tmp_path, QWEN_05B)
    c.inference.args["gpu_memory_utilization"] = 0.85  # what the 2-GPU config used to say
    plan = make_plan(c, tmp_path / "run", "s", H100, tmp_path)
    assert not plan.memory.derived and plan.config.inference.args["gpu_memory_utilization"] == 0.85
    assert plan.notes[1] == ("the trainer may run out of GPU memory: its estimated peak, 27.7 GiB, is more than the "
                             "10.9 GiB vLLM leaves it; set trainer.args.gradient_checkpointing = true or a smaller "
                             "trainer.args.micro_batch_size, or a smaller inference.args.gpu_memory_utilization "
                             "(at least 0.04)")


def test_a_hub_model_not_downloaded_yet_gets_half_the_gpu_and_the_plan_says_unchecked(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    plan = make_plan(shipped("qwen2.5-0.5b-instruct.toml", tmp_path), tmp_path / "run", "s", H100, tmp_path)
    assert plan.memory.utilization == 0.5 and plan.memory.gpu_bytes is None
    assert plan.notes[1] == ('memory not checked: the size of model "Qwen/Qwen2.5-0.5B-Instruct" cannot be read '
                             'offline (no config.json in a local folder or the Hugging Face cache); vLLM takes 0.5 of '
                             'each shared GPU')
    unknown_gpu = make_plan(shipped("quickstart.toml", tmp_path, TINY), tmp_path / "run", "s", Machine(1, 16), tmp_path)
    assert unknown_gpu.notes[1].startswith("memory not checked: the GPU's total memory is unknown")


# ---- --dry-run golden output ----

GOLDEN_CONFIG = """
model = "models/tiny-reverse"
[env]
id = "reverse-text"
[inference]
gpus = 6
[inference.args]
tensor_parallel_size = 2
[trainer]
gpus = 2
[trainer.args]
run_name = "golden"
batch_size = 64
micro_batch_size = 8
"""
QWEN_CONFIG = (ROOT / "configs/rl/qwen2.5-0.5b-instruct.toml").read_text()
# name: (machine, config, extra arguments); every case has models/qwen2.5-0.5b-instruct/config.json in its folder
GOLDEN_CASES = {
    "dry_run_8gpu": (Machine(8, 64), GOLDEN_CONFIG, ()),
    "dry_run_cpu": (Machine(0, 2), GOLDEN_CONFIG, ()),
    "dry_run_1gpu": (H100, QWEN_CONFIG, ("--model", "models/qwen2.5-0.5b-instruct")),
    # node rank 0 of 2 here, beside vLLM; the note carries node rank 1's command
    "dry_run_8gpu_2nodes": (Machine(8, 64), GOLDEN_CONFIG,
                            ("--trainer.nodes", "2", "--trainer.main_address", "10.0.0.5")),
    # --slurm from a login node without GPUs: 8 + 8 GPUs do not fit on one 8-GPU node, so vLLM gets node 0
    "dry_run_slurm_2x8gpu": (Machine(0, 4), GOLDEN_CONFIG, (
        "--slurm", "--inference.gpus", "8", "--inference.args.tensor_parallel_size", "1", "--trainer.gpus", "8",
        "--slurm.gpus_per_node", "8", "--slurm.partition", "gpu", "--slurm.account", "rl-team",
        "--slurm.time", '"04:00:00"', "--slurm.extra_sbatch", '["--qos=high"]')),
    "dry_run_slurm_cpu": (Machine(0, 2), GOLDEN_CONFIG, ("--slurm",)),
    # vLLM on node 0, trainer.nodes = 2 on nodes 1 and 2: one srun step, each task's node rank from Slurm
    "dry_run_slurm_3x8gpu_2trainer_nodes": (Machine(0, 4), GOLDEN_CONFIG, (
        "--slurm", "--inference.gpus", "8", "--inference.args.tensor_parallel_size", "1", "--trainer.gpus", "8",
        "--trainer.nodes", "2", "--trainer.args.batch_size", "128", "--slurm.gpus_per_node", "8",
        "--slurm.partition", "gpu")),
}


def dry_run(tmp_path, monkeypatch, machine, config_text, *extra):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "detect_machine", lambda: machine)
    (tmp_path / "cfg.toml").write_text(config_text)
    args = ["run", "cfg.toml", "--dry-run", "--inference.port", "18123", "--session", "golden",
            "--tmux-socket", "vfrl-golden-no-server", *extra]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    return (result.stdout.replace(str(tmp_path), "<tmp>").replace(BIN, "<bin>")
            .replace(str(bundle_root()), "<bundle>"))


@pytest.mark.parametrize("name", GOLDEN_CASES)
def test_dry_run_prints_the_plan_exactly(tmp_path, monkeypatch, name):
    """Regenerate after an intended change: VFRL_UPDATE_GOLDEN=1 pytest tests/test_launcher_plan.py"""
    machine, config_text, extra = GOLDEN_CASES[name]
    local_model(tmp_path, "qwen2.5-0.5b-instruct", QWEN_05B)
    out = dry_run(tmp_path, monkeypatch, machine, config_text, *extra)
    plan_part = out[out.index("# plan\n"):]
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("VFRL_UPDATE_GOLDEN"):
        golden.write_text(plan_part)
    assert plan_part == golden.read_text()
    assert not (tmp_path / "outputs").exists()  # started nothing, wrote nothing


def test_dry_run_prints_the_resolved_config_with_overrides(tmp_path, monkeypatch):
    config_text = (ROOT / "configs/rl/qwen2.5-1.5b-instruct-8gpu.toml").read_text()
    out = dry_run(tmp_path, monkeypatch, Machine(8, 64), config_text, "--trainer.args.max_steps", "7")
    resolved = tomllib.loads(out[out.index("# resolved config"):out.index("# plan\n")].split("\n", 1)[1])
    expected = RLConfig.model_validate(tomllib.loads((ROOT / "configs/rl/qwen2.5-1.5b-instruct-8gpu.toml").read_text()))
    expected.trainer.args.max_steps = 7
    expected.inference.port = 18123
    expected.inference.args["data_parallel_size"] = 3
    assert resolved == tomllib.loads(tomli_w.dumps(expected.model_dump(mode="json", exclude_none=True)))


def test_dry_run_reports_a_gpu_shortage_as_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "detect_machine", lambda: Machine(2, 8))
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/qwen2.5-1.5b-instruct-8gpu.toml").read_text())
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--dry-run",
                                          "--tmux-socket", f"vfrl-golden-{os.getpid()}"])
    assert result.exit_code == 2
    assert result.stderr.strip() == ("vf-rl: error: cfg.toml: inference.gpus + trainer.gpus = 8 is invalid: this "
                                     "machine has 2 GPUs; lower inference.gpus (6) or trainer.gpus (2)")


@pytest.mark.parametrize("host, reachable", [("0.0.0.0", True), ("::", True), ("10.0.0.5", True), ("gpu-node-3", True),
                                             ("127.0.0.1", False), ("::1", False), ("localhost", False)])
def test_a_host_beyond_loopback_is_announced_in_one_line(tmp_path, monkeypatch, host, reachable):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "detect_machine", lambda: Machine(0, 2))
    (tmp_path / "cfg.toml").write_text(GOLDEN_CONFIG)
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--dry-run", "--inference.host", host,
                                          "--tmux-socket", "vfrl-golden-no-server"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("vf-rl: note:")]
    expected = (f'vf-rl: note: inference.host = "{host}": vLLM will be reachable from the network; the per-run '
                f"API key protects every endpoint but /health")
    assert notes == ([expected] if reachable else [])


def test_the_quick_start_dry_run_on_one_gpu_shows_the_shared_plan(tmp_path, monkeypatch):
    """`CUDA_VISIBLE_DEVICES=0 vf-rl @ configs/rl/quickstart.toml --dry-run`, as issue 11 tried it."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(machine_module, "nvidia_smi", lambda *args: "0, GPU-aaaa, 81559\n")
    monkeypatch.chdir(tmp_path)
    local_model(tmp_path, "tiny-reverse", TINY)
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/quickstart.toml").read_text())
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--dry-run", "--tmux-socket", f"vfrl-1gpu-{os.getpid()}"])
    assert result.exit_code == 0, result.output
    assert ("devices:        inference GPUs 0 (vLLM: 1 data-parallel x 1 tensor-parallel); trainer GPUs 0 "
            "(1 process); shared by both: 0\n") in result.stdout
    assert ("memory:         vLLM --gpu-memory-utilization 0.5 (derived): 39.8 of each shared 79.6 GiB "
            "GPU") in result.stdout
    assert f"note:           {AUTO_NOTE}\n" in result.stdout
    assert "gpu_memory_utilization = 0.5" in result.stdout  # in the resolved config vf-vllm reads


def test_a_mistyped_option_is_not_taken_for_a_config_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/quickstart.toml").read_text())
    result = CliRunner().invoke(cli.app, ["run", "cfg.toml", "--dry-rnu"])
    assert result.exit_code == 2 and "no such option --dry-rnu; did you mean --dry-run?" in result.stderr


# ---- the launcher stays light ----

HEAVY = {"torch", "vllm", "transformers", "peft", "accelerate", "openai"}  # openai: ~1 s of imports


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["@", "configs/rl/quickstart.toml", "--dry-run"],
                                  ["status", "--tmux-socket", "vfrl-no-such-server"]])
def test_vf_rl_imports_no_torch_or_vllm(argv):
    """The console script's own path (main()), not just the module: help, errors and plans stay fast."""
    code = ("import sys\nfrom vfrl.launcher.cli import main\nsys.argv = ['vf-rl', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print('HEAVY', sorted({{m.split('.')[0] for m in sys.modules}} & {HEAVY!r}))")
    res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=ROOT)
    assert res.stdout.splitlines()[-1] == "HEAVY []", res.stdout[-2000:] + res.stderr[-2000:]


def test_vf_rl_help_runs_and_documents_overrides():
    out = subprocess.run([f"{BIN}/vf-rl", "run", "--help"], capture_output=True, text=True, check=True,
                         env={**os.environ, "COLUMNS": "200"}).stdout
    assert "--trainer.args.max_steps 10" in out and "--dry-run" in out and "--replace" in out


def test_an_environment_that_is_not_installed_stops_the_launch_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/quickstart.toml").read_text())
    args = ["run", "cfg.toml", "--env.id", "no-such-env",
            "--model", "Qwen/Qwen2.5-0.5B-Instruct",  # a hub id: not checked
            "--tmux-socket", f"vfrl-env-{os.getpid()}", "--detach"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 2
    line = result.stderr.strip()
    assert line.startswith('vf-rl: error: cfg.toml: env.id = "no-such-env" is invalid: environment \'no-such-env\' '
                           'is not installed (installed: ') and "reverse-text" in line and "\n" not in line
    assert line.endswith("install it with `vf-install no-such-env` (a folder: `vf-install --path DIR`)")
    assert not (tmp_path / "outputs").exists()
    dry = CliRunner().invoke(cli.app, [*args[:-1], "--dry-run"])  # the plan is still shown, with a warning
    assert dry.exit_code == 0 and "vf-rl: warning: cfg.toml: env.id" in dry.stderr


def test_wrong_env_args_stop_the_launch_in_one_line_naming_only_the_wrong_ones(tmp_path, monkeypatch):
    """Before vLLM starts (it took 37 s to be told), from the package's own `def load_environment`: the unknown
    name with its nearest, the right one left unnamed."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfg.toml").write_text((ROOT / "configs/rl/quickstart.toml").read_text())
    args = ["run", "cfg.toml", "--env.id", "calculator", "--env.args.max_turn", "3", "--env.args.seed", "1",
            "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--tmux-socket", f"vfrl-env-{os.getpid()}", "--detach"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        'vf-rl: error: cfg.toml: env.id = "calculator": its load_environment() does not take \'max_turn\' (did you '
        "mean 'max_turns'?) (it takes: num_train_examples, num_eval_examples, max_turns, style, seed); fix env.args")
    assert not (tmp_path / "outputs").exists()


def test_an_unknown_environment_id_names_the_nearest_installed_one(monkeypatch):
    from vfrl import installed_envs

    monkeypatch.setattr(installed_envs, "installed_environments", lambda: ["hanabi", "reverse-text", "sad"])
    line = installed_envs.not_installed_line("sadd")
    assert line == ("environment 'sadd' is not installed; did you mean 'sad'? (installed: hanabi, reverse-text, sad); "
                    "install it with `vf-install sadd` (a folder: `vf-install --path DIR`)")
    assert "did you mean" not in installed_envs.not_installed_line("zzzz")
    # its distribution is seen but its module is not (an editable install's .pth on PYTHONPATH): not "did you mean
    # 'sad'?" for 'sad'
    assert installed_envs.not_installed_line("sad").startswith(
        "environment 'sad' is installed, but its module cannot be imported from this Python")


def test_installed_environments_are_entry_points_and_distributions_that_require_verifiers(tmp_path, monkeypatch):
    """A hub package vf-install put here has no vfrl entry point: its distribution requiring verifiers names it."""
    from vfrl.installed_envs import installed_environments

    info = tmp_path / "my_hub_env-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-hub-env\nVersion: 0.1.0\n"
                                   "Requires-Dist: verifiers>=0.1.3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    names = installed_environments()
    assert "my_hub_env" in names and "reverse-text" in names and "verifiers" not in names


def test_inference_args_become_kebab_case_vllm_flags_booleans_bare_or_negated():
    from vfrl.inference.server import flag_args

    assert flag_args({"enforce_eager": True, "max_model_len": 512, "enable_prefix_caching": False,
                      "tensor_parallel_size": 2, "data_parallel_size": 3}) == [
        "--enforce-eager", "--max-model-len", "512", "--no-enable-prefix-caching", "--tensor-parallel-size", "2",
        "--data-parallel-size", "3"]


def test_liger_kernels_on_a_cpu_trainer_are_refused_in_one_line(tmp_path):
    with pytest.raises(PlanError) as e:
        make_plan(cfg(1, 1, use_liger_kernel=True), tmp_path, "s", Machine(0, 8), tmp_path)
    assert "trainer.args.use_liger_kernel" in str(e.value) and "this machine has no GPU" in str(e.value)
    with pytest.raises(PlanError, match="trainer.gpus = 0"):
        make_plan(cfg(1, 0, use_liger_kernel=True), tmp_path, "s", Machine(2, 8), tmp_path)
    plan = make_plan(cfg(1, 1, use_liger_kernel=True), tmp_path, "s", Machine(2, 8), tmp_path)  # a trainer GPU
    assert plan.config.trainer.args.use_liger_kernel and plan.trainer_devices == ["1"]


def test_liger_kernels_without_the_package_are_named_before_anything_starts(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "liger_kernel" else real(name, *a))
    assert "pip install liger-kernel" in preflight.liger_problem(cfg(use_liger_kernel=True))
    assert preflight.liger_problem(cfg()) is None
