"""Config rules: every bad config gives one line per problem (file, dotted key, bad value, what is allowed);
command-line overrides are parsed as TOML literals and validated like the file; every shipped config validates."""

from pathlib import Path

import pytest

from vfrl.launcher.config_errors import ConfigError, load_user_config
from vfrl.launcher.overrides import Override, parse_overrides

ROOT = Path(__file__).resolve().parents[1]
HEAD = 'model = "m"\n[env]\nid = "e"\n'

# (TOML body, the one line expected after "<file>: ")
BAD_CONFIGS = [
    (HEAD + "[trainer.args]\nbatch_sise = 8\n",
     "unknown key 'trainer.args.batch_sise'; did you mean 'trainer.args.batch_size'?"),
    (HEAD + "[trainer]\nmax_steps = 8\n",  # right name, wrong table
     "unknown key 'trainer.max_steps'; did you mean 'trainer.args.max_steps'?"),
    (HEAD + "[inference]\nprot = 8000\n",
     "unknown key 'inference.prot'; did you mean 'inference.port'?"),
    ('[env]\nid = "e"\n', "missing required key 'model'"),
    (HEAD + "[trainer.args]\nlearning_rate = -1\n",
     "trainer.args.learning_rate = -1 is invalid: must be greater than 0"),
    (HEAD + '[trainer.args]\nlr_scheduler_type = "cosin"\n',
     "trainer.args.lr_scheduler_type = \"cosin\" is invalid: must be 'constant', 'linear' or 'cosine'"),
    (HEAD + "[trainer.args]\nwarmup_steps = 10\n",  # the default schedule is constant: it would be ignored
     "trainer.args.warmup_steps = 10 is invalid: the 'constant' schedule has no warm-up: set lr_scheduler_type = "
     "'linear' or 'cosine', or warmup_steps = 0"),
    (HEAD + "[trainer.args]\nbatch_size = 10\nrollouts_per_example = 4\nmicro_batch_size = 2\n",
     "trainer.args.batch_size = 10 is invalid: must be a multiple of rollouts_per_example (4), e.g. 8 or 12"),
    (HEAD + "[trainer]\ngpus = 2\n[trainer.args]\nbatch_size = 24\nrollouts_per_example = 4\nmicro_batch_size = 8\n",
     "trainer.args.batch_size = 24 is invalid: must be a multiple of trainer.args.micro_batch_size x trainer "
     "processes (8 x 2 = 16), e.g. 16 or 32"),
    (HEAD + "[trainer.args]\nbatch_size = 64\nmicro_batch_size = 48\n",  # one process on the CPU or one GPU
     "trainer.args.batch_size = 64 is invalid: must be a multiple of trainer.args.micro_batch_size x trainer "
     "processes (48 x 1 = 48), e.g. 48 or 96"),
    (HEAD + "[trainer]\ngpus = 0\nnodes = 2\nprocesses = 2\n[trainer.args]\nbatch_size = 12\nrollouts_per_example = 4\n"
     "micro_batch_size = 2\n",  # every node's processes count: 2 x 2 x 2 = 8 micro-batch rows a round
     "trainer.args.batch_size = 12 is invalid: must be a multiple of trainer.args.micro_batch_size x trainer "
     "processes (2 x 2 nodes x 2 processes = 8), e.g. 8 or 16"),
    (HEAD + "[trainer]\nnodes = 0\n", "trainer.nodes = 0 is invalid: must be greater than or equal to 1"),
    (HEAD + '[trainer]\nnodes = 2\nmain_address = "10.0.0.5:29500"\n',
     'trainer.main_address = "10.0.0.5:29500" is invalid: must be a bare host name or IP address (e.g. node-01 or '
     "10.0.0.5), without scheme or port; the port is trainer.main_port"),
    (HEAD + "[trainer]\nnodes = 2\nmain_port = 70000\n",
     "trainer.main_port = 70000 is invalid: must be less than or equal to 65535"),
    (HEAD + "[trainer.args]\nmax_tokens = 128\nmax_seq_len = 128\n",
     "trainer.args.max_tokens = 128 is invalid: must be smaller than max_seq_len (128), which also holds the prompt"),
    (HEAD + "[trainer.args]\nlora_rank = 1024\n",
     "trainer.args.lora_rank = 1024 is invalid: vLLM serves LoRA ranks up to 512; use at most 512"),
    (HEAD + "[inference.args]\nmax_lora_rank = 8\n[trainer.args]\nlora_rank = 16\n",
     "inference.args.max_lora_rank = 8 is invalid: must be a vLLM max LoRA rank >= trainer.args.lora_rank (16): "
     "16, 32, 64, 128, 256, 320, 512; or leave it out and vf-rl picks one"),
    (HEAD + "[inference.args]\nmax_lora_rank = 24\n",
     "inference.args.max_lora_rank = 24 is invalid: must be a vLLM max LoRA rank >= trainer.args.lora_rank (8): "
     "8, 16, 32, 64, 128, 256, 320, 512; or leave it out and vf-rl picks one"),
    (HEAD + '[trainer.args]\nuse_lora = false\nlora_sync = "merged"\n',
     'trainer.args.lora_sync = "merged" is invalid: applies to LoRA training only (use_lora = true); full fine-tuning '
     'always reloads every weight: leave lora_sync out'),
    (HEAD + "[inference]\ngpus = 3\n[inference.args]\ntensor_parallel_size = 2\n",
     "inference.gpus = 3 is invalid: must be a multiple of inference.args.tensor_parallel_size (2): vLLM runs "
     "gpus / tensor_parallel_size data-parallel replicas"),
    (HEAD + "[inference]\ngpus = 4\n[inference.args]\ntensor_parallel_size = 2\ndata_parallel_size = 4\n",
     "inference.args.data_parallel_size = 4 is invalid: must be inference.gpus / tensor_parallel_size = 2, "
     "or left out (vf-rl sets it)"),
    (HEAD + "[trainer.args]\ngeneration_timeout = 120\n",  # rollout_timeout left at its default, 300
     "trainer.args.rollout_timeout = 300.0 is invalid: must be at most generation_timeout (120), the time limit of "
     "a whole batch of rollouts"),
    (HEAD + "[inference.args]\ngpu_memory_utilization = 85\n",
     "inference.args.gpu_memory_utilization = 85 is invalid: must be a number above 0 and at most 1: the fraction of "
     "each of its GPUs vLLM may take"),
    (HEAD + '[inference]\nshare_gpus = "yes"\n',
     "inference.share_gpus = \"yes\" is invalid: must be 'auto', 'always' or 'never'"),
    (HEAD + '[trainer]\ngpus = "two"\n',
     "trainer.gpus = \"two\" is invalid: must be a valid integer, unable to parse string as an integer"),
    ('model = "m"\n[env\n', "not valid TOML"),
]


@pytest.mark.parametrize("body, message", BAD_CONFIGS, ids=[m[:48] for _, m in BAD_CONFIGS])
def test_bad_config_gives_one_line_naming_file_key_value_and_fix(tmp_path, body, message):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(ConfigError) as e:
        load_user_config(path)
    text = str(e.value)
    assert "\n" not in text
    if message == "not valid TOML":
        assert text.startswith(f"{path}: not valid TOML")
    else:
        assert text == f"{path}: {message}"


def test_every_problem_gets_its_own_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(HEAD + "[trainer.args]\nbatch_size = 10\nrollouts_per_example = 4\nmicro_batch_size = 2\n"
                           "max_tokens = 300\nmax_seq_len = 256\n")
    with pytest.raises(ConfigError) as e:
        load_user_config(path)
    lines = str(e.value).splitlines()
    assert [line.split(" = ")[0] for line in lines] == [f"{path}: trainer.args.batch_size",
                                                         f"{path}: trainer.args.max_tokens"]


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: no such config file$"):
        load_user_config(tmp_path / "nope.toml")


@pytest.mark.parametrize("tokens, expected", [
    (["--trainer.args.max_steps", "10"], [("trainer.args.max_steps", 10)]),
    (["--trainer.args.learning-rate=3e-4"], [("trainer.args.learning_rate", 3e-4)]),
    (["--trainer.args.bf16"], [("trainer.args.bf16", True)]),
    (["--trainer.args.bf16", "--trainer.args.top_k", "-1"], [("trainer.args.bf16", True), ("trainer.args.top_k", -1)]),
    (["--model", "Qwen/Qwen2.5-0.5B-Instruct"], [("model", "Qwen/Qwen2.5-0.5B-Instruct")]),
    (["--trainer.args.lora_target_modules", '["q_proj", "v_proj"]'],
     [("trainer.args.lora_target_modules", ["q_proj", "v_proj"])]),
    (["--trainer.args.run_name", '"a b"'], [("trainer.args.run_name", "a b")]),
    (["--inference.args.enforce_eager=false"], [("inference.args.enforce_eager", False)]),
])
def test_overrides_are_toml_literals_with_string_fallback(tokens, expected):
    assert [(o.key, o.value) for o in parse_overrides(tokens)] == expected


def test_a_stray_argument_is_refused():
    with pytest.raises(ValueError, match="unexpected argument '10'"):
        parse_overrides(["10"])


def test_overrides_win_over_the_file_and_are_validated_like_it(tmp_path):
    path = tmp_path / "cfg.toml"
    path.write_text(HEAD + "[trainer.args]\nmax_steps = 100\n")
    cfg = load_user_config(path, parse_overrides(["--trainer.args.max_steps", "10",
                                                  "--inference.args.dtype", "float32"]))
    assert cfg.args.max_steps == 10 and cfg.inference.args == {"dtype": "float32"}
    for tokens, message in [
        (["--trainer.args.max_steps", "0"],
         "trainer.args.max_steps = 0 (from --trainer.args.max_steps) is invalid: must be greater than or equal to 1"),
        (["--trainer.args.max_step", "10"],
         "unknown key 'trainer.args.max_step' (from --trainer.args.max_step); did you mean 'trainer.args.max_steps'?"),
        (["--model.name", "x"], "--model.name: 'model' is a value, not a table; set it with --model VALUE"),
    ]:
        with pytest.raises(ConfigError) as e:
            load_user_config(path, parse_overrides(tokens))
        assert str(e.value) == f"{path}: {message}"


def test_override_objects_keep_the_flag_as_typed():
    assert parse_overrides(["--trainer.args.max-steps", "3"]) == [
        Override("trainer.args.max_steps", 3, "--trainer.args.max-steps")]


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "rl").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_config_validates(path):
    load_user_config(path)


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "rl").glob("*.toml")), ids=lambda p: p.name)
def test_the_run_directory_config_the_trainer_rereads_validates(path, tmp_path):
    """vf-rl writes the resolved config (every field, defaults included) and vf-train loads it again: a rule
    that refuses a default written back (api_key_var once did) stopped every run at the trainer."""
    from vfrl.config import load_config, write_config

    write_config(load_user_config(path), tmp_path / "config.toml")
    assert load_config(tmp_path / "config.toml") == load_user_config(path)
