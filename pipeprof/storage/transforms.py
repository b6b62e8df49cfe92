"""Per-sample transforms, applied in ``SampleDataset.prep`` (in the DataLoader workers).

* ``none``: the decoded values as they are.
* ``normalize``: standardize with FashionMNIST's mean and std (cheap).
* ``augment``: ``augment_passes`` random affine warps (rotation, shift, scale)
  of the 28x28 image, then normalize — CPU-heavy preprocessing, like the
  augmentation of real image pipelines; the pass count is the cost knob.

Transforms are module-level classes, so they pickle to worker processes. They
also accept a batch (``B x 784``), which the ``device`` storage uses.
"""

from __future__ import annotations

import torch

from pipeprof.scenario import DataSpec
from pipeprof.storage.base import Transform
from pipeprof.storage.synthetic import FEATURES, SIDE

# FashionMNIST's pixel statistics (the data set pipeprof's synthetic data imitates).
MEAN = 0.2860
STD = 0.3530


class Normalize:
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x - MEAN) / STD


class Augment:
    """Random affine warps of the image (degrees 15, shift 10%, scale 0.9-1.1), then normalize."""

    def __init__(self, passes: int = 1) -> None:
        from torchvision.transforms import v2  # importing torchvision costs seconds: only when augmenting

        self.passes = passes
        self.affine = v2.RandomAffine(degrees=15.0, translate=(0.1, 0.1), scale=(0.9, 1.1))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        image = x.reshape(-1, 1, SIDE, SIDE)
        for _ in range(self.passes):
            image = self.affine(image)
        return Normalize()(image.reshape(*x.shape[:-1], FEATURES))


def build_transform(spec: DataSpec) -> Transform | None:
    """The transform named by ``spec.transform`` (None for ``none``)."""
    if spec.transform == "none":
        return None
    if spec.transform == "normalize":
        return Normalize()
    if spec.transform == "augment":
        return Augment(spec.augment_passes)
    raise ValueError(f"unknown transform {spec.transform!r}")  # scenario validation prevents this
