"""Per-sample transforms, applied in ``SampleDataset.prep`` (in the DataLoader workers).

* ``none``: the decoded values as they are.
* ``normalize``: standardize with FashionMNIST's mean and std (cheap).
* ``augment``: a ``torchvision.transforms.v2.Compose`` of named leaves, as a
  real image pipeline is: ``ToImage28`` (784 values to a 1x28x28 image),
  ``augment_passes`` ``RandomAffine`` warps (rotation, shift, scale; one
  leaf per pass), ``Flatten784`` and ``Normalize`` — CPU-heavy
  preprocessing whose leaves the per-transform timing tells apart (the
  warps cost nearly all of it); the pass count is the cost knob.

Transforms are module-level classes, so they pickle to worker processes. They
also accept a batch (``B x 784``), which the ``device`` storage uses (one
draw of each warp for the whole batch).
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


class ToImage28:
    """784 values (or ``B x 784``) as a 1x28x28 image (``B x 1 x 28 x 28``)."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(*x.shape[:-1], 1, SIDE, SIDE)


class Flatten784:
    """A 1x28x28 image (``B x 1 x 28 x 28``) back to 784 values (``B x 784``)."""

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return image.reshape(*image.shape[:-3], FEATURES)


def augment(passes: int = 1) -> Transform:
    """Random affine warps of the image (degrees 15, shift 10%, scale 0.9-1.1), ``passes`` times, then normalize:
    a ``v2.Compose`` of named leaves (module docstring)."""
    from torchvision.transforms import v2  # importing torchvision costs seconds: only when augmenting

    warps = [v2.RandomAffine(degrees=15.0, translate=(0.1, 0.1), scale=(0.9, 1.1)) for _ in range(passes)]
    return v2.Compose([ToImage28(), *warps, Flatten784(), Normalize()])


def build_transform(spec: DataSpec) -> Transform | None:
    """The transform named by ``spec.transform`` (None for ``none``)."""
    if spec.transform == "none":
        return None
    if spec.transform == "normalize":
        return Normalize()
    if spec.transform == "augment":
        return augment(spec.augment_passes)
    raise ValueError(f"unknown transform {spec.transform!r}")  # scenario validation prevents this
