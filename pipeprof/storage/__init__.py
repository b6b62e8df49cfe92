"""Storage kinds: where the training data lives and how each sample is read."""

from __future__ import annotations

from torch.utils.data import Dataset

from pipeprof.scenario import DataSpec
from pipeprof.storage import memmap, ram
from pipeprof.storage.base import Builder
from pipeprof.storage.synthetic import SyntheticFiles

BUILDERS: dict[str, Builder] = {"ram": ram.build, "memmap": memmap.build}


def build_dataset(spec: DataSpec, files: SyntheticFiles) -> Dataset:
    """The Dataset for ``spec.storage`` over the generated files."""
    return BUILDERS[spec.storage](spec, files)
