"""Spawned and forkserver DataLoader workers' start-up (``summary.json`` ``loading.worker_start``): how long each
took from its process's start to its dataset unpickled, in parts, per pass of its loader, and against the
run's wall time. Pure: run.json's ``worker_starts`` rows in (``pipeprof.script.worker_start`` marks them).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field

import pandas as pd

from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.thresholds import START_WAIT_SHARE, WORKER_START_WORTH_SAYING
from pipeprof.analysis.verdict import Verdict, coarse
from pipeprof.run_meta import JsonObject

PARTS = {  # part -> (from mark, to mark)
    "interpreter_s": ("process_start_s", "prepare_t0_s"),
    "main_import_s": ("prepare_t0_s", "prepare_t1_s"),
    "dataset_unpickle_s": ("prepare_t1_s", "unpickled_s"),
}
NO_PARTS = ("the main module's import was not timed in the workers (they were not started under `pipeprof "
            "profile`, which arms every process it starts): only the whole start-up is known")
NO_START = "the workers' process start could not be read (/proc/self/stat): their start-up is unknown"


@dataclass(frozen=True)
class WorkerStart:
    """Spawned workers' start-up (``loading.worker_start``): how many ``workers`` started, the median and the
    longest start (s; None: their process start was unreadable, ``absent`` says so), the median of each part
    (``PARTS``; ``parts_absent`` where the main module's import was not timed), how many ``passes`` of their
    loaders started workers, a pass's median start-up (s) and every pass's start-up over the wall time."""

    workers: int
    median_s: float | None
    max_s: float | None
    passes: int
    per_pass_s: float | None
    share_of_wall: float | None
    parts: dict[str, float | None] = field(default_factory=dict)  # part -> its median, s (empty: parts_absent)
    parts_absent: str | None = None
    absent: str | None = None

    @property
    def timed(self) -> bool:
        """Whether each part of a worker's start-up was timed."""
        return self.parts_absent is None and None not in self.parts.values()

    def to_json(self) -> JsonObject:
        """summary.json's ``loading.worker_start``."""
        out: JsonObject = {
            "workers": self.workers, "median_s": self.median_s, "max_s": self.max_s,
            "parts": {"absent": self.parts_absent} if self.parts_absent is not None else dict(self.parts),
            "passes": self.passes, "per_pass_s": self.per_pass_s, "share_of_wall": self.share_of_wall,
        }
        if self.absent is not None:
            out["absent"] = self.absent
        return out


def _span(row: JsonObject, start: str, end: str) -> float | None:
    a, b = row.get(start), row.get(end)
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not math.isfinite(a - b):
        return None
    return max(float(b) - float(a), 0.0)


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def passes(rows: list[JsonObject]) -> list[float]:
    """Each pass's start-up, s: from its first worker's process start to its last worker's dataset unpickled
    (the workers of a loader's pass start together; a worker starting after the others are ready opens a new
    pass)."""
    spans: list[float] = []
    by_loader: dict[object, list[JsonObject]] = {}
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


def worker_start_summary(rows: list[JsonObject] | None, wall_s: float | None) -> WorkerStart | None:
    """Spawned workers' start-up from run.json's ``worker_starts`` rows (None when no worker was spawned: forked
    workers start as a copy of the script, at once)."""
    if not rows:
        return None
    totals = [_span(r, "process_start_s", "unpickled_s") for r in rows]
    known = [t for t in totals if t is not None]
    parts = {name: _median([_span(r, a, b) for r in rows]) for name, (a, b) in PARTS.items()}
    timed = parts["main_import_s"] is not None
    spans = passes(rows)
    return WorkerStart(
        workers=len(rows), median_s=statistics.median(known) if known else None, max_s=max(known) if known else None,
        passes=len(spans), per_pass_s=statistics.median(spans) if spans else None,
        share_of_wall=sum(spans) / wall_s if spans and wall_s else None,
        parts=parts if timed else {}, parts_absent=None if timed else NO_PARTS, absent=None if known else NO_START)


def with_worker_start_note(judged: Verdict, started: WorkerStart | None) -> Verdict:
    """``judged`` with a note, and the numbers in its evidence, where spawned workers' start-up took at least
    ``WORKER_START_WORTH_SAYING`` of the script's wall time; the class, rule and reason stay as they are."""
    share = started.share_of_wall if started is not None else None
    if started is None or share is None or share < WORKER_START_WORTH_SAYING:
        return judged
    timed = started.timed  # each part of a worker's start-up
    note = Reason("worker_start", {"share_of_wall": share, "per_pass_s": started.per_pass_s,
                                   "passes": started.passes, "median_s": started.median_s,
                                   **{name: started.parts[name] if timed else None for name in PARTS}})
    evidence = {**judged.evidence, "worker_start_share_of_wall": share, "worker_start_per_pass_s":
                started.per_pass_s}
    return dataclasses.replace(judged, notes=(*judged.notes, note), evidence=evidence)


def pass_start_wait_share(steps: pd.DataFrame) -> float | None:
    """The share of the counted steps' data wait that fell on the first step of a pass (an epoch's first batch:
    where workers that start anew each pass are waited for); None without counted wait."""
    if steps.empty or "epoch" not in steps.columns:
        return None
    epoch = pd.to_numeric(steps["epoch"], errors="coerce")
    first = (epoch != epoch.shift()).to_numpy()
    counted = ~steps["warmup"].astype(bool).to_numpy()
    wait = pd.to_numeric(steps["data_wait_s"], errors="coerce").fillna(0.0).to_numpy()
    total = float(wait[counted].sum())
    return float(wait[counted & first].sum()) / total if total > 0 else None


def with_start_verdict(judged: Verdict, started: WorkerStart | None, steps: pd.DataFrame) -> Verdict:
    """``judged`` turned into ``input:start`` where the loop waits mostly for workers starting: an input-bound
    run whose spawned workers' start-up was timed, with at least ``START_WAIT_SHARE`` of the counted data wait on
    the first step of a pass. Whatever the workers do once started, the loop waits for them to start (the
    per-sample cost of what they then make would name the wrong cause)."""
    if started is None or started.per_pass_s is None or coarse(judged.klass) not in ("input", "balanced"):
        return judged
    share = pass_start_wait_share(steps)
    if share is None or share < START_WAIT_SHARE:
        return judged
    timed = started.timed
    reason = Reason("workers_starting", {
        "data_wait_fraction": judged.evidence.get("data_wait_fraction"), "degree": judged.degree,
        "pass_start_share": share, "per_pass_s": started.per_pass_s, "passes": started.passes,
        "workers_per_pass": max(1, round(started.workers / max(started.passes, 1))),
        **{name: started.parts[name] if timed else None for name in PARTS}})
    evidence = {**judged.evidence, "pass_start_wait_share": share, "worker_start_per_pass_s": started.per_pass_s}
    return dataclasses.replace(judged, klass="input:start", rule="R10", reason=reason, evidence=evidence,
                               uncertain=False, candidates=("input:start",))
