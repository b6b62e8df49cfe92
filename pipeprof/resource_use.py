"""The summary's resource sections as typed records: summary.json ``cpu``, ``memory``, ``disk`` and ``gpu``.

``analysis.summary`` builds them from the sampler's records (counted steps only); the renderers read them as
these records, not as dicts. ``to_json`` is their summary.json form; ``from_json`` reads a summary.json (an older
or a partial one: a missing or non-numeric value reads as None, not measured, never 0).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pipeprof.numbers import finite
from pipeprof.run_meta import as_number, as_object


@dataclass(frozen=True)
class CpuUse:
    """summary.json ``cpu``: the machine's CPU (% of all ``cores``) and the training processes' (% of one core)."""

    cores: int | float | None = None  # usable cores, as run.json's environment recorded them
    mean_util: float | None = None  # whole machine, % of all cores
    peak_util: float | None = None
    main_mean_pct: float | None = None  # the training process, % of one core
    workers_mean_pct: float | None = None  # all DataLoader workers together, % of one core

    def outside_cores(self, ranks: int = 1) -> float | None:
        """The cores processes outside the job kept busy on average: the machine's use less the training
        process's and its workers', times the job's ``ranks`` on this machine (each as busy as this one);
        None where one of them was not measured."""
        if self.mean_util is None or self.cores is None or self.main_mean_pct is None:
            return None
        job = (self.main_mean_pct + (self.workers_mean_pct or 0.0)) / 100 * max(ranks, 1)
        return max(self.mean_util / 100 * float(self.cores) - job, 0.0)

    def to_json(self) -> dict[str, Any]:
        return {"cores": self.cores, "mean_util": self.mean_util, "peak_util": self.peak_util,
                "main_mean_pct": self.main_mean_pct, "workers_mean_pct": self.workers_mean_pct}

    @classmethod
    def from_json(cls, data: Any) -> CpuUse:
        d = as_object(data)
        return cls(cores=as_number(d.get("cores")), mean_util=finite(d.get("mean_util")),
                   peak_util=finite(d.get("peak_util")), main_mean_pct=finite(d.get("main_mean_pct")),
                   workers_mean_pct=finite(d.get("workers_mean_pct")))


@dataclass(frozen=True)
class UssSnapshot:
    """The largest unshared memory (USS) seen per role, summed over one snapshot's processes."""

    main: float | None
    workers: float | None  # None: no worker in any snapshot (not measured)
    snapshots: int

    def to_json(self) -> dict[str, Any]:
        return {"main": self.main, "workers": self.workers, "snapshots": self.snapshots}

    @classmethod
    def from_json(cls, data: Any) -> UssSnapshot | None:
        d = as_object(data)
        snapshots = finite(d.get("snapshots"))
        if snapshots is None:
            return None
        return cls(main=finite(d.get("main")), workers=finite(d.get("workers")), snapshots=int(snapshots))


@dataclass(frozen=True)
class MemoryUse:
    """summary.json ``memory``: peak resident set sizes over the whole run, and the USS snapshot."""

    peak_rss_bytes: float | None = None  # training process + workers
    peak_main_rss_bytes: float | None = None
    peak_workers_rss_bytes: float | None = None  # None where no worker ever existed (not measured, not 0)
    uss: UssSnapshot | None = None  # summary.json ``uss_bytes``

    def to_json(self) -> dict[str, Any]:
        return {"peak_rss_bytes": self.peak_rss_bytes, "peak_main_rss_bytes": self.peak_main_rss_bytes,
                "peak_workers_rss_bytes": self.peak_workers_rss_bytes,
                "uss_bytes": self.uss.to_json() if self.uss is not None else None}

    @classmethod
    def from_json(cls, data: Any) -> MemoryUse:
        d = as_object(data)
        return cls(peak_rss_bytes=finite(d.get("peak_rss_bytes")), peak_main_rss_bytes=finite(d.get("peak_main_rss_bytes")),
                   peak_workers_rss_bytes=finite(d.get("peak_workers_rss_bytes")),
                   uss=UssSnapshot.from_json(d.get("uss_bytes")))


@dataclass(frozen=True)
class DiskUse:
    """summary.json ``disk``: real disk reads of the process tree (page-cache hits excluded)."""

    mean_read_bytes_per_s: float | None = None  # over counted steps
    read_bytes: float | None = None  # the whole run: each process's last counter minus its first

    def to_json(self) -> dict[str, Any]:
        return {"mean_read_bytes_per_s": self.mean_read_bytes_per_s, "read_bytes": self.read_bytes}

    @classmethod
    def from_json(cls, data: Any) -> DiskUse:
        d = as_object(data)
        return cls(mean_read_bytes_per_s=finite(d.get("mean_read_bytes_per_s")), read_bytes=finite(d.get("read_bytes")))


@dataclass(frozen=True)
class GpuUse:
    """summary.json ``gpu``: NVML's readings over the counted steps (the device's, then the training process
    tree's own); each None where NVML gave none (its reason in ``absences``)."""

    mean_util_pct: float | None = None
    peak_mem_used_bytes: float | None = None
    mean_pcie_rx_bytes_per_s: float | None = None
    mean_pcie_tx_bytes_per_s: float | None = None
    mean_proc_util_pct: float | None = None  # the training process tree's own share (NVML per-process)
    peak_proc_mem_bytes: float | None = None
    mean_sm_clock_mhz: float | None = None
    mean_power_w: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> GpuUse | None:
        """None for a summary without a GPU (null)."""
        if not isinstance(data, dict):
            return None
        return cls(**{f.name: finite(data.get(f.name)) for f in dataclasses.fields(cls)})
