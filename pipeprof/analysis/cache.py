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
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from pipeprof import format as fmt
from pipeprof.analysis.thresholds import MIN_COLD_READ_FRACTION
from pipeprof.run_folder import Run

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


def _drop_for(drops: list[dict] | None, epoch: int, position: int) -> dict | None:
    """The drop recorded before ``epoch``: by its ``epoch`` key if drops carry one, else by position."""
    if not drops:
        return None
    if all("epoch" in d for d in drops):
        return next((d for d in drops if d["epoch"] == epoch), None)
    return drops[position] if position < len(drops) else None


def _why_short(epoch: int, fraction: float, unattributed_fraction: float, drop: dict | None) -> str:
    head = f"epoch {epoch} read only {fraction:.0%} of the data set from disk"
    if drop is None:
        why = "no page-cache drop was recorded before it, so it was probably served from the cache"
    elif not drop.get("dropped", False):
        why = f"the page cache was not dropped before it — {drop.get('reason') or 'the drop failed'}"
    else:
        after = drop.get("resident_after_bytes")
        left = f" ({fmt.byte_size(after)} left resident)" if after is not None else ""
        why = (f"the page cache was dropped before it{left}, yet the data came from the cache: "
               "something read the files back in between (kernel readahead on a memory map, "
               "another process), or the reads were made by processes the sampler did not watch")
    if fraction + unattributed_fraction >= MIN_COLD_READ_FRACTION:
        why += (f"; note that {unattributed_fraction:.0%} more was read by workers before the sampler "
                "first saw them, which could account for the rest")
    return f"{head}: {why}"


def cold_cache_check(epochs_df: pd.DataFrame, dataset_bytes: int, cache: str,
                     drops: list[dict] | None, dataset_samples: int | None = None) -> dict[str, Any]:
    """Per-epoch disk reads as a fraction of the data set, and whether a cold run was cold.

    ``epochs_df`` comes from ``epoch_reads``; ``dataset_bytes`` is the data
    set's size on disk; ``drops`` are ``DropResult.to_dict()`` recorded before
    each epoch (matched by an ``epoch`` key, else by position). With
    ``dataset_samples``, an epoch that consumed fewer samples (a run cut short
    by ``steps``) is held to its share of the data set.

    Returns ``{"cache", "verified", "min_read_fraction", "threshold",
    "epochs": [...], "drops", "reason"}``. ``verified`` is True when every
    epoch read at least ``MIN_COLD_READ_FRACTION`` of (its share of) the data
    set, False otherwise, None for a warm cache or when reads were not measured.
    """
    if cache not in ("warm", "cold"):
        raise ValueError(f"cache must be 'warm' or 'cold', got {cache!r}")
    if dataset_bytes <= 0:
        raise ValueError(f"dataset_bytes must be > 0, got {dataset_bytes}")
    epochs: list[dict[str, Any]] = []
    for position, row in enumerate(epochs_df.to_dict("records")):
        share = 1.0
        if dataset_samples and not pd.isna(row["samples"]):
            share = min(1.0, float(row["samples"]) / dataset_samples)
        expected = dataset_bytes * share
        measured = not pd.isna(row["read_bytes"])
        epochs.append({
            "epoch": int(row["epoch"]),
            "start_s": float(row["start_s"]),
            "end_s": float(row["end_s"]),
            "read_bytes": float(row["read_bytes"]) if measured else None,
            "unattributed_read_bytes": (None if pd.isna(row["unattributed_read_bytes"])
                                        else float(row["unattributed_read_bytes"])),
            "expected_bytes": expected,
            "read_fraction": float(row["read_bytes"]) / expected if measured and expected > 0 else None,
            "drop": _drop_for(drops, int(row["epoch"]), position),
        })

    fractions: list[float] = [e["read_fraction"] for e in epochs if e["read_fraction"] is not None]
    result: dict[str, Any] = {
        "cache": cache,
        "verified": None,
        "min_read_fraction": min(fractions) if fractions else None,
        "threshold": MIN_COLD_READ_FRACTION,
        "epochs": epochs,
        "drops": list(drops) if drops is not None else None,
        "reason": None,
    }
    if cache == "warm":
        result["reason"] = "warm page cache: disk reads are reported, there is nothing to verify"
        return result
    if not epochs:
        result["reason"] = "no epochs were recorded, so the cold cache cannot be verified"
        return result
    if len(fractions) < len(epochs):
        result["reason"] = ("disk reads were not measured (no read_bytes readings: io_counters absent?), "
                            "so the cold cache cannot be verified")
        return result

    short = [e for e in epochs if e["read_fraction"] < MIN_COLD_READ_FRACTION]
    result["verified"] = not short
    if short:
        reasons = [_why_short(e["epoch"], e["read_fraction"],
                              (e["unattributed_read_bytes"] or 0.0) / e["expected_bytes"], e["drop"])
                   for e in short]
        result["reason"] = ("NOT COLD: " + "; ".join(reasons)
                            + f". A cold epoch should read at least {MIN_COLD_READ_FRACTION:.0%} "
                            "of the data set from disk; the timings of these epochs are warm-cache timings.")
    else:
        result["reason"] = (f"every epoch read at least {min(fractions):.0%} of the data set "
                            f"({fmt.byte_size(dataset_bytes)}) from disk")
    return result


def cache_check(run: Run) -> dict[str, Any] | None:
    """Disk reads per epoch against the data set's size; for a cold cache, whether it really was cold."""
    cache = run.info.cache
    if cache is None:
        return None  # runs from before page-cache control
    mode, dataset_bytes = cache.get("mode", "warm"), cache.get("dataset_bytes") or 0
    if dataset_bytes <= 0:
        return {"cache": mode, "verified": None, "reason": "the data is not read from files on disk"}
    samples = run.settings.data.samples
    return cold_cache_check(epoch_reads(run.steps, run.processes), dataset_bytes, mode, cache.get("drops"),
                            dataset_samples=samples)
