"""From a scenario's [data] and [loader] to an iterable of batches.

Every storage kind but ``device`` goes through a real
``torch.utils.data.DataLoader`` built from the scenario's loader arguments;
``device`` takes batches by index on the device with no DataLoader.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from pipeprof.loader_rules import pins_memory
from pipeprof.scenario import Scenario
from pipeprof.storage import build_dataset
from pipeprof.storage import device as device_storage
from pipeprof.storage.base import Progress, SampleDataset
from pipeprof.storage.synthetic import ensure_synthetic
from pipeprof.storage.throttle import from_spec
from pipeprof.storage.transforms import build_transform
from pipeprof.workload.distributed import DistributedParts, EveryPassSampler, ShardedDeviceBatches


@dataclass
class Data:
    """The dataset (for its files and page cache) and the batches the loop iterates."""

    dataset: SampleDataset
    batches: Iterable  # a DataLoader, or DeviceBatches
    notes: list[str] = field(default_factory=list)

    @property
    def pin_memory(self) -> bool:
        return bool(getattr(self.batches, "pin_memory", False))

    def steps_per_epoch(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def nbytes_on_disk(self) -> int:
        return sum(p.stat().st_size for p in self.dataset.paths())


def build_data(scenario: Scenario, device: torch.device, cache_root: Path | None = None, *,
               recorder: Any = None, progress: Progress | None = None,
               rank: DistributedParts | None = None) -> Data:
    """Generate or reuse the data set and build the batches for ``scenario``.

    ``recorder`` (a ``LoadingRecorder``) wraps the dataset and the collate
    function so that fetch, prep and collate are timed inside the workers.
    With ``rank`` (one rank of a DDP job) the batches are that rank's shard,
    and the throttle applies only if ``data.slow_ranks`` names the rank (or is empty).
    """
    spec, loader = scenario.data, scenario.loader
    files = ensure_synthetic(spec.samples, spec.seed, cache_root, progress=progress)
    transform = build_transform(spec)
    if spec.storage == "device":
        on_device = device_storage.build(spec, files, transform, device=device)
        if rank is not None:
            return Data(on_device, ShardedDeviceBatches(on_device, loader, spec.seed, rank.rank, rank.world_size))
        return Data(on_device, device_storage.DeviceBatches(on_device, loader, spec.seed))
    slowed = rank is None or not spec.slow_ranks or rank.rank in spec.slow_ranks
    throttle = from_spec(spec.throttle) if spec.throttle is not None and slowed else None
    dataset = build_dataset(spec, files, transform, throttle, progress)
    notes = []
    pin_memory = pins_memory(loader.pin_memory, device.type)
    if loader.pin_memory and not pin_memory:
        notes.append("loader.pin_memory = true has no effect without a CUDA device: not applied")
    kwargs: dict[str, Any] = {}
    if loader.num_workers:
        kwargs["worker_init_fn"] = quiet_handover_errors
        kwargs["persistent_workers"] = loader.persistent_workers
        if loader.prefetch_factor is not None:
            kwargs["prefetch_factor"] = loader.prefetch_factor
    if recorder is not None:
        kwargs["collate_fn"] = recorder.collate_fn()
    read = recorder.wrap_dataset(dataset) if recorder is not None else dataset
    if rank is not None:
        # DataLoader's own shuffle is off with a sampler; the sampler shuffles (seeded) every pass.
        kwargs["sampler"] = EveryPassSampler(read, num_replicas=rank.world_size, rank=rank.rank,
                                             shuffle=loader.shuffle, seed=spec.seed)
    batches = DataLoader(
        read,
        batch_size=loader.batch_size,
        shuffle=loader.shuffle and rank is None,
        num_workers=loader.num_workers,
        pin_memory=pin_memory,
        drop_last=loader.drop_last,
        generator=torch.Generator().manual_seed(spec.seed),
        **kwargs,
    )
    return Data(dataset, batches, notes)


def quiet_handover_errors(worker_id: int) -> None:
    """A DataLoader ``worker_init_fn``: a batch handover cut short is not an error worth a traceback.

    A worker hands each batch's shared memory to the training process through
    ``multiprocessing.resource_sharer``, whose serving thread prints any error
    through ``sys.excepthook``. When the training process is interrupted (Ctrl-C,
    SIGTERM) in the middle of a handover, the worker's side fails and printed a
    traceback under pipeprof's one-line message. Such errors, from that module,
    are dropped here; every other exception is printed as before.
    """
    previous = sys.excepthook

    def hook(kind: type, value: BaseException, tb: Any) -> None:
        frames = traceback.extract_tb(tb)
        if issubclass(kind, Exception) and any(f.filename.endswith("resource_sharer.py") for f in frames):
            return
        previous(kind, value, tb)

    sys.excepthook = hook
