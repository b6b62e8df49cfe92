"""``memmap``: one ``.npy`` on disk, each sample read through a memory map.

The map is opened lazily in whichever process reads first (the training
process or a DataLoader worker), so nothing large is pickled to workers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from pipeprof.scenario import DataSpec
from pipeprof.storage.synthetic import SyntheticFiles


class MemmapDataset(Dataset):
    def __init__(self, x_path: Path, y: np.ndarray) -> None:
        self.x_path = Path(x_path)
        self.y = y
        self._x: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.y)

    def __getstate__(self) -> dict:
        return dict(self.__dict__, _x=None)  # each process maps the file itself

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self._x is None:
            self._x = np.load(self.x_path, mmap_mode="r")
        # Copy out of the read-only map: this is the actual read from storage.
        return torch.from_numpy(np.array(self._x[index])), int(self.y[index])


def build(spec: DataSpec, files: SyntheticFiles) -> MemmapDataset:
    return MemmapDataset(files.x_path, np.load(files.y_path))
