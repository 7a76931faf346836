"""RLTrainer: asynchronous, one-step off-policy GRPO-style training against a vLLM server.

    step n: await batch n (sampled by policy n-1 or n)     -- generated while step n-1 trained
            start generating batch n+1 with policy n
            train on batch n in a worker thread             -- the event loop keeps generating
            save adapter n+1, load it into vLLM, sample from it from now on

With several processes (accelerate launch --num-processes N), rank 0 runs this loop and hands each
batch to the other ranks, which only train (see distributed.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

import httpx
import torch

from vfrl.config import RLConfig
from vfrl.envs.daemon_pool import DaemonPool
from vfrl.inference.endpoints import server_root
from vfrl.envs.loader import load_configured_environment
from vfrl.envs.messages import json_default
from vfrl.run_dir import RunDir, append_jsonl, set_aside_after
from vfrl.trainer.advantages import reward_stats
from vfrl.trainer.batch import TrainBatch, make_train_batch
from vfrl.trainer.logprobs import sequence_logprobs_and_entropy
from vfrl.trainer.loss import LossInputs, compute_loss, mismatch_kl
from vfrl.trainer.reference import ReferencePolicy
from vfrl.trainer.checkpoint import (
    TrainingState, latest_checkpoint, load_checkpoint, rng_states, save_checkpoint, step_of,
)
from vfrl.trainer.console import TrainerConsole
from vfrl.trainer.distributed import Ranks
from vfrl.trainer.evaluation import is_eval_step
from vfrl.trainer.failure import (
    EXIT_ERROR, EXIT_INFERENCE_LOST, TrainingStopped, as_typed, describe, log_traceback, resume_hint,
)
from vfrl.trainer.inference_watch import (
    InferenceLost, inference_problem, process_gone, watch_inference,
)
from vfrl.trainer.mismatch import MismatchWatch
from vfrl.trainer.sampler_check import SamplerCheck
from vfrl.trainer.summary import summary
from vfrl.trainer.orchestrator import Batch, Orchestrator
from vfrl.trainer.sent_requests import SentRequests
from vfrl.trainer.shared_prefix import Packed, layout, packs
from vfrl.trainer.torch_thread import TorchThread
from vfrl.trainer.policy import compute_dtype, load_policy, make_accelerator, prepare_training
from vfrl.trainer.wandb_sink import NoWandb, WandbSink
from vfrl.trainer.weight_sync import WeightSync, weight_sync_for


# Calls that wait on the vLLM server (HTTP only): in threads the loop can stop waiting for once the run is
# stopping, so a hung server never holds up a Ctrl-C (the torch thread, torch_thread.py, is joined at exit).
SERVER_CALLS = DaemonPool("vllm-call", size=2)


def wait_for_server(base_url: str, timeout: float, inference_pid_file: Path | None = None) -> float:
    """Block until vLLM answers /health; returns seconds waited. InferenceLost at once if the server process died."""
    t0 = time.time()
    root = server_root(base_url)
    while True:
        try:
            if httpx.get(f"{root}/health", timeout=2).status_code == 200:
                return time.time() - t0
        except httpx.TransportError:
            pass
        if gone := process_gone(inference_pid_file):
            raise InferenceLost(f"{gone} during start-up")
        if time.time() - t0 > timeout:
            raise InferenceLost(f"vLLM did not answer {root}/health within {timeout:.0f}s of starting")
        time.sleep(1)


def _unretrieved_to(log: Path):
    """asyncio's handler for errors nobody awaited. Ctrl-C cancels every task at once; a gather of in-flight
    requests then ends with a CancelledError nobody is left to retrieve, and a second Ctrl-C during that
    shutdown ends a task with KeyboardInterrupt: the expected stop, not an error worth a traceback. Anything else (a generation task that failed while the run was already
    stopping for another reason) belongs in the log file, not on the console."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict) -> None:
        error = context.get("exception")
        if isinstance(error, (asyncio.CancelledError, KeyboardInterrupt)):
            return
        try:
            if error is not None:
                log_traceback(log, error, about=f"asyncio: {context.get('message', '')}")
            else:
                with open(log, "a") as f:
                    f.write(f"asyncio: {context.get('message', '')}\n")
        except Exception:  # noqa: BLE001 -- a task collected at interpreter exit, where open() may already be gone
            pass           # (NameError): the run's own error was reported; a traceback here would only confuse

    return handle


class RLTrainer:
    def __init__(self, config: RLConfig, run_dir: Path, base_url: str, api_key: str, env=None):
        """`env`: an environment object (the Python API) instead of loading `config.env.id`."""
        from transformers import AutoTokenizer

        self.cfg = config
        self.args = config.args
        self.run_dir = run_dir
        self.base_url = base_url
        self.api_key = api_key
        torch.manual_seed(self.args.seed)
        # ---- the policy on this process (policy.py, distributed.py) ----
        self.accelerator = make_accelerator(self.args)
        self.ranks = Ranks(self.accelerator.device)
        micro_batches = -(-self.args.batch_size // self.args.micro_batch_size)
        if micro_batches % self.ranks.world_size:
            raise ValueError(f"trainer.args.batch_size / micro_batch_size = {micro_batches} micro-batches cannot be "
                             f"shared by {self.ranks.world_size} trainer processes; make it a multiple")
        self.tokenizer = AutoTokenizer.from_pretrained(config.model)
        self.model, self.optimizer, self.scheduler = prepare_training(self.accelerator, load_policy(config), self.args)
        # the KL penalty's reference policy (beta > 0): see reference.py
        self.reference = (ReferencePolicy(self.model, config.model, self.args.use_lora, compute_dtype(self.args))
                          if self.args.beta > 0 else None)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        # ---- what it trains on, and where it pushes each version (weight_sync.py) ----
        self.env = env if env is not None else load_configured_environment(config.env.id, config.env.args, config.env.renderer)
        if hasattr(self.env, "limit_tasks"):  # a verifiers taskset without end: read only the rows this run can use
            a = self.args
            self.env.limit_tasks(a.max_steps * (a.batch_size // a.rollouts_per_example) + a.num_eval_examples)
        paths = RunDir(run_dir)
        if self.ranks.is_main:
            paths.rollouts.mkdir(parents=True, exist_ok=True)
        self.sync: WeightSync = weight_sync_for(config, paths, base_url, api_key)
        # ---- checkpoints, resume, monitoring (see checkpoint.py, console.py, mismatch.py, wandb_sink.py) ----
        self.metrics_path = paths.metrics
        self.console = TrainerConsole()
        self.mismatch = MismatchWatch(self.args.mismatch_kl_warn, self.args.mismatch_kl_jump)
        self.sampler_check = SamplerCheck(self.accelerator.unwrap_model(self.model))
        self.checkpoints_dir = paths.checkpoints
        self.start_step, self.pending_batch = 0, None
        if self.args.resume_from:
            self.start_step, self.pending_batch = self.resume(Path(self.args.resume_from))
        # what an emergency checkpoint may save: optimizer steps done, and whether one is half done
        self.steps_done, self.in_step = self.start_step, False
        self.unlogged: tuple[int, Batch, dict, dict] | None = None  # the last step trained, until its line is written
        self.loading: asyncio.Future | None = None  # vLLM's load of the newest policy pushed (push)
        self.log_file = paths.log("trainer")
        # the server process to watch beside /health: vf-vllm's, none for a server vf-rl did not start or one on
        # another node (a base URL other than its own server's: a Slurm job's inference node)
        own = not config.inference.base_url and base_url == config.inference.url
        self.inference_pid_file = paths.inference_pid if own else None
        # wandb is imported only here: report_to = "none" needs neither the package nor an account
        self.wandb = (WandbSink(run_dir, self.args.run_name, config.model_dump(mode="json"))
                      if self.args.report_to == "wandb" and self.ranks.is_main else NoWandb())

    def resume(self, path: Path) -> tuple[int, Batch | None]:
        """Load checkpoint `path` into model, optimizer, scheduler and RNGs; returns (step, pending batch)."""
        # every rank restores the same weights and optimizer state, and its own RNG state
        state, pending = load_checkpoint(path, self.accelerator.unwrap_model(self.model), self.optimizer,
                                         self.scheduler, rank=self.ranks.rank)
        if not self.ranks.is_main:  # the data position and pending batch matter on rank 0, which generates
            return state.step, None
        a = self.args
        changed = [f"{k} {old} -> {new}" for k, old, new in (
            ("seed", state.seed, a.seed),
            ("examples per step", state.examples_per_step, a.batch_size // a.rollouts_per_example),
            ("dataset size", state.dataset_size, len(self.env.dataset)))
            if old != new]
        if changed:
            self.console.warn(f"resuming {path} with a different data setup ({', '.join(changed)}): "
                              "the data order will not continue the original run's")
        moved = set_aside_after(self.metrics_path, state.step)
        self.console.info(f"resumed from {path} (step {state.step}"
                          f"{', with its pending batch' if pending else ''}; {moved} later metrics lines "
                          f"moved to metrics.discarded.jsonl)")
        return state.step, pending

    def save_due(self, step: int) -> bool:
        """Is a checkpoint written before training step `step` (the state after `step` optimizer steps)?"""
        a = self.args
        return a.save_strategy == "steps" and step % a.save_steps == 0 and step > self.start_step

    def save(self, step: int, pending: Batch | None) -> float:
        """Checkpoint after `step` optimizer steps (with the batch already generated for the next). Seconds.

        Called on every rank: rank 0 collects the ranks' RNG states and writes; the weights and optimizer
        state are the same on every rank (DDP), so rank 0's copy is everyone's."""
        t0 = time.perf_counter()
        a = self.args
        rngs = self.ranks.gather(rng_states())
        if not self.ranks.is_main:
            return 0.0
        path = save_checkpoint(self.checkpoints_dir, self.accelerator.unwrap_model(self.model), self.optimizer,
                               self.scheduler, self.training_state(step), pending, a.keep_last, rng_per_rank=rngs)
        self.console.info(f"saved checkpoint {path}")
        return time.perf_counter() - t0

    def training_state(self, step: int) -> TrainingState:
        a = self.args
        return TrainingState(step=step, seed=a.seed, examples_per_step=a.batch_size // a.rollouts_per_example,
                             dataset_size=len(self.env.dataset))

    # ---- when the run cannot go on (failure.py) ----
    def stopped_by(self, error: Exception) -> TrainingStopped:
        """Rank 0, after the loop failed: log the traceback, keep the steps trained so far, say it in one line."""
        log_traceback(self.log_file, error)
        if self.unlogged:  # a step trained (and kept below) whose push failed: its metrics line too
            step, batch, stats, times = self.unlogged
            with contextlib.suppress(Exception):
                self.log(step + 1, self.step_record(step, batch, stats, None, times), batch)
        lost = str(error) if isinstance(error, InferenceLost) else inference_problem(self.base_url,
                                                                                    self.inference_pid_file)
        if lost:
            log = (as_typed(RunDir(self.run_dir).log("inference")) if self.inference_pid_file is not None
                   else "its own log, where it runs")  # a server vf-rl did not start (inference.base_url)
            cause = f"{lost} (see {log})"
        else:
            cause = f"{describe(error)} (traceback in {as_typed(self.log_file)})"
        return TrainingStopped(EXIT_INFERENCE_LOST if lost else EXIT_ERROR, f"vf-train: {cause}. {self.keep_trained()}")

    def keep_trained(self) -> str:
        """Write an emergency checkpoint of the steps done unless one exists; a sentence on what was kept."""
        latest = latest_checkpoint(self.checkpoints_dir)
        if self.in_step:  # the step failed halfway: its weights are neither the old nor the new policy
            return ("The failing step's state is not saved" + (f"; the newest checkpoint is {as_typed(latest)}, "
                    f"continue with: {resume_hint(latest)}" if latest else "; no checkpoint exists"))
        if self.steps_done == 0:
            return "No step was trained, nothing to keep."
        path = latest if latest is not None and step_of(latest) == self.steps_done else None
        if path is None:
            try:
                path = save_checkpoint(self.checkpoints_dir, self.accelerator.unwrap_model(self.model), self.optimizer,
                                       self.scheduler, self.training_state(self.steps_done))
            except Exception as e:  # e.g. the disk is full: the older checkpoints are whole (written atomically)
                log_traceback(self.log_file, e)
                return (f"The emergency checkpoint could not be written ({e})"
                        + (f"; the newest checkpoint is {as_typed(latest)}" if latest else ""))
        return f"Training up to step {self.steps_done} is saved in {as_typed(path)}; continue with: {resume_hint(path)}"

    # ---- one training step on one batch (runs in a worker thread); the math: batch.py, loss.py, normalization.py ----
    def train_step(self, batch: Batch) -> dict[str, float]:
        """`num_iterations` optimizer updates on one batch, then one scheduler step (the schedule counts batches).

        The ratio's old policy is the behaviour policy, fixed for every iteration as in PPO: vLLM's sampling
        logprobs for sampled tokens, the trainer's logprobs before the first update for environment tokens
        (trained only with mask_env_responses = false). Recomputing "old" at each iteration would make every
        ratio 1 and the clip/mask bounds meaningless. entropy, mismatch_kl and kl describe the policy before
        this step's first update; loss, grad_norm and the clip fractions are means over the iterations.

        Several processes: every rank builds the same TrainBatch and loss weights from the whole batch (the
        global token count), then runs only its micro-batches (Ranks.mine). Each rank's loss is its share of the
        one-process loss, sum over ranks = the one-process loss, so the one-process gradient is the SUM of the
        ranks' gradients. DDP all-reduces the MEAN (sum / world_size), hence the backward of world_size * loss:
        mean over ranks of world_size * grad_r = sum over ranks of grad_r = the one-process gradient. The DDP
        all-reduce runs on each rank's last micro-batch only (no_sync before), once per optimizer update.
        """
        a = self.args
        self.in_step = True
        tb, rewards = make_train_batch(batch.rollouts, a, self.pad_id, batch.sizes())  # with whole-batch loss weights
        # each without its padding columns; rows that start alike together where the model forwards them packed
        parts = tb.micro_batches(a.micro_batch_size, by_prefix=packs(self.model))
        micro, device = [], self.accelerator.device
        for k in self.ranks.mine(len(parts)):  # all, with one process
            # how it is forwarded (shared_prefix.layout), from its CPU tensors: from a GPU's, reading the tokens
            # would wait for the previous micro-batch's backward, and the GPU would idle while the layout is built
            packed = layout(self.model, parts[k].input_ids, parts[k].attention_mask)
            micro.append((parts[k].to(device), None if packed is None else packed.to(device)))
        sums = dict.fromkeys(["loss", "grad_norm", "low", "high", "entropy", "mismatch_kl", "kl", "sampled",
                              "sampler_kl", "sampler_tokens"], 0.0)
        if micro:  # vLLM against the trainer on the policy that sampled the batch (sampler_check.py)
            mb = micro[0][0]
            with self.accelerator.autocast():
                checked = self.sampler_check.measure(mb.input_ids, mb.attention_mask, mb.sampled_mask & (mb.loss_mask > 0),
                                                     mb.sampling_logprobs, batch.policy_version, self.steps_done,
                                                     a.temperature)
            if checked is not None:
                sums["sampler_kl"], sums["sampler_tokens"] = checked
        self.sampler_check.keep(self.steps_done)
        self.model.train()
        for it in range(a.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for mb, packed in micro:
                synced = mb is micro[-1][0]  # DDP all-reduces the gradients in this backward
                with contextlib.nullcontext() if synced else self.accelerator.no_sync(self.model):
                    for key, value in self.micro_step(mb, packed, it == 0, synced and self.ranks.world_size > 1).items():
                        sums[key] += value
            sums["grad_norm"] += float(self.accelerator.clip_grad_norm_(self.model.parameters(), a.max_grad_norm))
            self.optimizer.step()
        self.scheduler.step()
        self.steps_done, self.in_step = self.steps_done + 1, False
        # per-rank sums -> batch sums (grad_norm is already the same on every rank: gradients are all-reduced)
        sums |= self.ranks.sum({k: v for k, v in sums.items() if k != "grad_norm"})
        loss_tokens = int(tb.loss_mask.sum())
        return self.update_metrics(sums, loss_tokens) | batch_metrics(batch, tb, rewards, loss_tokens)

    def micro_step(self, mb: TrainBatch, packed: Packed | None, first: bool, must_backward: bool) -> dict[str, float]:
        """Forward and backward of one micro-batch (on the device), laid out as `packed` says; returns its metric
        sums. The step's first iteration also fixes mb's old and reference logprobs. `must_backward`: this
        backward is the one DDP all-reduces in, so it runs even without loss tokens (every rank must join)."""
        a = self.args
        # lm_head's chunks (and the reference) run outside the model's forward: under the same autocast as it
        with self.accelerator.autocast():
            logprobs, entropy = sequence_logprobs_and_entropy(self.model, mb.input_ids, mb.attention_mask,
                                                              a.temperature, mb.loss_mask > 0, a.logprob_chunk_size,
                                                              with_entropy=first, packed=packed)
            sums = self.fix_old_policy(mb, packed, logprobs.detach(), entropy) if first else {}
        out = compute_loss(LossInputs(logprobs, mb.old_logprobs, mb.ref_logprobs, mb.advantages, mb.loss_mask,
                                      mb.loss_weights), a)
        if first and out.kl is not None:
            sums["kl"] = float(out.kl)
        backward = out.loss * self.ranks.world_size  # DDP averages over ranks; see train_step
        if not out.loss.requires_grad and must_backward:  # no loss tokens, so no forward ran: a zero-gradient one
            with self.accelerator.autocast():
                full, _ = sequence_logprobs_and_entropy(self.model, mb.input_ids, mb.attention_mask, a.temperature,
                                                        None, a.logprob_chunk_size, with_entropy=False, packed=packed)
            backward = 0.0 * full.sum()
        if backward.requires_grad:  # a micro-batch without loss tokens has nothing to backpropagate
            self.accelerator.backward(backward)
        return sums | {"loss": float(out.loss.detach()), "low": float(out.low), "high": float(out.high)}

    def fix_old_policy(self, mb: TrainBatch, packed: Packed | None, logprobs: torch.Tensor,
                       entropy: torch.Tensor) -> dict[str, float]:
        """Before the first update: pi_old (see train_step) and pi_ref of micro-batch `mb`, and the sums of what
        describes the policy before this step (entropy, mismatch with vLLM, sampled tokens). `logprobs`: (B, T)."""
        a = self.args
        sampled = mb.sampled_mask & (mb.loss_mask > 0)  # (B, T)
        mb.old_logprobs = torch.where(sampled, mb.sampling_logprobs, logprobs)
        if self.reference is not None:
            mb.ref_logprobs = self.reference.logprobs(mb.input_ids, mb.attention_mask, a.temperature,
                                                      mb.loss_mask > 0, a.logprob_chunk_size, packed)
        return {"entropy": float((entropy * mb.loss_mask).sum()),
                "mismatch_kl": float((mismatch_kl(logprobs, mb.old_logprobs) * sampled).sum()),
                "sampled": float(sampled.sum())}

    def update_metrics(self, sums: dict[str, float], loss_tokens: int) -> dict[str, float]:
        """The step's metrics from train_step's batch sums: means per loss token, per sampled token, per iteration."""
        a = self.args
        n_tok, n_it = max(loss_tokens, 1), a.num_iterations
        return {
            "loss": sums["loss"] / n_it,
            "grad_norm": sums["grad_norm"] / n_it,
            "lr": self.scheduler.get_last_lr()[0],
            "entropy": sums["entropy"] / n_tok,
            "mismatch_kl": sums["mismatch_kl"] / max(sums["sampled"], 1),
            "clip_fraction_low": sums["low"] / (n_tok * n_it),
            "clip_fraction_high": sums["high"] / (n_tok * n_it),
            "masked_fraction": (sums["low"] + sums["high"]) / (n_tok * n_it),  # loss tokens a ratio bound took out
            **({"kl": sums["kl"] / n_tok} if a.beta > 0 else {}),
            **({"sampler_mismatch_kl": sums["sampler_kl"] / sums["sampler_tokens"]} if sums["sampler_tokens"] else {}),
        }

    # ---- the loop ----
    def train(self) -> None:
        """Run to the end. A failure (vLLM lost, an environment error) raises TrainingStopped after keeping
        the steps trained so far; Ctrl-C raises KeyboardInterrupt."""
        if self.ranks.is_main:
            self.torch_thread = TorchThread()
            try:
                with asyncio.Runner() as runner:
                    runner.get_loop().set_exception_handler(_unretrieved_to(self.log_file))
                    try:
                        runner.run(self._train_watched())
                    finally:  # a training step in flight ends before what follows reads the model
                        self.torch_thread.join()
            except Exception as e:  # the other ranks are ended by the launcher when this one exits
                raise self.stopped_by(e) from e
            config = RunDir(self.run_dir).config  # written by vf-rl at launch
            took = time.time() - config.stat().st_mtime if config.exists() else None
            self.console.info("\n".join(summary(self.run_dir, self.cfg.model, self.cfg.env.id, took)))
        else:
            self._follow()
        self.ranks.close()

    async def _train_watched(self) -> None:
        """The loop, with the vLLM server watched beside it (inference_watch.py): a server that dies or
        hangs stops the loop within seconds instead of at the next failed request or generation_timeout."""
        # a daemon thread: a Ctrl-C or `vf-rl stop` during vLLM's start-up must not wait for vLLM to come up
        waited = await SERVER_CALLS.run(lambda: wait_for_server(self.base_url, 900, self.inference_pid_file))
        self.console.info(f"vLLM is up (waited {waited:.1f}s)")
        try:
            await self._train_and_watch()
        finally:
            if (close := getattr(self.env, "aclose", None)) is not None:  # a verifiers 0.4 environment's serving
                with contextlib.suppress(Exception):                    # resources (verifiers_v1.py), in this loop
                    await close()

    async def _train_and_watch(self) -> None:
        loop = asyncio.create_task(self._train())
        watch = asyncio.create_task(watch_inference(self.base_url, self.inference_pid_file, self.args.inference_timeout))
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

    async def push(self, model, version: int, after: asyncio.Future | None = None) -> tuple[asyncio.Future, float]:
        """Make vLLM serve policy `version`. Returns its load, in flight (its result: the model name to request
        and the load's seconds), and the seconds the loop was held. The loop waits for the torch side only: the
        save (what vLLM reads) and save_aside (what it does not), in the torch thread, before the next step
        changes the weights; a thread left inside torch at interpreter exit aborts the process. vLLM's load
        (HTTP) then runs beside the next training step, in a thread the loop can abandon to a hung server,
        once `after` (the batch in flight, for a sync that drains) is done; what samples from the new policy
        (the next batch, eval) awaits it. One load at a time, in version order: the previous one ran beside
        the step just trained, and its error stops the run here."""
        t0 = time.perf_counter()
        if self.loading is not None:
            await self.loading
        path = await self.torch_thread.run(self.sync.save, model, version)
        self.loading = loading = asyncio.ensure_future(self._load(path, version, after))
        # its error reaches whatever awaits it (the next batch, eval, the next push); when nothing will, because
        # the run already stopped on another error (the write's below, a lost server), it is read and dropped
        # here, not left to be reported at interpreter exit
        loading.add_done_callback(lambda f: f.cancelled() or f.exception())
        await self.torch_thread.run(self.sync.save_aside, model, version)
        return loading, time.perf_counter() - t0

    async def _load(self, path: Path, version: int, after: asyncio.Future | None) -> tuple[str, float]:
        # vLLM loads what it can of the policy while the batch in flight is still sampled (staged_weights.py)
        await SERVER_CALLS.run(lambda: self.sync.stage(path, version))
        if after is not None:
            await asyncio.wait([after])  # its errors are the loop's to read, when it awaits the batch
        t0 = time.perf_counter()
        name = await SERVER_CALLS.run(lambda: self.sync.load(path, version))
        self.served = name  # the newest policy vLLM serves (GRPOTrainer.evaluate samples from it)
        return name, time.perf_counter() - t0

    @staticmethod
    async def generate_on(orch: Orchestrator, loading: asyncio.Future, step: int, version: int) -> Batch:
        """Batch `step`, sampled from policy `version` once vLLM serves it."""
        name, load_s = await loading
        batch = await orch.generate(step, name, version)
        batch.load_s = load_s
        return batch

    def _follow(self) -> None:
        """Ranks > 0: rank 0's loop without vLLM and without writing: receive the batch, train, wait for the sync.
        Each collective here has its twin, in the same order, in _train."""
        a = self.args
        for step in range(self.start_step, a.max_steps):
            batch = self.ranks.share(None)
            if self.save_due(step):
                self.save(step, None)
            self.train_step(batch)
            self.ranks.barrier()  # rank 0 pushes policy step+1 into vLLM meanwhile
        if a.save_strategy == "steps" and a.max_steps > self.start_step:
            self.save(a.max_steps, None)

    async def _train(self) -> None:
        from openai import AsyncOpenAI

        a = self.args
        sent = SentRequests()
        client = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, timeout=a.generation_timeout, max_retries=2,
                             http_client=sent.client())
        orch = Orchestrator(self.env, client, a)
        model = self.accelerator.unwrap_model(self.model)
        version = self.start_step  # policy version == optimizer steps done; 0 is the base model
        loading, _ = await self.push(model, version)  # resumed: the checkpoint's
        if self.pending_batch is not None:  # resumed: the batch the uninterrupted run trained next
            next_batch = asyncio.get_running_loop().create_future()
            next_batch.set_result(self.pending_batch)
        else:
            next_batch = asyncio.create_task(self.generate_on(orch, loading, version, version))
        # eval of policy v runs in the background while step v+1 trains; it ends before policy v+1 is pushed
        evaluation = self.start_eval(orch, loading, 0) if self.start_step == 0 and is_eval_step(a, 0) else None
        for step in range(self.start_step, a.max_steps):
            t_step = time.time()
            batch = await next_batch
            wait_s = time.time() - t_step
            if batch.policy_version < step - 1:  # the one-step off-policy contract
                raise RuntimeError(f"batch {step} came from policy {batch.policy_version}: more than one step stale")
            if step + 1 < a.max_steps:
                requests_out = sent.reach(orch.examples_per_step)  # a group's first request (n samples), or more
                next_batch = asyncio.create_task(self.generate_on(orch, loading, step + 1, version))
                # generation bounded this step (the loop waited): the next batch's requests go out before training
                # starts, for up to the time this step waited anyway (sent_requests.py)
                await sent.wait(requests_out, next_batch, limit=wait_s)
            if self.ranks.active:  # the other ranks wait in _follow for this batch
                await self.torch_thread.run(self.ranks.share, batch)
            save_s = 0.0
            if self.save_due(step):
                save_s = await self.torch_thread.run(self.save, step, batch)
            await self.torch_thread.run(self.train_and_hold, step, batch, {"wait_s": wait_s, "save_s": save_s})
            _, _, stats, times = self.unlogged
            version = step + 1
            if evaluation is not None:
                await self.finish_eval(evaluation)
                evaluation = None
            # full weights: batch step+1 ends on the policy it started on, so vLLM loads the new one after it
            drain = next_batch if self.sync.drain_before_push and step + 1 < a.max_steps else None
            loading, sync_s = await self.push(model, version, after=drain)
            if self.ranks.active:  # no rank starts step+1 before policy step+1 is written
                await self.torch_thread.run(self.ranks.barrier)
            if is_eval_step(a, version):
                evaluation = self.start_eval(orch, loading, version)
            times |= {"wait_s": wait_s, "sync_s": sync_s, "step_s": time.time() - t_step}
            self.log(step + 1, self.step_record(step, batch, stats, self.sync.name_of(version), times), batch)
            self.unlogged = None
        await loading  # the last policy is served when the run ends (eval, GRPOTrainer.evaluate)
        if evaluation is not None:
            await self.finish_eval(evaluation)
        if a.save_strategy == "steps" and a.max_steps > self.start_step:
            await self.torch_thread.run(self.save, a.max_steps, None)
        self.wandb.finish()

    def train_and_hold(self, step: int, batch: Batch, times: dict) -> None:
        """train_step, then hold the step's stats in `unlogged` until its metrics line is written: after the
        push, or by stopped_by when the push (or anything after the step) failed. Set in the worker thread,
        so a step that finishes after the loop was cancelled is held too."""
        t0 = time.time()
        stats = self.train_step(batch)
        self.unlogged = step, batch, stats, times | {"train_start": t0, "train_end": time.time()}

    def step_record(self, step: int, batch: Batch, stats: dict, model_name: str, times: dict) -> dict:
        """metrics.jsonl's line for training step `step` (0-based): the step's stats, which policy sampled the
        batch and which trained on it, and where the time went."""
        train_s = times["train_end"] - times["train_start"]
        record = {
            "step": step + 1, "max_steps": self.args.max_steps, **stats,
            "policy_version": batch.policy_version, "trained_version": step, "adapter_loaded": model_name,
            "gen_start": batch.gen_start, "gen_end": batch.gen_end, "generate_s": batch.gen_end - batch.gen_start,
            "load_s": batch.load_s,  # vLLM's load of the policy that sampled it, beside the step before
            "train_s": train_s, **times,
            "tokens_per_s": sum(len(r.prompt_ids) + len(r.completion_ids) for r in batch.rollouts) / max(train_s, 1e-9),
        }
        if step == self.start_step and self.start_step > 0:
            record["resumed_from"] = self.start_step
        return record

    # ---- eval during training (evaluation.py) ----
    def start_eval(self, orch: Orchestrator, loading: asyncio.Future, version: int) -> tuple[int, asyncio.Task]:
        async def evaluate():
            name, _ = await loading
            return await orch.evaluate(name)
        return version, asyncio.create_task(evaluate())

    async def finish_eval(self, evaluation: tuple[int, asyncio.Task]) -> None:
        version, task = evaluation
        stats, rollouts = await task
        record = {"step": version, "max_steps": self.args.max_steps, **stats}
        append_jsonl(self.metrics_path, record)
        write_rollouts(RunDir(self.run_dir).eval_rollouts(version), rollouts)
        self.wandb.log(record)
        self.console.eval(version, stats)

    # ---- monitoring: metrics.jsonl, rollouts/step_N.jsonl, console, wandb, mismatch watch ----
    def log(self, step: int, record: dict, batch: Batch) -> None:
        a = self.args
        # the same-policy figure where the trainer measured it: mismatch_kl also holds one step of policy change
        alert = self.mismatch.check(record.get("sampler_mismatch_kl", record.get("mismatch_kl", 0.0)))
        record["mismatch_kl_alert"] = int(alert is not None)
        append_jsonl(self.metrics_path, record)
        write_rollouts(RunDir(self.run_dir).step_rollouts(step), batch.rollouts)
        self.console.step(record)
        if batch.warning:
            self.console.warn(batch.warning)
        if alert:
            self.console.warn(f"step {step}: {alert}")
        show = a.log_completions and step % a.logging_steps == 0
        if show:
            self.console.completions(step, batch.rollouts, a.num_completions_to_print)
        self.wandb.log(record)
        if show:
            self.wandb.completions(step, batch.rollouts)
        if alert:
            self.wandb.alert(f"mismatch_kl at step {step}", alert)


def rollout_row(r) -> dict:
    return {"example_id": r.example_id, "prompt": r.prompt, "completion": r.completion, "answer": r.answer,
            "reward": r.reward, "metrics": r.metrics, "policy": r.policy,
            "reward_errors": r.reward_errors, "error": r.error,  # why it scored 0 / ended early
            # training rows (a forked verifiers trace has several) and the policy's tokens among them
            "branches": len(r.sequences()), "sampled_tokens": sum(sum(s.completion_mask) for s in r.sequences())}


def write_rollouts(path: Path, rollouts: list) -> None:
    """One line per rollout; a message of any shape (an object, a pydantic model) is saved, never an error."""
    with open(path, "w") as f:
        for r in rollouts:
            f.write(json.dumps(rollout_row(r), default=json_default) + "\n")


def batch_metrics(batch: Batch, tb: TrainBatch, rewards: torch.Tensor, loss_tokens: int) -> dict[str, float]:
    """What a step trained on. `rewards`: those the advantages used (make_train_batch)."""
    n = len(batch.rollouts)
    return {
        **reward_stats(torch.tensor([r.reward for r in batch.rollouts]), rewards, batch.sizes()),
        "completion_len": sum(len(r.completion_ids) for r in batch.rollouts) / n,
        # of the sequences trained (a rollout's branches are rows of their own), not the padding
        "truncated_fraction": float(tb.truncated[:sum(len(r.sequences()) for r in batch.rollouts)].float().mean()),
        "loss_tokens": loss_tokens,
        **batch.metrics,  # the step's faulty rollouts, see step_faults.py
        **{f"reward/{name}": sum(r.metrics.get(name, 0.0) for r in batch.rollouts) / n
           for name in batch.rollouts[0].metrics},
    }
