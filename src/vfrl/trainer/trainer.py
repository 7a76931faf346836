"""vf-train's loop: asynchronous, one-step off-policy GRPO-style training against a vLLM server.

    step n: await batch n (sampled by policy n-k or later)  -- generated while earlier steps trained
            start generating batch n+k with policy n        -- k = num_batches_ahead (1: one-step off-policy)
            train on batch n in the torch thread            -- the event loop keeps generating
            push policy n+1 to vLLM, sample from it from now on
    (k = 0: generate batch n with policy n, then train on it.)

The two sides it joins, siblings that never import each other (tests/test_layers.py):
    rollouts/           the pipeline (push to vLLM, the batch in flight, eval in the background), the orchestrator
                        (examples, rollouts against vLLM, scores: the environment, envs/), the weight sync
    learner/            Learner: model, optimizer, schedule, reference; train_step on one batch returns its stats;
                        checkpoints; several processes (accelerate launch --num-processes N: rank 0 runs this loop
                        and hands each batch to the others, which only train: _follow)
    rollout_types.py    what one hands the other: Rollout, Batch
And beside the loop, in trainer/: run_log.py (metrics.jsonl, rollout files, console, wandb), failure.py (the one
line and what is kept when the run cannot go on), inference_watch.py (the vLLM server, watched beside the loop;
when vf-vllm starts a dead one again, heal() waits for it and the loop goes on from the steps trained).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from pathlib import Path

from vfrl.config import RLConfig
from vfrl.envs.loader import load_configured_environment, trainable
from vfrl.run_dir import RunDir, set_aside_after
from vfrl.learner.checkpoint import TrainingState, latest_checkpoint, save_checkpoint, step_of
from vfrl.trainer.console import TrainerConsole
from vfrl.rollouts.evaluation import is_eval_step
from vfrl import stop_signals
from vfrl.trainer.failure import (
    EXIT_ERROR, EXIT_INFERENCE_LOST, HungUp, TrainingStopped, as_typed, describe, log_traceback, resume_hint,
    unretrieved_errors_to,
)
from vfrl.trainer.inference_watch import (
    START_TIMEOUT, InferenceLost, inference_problem, own_server_url, restart_under_way, restarts, wait_for_server,
    watch_inference,
)
from vfrl.learner.learner import Learner
from vfrl.rollouts.orchestrator import Orchestrator
from vfrl.rollout_types import Batch
from vfrl.rollouts.pipeline import SERVER_CALLS, Pipeline
from vfrl.trainer.run_log import RunLog, step_record
from vfrl.rollouts.sent_requests import SentRequests
from vfrl.trainer.summary import summary
from vfrl.torch_thread import TorchThread
from vfrl.rollouts.weight_sync import weight_sync_for


class RLTrainer:
    def __init__(self, config: RLConfig, run_dir: Path, base_url: str | None, api_key: str, env=None,
                 server_dir: Path | None = None):
        """`base_url` None: the run's own server on the port vLLM bound (inference.port = 0), found when the loop
        starts. `env`: an environment object (the Python API) instead of loading `config.env.id`. `server_dir`: the
        run directory of the vf-vllm this run shares with others (a sweep's); default: its own."""
        self.cfg, self.args, self.run_dir, self.base_url, self.api_key = config, config.args, run_dir, base_url, api_key
        self.paths = paths = RunDir(run_dir)
        self.server_paths = RunDir(server_dir or run_dir)  # its vf-vllm's files: pid, port, restarts, log
        self.learner = Learner(config)
        self.ranks = self.learner.ranks
        self.env = trainable(env if env is not None else load_configured_environment(
            config.env.id, config.env.args, config.env.renderer, config.env.workers, config.env.sandbox))
        # a verifiers taskset without end: read only the rows this run can use
        gen = self.args.generation
        self.env.limit_tasks(self.args.loop.max_steps * (gen.batch_size // gen.rollouts_per_example)
                             + gen.evaluation.num_eval_examples)
        if self.ranks.is_main:
            paths.rollouts.mkdir(parents=True, exist_ok=True)
        self.sync = weight_sync_for(config, paths, base_url, api_key, run=self.args.run_name if server_dir else None)
        self.console = TrainerConsole()
        self.log_file = paths.log("trainer")
        self.start_step, self.pending_batches = 0, []
        if resume_from := self.args.checkpointing.resume_from:
            self.start_step, self.pending_batches = self.resume(Path(resume_from))
        # the server process to watch beside /health: vf-vllm's, none for a server vf-rl did not start or one on
        # another node (a base URL other than its own server's: a Slurm job's inference node)
        own = not config.inference.base_url and base_url in (None, config.inference.url)
        self.inference_pid_file = self.server_paths.inference_pid if own else None
        self.run_log = RunLog(paths, self.args, self.console,
                              config.model_dump(mode="json") if self.ranks.is_main else None)
        self.pipeline: Pipeline | None = None  # rank 0's, made when the loop starts
        self.restart_note: dict = {}  # vLLM started again before the next step: said in that step's metrics line

    # ---- checkpoints (checkpoint.py) ----
    def resume(self, path: Path) -> tuple[int, list[Batch]]:
        """Load checkpoint `path` into the learner; returns (step, the pending batches this run may train on)."""
        state, pending = self.learner.load(path)
        if not self.ranks.is_main:  # the data position and pending batches matter on rank 0, which generates
            return state.step, []
        # a checkpoint of a run further off-policy: what this one's num_batches_ahead allows, the rest regenerated
        k = self.args.loop.num_batches_ahead
        within = [state.step + i - b.policy_version <= k for i, b in enumerate(pending)]
        pending = pending[:within.index(False)] if False in within else pending
        now = self.training_state(state.step)
        changed = [f"{name} {old} -> {new}" for name, old, new in (
            ("seed", state.seed, now.seed),
            ("examples per step", state.examples_per_step, now.examples_per_step),
            ("dataset size", state.dataset_size, now.dataset_size))
            if old != new]
        if changed:
            self.console.warn(f"resuming {path} with a different data setup ({', '.join(changed)}): "
                              "the data order will not continue the original run's")
        moved = set_aside_after(self.paths.metrics, state.step)
        self.console.info(f"resumed from {path} (step {state.step}"
                          f"{f', with {len(pending)} pending batch(es)' if pending else ''}; {moved} later metrics "
                          f"lines moved to metrics.discarded.jsonl)")
        return state.step, pending

    def training_state(self, step: int) -> TrainingState:
        gen = self.args.generation
        return TrainingState(step=step, seed=gen.seed, examples_per_step=gen.batch_size // gen.rollouts_per_example,
                             dataset_size=len(self.env.dataset))

    def save_due(self, step: int) -> bool:
        """Is a checkpoint written before training step `step` (the state after `step` optimizer steps)?"""
        c = self.args.checkpointing
        return c.save_strategy == "steps" and step % c.save_steps == 0 and step > self.start_step

    def save(self, step: int, pending: list[Batch]) -> float:
        """Checkpoint after `step` optimizer steps (with the batches already sampled for the steps after it by
        older policies), on every rank (Learner.save). Returns the seconds it took."""
        t0 = time.perf_counter()
        path = self.learner.save(self.paths.checkpoints, self.training_state(step), pending,
                                 self.args.checkpointing.keep_last)
        if path is not None:
            self.console.info(f"saved checkpoint {path}")
        return time.perf_counter() - t0

    # ---- when the run cannot go on (failure.py) ----
    def stopped_by(self, error: Exception) -> TrainingStopped:
        """Rank 0, after the loop failed: log the traceback, keep the steps trained so far, say it in one line."""
        if not isinstance(error, HungUp):
            log_traceback(self.log_file, error)
        # the server's state tells whether it caused the failure; a closed terminal ended it too (its pane's)
        lost = (str(error) if isinstance(error, InferenceLost) else
                None if isinstance(error, HungUp) else inference_problem(self.base_url, self.inference_pid_file))
        if lost:
            log = (as_typed(self.server_paths.log("inference")) if self.inference_pid_file is not None
                   else "its own log, where it runs")  # a server vf-rl did not start (inference.base_url)
            cause = f"{lost} (see {log})"
        elif isinstance(error, HungUp):  # a signal: no traceback to read
            cause = describe(error)
        else:
            cause = f"{describe(error)} (traceback in {as_typed(self.log_file)})"
        return TrainingStopped(EXIT_INFERENCE_LOST if lost else EXIT_ERROR, f"vf-train: {cause}. {self.keep_trained()}")

    def keep_trained(self) -> str:
        """Write an emergency checkpoint of the steps done unless one exists; a sentence on what was kept."""
        checkpoints, learner = RunDir(self.run_dir).checkpoints, self.learner
        latest = latest_checkpoint(checkpoints)
        if learner.in_step:  # the step failed halfway: its weights are neither the old nor the new policy
            return ("The failing step's state is not saved" + (f"; the newest checkpoint is {as_typed(latest)}, "
                    f"continue with: {resume_hint(latest)}" if latest else "; no checkpoint exists"))
        if learner.steps_done == 0:
            return "No step was trained, nothing to keep."
        path = latest if latest is not None and step_of(latest) == learner.steps_done else None
        if path is None:
            try:  # rank 0 alone: not Learner.save, whose gather would wait for the other ranks
                path = save_checkpoint(checkpoints, learner.policy, learner.optimizer, learner.scheduler,
                                       self.training_state(learner.steps_done))
            except Exception as e:  # e.g. the disk is full: the older checkpoints are whole (written atomically)
                log_traceback(self.log_file, e)
                return (f"The emergency checkpoint could not be written ({describe(e)})"
                        + (f"; the newest checkpoint is {as_typed(latest)}" if latest else ""))
        return (f"Training up to step {learner.steps_done} is saved in {as_typed(path)}; "
                f"continue with: {resume_hint(path)}")

    # ---- the loop ----
    def train(self) -> None:
        """Run to the end. A failure (vLLM lost, an environment error) raises TrainingStopped after keeping
        the steps trained so far; Ctrl-C raises KeyboardInterrupt."""
        if self.ranks.is_main:
            torch_thread = TorchThread()
            try:
                try:
                    with asyncio.Runner() as runner:
                        runner.get_loop().set_exception_handler(unretrieved_errors_to(self.log_file))
                        try:
                            runner.run(self._train_watched(torch_thread))
                        finally:  # a training step in flight ends before what follows reads the model
                            torch_thread.join()
                except Exception as e:
                    # A second Ctrl-C can land as the loop's main task ends on the first: the loop is left stopped,
                    # and the Runner's close fails on it ("Event loop stopped before Future completed"). The
                    # stop is the Ctrl-C's.
                    if isinstance(e.__context__, KeyboardInterrupt):
                        raise e.__context__ from None
                    raise
            except KeyboardInterrupt:  # Ctrl-C, a stop; or the terminal gone, a fault: keep what was trained
                if not stop_signals.hung_up():
                    raise
                stopped = self.stopped_by(HungUp("the trainer's terminal was closed (SIGHUP: its tmux pane or the "
                                                 "tmux server is gone)"))
                with contextlib.suppress(OSError), open(self.log_file, "a") as log:  # no pane shows the line now
                    log.write(stopped.line + "\n")
                raise stopped from None
            except Exception as e:  # the other ranks are ended by the launcher when this one exits
                raise self.stopped_by(e) from e
            config = RunDir(self.run_dir).config  # written by vf-rl at launch
            took = time.time() - config.stat().st_mtime if config.exists() else None
            self.console.info("\n".join(summary(self.run_dir, self.cfg.model, self.cfg.env.id, took)))
        else:
            self._follow()
        self.ranks.close()

    async def _train_watched(self, torch_thread: TorchThread) -> None:
        """The loop, with the vLLM server watched beside it (inference_watch.py): a server that dies or
        hangs stops the loop within seconds instead of at the next failed request or generation_timeout."""
        # a daemon thread: a Ctrl-C or `vf-rl stop` during vLLM's start-up must not wait for vLLM to come up
        if self.base_url is None:
            self.base_url = await SERVER_CALLS.run(lambda: own_server_url(self.cfg.inference, self.server_paths,
                                                                          START_TIMEOUT))
            self.sync.serve_at(self.base_url)
        waited = await SERVER_CALLS.run(lambda: wait_for_server(self.base_url, START_TIMEOUT,
                                                                self.inference_pid_file, self.api_key))
        self.console.info(f"vLLM is up (waited {waited:.1f}s)")
        from openai import AsyncOpenAI

        sent = SentRequests()
        gen = self.args.generation
        client = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, timeout=gen.generation_timeout,
                             max_retries=2, http_client=sent.client())
        orchestrator = Orchestrator(self.env, client, gen)
        self.pipeline = Pipeline(self.sync, torch_thread, orchestrator, sent)
        seen = len(restarts(self.inference_pid_file))
        loop = asyncio.create_task(self._train(self.pipeline, self.start_step, self.pending_batches))
        watch = asyncio.create_task(watch_inference(self.base_url, self.inference_pid_file,
                                                    self.args.loop.inference_timeout))
        try:
            await asyncio.wait({loop, watch}, return_when=asyncio.FIRST_COMPLETED)
            while loop.done() and not loop.cancelled() and loop.exception() and await self.heal(loop.exception(), seen):
                seen = len(restarts(self.inference_pid_file))
                self.pipeline = Pipeline(self.sync, torch_thread, orchestrator, sent)
                loop = asyncio.create_task(self._train(self.pipeline, self.learner.steps_done, []))
                await asyncio.wait({loop, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not loop.done():  # the watch raised
                loop.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):  # its errors follow from the lost server
                    await loop
                watch.result()
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            loop.result()
        finally:
            with contextlib.suppress(Exception):  # its @teardown methods, or a verifiers 0.4 environment's
                await self.env.aclose()          # serving resources (verifiers_v1.py), in this loop

    async def _train(self, pipe: Pipeline, start: int, pending: list[Batch]) -> None:
        """Train steps `start`.. (a resume's or a heal's: the steps done) on `pending` (batches sampled already)
        and the batches it generates."""
        a, learner, torch_thread = self.args.loop, self.learner, pipe.torch_thread
        k, evaluation_due = a.num_batches_ahead, self.args.evaluation
        version = start  # policy version == optimizer steps done; 0 is the base model
        await pipe.push(learner.policy, version)  # resumed: the checkpoint's
        # the batches of the steps to come, sampled or being sampled, in step order: k of them ahead of training
        ahead = deque(as_done(b) for b in pending)  # resumed: what older policies sampled
        for later in range(start + len(ahead), min(start + k, a.max_steps)):
            ahead.append(pipe.generate(later, version))
        # eval of policy v runs in the background while step v+1 trains; it ends before policy v+1 is pushed
        evaluation = pipe.start_eval(0) if start == 0 and is_eval_step(evaluation_due, 0) else None
        for step in range(start, a.max_steps):
            if not ahead:  # num_batches_ahead = 0: this step's batch, from the policy just pushed
                ahead.append(pipe.generate(step, version))
            t_step = time.time()
            batch = await ahead.popleft()
            wait_s = time.time() - t_step
            if step - batch.policy_version > k:  # the bounded-staleness contract
                raise RuntimeError(f"batch {step} came from policy {batch.policy_version}: more than "
                                   f"num_batches_ahead = {k} policies stale")
            older = list(ahead)  # sampled by policies before this step's: a checkpoint keeps them
            if k and step + k < a.max_steps:
                ahead.append(await pipe.generate_ahead(step + k, version, waited=wait_s))
            if self.ranks.active:  # the other ranks wait in _follow for this batch
                await torch_thread.run(self.ranks.share, batch)
            save_s = 0.0
            if self.save_due(step):
                save_s = await torch_thread.run(self.save, step, [batch, *[await f for f in older]])
            stats, times = await self.train_step(torch_thread, step, batch, {"wait_s": wait_s, "save_s": save_s})
            version = step + 1
            try:
                if evaluation is not None:
                    self.run_log.eval(evaluation[0], *await evaluation[1])
                    evaluation = None
                # full weights: the batches in flight end on the policy they started on; vLLM loads the new one after
                drain = self.sync.drain_before_push and ahead and asyncio.gather(*ahead, return_exceptions=True)
                _, sync_s = await pipe.push(learner.policy, version, after=drain or None)
                if self.ranks.active:  # no rank starts step+1 before policy step+1 is written
                    await torch_thread.run(self.ranks.barrier)
            except BaseException:  # trained, not pushed: its line (no sync time, no adapter), then the failure
                with contextlib.suppress(Exception):
                    self.log_step(step, batch, stats, None, times)
                raise
            if is_eval_step(evaluation_due, version):
                evaluation = pipe.start_eval(version)
            times |= {"sync_s": sync_s, "step_s": time.time() - t_step}
            self.log_step(step, batch, stats, self.sync.name_of(version), times)
        await pipe.loading  # the last policy is served when the run ends (eval, GRPOTrainer.evaluate)
        if evaluation is not None:
            self.run_log.eval(evaluation[0], *await evaluation[1])
        if self.args.checkpointing.save_strategy == "steps" and a.max_steps > start:
            await torch_thread.run(self.save, a.max_steps, [])
        self.run_log.tracker.finish()

    async def heal(self, error: BaseException, seen: int) -> bool:
        """After the loop failed with `error`: if vf-vllm is starting its server again (it died while it served;
        restarts after the first `seen`), wait until it serves and return True: the loop then goes on from the steps
        trained, pushing the current policy and sampling the batches in flight again. False when no restart is under
        way (the run stops as before), or with several ranks (each waits in a collective of its own)."""
        if self.ranks.active:
            return False
        record = await restart_under_way(self.base_url, self.inference_pid_file, seen, self.cfg.inference.max_restarts)
        if record is None:
            return False
        t0 = time.time()
        log_traceback(self.log_file, error)  # what the server's death did to the loop, for the log
        self.pipeline.abandon()
        await self.pipeline.torch_thread.run(lambda: None)  # a step or a save in flight ends first
        done = self.learner.steps_done
        self.console.warn(f"the vLLM server exited ({record['exit_code']}); vf-vllm is starting it again "
                          f"({record['restart']} of {record['max_restarts']}, inference.max_restarts). The {done} "
                          f"step(s) trained are kept; training goes on from step {done + 1} once it serves")
        waited = await SERVER_CALLS.run(lambda: wait_for_server(self.base_url, START_TIMEOUT, self.inference_pid_file,
                                                                self.api_key))
        self.restart_note = {"inference_restarts": record["restart"], "restart_s": time.time() - t0}
        self.console.info(f"vLLM serves again (waited {waited:.0f}s): pushing policy {done}, sampling its batch again")
        return True

    def _follow(self) -> None:
        """Ranks > 0: rank 0's loop without vLLM and without writing: receive the batch, train, wait for the sync.
        Each collective here has its twin, in the same order, in _train."""
        max_steps = self.args.loop.max_steps
        for step in range(self.start_step, max_steps):
            batch = self.ranks.share(None)
            if self.save_due(step):
                self.save(step, [])
            self.learner.train_step(batch)
            self.ranks.barrier()  # rank 0 pushes policy step+1 into vLLM meanwhile
        if self.args.checkpointing.save_strategy == "steps" and max_steps > self.start_step:
            self.save(max_steps, [])

    async def train_step(self, torch_thread: TorchThread, step: int, batch: Batch, times: dict) -> tuple[dict, dict]:
        """Learner.train_step on `batch` in the torch thread: its stats, and `times` with the step's bounds. Cancelled
        meanwhile (the server lost, or the loop closing after a Ctrl-C or a hang-up, which cancels every task), the
        step still ends, and its line is written before the cancellation goes on: the emergency checkpoint holds
        the step."""
        t0 = time.time()
        training = torch_thread.submit(self.learner.train_step, batch)  # not a task: a closing loop cancels tasks
        try:
            stats = await asyncio.shield(training)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                stats = await training
                self.log_step(step, batch, stats, None, times | {"train_start": t0, "train_end": time.time()})
            raise
        return stats, times | {"train_start": t0, "train_end": time.time()}

    def log_step(self, step: int, batch: Batch, stats: dict, model_name: str | None, times: dict) -> None:
        """Training step `step`'s metrics line and rollout file (RunLog.step); `model_name` None: not pushed."""
        self.run_log.step(step + 1, self.record(step, batch, stats, model_name, times), batch)

    def record(self, step: int, batch: Batch, stats: dict, model_name: str | None, times: dict) -> dict:
        """metrics.jsonl's line for training step `step` (run_log.step_record)."""
        resumed = self.start_step if step == self.start_step and self.start_step > 0 else None
        record = step_record(step, batch, stats, model_name, times, self.args.loop.max_steps, resumed)
        record |= self.restart_note
        self.restart_note = {}
        return record


def as_done(batch: Batch) -> asyncio.Future:
    """A batch already in hand (a resumed run's pending batch), awaited like one being generated."""
    done = asyncio.get_running_loop().create_future()
    done.set_result(batch)
    return done
