"""Several trainer processes (`accelerate launch --num-processes N vf-train`): who does what.

Rank 0 is the only process that talks to vLLM (the orchestrator's generation, eval, the weight sync)
and the only one that writes (metrics.jsonl, rollouts/, console, wandb, checkpoints). A step:

    rank 0                                   every rank
    batch = await the orchestrator
    share(batch)  ------------------------>  batch = share(None)          same rollouts everywhere
                                             train_step: advantages and loss weights of the whole batch
                                             (identical on every rank), forward/backward on micro-batches
                                             k with k % world_size == rank, DDP all-reduces the gradients
    write the new policy for vLLM
    barrier()  <-------------------------->  barrier()                    nobody starts step n+1 before
                                                                          policy n+1 is written (vLLM
                                                                          loads it meanwhile)

One process (no accelerate, or --num-processes 1) is world_size 1: share, barrier and sum are no-ops.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class Ranks:
    """This process's place among the trainer processes, and the few collectives the loop needs."""

    def __init__(self, device: torch.device):
        self.active = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        self.world_size = dist.get_world_size() if self.active else 1
        self.rank = dist.get_rank() if self.active else 0
        # nccl moves objects through the GPU; gloo (CPU ranks) through host memory
        self.device = device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def mine(self, num_micro_batches: int) -> list[int]:
        """This rank's micro-batches: a fixed, deterministic shard (k % world_size == rank)."""
        return [k for k in range(num_micro_batches) if k % self.world_size == self.rank]

    def share(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (pickled; the others pass None)."""
        if not self.active:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self.device)
        return box[0]

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj`, in rank order, on rank 0 (None elsewhere)."""
        if not self.active:
            return [obj]
        out = [None] * self.world_size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def sum(self, values: dict[str, float]) -> dict[str, float]:
        """Element-wise sum over ranks of per-rank sums (same keys, same order, on every rank)."""
        if not self.active:
            return values
        t = torch.tensor(list(values.values()), dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return dict(zip(values, t.tolist()))

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def close(self) -> None:
        """Every rank is done: take the process group down together. A rank that exits with it still up can
        abort in gloo's teardown ("terminate called without an active exception", seen in CI on rank 1)."""
        if self.active:
            dist.barrier()
            dist.destroy_process_group()
            self.active = False
