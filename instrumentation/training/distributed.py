"""Data parallelism under ``torchrun``: the process group, gradient averaging and routing in step.

Every rank holds the whole model and a different slice of each global batch; gradients are
averaged with one all-reduce per step. AAH routing reads batch statistics, so ranks would drift
apart; ``routing_sync`` averages the inputs of every routing decision across ranks before the
decision, so all ranks take identical decisions (``ranks_agree`` checks it after every step).
Only rank 0 writes the run directory and the checkpoints.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    initialised_here: bool = False

    @property
    def active(self) -> bool:
        return self.world_size > 1


def init_distributed(device: str) -> Dist:
    """Join the process group ``torchrun`` describes (gloo on CPU, nccl on CUDA); single process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    dist = torch.distributed
    if dist.is_initialized():
        return Dist(dist.get_rank(), dist.get_world_size(), False)
    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist.init_process_group(backend=backend)
    return Dist(dist.get_rank(), dist.get_world_size(), True)


@contextlib.contextmanager
def process_group(device: str) -> Iterator[tuple[Dist, str]]:
    """(this process's ``Dist``, its device: ``cuda:LOCAL_RANK`` under torchrun on CUDA); the group
    this call joined is left again on exit, after every rank got there."""
    dist = init_distributed(device)
    try:
        if device.startswith("cuda") and dist.active:
            device = f"cuda:{int(os.environ.get('LOCAL_RANK', dist.rank))}"
            torch.cuda.set_device(device)
        yield dist, device
    finally:
        if dist.initialised_here:
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()


def average_gradients(params: list[torch.nn.Parameter], world_size: int) -> None:
    """One all-reduce of all gradients (flattened), then divide: plain data-parallel SGD."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads or world_size <= 1:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    torch.distributed.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def broadcast(tensors: Iterable[torch.Tensor]) -> None:
    """Rank 0's values of ``tensors`` everywhere (an identical start, also after a resume)."""
    with torch.no_grad():
        for t in tensors:
            torch.distributed.broadcast(t.data, src=0)


def broadcast_model(model: torch.nn.Module) -> None:
    """Rank 0's parameters and buffers everywhere (identical start, also after a resume)."""
    broadcast(list(model.parameters()) + list(model.buffers()))


class routing_sync:
    """Average the inputs of every routing decision across ranks (training forwards only).

    AAH routing reads statistics of the current batch (per-head Q/K/V moments and the previous
    forward's entropy / norm / usage). Each rank sees a different batch, so without help the
    ranks would cluster differently and execute different windows. Inside this context the
    model's feature reducer (``AAHTransformer.set_feature_reducer``) averages both feature kinds
    that feed all routing (method section 4) over ranks, so the EMA, the clustering, the
    controller inputs and hence every decision are identical on all ranks: routing behaves as if
    computed on the global batch's mean statistics. Evaluation runs on rank 0 alone and is not
    synced (``routing_sync.paused``); with frozen evaluation routing it computes no features
    anyway. With ``world_size <= 1`` it does nothing.
    """

    paused = False  # set while one rank runs forwards alone (evaluation on rank 0)

    def __init__(self, model: torch.nn.Module, world_size: int):
        self.model = model
        self.world_size = int(world_size)

    def reduce(self, feats: torch.Tensor) -> torch.Tensor:
        if routing_sync.paused or not torch.distributed.is_initialized():
            return feats
        out = feats.detach().clone()
        torch.distributed.all_reduce(out)
        return out / self.world_size

    def __enter__(self) -> routing_sync:
        if self.world_size > 1:
            self.model.set_feature_reducer(self.reduce)
        return self

    def __exit__(self, *exc) -> None:
        self.model.set_feature_reducer(None)


def ranks_agree(model: torch.nn.Module, device: str = "cpu") -> bool:
    """Do all ranks execute the same window in every head? (one small all-gather)."""
    mine = model.current_windows().to(device=device, dtype=torch.long)
    world = torch.distributed.get_world_size()
    everyone = [torch.empty_like(mine) for _ in range(world)]
    torch.distributed.all_gather(everyone, mine)
    return all(torch.equal(everyone[0], other) for other in everyone[1:])
