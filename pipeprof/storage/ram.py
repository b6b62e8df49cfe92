"""``ram``: the whole data set as one tensor in memory, indexed per sample."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from pipeprof.scenario import DataSpec
from pipeprof.storage.synthetic import SyntheticFiles


class RamDataset(Dataset):
    def __init__(self, x: torch.Tensor, y: np.ndarray) -> None:
        self.x = x
        self.y = y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.x[index], int(self.y[index])


def build(spec: DataSpec, files: SyntheticFiles) -> RamDataset:
    return RamDataset(torch.from_numpy(np.load(files.x_path)), np.load(files.y_path))
