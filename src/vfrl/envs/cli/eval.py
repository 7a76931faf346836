"""vf-eval: run an environment against any OpenAI-compatible server and report its rewards.

Writes one rollout per line to `results.jsonl` and the run's settings and means to `metadata.json`,
under outputs/evals/<env>--<model>/<timestamp>/ unless `-o` names the folder.

Token ids (`--token-ids`): against vLLM, rollouts keep the token ids and logprobs the trainer would
see. Any other server is evaluated on text: `auto` (the default) asks the server once, before the
run, for one token the vLLM way, and switches to text mode with a one-line notice when it refuses
the request (HTTP 400/422) or answers without ids.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import statistics
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from vfrl.envs.at_k import at_k
from vfrl.envs.cli import fail
from vfrl.envs.cli.eval_defaults import EVAL_DEFAULTS, read_eval_defaults
from vfrl.envs.faults import RolloutFailed, RolloutFaults, first_reason, reward_error_counts
from vfrl.rollout_types import json_default
from vfrl.envs.sampling import MissingTokenIds, probe_token_ids

PROG = "vf-eval"
DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
DEFAULT_KEY_VAR = "VFRL_API_KEY"
app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


class Sandbox(str, Enum):
    hosted = "hosted"
    local = "local"
    unsandboxed = "unsandboxed"


class TokenIds(str, Enum):
    auto = "auto"  # token mode when the server returns vLLM's ids, else text mode
    on = "on"  # token mode; a server without ids is an error
    off = "off"  # text mode: plain chat (or completions) requests, no ids or logprobs recorded


def parse_json_object(text: str | None, flag: str) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        fail(PROG, f"{flag} is not valid JSON ({e.msg} at column {e.colno}): {text!r}; "
                   f"""example: {flag.split('/')[0]} '{{"num_eval_examples": 10}}'""")
    if not isinstance(value, dict):
        fail(PROG, f"{flag} must be a JSON object like '{{\"key\": 1}}', got {text!r}")
    return value


def model_slug(model: str) -> str:
    """`Qwen/Qwen3-4B` -> `Qwen--Qwen3-4B`; a local model folder -> its folder name."""
    if model.startswith(("/", ".", "~")) or Path(model).is_dir():
        return Path(model).name or "model"
    return model.replace("/", "--")


def output_dir(env_id: str, model: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("outputs") / "evals" / f"{env_id}--{model_slug(model)}" / stamp
    path, k = base, 1
    while path.exists():  # two runs in the same second: never mix their files
        path, k = base.with_name(f"{stamp}-{k}"), k + 1
    return path


def rollout_record(rollout: Any, scored: bool = True) -> dict[str, Any]:
    """A rollout as a line of results.jsonl; an unscored one (score_rollouts=False) has reward null."""
    record = dataclasses.asdict(rollout) if dataclasses.is_dataclass(rollout) else dict(vars(rollout))
    return record if scored else {**record, "reward": None}


def summarize(rollouts: list[Any], scored: bool = True) -> dict[str, Any]:
    """Reward, metrics and pass@k over the rollouts (None and empty when the environment does not score them),
    truncation and length."""
    rewards = [float(r.reward) for r in rollouts]
    names = sorted({name for r in rollouts for name in r.metrics})
    return {
        "reward": {"mean": statistics.fmean(rewards), "std": statistics.pstdev(rewards),
                   "min": min(rewards), "max": max(rewards)} if scored else None,
        # a metric missing from a rollout (e.g. reward_errors) counts as 0 there
        "metrics": {name: statistics.fmean(float(r.metrics.get(name, 0.0)) for r in rollouts) for name in names},
        "truncated": statistics.fmean(1.0 if getattr(r, "truncated", False) else 0.0 for r in rollouts),
        # unknown in text mode (no token ids recorded)
        "completion_tokens": statistics.fmean(len(r.completion_ids) for r in rollouts)
        if all(getattr(r, "completion_ids", None) for r in rollouts) else None,
        "at_k": at_k(rollouts) if scored else {},  # avg@k and pass@k with -r k > 1
    }


def api_error_message(e: Exception, base_url: str, model: str, key_var: str) -> str | None:
    """One line for the server mistakes a user can fix; None for anything else."""
    import openai

    if isinstance(e, openai.APIConnectionError):
        return f"cannot reach {base_url} ({e}); is the server running? start one with `vf-vllm` or pass -b URL"
    if isinstance(e, openai.AuthenticationError):
        return f"{base_url} rejected the API key (taken from ${key_var}); export it or pass -k VAR"
    if isinstance(e, openai.NotFoundError):
        return f"model '{model}' is not served at {base_url} ({e.message}); pass the served name with -m"
    if isinstance(e, openai.APIStatusError):
        return f"the server at {base_url} refused a request (HTTP {e.status_code}): {e.message}"
    if isinstance(e, MissingTokenIds):
        return (f"--token-ids on, but {base_url} answered without vLLM's token ids (no {e.what}); "
                "pass --token-ids auto or off to evaluate it on text")
    return None


async def served_models(client) -> list[str]:
    return [m.id async for m in client.models.list()]


async def choose_token_mode(client, model: str, token_ids: TokenIds, base_url: str, completion: bool = False) -> bool:
    """Whether to record token ids (token mode) or evaluate on text; `auto` probes the server once, on the
    route the environment's requests take (`completion`: /v1/completions)."""
    if token_ids is not TokenIds.auto:
        return token_ids is TokenIds.on
    why_not = await probe_token_ids(client, model, completion)
    if why_not is not None:
        typer.echo(f"{PROG}: {base_url} does not return vLLM token ids ({why_not}); evaluating on text, "
                   "without token ids or logprobs (--token-ids off skips this check)", err=True)
    return why_not is None


async def run_eval(env, client, model: str, num_examples: int, rollouts_per_example: int,
                   sampling: dict[str, Any], max_concurrent: int, results_path: Path, on_group,
                   record_tokens: bool = True, faults: RolloutFaults | None = None) -> list[Any]:
    """All groups concurrently (at most max_concurrent requests in flight); each group is appended to
    results.jsonl as soon as it is scored, so an interrupted run keeps what it finished. `faults`:
    rollouts the server rejects are left out and counted there, as in training."""
    semaphore = asyncio.Semaphore(max_concurrent)
    tasks = [asyncio.create_task(env.run_group(client, model, i, rollouts_per_example, sampling, semaphore, eval=True,
                                               record_tokens=record_tokens, faults=faults))
             for i in range(num_examples)]
    rollouts: list[Any] = []
    try:
        with results_path.open("w") as f:
            for next_group in asyncio.as_completed(tasks):
                group = await next_group
                for r in group:
                    f.write(json.dumps(rollout_record(r, getattr(env, "score_rollouts", True)),
                                       default=json_default) + "\n")
                f.flush()
                rollouts += group
                on_group(rollouts_per_example)  # dropped rollouts are done too
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    rollouts.sort(key=lambda r: r.example_id)
    return rollouts


def print_summary(summary: dict[str, Any], n_rollouts: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{n_rollouts} rollouts", title_justify="left")
    table.add_column("")
    table.add_column("mean", justify="right")
    table.add_column("std", justify="right")
    if summary["reward"] is None:
        table.add_row("reward", "not scored", "")
    else:
        table.add_row("reward", f"{summary['reward']['mean']:.4f}", f"{summary['reward']['std']:.4f}")
    for name, mean in summary["metrics"].items():
        table.add_row(name, f"{mean:.4f}", "")
    for name, value in summary["at_k"].items():
        table.add_row(name, f"{value:.4f}", "")
    table.add_row("truncated", f"{summary['truncated']:.4f}", "")
    if summary["completion_tokens"] is not None:
        table.add_row("completion tokens", f"{summary['completion_tokens']:.1f}", "")
    Console().print(table)


# `vf-eval --help`. A string, not the docstring: typer shows a line break inside a paragraph after the first as it is
# written, so each paragraph is one line of the help and several lines here.
EVALUATE_HELP = (
    "Evaluate ENV_ID: N examples x R rollouts against the server; print the mean reward and each metric's mean.\n\n"
    "Against vLLM the rollouts keep their token ids and logprobs; any other OpenAI-compatible server is evaluated on "
    "text (see --token-ids).\n\n"
    "Defaults can come from \\[tool.vfrl.eval] in the environment's pyproject.toml; flags win.")


@app.command(help=EVALUATE_HELP)
def evaluate(
    env_id: Annotated[str, typer.Argument(metavar="ENV_ID", help="Installed environment id, e.g. reverse-text.")],
    model: Annotated[Optional[str], typer.Option(
        "--model", "-m",
        help="Model name as the server knows it \\[default: the first model the server lists].")] = None,
    api_base_url: Annotated[Optional[str], typer.Option(
        "--api-base-url", "-b", help=f"OpenAI-compatible base URL \\[default: {DEFAULT_BASE_URL}].")] = None,
    api_key_var: Annotated[Optional[str], typer.Option(
        "--api-key-var", "-k",
        help=f"Environment variable holding the API key \\[default: {DEFAULT_KEY_VAR}; 'EMPTY' when unset].")] = None,
    num_examples: Annotated[Optional[int], typer.Option(
        "--num-examples", "-n", help="Examples to evaluate; -1 for all \\[default: 5].")] = None,
    rollouts_per_example: Annotated[Optional[int], typer.Option(
        "--rollouts-per-example", "-r", help="Rollouts per example \\[default: 3].")] = None,
    max_concurrent: Annotated[Optional[int], typer.Option(
        "--max-concurrent", "-c", help="Requests in flight at most \\[default: 32].")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(
        "--max-tokens", "-t", help="Max tokens per reply \\[default: the server's].")] = None,
    temperature: Annotated[Optional[float], typer.Option(
        "--temperature", "-T", help="Sampling temperature \\[default: the server's].")] = None,
    sampling_args: Annotated[Optional[str], typer.Option(
        "--sampling-args", "-S", help="""More sampling args as JSON, e.g. '{"top_p": 0.9, "seed": 0}'.""")] = None,
    env_args: Annotated[Optional[str], typer.Option(
        "--env-args", "-a",
        help="""load_environment() keyword args as JSON, e.g. '{"num_eval_examples": 10}'.""")] = None,
    output: Annotated[Optional[Path], typer.Option(
        "--output-dir", "-o",
        help="Folder for results.jsonl and metadata.json "
             "\\[default: outputs/evals/<env>--<model>/<timestamp>].")] = None,
    renderer: Annotated[Optional[str], typer.Option(
        "--renderer",
        help="verifiers 0.4 packages: the `renderers` renderer for the prompts, a name (qwen3) or JSON "
             """('{"name": "default", "tool_parser": "hermes"}') \\[default: found from the model's name].""")] = None,
    env_workers: Annotated[int, typer.Option(
        "--env-workers", min=0,
        help="verifiers 0.4 packages: run the episodes in verifiers' env server with this many worker processes "
             "(env.workers); 0 runs them in this process.")] = 0,
    sandbox: Annotated[Optional[Sandbox], typer.Option(
        "--sandbox", case_sensitive=False,
        help="Where verifiers' SandboxEnv runs its sandboxes: 'local' is vfrl's sandbox on this machine (no network, "
             "the machine's system read-only); 'hosted' (Prime Intellect's service) is not run by vfrl; "
             "'unsandboxed' lets the python tool run code without isolation where the machine cannot isolate.")] = None,
    token_ids: Annotated[TokenIds, typer.Option(
        "--token-ids", case_sensitive=False,
        help="Record vLLM's token ids and logprobs per rollout: 'on' needs vLLM, 'off' sends plain requests without "
             "them (any OpenAI-compatible server), 'auto' asks the server once and falls back to text with a "
             "notice.")] = TokenIds.auto,
) -> None:
    given = {"model": model, "api_base_url": api_base_url, "api_key_var": api_key_var, "num_examples": num_examples,
             "rollouts_per_example": rollouts_per_example, "max_concurrent": max_concurrent, "max_tokens": max_tokens,
             "temperature": temperature}
    job = resolve_job(env_id, given, env_args, sampling_args, output, token_ids)
    job.renderer = (parse_json_object(renderer, "--renderer") if renderer and renderer.lstrip().startswith("{")
                    else renderer)
    job.workers = env_workers
    job.sandbox = sandbox.value if sandbox is not None else None
    env = load_eval_environment(job)
    try:
        asyncio.run(run_job(job, env))
    except KeyboardInterrupt:
        typer.echo(f"{PROG}: interrupted; groups finished before that are kept in results.jsonl (no metadata.json)",
                   err=True)
        raise typer.Exit(130) from None


@dataclass
class EvalJob:
    """What one vf-eval does: flags over [tool.vfrl.eval] defaults over vf-eval's own (docs/environments.md)."""
    env_id: str
    env_args: dict[str, Any]
    opts: dict[str, Any]  # model, api_base_url, api_key_var, num_examples, rollouts_per_example, max_concurrent, ...
    sampling: dict[str, Any]
    api_key: str
    source: Path | None  # the pyproject.toml the defaults came from
    output: Path | None
    token_ids: TokenIds
    split: str = "train"
    renderer: str | dict[str, Any] | None = None  # a verifiers 0.4 package's renderer (env.renderer)
    workers: int = 0  # a verifiers 0.4 package's env server workers (env.workers)
    sandbox: str | None = None  # where verifiers' SandboxEnv runs its sandboxes (env.sandbox)
    n: int = 0  # examples to evaluate, known once the environment is loaded


def resolve_job(env_id: str, given: dict[str, Any], env_args: str | None, sampling_args: str | None,
                output: Path | None, token_ids: TokenIds) -> EvalJob:
    try:
        defaults, source = read_eval_defaults(env_id)
    except ValueError as e:
        fail(PROG, str(e))
    opts = {**EVAL_DEFAULTS, **defaults, **{k: v for k, v in given.items() if v is not None}}
    args = {**defaults.get("env_args", {}), **parse_json_object(env_args, "-a/--env-args")}
    sampling = {**defaults.get("sampling_args", {}), **parse_json_object(sampling_args, "-S/--sampling-args")}
    for key in ("max_tokens", "temperature"):
        if opts[key] is not None:
            sampling[key] = opts[key]
    if opts["rollouts_per_example"] < 1 or opts["max_concurrent"] < 1 or opts["num_examples"] == 0:
        fail(PROG, "-n must be -1 or positive, -r and -c at least 1")
    key_var = opts["api_key_var"]
    api_key = os.environ.get(key_var)
    if api_key is None:
        if given["api_key_var"] is not None:  # asked for by name: it must be there
            fail(PROG, f"${key_var} is not set; export it or pass -k with the variable that holds the API key")
        api_key = "EMPTY"
    return EvalJob(env_id, args, opts, sampling, api_key, source, output, token_ids)


def load_eval_environment(job: EvalJob):
    """The environment, and which split and how many examples of it the job evaluates (eval split if it has one)."""
    from vfrl.envs.environment import DatasetBuildError
    from vfrl.envs.loader import EnvironmentLoadError, load_configured_environment

    try:
        env = load_configured_environment(job.env_id, job.env_args, job.renderer, job.workers, job.sandbox)
    except EnvironmentLoadError as e:  # one line: the package and the error (args refused, a raise, not an env)
        fail(PROG, str(e))
    if job.opts["num_examples"] > 0 and hasattr(env, "limit_tasks"):  # a verifiers taskset: read the first n only
        env.limit_tasks(job.opts["num_examples"], bounded_too=True)
    try:
        data = env.eval_dataset if env.eval_dataset is not None else env.dataset
    except DatasetBuildError as e:  # one line: the builder and its error (its data behind a network it cannot reach)
        fail(PROG, str(e))
    job.split = "eval" if env.eval_dataset is not None else "train"
    if not len(data):  # e.g. a package whose own filter kept no row of its data
        fail(PROG, f"environment '{job.env_id}' has no rows to evaluate: its {job.split} split is empty"
                   + ("" if job.split == "train" else " (it has an eval split, and vf-eval reads that one)"))
    job.n = len(data) if job.opts["num_examples"] < 0 else min(job.opts["num_examples"], len(data))
    return env


async def run_job(job: EvalJob, env) -> None:
    """Ask the server, sample every rollout into results.jsonl, then write metadata.json and print the summary."""
    from openai import AsyncOpenAI

    base_url, key_var = job.opts["api_base_url"], job.opts["api_key_var"]
    client = AsyncOpenAI(base_url=base_url, api_key=job.api_key, max_retries=1)
    model, out = job.opts["model"], None
    try:
        model = await pick_model(client, model, base_url)
        out = job.output or output_dir(job.env_id, model)
        if (out / "results.jsonl").exists():
            fail(PROG, f"{out / 'results.jsonl'} already exists; pass another -o folder "
                       "(vf-eval never overwrites results)")
        record_tokens = await choose_token_mode(client, model, job.token_ids, base_url,
                                                completion=getattr(env, "message_type", "chat") == "completion")
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        rollouts, faults = await sample_with_progress(job, env, client, model, out / "results.jsonl", record_tokens)
    except BaseException as e:  # also Ctrl-C: no empty results file left behind
        if out is not None:
            _remove_if_empty(out / "results.jsonl")
        line = api_error_message(e, base_url, model or "?", key_var) if isinstance(e, Exception) else None
        if line is None and getattr(e, "worded_for_users", False):  # e.g. a verifiers 0.4 env on a plain server
            line = str(e)
        if line is None:
            raise
        if isinstance(e, RolloutFailed) and out is not None:  # the package's bug: its traceback is for its author
            out.mkdir(parents=True, exist_ok=True)
            (out / "traceback.txt").write_text("".join(traceback.format_exception(e)))
            line += f"; the traceback is in {out / 'traceback.txt'}"
        fail(PROG, line)
    finally:
        if hasattr(env, "aclose"):  # its @teardown methods, or a verifiers 0.4 environment's serving resources
            await env.aclose()
        await client.close()
    summary = summarize(rollouts, scored=getattr(env, "score_rollouts", True))
    write_metadata(out / "metadata.json", job, model, rollouts, faults, record_tokens, summary, time.time() - t0)
    print_summary(summary, len(rollouts))
    said = (f"reward mean {summary['reward']['mean']:.4f}" if summary["reward"] is not None
            else f"{len(rollouts)} rollouts, not scored (the environment sets score_rollouts=False)")
    typer.echo(f"{PROG}: {said}; wrote {out}/results.jsonl and metadata.json")
    if stop := scoring_failures(rollouts, faults, job.n * job.opts["rollouts_per_example"]):
        fail(PROG, stop)


def scoring_failures(rollouts: list, faults: RolloutFaults, requested: int) -> str | None:
    """Say each reward function that failed (one line each: which, on how many, why); return the line to stop on
    where vf-train would stop a run (trainer.args.max_reward_error_fraction's default), else None."""
    from vfrl.config import TrainerArgs

    limit = TrainerArgs.model_fields["max_reward_error_fraction"].default
    stop = None
    for name, n in reward_error_counts(rollouts).items():
        if n:
            why = first_reason(rollouts, name)
            typer.echo(f"{PROG}: reward function {name!r} failed on {n} of {len(rollouts)} rollouts and scored 0 "
                       f"there; it {why}", err=True)
            if n > limit * len(rollouts) and stop is None:
                stop = (f"reward function {name!r} failed on {n} of {len(rollouts)} rollouts (more than "
                        f"{limit:g}, where vf-train stops a run): it {why}; fix the function (each rollout's "
                        "reward_errors are in results.jsonl)")
    scoring = faults.dropped["scoring_failed"]
    if stop is None and scoring > limit * requested:
        stop = (f"the environment's scoring failed on {scoring} of {requested} rollouts (more than {limit:g}, where "
                f"vf-train stops a run), e.g. {faults.first['scoring_failed']}; fix the @vf.reward or @vf.metric")
    return stop


async def pick_model(client, model: str | None, base_url: str) -> str:
    """-m, checked against what the server lists (which also tells early that it is there); else its first."""
    served = await served_models(client)
    if model is None:
        if not served:
            fail(PROG, f"{base_url} serves no model; pass -m MODEL")
        typer.echo(f"{PROG}: model {served[0]} (the first the server lists; -m to choose)")
        return served[0]
    if served and model not in served:
        fail(PROG, f"model '{model}' is not served at {base_url}; it serves: {', '.join(served[:5])}")
    return model


async def sample_with_progress(job: EvalJob, env, client, model: str, results: Path, record_tokens: bool):
    """Every rollout, with a progress bar; faulty ones dropped and counted (all dropped: one line, exit 2)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    n, r = job.n, job.opts["rollouts_per_example"]
    typer.echo(f"{PROG}: {job.env_id} ({job.split} split): {n} examples x {r} rollouts against "
               f"{job.opts['api_base_url']}")
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn()) as progress:
        bar = progress.add_task(job.env_id, total=n * r)
        faults = RolloutFaults()
        rollouts = await run_eval(env, client, model, n, r, job.sampling, job.opts["max_concurrent"], results,
                                  lambda k: progress.advance(bar, k), record_tokens, faults)
    if faults.total:
        what = f"{faults.total} of {n * r} rollouts dropped: {faults.describe()}"
        if not rollouts:
            fail(PROG, f"all {what}")
        typer.echo(f"{PROG}: {what}", err=True)
    return rollouts, faults


def write_metadata(path: Path, job: EvalJob, model: str, rollouts: list, faults: RolloutFaults, record_tokens: bool,
                   summary: dict[str, Any], duration_s: float) -> None:
    metadata = {
        "env_id": job.env_id, "env_args": job.env_args, "model": model, "base_url": job.opts["api_base_url"],
        "split": job.split, "num_examples": job.n, "rollouts_per_example": job.opts["rollouts_per_example"],
        "num_rollouts": len(rollouts), "rollouts_dropped": dict(faults.dropped), "sampling_args": job.sampling,
        "max_concurrent": job.opts["max_concurrent"], "token_ids": record_tokens,
        "defaults_from": str(job.source) if job.source else None,
        **summary, "duration_s": round(duration_s, 3),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "vfrl_version": _vfrl_version(),
    }
    path.write_text(json.dumps(metadata, indent=2, default=str) + "\n")


def _remove_if_empty(results: Path) -> None:
    """A run that failed before its first group leaves no empty files behind; partial results stay."""
    if results.is_file() and results.stat().st_size == 0:
        results.unlink()
        if not any(results.parent.iterdir()):
            results.parent.rmdir()


def _vfrl_version() -> str:
    from vfrl import __version__

    return __version__


def main() -> None:
    app()
