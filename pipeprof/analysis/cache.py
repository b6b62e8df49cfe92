"""Was a cold run really cold? Disk reads per epoch, checked against the data set's size.

Pure functions over the run's tables (``steps``, ``processes``; see
``pipeprof/run_folder.py``). With ``cache = "cold"`` the runner drops the data set
from the page cache before each epoch, so each epoch should read (about) the
whole data set from disk; an epoch that read much less was served from the
cache and the run was warm in all but name.

How bytes are attributed to an epoch: the epoch's window runs from its first
step's start to its last step's end; each process's cumulative ``read_bytes``
is interpolated linearly between sampler ticks and the window's increase is
summed over the process tree. A process first seen inside a window counts
from its first reading: bytes it read before the sampler first saw it (a new
worker is found at the next tick on Linux, else at the next process-tree
refresh, ``tree_refresh_s``, 1 s by default) are lost. They are reported as ``unattributed_read_bytes`` (an upper
bound: some may predate the window), so ``read_bytes`` is a lower bound and a
cold check can fail when it should not, never pass when it should not.

``cache_check`` returns a ``CacheCheck`` (summary.json's ``cache``); its ``reason`` is a kind plus its
numbers, which ``render.cache_text`` words at the edge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.thresholds import MIN_COLD_READ_FRACTION
from pipeprof.numbers import finite
from pipeprof.run_folder import Run
from pipeprof.run_meta import JsonObject, as_object

EPOCH_COLUMNS = ["epoch", "start_s", "end_s", "samples", "read_bytes", "unattributed_read_bytes"]


def _windows(steps: pd.DataFrame) -> pd.DataFrame:
    """epoch, start_s, end_s, samples: each epoch's first step start to its last step end."""
    df = steps.copy()
    # step_s is start to start of the next step; a missing one ends at its own start.
    df["end_s"] = (df["t_start_s"] + df["step_s"]).fillna(df["t_start_s"])
    agg = {"start_s": ("t_start_s", "min"), "end_s": ("end_s", "max")}
    if "samples" in df:
        agg["samples"] = ("samples", "sum")
    out = df.groupby("epoch", sort=True).agg(**agg).reset_index()
    if "samples" not in out:
        out["samples"] = math.nan
    return out


def _process_series(processes: pd.DataFrame) -> list[tuple[np.ndarray, np.ndarray]]:
    """(t_s, cumulative read_bytes) per process, sorted by time.

    A counter that goes down means the pid was reused by a new process: the
    series is split there, and each part is a process of its own.
    """
    df = processes.dropna(subset=["t_s", "read_bytes"]).sort_values(["pid", "t_s"])
    series = []
    for _, rows in df.groupby("pid", sort=False):
        reads = rows["read_bytes"].to_numpy(dtype=float)
        times = rows["t_s"].to_numpy(dtype=float)
        part = np.concatenate([[0], np.cumsum(np.diff(reads) < 0)])
        for k in np.unique(part):
            series.append((times[part == k], reads[part == k]))
    return series


def epoch_reads(steps: pd.DataFrame, processes: pd.DataFrame) -> pd.DataFrame:
    """Bytes the process tree read from disk in each epoch's time window.

    Columns: ``epoch``, ``start_s``, ``end_s`` (seconds since the run started),
    ``samples`` (samples consumed in the epoch, warm-up steps included),
    ``read_bytes`` (disk reads in the window; NaN where no process had a
    ``read_bytes`` reading, e.g. io_counters absent) and
    ``unattributed_read_bytes`` (what processes first seen in the window had
    already read at their first reading; not in ``read_bytes``).
    """
    if steps.empty:
        return pd.DataFrame(columns=EPOCH_COLUMNS)
    windows = _windows(steps)
    series = _process_series(processes) if not processes.empty else []
    read, unattributed = [], []
    for start_s, end_s in zip(windows["start_s"], windows["end_s"]):
        if not series:
            read.append(math.nan)
            unattributed.append(math.nan)
            continue
        total = lost = 0.0
        for times, reads in series:
            # np.interp holds the end values outside the series: a process
            # counts from its first reading and stops at its last.
            before, after = np.interp([start_s, end_s], times, reads)
            total += after - before
            if start_s < times[0] <= end_s:
                lost += reads[0]
        read.append(total)
        unattributed.append(lost)
    windows["read_bytes"] = read
    windows["unattributed_read_bytes"] = unattributed
    return windows[EPOCH_COLUMNS]


# ---- the verdict -------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheEpoch:
    """One epoch's disk reads against what it should have read cold (``expected_bytes``: its share of the
    data set), and the page-cache drop recorded before it (run.json's, as recorded)."""

    epoch: int
    start_s: float
    end_s: float
    read_bytes: float | None  # None: not measured
    unattributed_read_bytes: float | None
    expected_bytes: float
    read_fraction: float | None
    drop: JsonObject | None = None  # run.json's record of the drop, as recorded

    def to_json(self) -> JsonObject:
        return {"epoch": self.epoch, "start_s": self.start_s, "end_s": self.end_s, "read_bytes": self.read_bytes,
                "unattributed_read_bytes": self.unattributed_read_bytes, "expected_bytes": self.expected_bytes,
                "read_fraction": self.read_fraction, "drop": self.drop}

    @classmethod
    def from_json(cls, data: Any) -> CacheEpoch:
        d = as_object(data)
        drop = d.get("drop")
        return cls(epoch=int(d.get("epoch") or 0), start_s=float(d.get("start_s") or 0.0),
                   end_s=float(d.get("end_s") or 0.0), read_bytes=finite(d.get("read_bytes")),
                   unattributed_read_bytes=finite(d.get("unattributed_read_bytes")),
                   expected_bytes=float(d.get("expected_bytes") or 0.0), read_fraction=finite(d.get("read_fraction")),
                   drop=dict(drop) if isinstance(drop, dict) else None)


@dataclass(frozen=True)
class CacheCheck:
    """summary.json's ``cache``: the page-cache mode, whether a cold run was verified cold (None: warm, or not
    measurable), why (``reason``), and, where the data set is read from files on disk, each epoch's reads
    (``epochs``; None where it is not: the short form), the smallest ``read_fraction``, the ``threshold`` and
    the ``drops`` as recorded."""

    cache: str | None
    verified: bool | None
    reason: Reason | None
    epochs: tuple[CacheEpoch, ...] | None = None
    min_read_fraction: float | None = None
    threshold: float | None = None
    drops: tuple[JsonObject, ...] | None = None  # run.json's drop records, as recorded

    def to_json(self) -> JsonObject:
        """summary.json's ``cache`` but its ``reason``, worded at the edge (``render.cache_text``)."""
        out: JsonObject = {"cache": self.cache, "verified": self.verified}
        if self.epochs is not None:
            out.update(min_read_fraction=self.min_read_fraction, threshold=self.threshold,
                       epochs=[e.to_json() for e in self.epochs],
                       drops=list(self.drops) if self.drops is not None else None)
        return out

    @classmethod
    def from_json(cls, data: Any) -> CacheCheck | None:
        """The inverse of ``to_json`` for a summary read back (its reason as written); None: no check."""
        if not isinstance(data, dict):
            return None
        reason, epochs, drops = data.get("reason"), data.get("epochs"), data.get("drops")
        full = "epochs" in data
        return cls(cache=data.get("cache"), verified=data.get("verified"),
                   reason=Reason.written(reason) if isinstance(reason, str) else None,
                   epochs=tuple(CacheEpoch.from_json(e) for e in epochs or ()) if full else None,
                   min_read_fraction=finite(data.get("min_read_fraction")), threshold=finite(data.get("threshold")),
                   drops=tuple(d for d in drops if isinstance(d, dict)) if isinstance(drops, list) else None)


def _drop_for(drops: list[JsonObject] | None, epoch: int, position: int) -> JsonObject | None:
    """The drop recorded before ``epoch``: by its ``epoch`` key if drops carry one, else by position."""
    if not drops:
        return None
    if all("epoch" in d for d in drops):
        return next((d for d in drops if d["epoch"] == epoch), None)
    return drops[position] if position < len(drops) else None


def _short(e: CacheEpoch) -> Reason:
    """Why an epoch of a cold run read less than it should have: no drop recorded, a drop that failed, or a
    drop after which something read the files back in; and whether workers' reads the sampler missed could
    account for the rest."""
    fraction = e.read_fraction or 0.0
    unattributed = (e.unattributed_read_bytes or 0.0) / e.expected_bytes
    drop = e.drop
    return Reason("cache_epoch_short", {
        "epoch": e.epoch, "read_fraction": fraction, "unattributed_fraction": unattributed,
        "drop": "none" if drop is None else "dropped" if drop.get("dropped", False) else "failed",
        "drop_reason": drop.get("reason") if drop is not None else None,
        "resident_after_bytes": drop.get("resident_after_bytes") if drop is not None else None,
        "unattributed_may_account": fraction + unattributed >= MIN_COLD_READ_FRACTION})


def cold_cache_check(epochs_df: pd.DataFrame, dataset_bytes: int, cache: str,
                     drops: list[JsonObject] | None, dataset_samples: int | None = None) -> CacheCheck:
    """Per-epoch disk reads as a fraction of the data set, and whether a cold run was cold.

    ``epochs_df`` comes from ``epoch_reads``; ``dataset_bytes`` is the data
    set's size on disk; ``drops`` are ``DropResult.to_dict()`` recorded before
    each epoch (matched by an ``epoch`` key, else by position). With
    ``dataset_samples``, an epoch that consumed fewer samples (a run cut short
    by ``steps``) is held to its share of the data set.

    ``verified`` is True when every epoch read at least ``MIN_COLD_READ_FRACTION``
    of (its share of) the data set, False otherwise, None for a warm cache or when
    reads were not measured.
    """
    if cache not in ("warm", "cold"):
        raise ValueError(f"cache must be 'warm' or 'cold', got {cache!r}")
    if dataset_bytes <= 0:
        raise ValueError(f"dataset_bytes must be > 0, got {dataset_bytes}")
    epochs: list[CacheEpoch] = []
    for position, row in enumerate(epochs_df.to_dict("records")):
        share = 1.0
        if dataset_samples and not pd.isna(row["samples"]):
            share = min(1.0, float(row["samples"]) / dataset_samples)
        expected = dataset_bytes * share
        measured = not pd.isna(row["read_bytes"])
        epochs.append(CacheEpoch(
            epoch=int(row["epoch"]),
            start_s=float(row["start_s"]),
            end_s=float(row["end_s"]),
            read_bytes=float(row["read_bytes"]) if measured else None,
            unattributed_read_bytes=(None if pd.isna(row["unattributed_read_bytes"])
                                     else float(row["unattributed_read_bytes"])),
            expected_bytes=expected,
            read_fraction=float(row["read_bytes"]) / expected if measured and expected > 0 else None,
            drop=_drop_for(drops, int(row["epoch"]), position),
        ))

    fractions: list[float] = [e.read_fraction for e in epochs if e.read_fraction is not None]

    def result(verified: bool | None, reason: Reason) -> CacheCheck:
        return CacheCheck(cache=cache, verified=verified, reason=reason, epochs=tuple(epochs),
                          min_read_fraction=min(fractions) if fractions else None, threshold=MIN_COLD_READ_FRACTION,
                          drops=tuple(drops) if drops is not None else None)

    if cache == "warm":
        return result(None, Reason("cache_warm"))
    if not epochs:
        return result(None, Reason("cache_no_epochs"))
    if len(fractions) < len(epochs):
        return result(None, Reason("cache_reads_not_measured"))
    short = [e for e in epochs if (e.read_fraction or 0.0) < MIN_COLD_READ_FRACTION]
    if short:
        return result(False, Reason("cache_not_cold", {"threshold": MIN_COLD_READ_FRACTION},
                                    tuple(_short(e) for e in short)))
    return result(True, Reason("cache_cold", {"min_read_fraction": min(fractions), "dataset_bytes": dataset_bytes}))


def cache_check(run: Run) -> CacheCheck | None:
    """Disk reads per epoch against the data set's size; for a cold cache, whether it really was cold."""
    cache = run.info.cache
    if cache is None:
        return None  # runs from before page-cache control
    mode, dataset_bytes = cache.get("mode", "warm"), cache.get("dataset_bytes") or 0
    if dataset_bytes <= 0:
        return CacheCheck(cache=mode, verified=None, reason=Reason("cache_not_on_disk"))
    samples = run.settings.data.samples
    return cold_cache_check(epoch_reads(run.steps, run.processes), dataset_bytes, mode, cache.get("drops"),
                            dataset_samples=samples)
