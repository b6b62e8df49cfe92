"""The storage interface: every storage kind yields the same sample for the same index.

A storage kind is one module in ``pipeprof/storage/`` with a
``build(spec, files, transform, throttle)`` function returning a
``SampleDataset``. Reading a sample is split in two so that the profiler can
time each part (inside DataLoader workers too):

* ``fetch(index)`` reads the sample's bytes from storage (a file, a memory
  map, a tensor) and returns ``Fetched`` — the raw payload, its label, and
  how many bytes were read. An emulated slow storage (``throttle``) waits here.
* ``prep(fetched)`` decodes the payload into 784 float32 values and applies
  the transform; it returns ``(x, y)``. A kind whose ``decode`` runs a real
  decoder names it in ``decoder`` (``torchvision.io.decode_png``): the
  loading recorder then times the decode apart from the transform
  (transforms.csv's "decode" rows); kinds that hand over values as stored
  (RAM, a memory map) leave it None.

``__getitem__(i)`` is ``prep(fetch(i))``, so a plain DataLoader works as is.
Register a new kind in ``pipeprof/storage/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import Dataset

from pipeprof.scenario import DataSpec
from pipeprof.storage.synthetic import SyntheticFiles

Transform = Callable[[torch.Tensor], torch.Tensor]  # 784 float32 values in, 784 out


class Throttle(Protocol):
    """Emulated slow storage: ``wait(nbytes)`` blocks as long as reading ``nbytes`` would take."""

    def wait(self, nbytes: int) -> None: ...


@dataclass(frozen=True)
class Fetched:
    payload: Any  # what the storage kind's decode() understands
    label: int
    nbytes: int  # bytes read from storage for this sample


class SampleDataset(Dataset):
    """Base of every storage kind's dataset; subclasses implement ``read`` and ``decode``."""

    decoder: str | None = None  # the decode call, as transforms.csv names it; None: values used as stored

    def __init__(self, labels: np.ndarray, transform: Transform | None = None,
                 throttle: Throttle | None = None) -> None:
        self.labels = labels
        self.transform = transform
        self.throttle = throttle

    def __len__(self) -> int:
        return len(self.labels)

    # -- what a storage kind implements ------------------------------------------------

    def read(self, index: int) -> tuple[Any, int]:
        """The raw payload of sample ``index`` and the bytes read."""
        raise NotImplementedError

    def decode(self, payload: Any) -> torch.Tensor:
        """The payload as a float32 tensor of 784 values in [0, 1]."""
        raise NotImplementedError

    def paths(self) -> list[Path]:
        """Files backing the data (for dropping them from the page cache); none by default."""
        return []

    def close(self) -> None:
        """Release open files and memory maps (a mapped page cannot be evicted)."""

    # -- the two timed halves ----------------------------------------------------------

    def fetch(self, index: int) -> Fetched:
        payload, nbytes = self.read(index)
        if self.throttle is not None:
            self.throttle.wait(nbytes)
        return Fetched(payload, int(self.labels[index]), nbytes)

    def prep(self, fetched: Fetched) -> tuple[torch.Tensor, int]:
        return self.transformed(self.decode(fetched.payload)), fetched.label

    def transformed(self, x: torch.Tensor) -> torch.Tensor:
        """The decoded values through the transform (as they are without one): prep's second half."""
        return self.transform(x) if self.transform is not None else x

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.prep(self.fetch(index))


Progress = Callable[[str, int, int], None]  # (what, done, total): materialization progress


class Builder(Protocol):
    def __call__(self, spec: DataSpec, files: SyntheticFiles, transform: Transform | None,
                 throttle: Throttle | None, progress: Progress | None = None) -> SampleDataset: ...
