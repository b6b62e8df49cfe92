"""A sweep's (or tune's) predictions checked against its own points: the predictions' track record on this machine.

Each complete point keeps its run's predictions (``predictions``: change, samples/s, tier, interval). A
prediction *lands* on another point when its change, applied to the point's settings, gives exactly that
other point's settings (every key of the change among the swept settings; a change of a setting the sweep
held fixed lands nowhere). Each such pair is a row ``{from, change, to, predicted, measured, error, inside,
tier}`` (``error`` = predicted / measured − 1; ``inside``: the measured samples/s within the prediction's 80 %
interval, null without bounds), and the ``summary`` counts them: ``pairs``, ``median_abs_error``,
``worst_abs_error``, ``inside_share`` (over the rows with bounds). Pure: dicts in, dicts out.

A point whose own measurement never settled says little of a prediction: one that ran until its time budget
without its windows' throughput reaching the run's own steadiness threshold (``steady.stopped == "budget"``,
``steady.cv > steady.cv_threshold``, or too few windows for a cv at all: a neighbour's burst of work on a
shared machine, a cold cache still filling) is named in each row it is an end of (``unsteady``: its label
and cv, null for too few windows), and ``summary.steady`` is the
same summary over the rows with neither end unsteady: the track record the machine's noise did not write.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from pipeprof.loader_rules import prefetch_factor
from pipeprof.numbers import finite


def point_predictions(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """A run summary's recommendations that change a setting and have a number, as a point keeps them."""
    out = []
    for rec in summary.get("recommendations") or []:
        if not isinstance(rec, dict) or not rec.get("change") or finite(rec.get("predicted_samples_per_s")) is None:
            continue
        bounds = (rec.get("interval") or {}).get("samples_per_s")
        out.append({"change": dict(rec["change"]), "predicted_samples_per_s": float(rec["predicted_samples_per_s"]),
                    "tier": rec.get("tier"), "interval": list(bounds) if isinstance(bounds, list) else None})
    return out


def prediction_check(points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """sweep.json's (and tune.json's) ``prediction_check``: the rows and their summary (module docstring)."""
    done = [p for p in points if p.get("status") == "complete" and finite(p.get("samples_per_s")) is not None]
    rows = []
    for source in done:
        settings = dict(source.get("change") or {})
        for pred in source.get("predictions") or []:
            change = dict(pred.get("change") or {})
            if not change or not set(change) <= set(settings):
                continue
            wanted = _as_loaded({**settings, **change})
            target = next((p for p in done if p is not source and _as_loaded(p.get("change") or {}) == wanted),
                          None)
            if target is None:
                continue
            predicted, measured = float(pred["predicted_samples_per_s"]), float(target["samples_per_s"])
            bounds = pred.get("interval")
            inside = bounds[0] <= measured <= bounds[1] if isinstance(bounds, list) and len(bounds) == 2 else None
            unsteady = [{"point": p.get("label"), "cv": unsettled(p)[1]} for p in (source, target)
                        if unsettled(p)[0]]
            rows.append({"from": source.get("label"), "change": change, "to": target.get("label"),
                         "predicted": predicted, "measured": measured, "error": predicted / measured - 1,
                         "inside": inside, "tier": pred.get("tier"), "unsteady": unsteady})
    return {"rows": rows, "summary": {**_summary(rows), "steady": _summary(r for r in rows if not r["unsteady"])}}


def unsettled(point: dict[str, Any]) -> tuple[bool, float | None]:
    """(whether the point ran out of time without settling, its windows' coefficient of variation: None for
    too few windows to have one) (module docstring). A point that settled, or ran its fixed steps (nothing
    said either way), is not."""
    steady = point.get("steady")
    if not isinstance(steady, dict) or steady.get("stopped") != "budget":
        return False, None
    cv, threshold = finite(steady.get("cv")), finite(steady.get("cv_threshold"))
    if cv is None:
        return True, None
    return (threshold is not None and cv > threshold), cv


def _as_loaded(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings as the DataLoader runs them: an unset ``prefetch_factor`` with workers is its default, and none
    without (``loader_rules.prefetch_factor``), so 2 workers at the default equal 2 workers at 2."""
    out = dict(settings)
    if "loader.prefetch_factor" in out:
        workers = out.get("loader.num_workers")
        out["loader.prefetch_factor"] = prefetch_factor(int(workers or 0), out["loader.prefetch_factor"])
    return out


def _summary(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    rows = list(rows)
    errors = [abs(r["error"]) for r in rows]
    bounded = [r["inside"] for r in rows if r["inside"] is not None]
    return {"pairs": len(rows), "median_abs_error": statistics.median(errors) if errors else None,
            "worst_abs_error": max(errors) if errors else None,
            "inside_share": sum(bounded) / len(bounded) if bounded else None}
