"""``ram``: the whole data set as one tensor in memory, indexed per sample."""

from __future__ import annotations

import numpy as np
import torch

from pipeprof.scenario import DataSpec
from pipeprof.storage.base import Progress, SampleDataset, Throttle, Transform
from pipeprof.storage.synthetic import FEATURES, SyntheticFiles


class RamDataset(SampleDataset):
    def __init__(self, x: torch.Tensor, labels: np.ndarray, transform: Transform | None = None,
                 throttle: Throttle | None = None) -> None:
        super().__init__(labels, transform, throttle)
        self.x = x

    def read(self, index: int) -> tuple[torch.Tensor, int]:
        return self.x[index], FEATURES * 4

    def decode(self, payload: torch.Tensor) -> torch.Tensor:
        return payload


def build(spec: DataSpec, files: SyntheticFiles, transform: Transform | None = None,
          throttle: Throttle | None = None, progress: Progress | None = None) -> RamDataset:
    return RamDataset(torch.from_numpy(np.load(files.x_path)), np.load(files.y_path), transform, throttle)
