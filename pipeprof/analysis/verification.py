"""Verified prediction: the top recommendation's predicted speed-up against a measured re-run.

``run --verify`` re-runs the scenario in a fresh process with the first
recommendation that changes a setting applied, and stores what happened in
run.json as ``verification`` (a raw record: the change, the prediction made
at the time, the re-run's status, samples/s and folder). This module derives
summary.json's ``verification`` from it and the run's own samples/s:

* ``measured_speedup`` = re-run samples/s / this run's samples/s;
* ``prediction_error`` = predicted samples/s / measured samples/s - 1
  (+0.10: the model promised 10% more than the re-run delivered; -0.10:
  10% less);
* ``verdict_words``: the comparison in one sentence.

Both runs are single measurements on whatever else the machine was doing:
the same run repeats within about ±15% on a busy 2-core machine, so an
error inside ``NOISE`` is reported as within the noise of one re-run.
"""

from __future__ import annotations

from typing import Any

from pipeprof.numbers import finite

NOISE = 0.15  # one run against one re-run on a shared machine: measured spread of repeats


def verification(record: Any, samples_per_s: float | None) -> dict[str, Any] | None:
    """summary.json's ``verification`` from run.json's record (None when ``--verify`` was not asked)."""
    if not isinstance(record, dict):
        return None
    out = dict(record)
    out.update(measured_speedup=None, prediction_error=None)
    measured = finite(record.get("measured_samples_per_s"))
    predicted = finite(record.get("predicted_samples_per_s"))
    if record.get("status") != "complete" or measured is None:
        out["verdict_words"] = _not_measured(record)
        return out
    if samples_per_s:
        out["measured_speedup"] = measured / samples_per_s
    if predicted is not None and measured > 0:
        out["prediction_error"] = predicted / measured - 1
    out["verdict_words"] = _words(out)
    return out


def _words(v: dict[str, Any]) -> str:
    predicted, measured = v.get("predicted_speedup"), v.get("measured_speedup")
    error = v.get("prediction_error")
    parts = []
    if predicted is not None and measured is not None:
        parts.append(f"predicted ×{predicted:.2f}, measured ×{measured:.2f}")
    if error is not None:
        how = "too high" if error > 0 else "too low"
        noise = "within" if abs(error) <= NOISE else "beyond"
        parts.append(f"the prediction was {100 * abs(error):.0f}% {how} ({noise} the ±{100 * NOISE:.0f}% "
                     f"noise of one re-run)")
    return "; ".join(parts) or "measured, but nothing to compare with"


def _not_measured(record: dict[str, Any]) -> str:
    status = record.get("status") or "unknown"
    reason = record.get("reason")
    if status == "not applicable":
        return f"nothing to verify: {reason}"
    return f"re-run {status}" + (f": {reason}" if reason else "")

