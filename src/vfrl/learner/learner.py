"""The learner: the policy being trained on this process, and one GRPO step on one batch.

It owns the model, optimizer, LR schedule and KL reference, and knows nothing of vLLM, the environment or
the loop around it (trainer.py). The math is in batch.py (sequences, advantages, loss weights), loss.py
(the clipped objective) and logprobs.py; what is measured per step is update_metrics and batch_metrics.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from vfrl.config import RLConfig
from vfrl.learner.advantages import reward_stats
from vfrl.learner.batch import TrainBatch, make_train_batch
from vfrl.learner.checkpoint import TrainingState, load_checkpoint, rng_states, save_checkpoint
from vfrl.learner.distributed import Ranks
from vfrl.learner.logprobs import sequence_logprobs_and_entropy
from vfrl.learner.loss import LossInputs, compute_loss, importance_weights, mismatch_kl
from vfrl.rollout_types import Batch
from vfrl.learner.policy import compute_dtype, load_policy, make_accelerator, prepare_training
from vfrl.learner.reference import ReferencePolicy
from vfrl.learner.sampler_check import SamplerCheck
from vfrl.learner.shared_prefix import Packed, layout, packs


class Learner:
    def __init__(self, config: RLConfig):
        from transformers import AutoTokenizer

        a = config.args  # the sections this part reads (sections.py), each taken once
        self.config, self.run, self.loss, self.shape = config, a.learner, a.loss, a.batch
        self.max_grad_norm = a.optimizer.max_grad_norm
        torch.manual_seed(self.run.seed)
        self.accelerator = make_accelerator(self.run.bf16)
        self.ranks = Ranks(self.accelerator.device)
        micro_batches = -(-self.shape.batch_size // self.run.micro_batch_size)
        if micro_batches % self.ranks.world_size:
            raise ValueError(f"trainer.args.batch_size / micro_batch_size = {micro_batches} micro-batches cannot be "
                             f"shared by {self.ranks.world_size} trainer processes; make it a multiple")
        self.tokenizer = AutoTokenizer.from_pretrained(config.model)
        self.pad_id = (self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None
                       else self.tokenizer.eos_token_id)
        self.model, self.optimizer, self.scheduler = prepare_training(self.accelerator, load_policy(config),
                                                                      a.optimizer)
        # the KL penalty's reference policy (beta > 0): see reference.py
        self.reference = (ReferencePolicy(self.model, config.model, a.lora.use_lora, compute_dtype(self.run.bf16))
                          if self.loss.beta > 0 else None)
        self.sampler_check = SamplerCheck(self.policy)
        # what an emergency checkpoint may save: optimizer steps done, and whether one is half done
        self.steps_done, self.in_step = 0, False

    @property
    def policy(self):
        """The model without its distributed wrapper: what is saved, pushed to vLLM and checkpointed."""
        return self.accelerator.unwrap_model(self.model)

    # ---- checkpoints (checkpoint.py) ----
    def save(self, checkpoints_dir: Path, state: TrainingState, pending: list[Batch] = (),
             keep_last: int | None = None) -> Path | None:
        """Checkpoint `state.step` optimizer steps. Called on every rank: rank 0 collects the ranks' RNG states and
        writes; the weights and optimizer state are the same on every rank (DDP), so rank 0's copy is everyone's."""
        rngs = self.ranks.gather(rng_states())
        if not self.ranks.is_main:
            return None
        return save_checkpoint(checkpoints_dir, self.policy, self.optimizer, self.scheduler, state, pending,
                               keep_last, rng_per_rank=rngs)

    def load(self, path: Path) -> tuple[TrainingState, list[Batch]]:
        """Every rank restores the same weights and optimizer state, and its own RNG state."""
        state, pending = load_checkpoint(path, self.policy, self.optimizer, self.scheduler, rank=self.ranks.rank)
        self.steps_done = state.step
        return state, pending

    # ---- one training step on one batch (runs in the torch thread) ----
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
        run = self.run
        self.in_step = True
        # with whole-batch loss weights
        tb, rewards = make_train_batch(batch.rollouts, self.shape, self.pad_id, batch.sizes())
        micro = self.my_micro_batches(tb)
        sums = dict.fromkeys(["loss", "grad_norm", "low", "high", "entropy", "mismatch_kl", "kl", "sampled",
                              "sampler_kl", "sampler_tokens", "is_weight", "is_masked"], 0.0)
        if micro:  # vLLM against the trainer on the policy that sampled the batch (sampler_check.py)
            mb = micro[0][0]
            with self.accelerator.autocast():
                checked = self.sampler_check.measure(mb.input_ids, mb.attention_mask,
                                                     mb.sampled_mask & (mb.loss_mask > 0), mb.sampling_logprobs,
                                                     batch.policy_version, self.steps_done, run.temperature)
            if checked is not None:
                sums["sampler_kl"], sums["sampler_tokens"] = checked
        self.sampler_check.keep(self.steps_done)
        self.model.train()
        for it in range(run.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for mb, packed in micro:
                synced = mb is micro[-1][0]  # DDP all-reduces the gradients in this backward
                with contextlib.nullcontext() if synced else self.accelerator.no_sync(self.model):
                    metrics = self.micro_step(mb, packed, it == 0, synced and self.ranks.world_size > 1)
                    for key, value in metrics.items():
                        sums[key] += value
            sums["grad_norm"] += float(self.accelerator.clip_grad_norm_(self.model.parameters(), self.max_grad_norm))
            self.optimizer.step()
        self.scheduler.step()
        self.steps_done, self.in_step = self.steps_done + 1, False
        # per-rank sums -> batch sums (grad_norm is already the same on every rank: gradients are all-reduced)
        sums |= self.ranks.sum({k: v for k, v in sums.items() if k != "grad_norm"})
        loss_tokens = int(tb.loss_mask.sum())
        return self.update_metrics(sums, loss_tokens) | batch_metrics(batch, tb, rewards, loss_tokens)

    def my_micro_batches(self, tb: TrainBatch) -> list[tuple[TrainBatch, Packed | None]]:
        """This rank's micro-batches on the device, each without its padding columns and laid out as the model
        forwards it (shared_prefix.py: rows that start alike together where the model forwards them packed)."""
        parts = tb.micro_batches(self.run.micro_batch_size, by_prefix=packs(self.model))
        micro, device = [], self.accelerator.device
        for k in self.ranks.mine(len(parts)):  # all, with one process
            # the layout from the CPU tensors: reading a GPU's would wait for the previous micro-batch's backward,
            # and the GPU would idle while the layout is built
            packed = layout(self.model, parts[k].input_ids, parts[k].attention_mask)
            micro.append((parts[k].to(device), None if packed is None else packed.to(device)))
        return micro

    def micro_step(self, mb: TrainBatch, packed: Packed | None, first: bool, must_backward: bool) -> dict[str, float]:
        """Forward and backward of one micro-batch (on the device), laid out as `packed` says; returns its metric
        sums. The step's first iteration also fixes mb's old and reference logprobs. `must_backward`: this
        backward is the one DDP all-reduces in, so it runs even without loss tokens (every rank must join)."""
        run = self.run
        # lm_head's chunks (and the reference) run outside the model's forward: under the same autocast as it
        with self.accelerator.autocast():
            logprobs, entropy = sequence_logprobs_and_entropy(self.model, mb.input_ids, mb.attention_mask,
                                                              run.temperature, mb.loss_mask > 0, run.logprob_chunk_size,
                                                              with_entropy=first, packed=packed)
            sums = self.fix_old_policy(mb, packed, logprobs.detach(), entropy) if first else {}
        out = compute_loss(LossInputs(logprobs, mb.old_logprobs, mb.ref_logprobs, mb.advantages, mb.loss_mask,
                                      mb.loss_weights, mb.is_weights), self.loss)
        if first and out.kl is not None:
            sums["kl"] = float(out.kl)
        backward = out.loss * self.ranks.world_size  # DDP averages over ranks; see train_step
        if not out.loss.requires_grad and must_backward:  # no loss tokens, so no forward ran: a zero-gradient one
            with self.accelerator.autocast():
                full, _ = sequence_logprobs_and_entropy(self.model, mb.input_ids, mb.attention_mask, run.temperature,
                                                        None, run.logprob_chunk_size, with_entropy=False, packed=packed)
            backward = 0.0 * full.sum()
        if backward.requires_grad:  # a micro-batch without loss tokens has nothing to backpropagate
            self.accelerator.backward(backward)
        return sums | {"loss": float(out.loss.detach()), "low": float(out.low), "high": float(out.high)}

    def fix_old_policy(self, mb: TrainBatch, packed: Packed | None, logprobs: torch.Tensor,
                       entropy: torch.Tensor) -> dict[str, float]:
        """Before the first update: pi_old (see train_step) and pi_ref of micro-batch `mb`, and the sums of what
        describes the policy before this step (entropy, mismatch with vLLM, sampled tokens). `logprobs`: (B, T)."""
        run, loss = self.run, self.loss
        sampled = mb.sampled_mask & (mb.loss_mask > 0)  # (B, T)
        sums = {"entropy": float((entropy * mb.loss_mask).sum()),
                "mismatch_kl": float((mismatch_kl(logprobs, mb.sampling_logprobs) * sampled).sum()),
                "sampled": float(sampled.sum())}
        if loss.vllm_importance_sampling_correction:  # pi_old: this policy; the sampler's gap: a weight (loss.py)
            mb.old_logprobs = logprobs
            mb.is_weights = importance_weights(logprobs, mb.sampling_logprobs, sampled,
                                               loss.vllm_importance_sampling_mode, loss.vllm_importance_sampling_cap)
            sums |= {"is_weight": float((mb.is_weights * sampled).sum()),
                     "is_masked": float(((mb.is_weights == 0) & sampled).sum())}
        else:
            mb.old_logprobs = torch.where(sampled, mb.sampling_logprobs, logprobs)
        if self.reference is not None:
            mb.ref_logprobs = self.reference.logprobs(mb.input_ids, mb.attention_mask, run.temperature,
                                                      mb.loss_mask > 0, run.logprob_chunk_size, packed)
        return sums

    def update_metrics(self, sums: dict[str, float], loss_tokens: int) -> dict[str, float]:
        """The step's metrics from train_step's batch sums: means per loss token, per sampled token, per iteration."""
        n_tok, n_it = max(loss_tokens, 1), self.run.num_iterations
        return {
            "loss": sums["loss"] / n_it,
            "grad_norm": sums["grad_norm"] / n_it,
            "lr": self.scheduler.get_last_lr()[0],
            "entropy": sums["entropy"] / n_tok,
            "mismatch_kl": sums["mismatch_kl"] / max(sums["sampled"], 1),
            "clip_fraction_low": sums["low"] / (n_tok * n_it),
            "clip_fraction_high": sums["high"] / (n_tok * n_it),
            "masked_fraction": (sums["low"] + sums["high"]) / (n_tok * n_it),  # loss tokens a ratio bound took out
            **({"kl": sums["kl"] / n_tok} if self.loss.beta > 0 else {}),
            **({"importance_sampling_ratio": sums["is_weight"] / max(sums["sampled"], 1),  # after its cap
                "importance_sampling_masked_fraction": sums["is_masked"] / max(sums["sampled"], 1)}
               if self.loss.vllm_importance_sampling_correction else {}),
            **({"sampler_mismatch_kl": sums["sampler_kl"] / sums["sampler_tokens"]} if sums["sampler_tokens"] else {}),
        }


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
