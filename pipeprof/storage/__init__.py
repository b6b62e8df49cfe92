"""Storage kinds: where the training data lives and how each sample is read."""

from __future__ import annotations

from pipeprof.scenario import DataSpec
from pipeprof.storage import device, memmap, ram
from pipeprof.storage import files, images
from pipeprof.storage.base import Builder, Progress, SampleDataset, Throttle, Transform
from pipeprof.storage.synthetic import SyntheticFiles

BUILDERS: dict[str, Builder] = {
    "device": device.build,
    "ram": ram.build,
    "memmap": memmap.build,
    "files": files.build,
    "images": images.build,
}


def build_dataset(spec: DataSpec, files: SyntheticFiles, transform: Transform | None = None,
                  throttle: Throttle | None = None, progress: Progress | None = None) -> SampleDataset:
    """The dataset for ``spec.storage`` over the generated files."""
    return BUILDERS[spec.storage](spec, files, transform, throttle, progress)
