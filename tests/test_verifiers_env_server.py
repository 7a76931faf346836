"""env.workers: a verifiers 0.4 package's episodes in verifiers' own env server (src/vfrl/envs/verifiers_env_server.py),
worker processes beside the trainer, against the real vLLM CPU server."""

import asyncio
import multiprocessing
import os

import pytest

from conftest import served_batch
from test_env_verifiers_v1 import PKGS, needs_v1


def seen(batch) -> list:
    return sorted((r.example_id, r.prompt_ids, r.completion_ids, r.completion_mask, r.reward, r.metrics,
                   r.turn_spans) for r in batch.rollouts)


@needs_v1
@pytest.mark.e2e
def test_env_workers_give_the_rollouts_the_trainers_process_gives(shared_vllm_server, tiny_model, monkeypatch):
    """The same batch (2 examples x 2, per-episode seeds) sampled in the trainer's process and in verifiers' env
    server with two workers (a broker over two EnvServer processes, each loading the package): the same token ids,
    masks, rewards and metrics, logprobs within float noise; the server and its workers end with the env's aclose."""
    from vfrl.envs.loader import load_configured_environment
    from vfrl.envs.verifiers_env_server import EnvServerProcess
    from vfrl_chat_harness import InProcess

    monkeypatch.setenv("PYTHONPATH", str(PKGS))  # the workers import the package
    here = load_configured_environment("v1-reverse", {}, None, 0)
    here.group_first_turns = False  # the workers send a request per episode
    there = load_configured_environment("v1-reverse", {}, None, 2)
    args = (shared_vllm_server.base_url, shared_vllm_server.api_key, str(tiny_model), 0)
    local = served_batch(here, *args, max_tokens=12)

    async def not_here(self, argv, env):
        raise AssertionError("an episode ran in the trainer's process")

    sent, run = [], EnvServerProcess.run

    async def counted(self, context, task_data):
        sent.append(task_data)
        return await run(self, context, task_data)

    monkeypatch.setattr(InProcess, "run_program", not_here)
    monkeypatch.setattr(EnvServerProcess, "run", counted)
    served = served_batch(there, *args, max_tokens=12)
    assert len(sent) == 4
    assert len(served.rollouts) == 4 and served.metrics["rollouts_dropped"] == 0
    assert seen(served) == seen(local)
    for a, b in zip(sorted(local.rollouts, key=lambda r: (r.example_id, r.completion_ids)),
                    sorted(served.rollouts, key=lambda r: (r.example_id, r.completion_ids))):
        assert a.completion_logprobs == pytest.approx(b.completion_logprobs, abs=1e-4)
    assert there.server is None and multiprocessing.active_children() == []


@needs_v1
def test_an_env_server_that_exits_before_it_serves_is_one_line():
    from vfrl.envs.verifiers_env_server import EnvServerError, EnvServerProcess

    server = EnvServerProcess("v1-reverse", {}, 2, target=os._exit)  # os._exit(**kwargs): a TypeError, exit 1
    with pytest.raises(EnvServerError) as e:
        asyncio.run(server.start())
    assert str(e.value) == ("environment 'v1-reverse': verifiers' env server exited with code 1 before it served "
                            "(env.workers = 2; its error is in the trainer's log)")
    server.end()
    assert multiprocessing.active_children() == []


@needs_v1
def test_env_workers_for_a_vfrl_environment_is_one_line():
    """vf-rl's preflight, the loader (vf-train, the Python API) and vf-eval --env-workers say the same line; a
    verifiers package takes them."""
    from typer.testing import CliRunner

    from vfrl.envs.cli.eval import app as eval_app
    from vfrl.envs.loader import EnvironmentLoadError, load_configured_environment
    from vfrl.launcher.preflight import environment_problem

    line = ("env.workers = 2 is for verifiers 0.4 packages (verifiers' env server runs their episodes), and "
            "'reverse-text' is not one: remove env.workers")
    assert environment_problem("reverse-text", None, 2) == line
    with pytest.raises(EnvironmentLoadError, match=line.replace("(", r"\(").replace(")", r"\)")):
        load_configured_environment("reverse-text", {}, None, 2)
    done = CliRunner().invoke(eval_app, ["reverse-text", "--env-workers", "2", "-b", "http://127.0.0.1:1/v1"])
    assert done.exit_code != 0 and line in " ".join(done.output.split()) and "Traceback" not in done.output
    assert environment_problem("v1-reverse", None, 2) is None
    assert load_configured_environment("v1-reverse", {}, None, 2).workers == 2
