"""``memmap``: one ``.npy`` on disk, each sample read through a memory map.

The map is opened lazily in whichever process reads first (the training
process or a DataLoader worker), so nothing large is pickled to workers.
With a cold page cache the map is opened with readahead off
(``madvise(MADV_RANDOM)``): the kernel's readahead would otherwise pull the
whole file back into the cache within a fraction of a second and the "cold"
run would be warm in all but name.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import torch

from pipeprof.scenario import DataSpec
from pipeprof.storage.base import Progress, SampleDataset, Throttle, Transform
from pipeprof.storage.synthetic import FEATURES, SyntheticFiles


class MemmapDataset(SampleDataset):
    def __init__(self, x_path: Path, labels: np.ndarray, transform: Transform | None = None,
                 throttle: Throttle | None = None, random_access: bool = False) -> None:
        super().__init__(labels, transform, throttle)
        self.x_path = Path(x_path)
        self.random_access = random_access
        self._x: np.memmap | None = None

    def __getstate__(self) -> dict:
        return dict(self.__dict__, _x=None)  # each process maps the file itself

    def _open(self) -> np.memmap:
        x = np.load(self.x_path, mmap_mode="r")
        if self.random_access and hasattr(x, "_mmap") and hasattr(mmap, "MADV_RANDOM"):
            x._mmap.madvise(mmap.MADV_RANDOM)
        return x

    def read(self, index: int) -> tuple[np.ndarray, int]:
        if self._x is None:
            self._x = self._open()
        # Copy out of the read-only map: this is the actual read from storage.
        return np.array(self._x[index]), FEATURES * 4

    def decode(self, payload: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(payload)

    def paths(self) -> list[Path]:
        return [self.x_path]

    def close(self) -> None:
        self._x = None  # numpy unmaps when the last reference goes


def build(spec: DataSpec, files: SyntheticFiles, transform: Transform | None = None,
          throttle: Throttle | None = None, progress: Progress | None = None) -> MemmapDataset:
    return MemmapDataset(files.x_path, np.load(files.y_path), transform, throttle,
                         random_access=getattr(spec, "cache", "warm") == "cold")
