"""The attribution's sections as typed records: what ``attribution`` hands the verdict and the recommendations.

One frozen dataclass per section of summary.json's ``attribution`` (units in the
field names, as in summary.json). A section that can be missing has ``absent``:
the reason it was not measured, with every number None; its ``to_json()`` is then
``{"absent": reason}``, never zeros. ``to_json()`` gives the section exactly as
summary.json has it (fields in declaration order); ``from_json()`` is its lenient
inverse (unknown keys ignored, missing ones at their defaults), for summaries read back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from pipeprof.analysis.reasons import Reason
from pipeprof.run_meta import JsonObject, as_object

_S = TypeVar("_S", bound="_Section")

# One number a verdict, a cause or a straggler was decided on (their ``evidence``, units in the keys): a number,
# a flag, a name or an absence's reason, or numbers by rank; None: not measured.
EvidenceValue = bool | int | float | str | Mapping[str, float] | None
Evidence = dict[str, EvidenceValue]


class _Section:
    """to_json / from_json over a dataclass's fields; ``absent`` (where declared) replaces the whole section."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # set by @dataclass on each section
    _NESTED: ClassVar[dict[str, type[_Section]]] = {}

    def to_json(self) -> JsonObject:
        absent = getattr(self, "absent", None)  # only the sections that can be missing declare it
        if absent is not None:
            return {"absent": absent}
        out: JsonObject = {}
        for f in dataclasses.fields(self):
            if f.name == "absent":
                continue
            value = getattr(self, f.name)
            out[f.name] = value.to_json() if isinstance(value, _Section) else \
                dict(value) if isinstance(value, dict) else value
        return out

    @classmethod
    def from_json(cls: type[_S], data: Any) -> _S:
        data = as_object(data)
        names = {f.name for f in dataclasses.fields(cls)}
        if "absent" in names and data.get("absent") is not None:
            return cls(absent=str(data["absent"]))  # type: ignore[call-arg]
        kwargs: dict[str, object] = {}
        for name in names - {"absent"}:
            if name not in data:
                continue
            value = data[name]
            nested = cls._NESTED.get(name)
            kwargs[name] = nested.from_json(value) if nested is not None and value is not None else value
        return cls(**kwargs)


@dataclass(frozen=True)
class StepShares(_Section):
    """``step``: shares of counted step time, the counted steps and their mean times (never absent)."""

    steps: int = 0
    data_wait_fraction: float | None = None
    h2d_fraction: float | None = None
    collective_wait_fraction: float | None = None  # blocked in collectives, waiting for the other ranks
    compute_fraction: float | None = None
    other_fraction: float | None = None
    step_mean_s: float | None = None
    data_wait_mean_s: float | None = None


PARTS = ("fetch", "prep", "collate")
CORE_WAIT = "core_wait"  # not a part of making a batch the verdict can change: the maker waited for a core


# LoadingEvidence.split of a script's loading: __getitem__'s time off the CPU as fetch, on the CPU as prep
OFF_CPU_SPLIT = "thread-cpu-time"


@dataclass(frozen=True)
class LoadingEvidence(_Section):
    """``loading``: how the batches were made, measured in the process that made each one.

    ``workers``: 0 when the training process made them; per-sample and per-batch times;
    ``*_fraction``: shares of production time; ``busy_fraction_by_worker`` (``"main"``,
    ``"0"``, ...); ``production_over_wait_fraction``: ``batch_s`` over the mean data wait
    per step; ``samples_per_call``: a ready-made batch's samples (one ``__getitem__`` call); ``split``: how fetch
    and prep were told apart (None: timed around the storage's fetch() and prep(); ``"thread-cpu-time"``: a
    script's ``__getitem__``).
    """

    workers: int | None = None
    fetch_per_sample_s: float | None = None
    core_wait_per_sample_s: float | None = None  # runnable, waiting for a core (None: unknown; fetch holds it)
    prep_per_sample_s: float | None = None
    collate_per_sample_s: float | None = None
    collate_per_batch_s: float | None = None
    batch_s: float | None = None
    fetch_fraction: float | None = None
    core_wait_fraction: float | None = None
    prep_fraction: float | None = None
    collate_fraction: float | None = None
    busy_fraction_by_worker: dict[str, float | None] = field(default_factory=dict)
    worker_busy_mean_fraction: float | None = None
    production_over_wait_fraction: float | None = None
    split: str | None = None
    # samples one __getitem__ call hands over where the loader takes ready-made batches (batch_size=None) of more
    # than one sample; None: one sample a call
    samples_per_call: float | None = None
    absent: str | None = None

    def to_json(self) -> JsonObject:
        out = super().to_json()
        if out.get("samples_per_call", 0) is None:
            del out["samples_per_call"]  # written only for ready-made batches (summary.json's optional key)
        return out

    def part_fraction(self, part: str) -> float | None:
        """The share of production time of ``part`` (one of ``PARTS``, or ``CORE_WAIT``)."""
        if part not in PARTS and part != CORE_WAIT:
            raise KeyError(part)
        return getattr(self, f"{part}_fraction")


@dataclass(frozen=True)
class CpuEvidence(_Section):
    """``cpu``: threads against the usable cores, CPU use in % of one core (process) or of all (machine)."""

    cores_usable: int | None = None
    torch_threads: int | None = None
    num_workers: int | None = None
    threads_wanted: int | None = None
    oversubscribed: bool | None = None
    main_cpu_mean_pct: float | None = None
    workers_cpu_mean_pct: float | None = None
    machine_cpu_mean_pct: float | None = None
    machine_cpu_peak_pct: float | None = None
    busy_cores: float | None = None
    busy_over_usable_fraction: float | None = None


@dataclass(frozen=True)
class DiskCeiling(_Section):
    """``disk.ceiling``: the probe's cold-read ceilings and the run's reads against them."""

    sequential_cold_bytes_per_s: float | None = None
    random_4k_cold_reads_per_s: float | None = None
    random_4k_cold_bytes_per_s: float | None = None
    mean_over_sequential_fraction: float | None = None
    peak_over_sequential_fraction: float | None = None
    peak_over_random_4k_fraction: float | None = None
    absent: str | None = None


@dataclass(frozen=True)
class DiskEvidence(_Section):
    """``disk``: the process tree's real reads during the counted steps, and the probed ``ceiling``
    (None only where the whole section is absent)."""

    _NESTED: ClassVar[dict[str, type[_Section]]] = {"ceiling": DiskCeiling}

    mean_read_bytes_per_s: float | None = None
    peak_read_bytes_per_s: float | None = None
    ceiling: DiskCeiling | None = None
    absent: str | None = None


@dataclass(frozen=True)
class GpuEvidence(_Section):
    """``gpu``: mean utilization and idle time, in %."""

    mean_util_pct: float | None = None
    idle_pct: float | None = None
    absent: str | None = None


@dataclass(frozen=True)
class PrefetchEvidence(_Section):
    """``prefetch``: the DataLoader's prefetch queue as the counted steps found it (``ready_batches``)."""

    num_workers: int | None = None
    prefetch_factor: int | None = None
    capacity_batches: int | None = None
    steps_observed: int | None = None
    mean_ready_batches: float | None = None
    mean_occupancy_fraction: float | None = None
    empty_step_fraction: float | None = None
    full_step_fraction: float | None = None
    ready_wait_fraction: float | None = None
    wait_when_ready_mean_s: float | None = None
    wait_when_empty_mean_s: float | None = None
    absent: str | None = None


@dataclass(frozen=True)
class DataEvidence(_Section):
    """``data``: the storage kind, its throttle (emulated slow storage: a preset name or its spec) and
    whether batches were pinned (never absent)."""

    storage: str | None = None
    throttle: Any = None
    pin_memory: bool = False


@dataclass(frozen=True)
class CacheEvidence(_Section):
    """``cache``: the page-cache mode asked for, whether it was verified, and why not (``reason``: the page-cache
    check's, worded at the edge by ``render.cache_text``; as written where a summary was read back)."""

    cache: str | None = None
    verified: bool | None = None
    reason: Reason | None = None
    absent: str | None = None

    def to_json(self) -> JsonObject:
        """summary.json's ``attribution.cache`` but its ``reason``, worded at the edge."""
        return {"absent": self.absent} if self.absent is not None else {"cache": self.cache, "verified": self.verified}

    @classmethod
    def from_json(cls, data: Any) -> CacheEvidence:
        d = as_object(data)
        if d.get("absent") is not None:
            return cls(absent=str(d["absent"]))
        reason = d.get("reason")
        return cls(cache=d.get("cache"), verified=d.get("verified"),
                   reason=Reason.written(reason) if isinstance(reason, str) else None)
