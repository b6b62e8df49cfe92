"""Spawned and forkserver DataLoader workers' start-up (``summary.json`` ``loading.worker_start``): how long each
took from its process's start to its dataset unpickled, in parts, per pass of its loader, and against the
run's wall time. Pure: run.json's ``worker_starts`` rows in (``pipeprof.script.worker_start`` marks them).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.thresholds import WORKER_START_WORTH_SAYING
from pipeprof.analysis.verdict import Verdict

PARTS = {  # part -> (from mark, to mark)
    "interpreter_s": ("process_start_s", "prepare_t0_s"),
    "main_import_s": ("prepare_t0_s", "prepare_t1_s"),
    "dataset_unpickle_s": ("prepare_t1_s", "unpickled_s"),
}
NO_PARTS = ("the main module's import was not timed in the workers (they were not started under `pipeprof "
            "profile`, which arms every process it starts): only the whole start-up is known")
NO_START = "the workers' process start could not be read (/proc/self/stat): their start-up is unknown"


def _span(row: dict[str, Any], start: str, end: str) -> float | None:
    a, b = row.get(start), row.get(end)
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not math.isfinite(a - b):
        return None
    return max(float(b) - float(a), 0.0)


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def passes(rows: list[dict[str, Any]]) -> list[float]:
    """Each pass's start-up, s: from its first worker's process start to its last worker's dataset unpickled
    (the workers of a loader's pass start together; a worker starting after the others are ready opens a new
    pass)."""
    spans: list[float] = []
    by_loader: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        if _span(row, "process_start_s", "unpickled_s") is not None:
            by_loader.setdefault(row.get("loader"), []).append(row)
    for group in by_loader.values():
        group.sort(key=lambda r: r["process_start_s"])
        first, last = group[0]["process_start_s"], group[0]["unpickled_s"]
        for row in group[1:]:
            if row["process_start_s"] > last:
                spans.append(last - first)
                first, last = row["process_start_s"], row["unpickled_s"]
            else:
                last = max(last, row["unpickled_s"])
        spans.append(last - first)
    return spans


def worker_start_summary(rows: list[dict[str, Any]] | None, wall_s: float | None) -> dict[str, Any] | None:
    """``{"workers", "median_s", "max_s", "parts", "per_pass_s", "share_of_wall"}`` of spawned workers' start-up
    (None when no worker was spawned: forked workers start as a copy of the script, at once)."""
    if not rows:
        return None
    totals = [_span(r, "process_start_s", "unpickled_s") for r in rows]
    known = [t for t in totals if t is not None]
    parts: dict[str, Any] = {name: _median([_span(r, a, b) for r in rows]) for name, (a, b) in PARTS.items()}
    if parts["main_import_s"] is None:
        parts = {"absent": NO_PARTS}
    spans = passes(rows)
    out: dict[str, Any] = {
        "workers": len(rows),
        "median_s": statistics.median(known) if known else None,
        "max_s": max(known) if known else None,
        "parts": parts,
        "passes": len(spans),
        "per_pass_s": statistics.median(spans) if spans else None,
        "share_of_wall": sum(spans) / wall_s if spans and wall_s else None,
    }
    if not known:
        out["absent"] = NO_START
    return out


def with_worker_start_note(judged: Verdict, started: dict[str, Any] | None) -> Verdict:
    """``judged`` with a note, and the numbers in its evidence, where spawned workers' start-up took at least
    ``WORKER_START_WORTH_SAYING`` of the script's wall time; the class, rule and reason stay as they are."""
    share = (started or {}).get("share_of_wall")
    if started is None or share is None or share < WORKER_START_WORTH_SAYING:
        return judged
    parts = started.get("parts") or {}
    timed = "main_import_s" in parts and None not in parts.values()  # each part of a worker's start-up
    note = Reason("worker_start", {"share_of_wall": share, "per_pass_s": started["per_pass_s"],
                                   "passes": started["passes"], "median_s": started["median_s"],
                                   **{name: parts[name] if timed else None for name in PARTS}})
    evidence = {**judged.evidence, "worker_start_share_of_wall": share, "worker_start_per_pass_s":
                started["per_pass_s"]}
    return dataclasses.replace(judged, notes=(*judged.notes, note), evidence=evidence)
