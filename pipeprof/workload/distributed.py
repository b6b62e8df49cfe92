"""One rank of a scenario's DDP job: the process group, the wrapped model, the shard, the collective wait.

``pipeline/ranks_run.py`` starts ``train.ranks`` processes; each calls
``join_group`` and builds its workload with a ``DistributedParts``. The
model trains under ``DistributedDataParallel``; each rank reads its shard
of the data through a ``DistributedSampler`` (a new shuffle every pass).

**Collective wait.** DDP's reducer starts the gradient all-reduce during the
backward pass and, at its end, blocks the calling thread until every
bucket is reduced. Under gloo that wait is off the CPU (the thread sleeps
on a condition while gloo's own threads move the bytes), while the rank's
own backward math runs on the CPU. So, per backward pass::

    collective_wait_s = max(0, wall - thread CPU time - run-queue wait)

``CollectiveWait.backward`` measures it (``time.thread_time`` for the
thread's CPU time, ``measure.schedstat`` for the time it was runnable but
waiting for a core, which is no collective's); the step timer takes it out
of the step's compute. Limits: with more than one torch thread, time the
calling thread spends off the CPU waiting for its intra-op helpers counts
as collective too (a scenario rank trains with 1 thread unless it says
otherwise); where the run-queue wait cannot be read it is taken as 0. On
CUDA, NCCL reduces on the device and the host does not block: no wait is
measurable this way (``collective`` is None; the run records an absence).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from pipeprof.measure.clock import Clock, monotonic_clock
from pipeprof.measure.schedstat import RunQueueClock, blocked_s, run_queue_wait
from pipeprof.scenario import LoaderSpec
from pipeprof.storage.device import DeviceBatches, DeviceDataset

AGREE_EVERY_STEPS = 32  # the ranks agree on stopping (one blocking all-reduce) once every this many steps
GROUP_TIMEOUT_S = 300.0  # a rank blocked this long in a collective fails (a peer that vanished is seen sooner)


def backend_for(device: torch.device, world_size: int) -> str:
    """NCCL for CUDA devices when every rank has a GPU of its own (NCCL refuses two ranks on one),
    gloo on the CPU or where ranks share a GPU."""
    if device.type == "cuda" and torch.cuda.device_count() >= world_size:
        return "nccl"
    return "gloo"


def join_group(rank: int, world_size: int, port: int, backend: str) -> None:
    """Initialise the default process group over TCP on this machine (MASTER_ADDR 127.0.0.1, ``port``)."""
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size)})
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=dt.timedelta(seconds=GROUP_TIMEOUT_S))


def leave_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class CollectiveWait:
    """Measures the collective wait of backward passes (see module docstring); ``take()`` hands it over.

    Clocks are injected: ``clock`` (wall), ``cpu_clock`` (the calling thread's CPU time) and
    ``run_queue`` (its cumulative run-queue wait, None when unknown), all in seconds.
    """

    def __init__(self, clock: Clock = monotonic_clock, cpu_clock: Clock = time.thread_time,
                 run_queue: RunQueueClock = run_queue_wait) -> None:
        self.clock, self.cpu_clock, self.run_queue = clock, cpu_clock, run_queue
        self._pending_s = 0.0

    def backward(self, loss: Any) -> None:
        """``loss.backward()``, its collective wait added to what ``take()`` returns next."""
        queued, cpu, wall = self.run_queue(), self.cpu_clock(), self.clock()
        loss.backward()
        wall_s, cpu_s = self.clock() - wall, self.cpu_clock() - cpu
        self._pending_s += blocked_s(wall_s, cpu_s, queued, self.run_queue())

    def take(self) -> float:
        """Seconds of collective wait since the last call."""
        taken, self._pending_s = self._pending_s, 0.0
        return taken


class EveryPassSampler(DistributedSampler):
    """A DistributedSampler that reshuffles for every pass (``set_epoch`` by itself, as a loop would)."""

    def __iter__(self) -> Iterator[Any]:
        indices = super().__iter__()
        self.set_epoch(self.epoch + 1)
        return indices


class ShardedDeviceBatches(DeviceBatches):
    """``DeviceBatches`` of one rank's shard, split as DistributedSampler splits: every rank draws the
    same permutation (one seed), padded to a multiple of the ranks, and takes every ``world_size``-th index."""

    def __init__(self, dataset: DeviceDataset, spec: LoaderSpec, seed: int, rank: int, world_size: int) -> None:
        super().__init__(dataset, spec, seed)
        self.rank, self.world_size = rank, world_size

    def shard_size(self) -> int:
        return -(-len(self.dataset) // self.world_size)

    def __len__(self) -> int:
        full, rest = divmod(self.shard_size(), self.batch_size)
        return full if (self.drop_last or rest == 0) else full + 1

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.dataset)
        order = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
        padded = self.shard_size() * self.world_size
        order = torch.cat([order, order[: padded - n]])[self.rank :: self.world_size].to(self.dataset.x.device)
        transform = self.dataset.transform
        for b in range(len(self)):
            index = order[b * self.batch_size : (b + 1) * self.batch_size]
            x = self.dataset.x[index]
            yield (transform(x) if transform is not None else x), self.dataset.y[index]


@dataclass
class DistributedParts:
    """What one rank adds to its workload: rank, world, backend, the DDP model and the collective meter."""

    rank: int
    world_size: int
    backend: str
    model: DistributedDataParallel | None = None
    collective: CollectiveWait | None = None  # None on CUDA: NCCL does not block the host
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    def wrap(self, model: nn.Module, device: torch.device) -> DistributedDataParallel:
        """``model`` under DDP (parameters broadcast from rank 0 now)."""
        ids = [device.index or 0] if device.type == "cuda" else None
        self.device = device
        self.model = DistributedDataParallel(model, device_ids=ids)
        if device.type != "cuda":
            self.collective = CollectiveWait()
        return self.model

    def solo(self) -> contextlib.AbstractContextManager[Any]:
        """Train steps without the gradient all-reduce (DDP's ``no_sync``): the rank's own compute alone."""
        return self.model.no_sync() if self.model is not None else contextlib.nullcontext()

    def agree(self, stop: bool) -> bool:
        """True on every rank if any rank wants to stop here (every rank must train the same steps: a rank
        that stopped alone would leave the others blocked in their next all-reduce). A blocking all-reduce
        and a host read: ``agreeing`` calls it once every ``AGREE_EVERY_STEPS`` steps, never per step."""
        flag = torch.tensor([1 if stop else 0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def agreeing(self, stop_after: Callable[[int, int], bool],
                 every_steps: int = AGREE_EVERY_STEPS) -> Callable[[int, int], bool]:
        """``stop_after`` decided by all ranks together (steady state or a time budget reached on one).

        Each rank decides on its own host clock at every step, and the ranks agree only every
        ``every_steps`` steps (all at the same steps: they train in lockstep). An agreement per step
        would stop the host at every step on CUDA (the flag's copy and its read), so the host could never
        run ahead and the profiled job would expose data waits the unprofiled one hides; the price is a stop
        up to ``every_steps - 1`` steps later than wanted."""
        if every_steps < 1:
            raise ValueError(f"every_steps must be >= 1, got {every_steps}")
        state = {"steps": 0, "wanted": False}

        def decide(step: int, samples: int) -> bool:
            state["wanted"] = bool(stop_after(step, samples)) or bool(state["wanted"])
            state["steps"] += 1
            if state["steps"] % every_steps:
                return False
            return self.agree(bool(state["wanted"]))
        return decide
