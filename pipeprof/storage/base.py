"""The storage interface: every storage kind yields the same sample for the same index.

A storage kind is one module in ``pipeprof/storage/`` with a ``build(spec,
files)`` function returning a map-style ``torch.utils.data.Dataset`` whose
``__getitem__(i)`` gives ``(x, y)``: ``x`` a float32 tensor of 784 values and
``y`` the int class label. Register it in ``pipeprof/storage/__init__.py``.
"""

from __future__ import annotations

from typing import Protocol

from torch.utils.data import Dataset

from pipeprof.scenario import DataSpec
from pipeprof.storage.synthetic import SyntheticFiles


class Builder(Protocol):
    def __call__(self, spec: DataSpec, files: SyntheticFiles) -> Dataset: ...
