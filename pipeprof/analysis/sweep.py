"""A sweep's results: one record per point from its run's summary, the best point, and the plot series.

Pure functions over the points' summary.json documents, writing sweep.json's rows; the sweep command runs the
points. ``Sweep.from_json`` reads sweep.json back into typed records for the renderers.
A point's throughput is its run's ``samples_per_s`` (counted steps: after
warm-up, and with ``train.steady`` after the unstable start as well) with
the uncertainty of its windowed throughput (``summary["throughput"]``:
the 95% interval of the window mean, else the windows' min–max). The best
point is the complete one with the highest samples/s; points whose upper
bound reaches the best one's lower bound are "within noise of the best" —
on a noisy machine the ranking among them is not meaningful.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipeprof.analysis.prediction_check import PredictionCheck, point_predictions
from pipeprof.numbers import finite
from pipeprof.resource_use import CpuUse, MemoryUse
from pipeprof.run_meta import JsonObject, as_object

POINT_STATUSES = ("complete", "failed", "invalid", "interrupted", "skipped", "not run")


def point_record(index: int, label: str, change: JsonObject, status: str, *, reason: str | None = None,
                 folder: str | None = None, summary: JsonObject | None = None,
                 wall_s: float | None = None) -> JsonObject:
    """One row of sweep.json (tune.json), as written: the settings (``change``), the outcome, and the headline
    numbers of its run's summary.json (``summary``, as read)."""
    s = summary or {}
    fractions = s.get("fractions") or {}
    low, high, how = interval(s)
    return {
        "index": index,
        "label": label,
        "change": dict(change),
        "status": status,
        "reason": reason,
        "folder": folder,
        "report": f"{folder}/report.html" if folder and summary is not None else None,
        "samples_per_s": finite(s.get("samples_per_s")),
        "samples_per_s_low": low,
        "samples_per_s_high": high,
        "uncertainty": how,
        "steps": s.get("steps"),
        "step_time_median_s": finite((s.get("step_time_s") or {}).get("median")),
        "fractions": {k: finite(fractions.get(k)) for k in ("data_wait", "h2d", "collective_wait", "compute", "other")},
        "verdict": (s.get("verdict") or {}).get("class"),
        "bottleneck": s.get("bottleneck"),
        "cpu_mean_util_pct": CpuUse.from_json(s.get("cpu")).mean_util,
        # processes outside the job during the run, as a share of the cores (analysis.prediction_check)
        "outside_share": _outside_share(s),
        "peak_rss_bytes": MemoryUse.from_json(s.get("memory")).peak_rss_bytes,
        "steady": (s.get("steady") or None),
        "wall_s": wall_s,
        "predictions": point_predictions(s),  # checked against the other points (analysis.prediction_check)
    }


def _outside_share(summary: JsonObject) -> float | None:
    """The share of the machine's cores that processes outside the job kept busy during the run (a job's ranks
    on this machine are the job's); None where not measured."""
    cpu = CpuUse.from_json(summary.get("cpu"))
    job = as_object(summary.get("job"))
    world = finite(job.get("world_size")) or 1
    nodes = len(job.get("nodes") or []) or 1
    outside = cpu.outside_cores(max(int(round(world / nodes)), 1))
    return outside / float(cpu.cores) if outside is not None and cpu.cores else None


def interval(summary: JsonObject) -> tuple[float | None, float | None, str | None]:
    """(low, high, method) of a run's samples/s from its windowed throughput (its summary.json, as read)."""
    t = summary.get("throughput") or {}
    low, high = finite(t.get("ci95_low")), finite(t.get("ci95_high"))
    if low is not None and high is not None:
        return low, high, f"95% interval over {t.get('windows')} windows"
    low, high = finite(t.get("min")), finite(t.get("max"))
    if low is not None and high is not None:
        return low, high, f"min-max over {t.get('windows')} windows"
    rates = [r for r in ((summary.get("steady") or {}).get("window_samples_per_s") or []) if finite(r) is not None]
    if len(rates) >= 2:
        return min(rates), max(rates), f"min-max over the last {len(rates)} steady-state windows"
    return None, None, None


def best_point(points: Iterable[JsonObject]) -> JsonObject | None:
    """The complete point (sweep.json's row, ``point_record``) with the highest samples/s (the first one on a
    tie)."""
    done = [p for p in points if p["status"] == "complete" and p.get("samples_per_s") is not None]
    return max(done, key=lambda p: p["samples_per_s"]) if done else None


def near_best(points: list[JsonObject], best: JsonObject | None) -> list[int]:
    """Indices of complete points whose upper bound reaches the best point's lower bound (best included)."""
    if best is None:
        return []
    floor = best.get("samples_per_s_low") or best["samples_per_s"]
    return [p["index"] for p in points if p["status"] == "complete" and p.get("samples_per_s") is not None
            and (p.get("samples_per_s_high") or p["samples_per_s"]) >= floor]


def best_summary(best: JsonObject | None, base_settings: JsonObject) -> JsonObject | None:
    """sweep.json's ``best``: the point's settings (its change over the base), samples/s and folder."""
    if best is None:
        return None
    return {"index": best["index"], "label": best["label"], "settings": dict(best["change"]),
            "samples_per_s": best["samples_per_s"], "samples_per_s_low": best["samples_per_s_low"],
            "samples_per_s_high": best["samples_per_s_high"], "verdict": best["verdict"],
            "folder": best["folder"], "base": base_settings}


# -- read back ------------------------------------------------------------------------------------------------------
# The typed reader of sweep.json (and tune.json): the renderers parse the document once and read these fields.


@dataclass(frozen=True)
class SweepPoint:
    """One of sweep.json's ``points`` (``point_record``): its settings (``change``), outcome, samples/s with its
    bounds, shares of step time and verdict class, as written (None: not measured)."""

    index: Any
    label: Any
    change: JsonObject
    status: str | None
    reason: str | None
    samples_per_s: float | None
    samples_per_s_low: float | None
    samples_per_s_high: float | None
    fractions: dict[str, float | None]
    verdict: str | None

    @classmethod
    def from_json(cls, data: Any) -> SweepPoint:
        d = data if isinstance(data, dict) else {}
        fractions, change = d.get("fractions"), d.get("change")
        return cls(index=d.get("index"), label=d.get("label"), change=dict(change) if isinstance(change, dict) else {},
                   status=_str(d.get("status")), reason=_str(d.get("reason")),
                   samples_per_s=_number(d.get("samples_per_s")), samples_per_s_low=_number(d.get("samples_per_s_low")),
                   samples_per_s_high=_number(d.get("samples_per_s_high")),
                   fractions={str(k): finite(v) for k, v in fractions.items()} if isinstance(fractions, dict) else {},
                   verdict=_str(d.get("verdict")))


@dataclass(frozen=True)
class SweepAxis:
    """One of sweep.json's ``axes``: the setting swept and its values."""

    key: str
    values: tuple[Any, ...]

    @property
    def numeric(self) -> bool:
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values)


@dataclass(frozen=True)
class Sweep:
    """sweep.json (or tune.json: ``kind`` "tune") read back: its scenario, axes, points, the best point's index,
    the points within noise of it, and the prediction check (None: none)."""

    kind: str
    scenario: Any
    axes: tuple[SweepAxis, ...]
    points: tuple[SweepPoint, ...]
    best_index: Any
    near_best: frozenset[Any]
    prediction_check: PredictionCheck | None
    best_samples_per_s: float | None = None  # the best point's
    best_settings: JsonObject | None = None  # the best point's change over the base
    point_count: int | None = None  # the points (a script's tune: its trials); None: not a list

    @classmethod
    def from_json(cls, data: Any) -> Sweep:
        d = data if isinstance(data, dict) else {}
        best = as_object(d.get("best"))
        settings = best.get("settings")
        counted = d.get("points") if "points" in d else d.get("trials")
        return cls(kind=str(d.get("kind", "sweep")), scenario=d.get("scenario"),
                   axes=tuple(SweepAxis(key=a["key"], values=tuple(a.get("values") or []))
                              for a in d.get("axes") or [] if isinstance(a, dict) and "key" in a),
                   points=tuple(SweepPoint.from_json(p) for p in d.get("points") or []),
                   best_index=best.get("index"), near_best=frozenset(d.get("near_best") or []),
                   prediction_check=PredictionCheck.from_json(d.get("prediction_check")),
                   best_samples_per_s=finite(best.get("samples_per_s")),
                   best_settings=settings if isinstance(settings, dict) else {},
                   point_count=len(counted) if isinstance(counted, list) else None)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    """A number as written (an int stays an int); None for anything else."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
