"""Inside the sample (issue 18): which transform and which decode call cost the time, per loader.

Pure functions over ``transforms.csv`` (``run_folder.TRANSFORM_COLUMNS``:
per batch consumed by a step, the wall and CPU time of each leaf
transform, of the decode calls, and of the batch's whole ``__getitem__``)
and run.json ``transform_pipelines`` (each loader's leaves in call order,
``{"name", "random"}``). The records of warm-up steps are left out, like
every other statistic.

The typed records below are what summary.json, the verdict, the
recommendations and the renderers read; ``to_json`` belongs to the
summary writer only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransformCost:
    """One leaf transform of a loader's pipeline, over the counted batches."""

    name: str  # unique in its pipeline: "RandomResizedCrop(size=224)", "Normalize #2"
    order: int  # position in the pipeline's call order (0 first)
    per_sample_s: float  # wall seconds per sample the loader made (a randomly skipped call counts 0)
    cpu_per_sample_s: float  # the calling thread's CPU seconds per sample
    calls: int
    share_of_prep: float | None  # its wall time over the samples' prep time (None: unknown or zero)
    random: bool | None  # a random transform (or inside a random container); None: not known


@dataclass(frozen=True)
class DecodeCost:
    """The common decode / read calls made in ``__getitem__`` outside any transform."""

    per_sample_s: float
    cpu_per_sample_s: float
    calls: int
    how: str  # the calls seen, costliest first: "PIL.Image.open+convert", "torchvision.io.decode_jpeg", ...


@dataclass(frozen=True)
class PrepSplit:
    """A sample's making split into fetch / decode / transform / other, seconds per sample (``core_wait_s``
    None where unknown); the parts sum to the samples' ``__getitem__`` time."""

    fetch_s: float
    core_wait_s: float | None
    decode_s: float
    transform_s: float
    other_s: float


@dataclass(frozen=True)
class LoaderTransforms:
    """What one loader's samples spent inside ``__getitem__``, over its counted batches."""

    loader: int
    samples: int
    transforms: tuple[TransformCost, ...]  # costliest first
    decode: DecodeCost | None  # None: no decode call seen
    split: PrepSplit | None  # None: neither a transform nor a decode call timed
