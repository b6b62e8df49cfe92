"""Storage kinds: where the training data lives and how each sample is read."""

from __future__ import annotations

import importlib

from pipeprof.scenario import DataSpec
from pipeprof.storage.base import Builder, Progress, SampleDataset, Throttle, Transform
from pipeprof.storage.synthetic import SyntheticFiles


def _lazy(kind: str) -> Builder:
    """The kind's ``build``, imported on first use (``images`` pulls in torchvision: seconds)."""

    def build(*args, **kwargs):
        return importlib.import_module(f"pipeprof.storage.{kind}").build(*args, **kwargs)

    return build


BUILDERS: dict[str, Builder] = {kind: _lazy(kind) for kind in ("device", "ram", "memmap", "files", "images")}


def build_dataset(spec: DataSpec, files: SyntheticFiles, transform: Transform | None = None,
                  throttle: Throttle | None = None, progress: Progress | None = None) -> SampleDataset:
    """The dataset for ``spec.storage`` over the generated files."""
    return BUILDERS[spec.storage](spec, files, transform, throttle, progress)
