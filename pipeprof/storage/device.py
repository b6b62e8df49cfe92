"""``device``: the whole data set resident on the training device; batches taken by index.

No DataLoader and no per-sample reads: each batch is one indexing operation
on tensors that already live where the model runs. This is the data-stall-free
ceiling the other storage kinds are compared against. A transform is applied
to the whole batch on the device.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from pipeprof.scenario import DataSpec, LoaderSpec
from pipeprof.storage.base import Progress, SampleDataset, Throttle, Transform
from pipeprof.storage.synthetic import SyntheticFiles


class DeviceDataset(SampleDataset):
    """Per-sample access for tests and tools; training uses ``DeviceBatches``."""

    def __init__(self, x: torch.Tensor, labels: np.ndarray, transform: Transform | None = None) -> None:
        super().__init__(labels, transform, None)
        self.x = x
        self.y = torch.from_numpy(labels).to(x.device)

    def read(self, index: int) -> tuple[torch.Tensor, int]:
        return self.x[index], 0  # nothing is read from storage

    def decode(self, payload: torch.Tensor) -> torch.Tensor:
        return payload


class DeviceBatches:
    """An iterable of ``(x, y)`` batches drawn by index on the device, one pass per iteration."""

    pin_memory = False  # nothing to copy: the runner's non_blocking logic reads this like a DataLoader's

    def __init__(self, dataset: DeviceDataset, spec: LoaderSpec, seed: int) -> None:
        self.dataset = dataset
        self.batch_size = spec.batch_size
        self.shuffle = spec.shuffle
        self.drop_last = spec.drop_last
        self.generator = torch.Generator(device="cpu").manual_seed(seed)

    def __len__(self) -> int:
        full, rest = divmod(len(self.dataset), self.batch_size)
        return full if (self.drop_last or rest == 0) else full + 1

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        n = len(self.dataset)
        order = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
        order = order.to(self.dataset.x.device)
        transform = self.dataset.transform
        for b in range(len(self)):
            index = order[b * self.batch_size : (b + 1) * self.batch_size]
            x = self.dataset.x[index]
            yield (transform(x) if transform is not None else x), self.dataset.y[index]


def build(spec: DataSpec, files: SyntheticFiles, transform: Transform | None = None,
          throttle: Throttle | None = None, progress: Progress | None = None,
          device: torch.device | str = "cpu") -> DeviceDataset:
    return DeviceDataset(torch.from_numpy(np.load(files.x_path)).to(device), np.load(files.y_path), transform)
