"""Verified prediction: the top recommendation's predicted speed-up against a measured re-run.

``run --verify`` re-runs the scenario in a fresh process with the first
recommendation that changes a setting applied, and stores what happened in
run.json as ``verification`` (a raw record: the change, the prediction made
at the time, the re-run's status, samples/s and folder). This module derives
summary.json's ``verification`` from it and the run's own samples/s:

* ``measured_speedup`` = the change's median samples/s / the base's median, the base (the scenario as run)
  and the change run alternately in fresh processes (A B A B ...); without base runs, over this run's;
* ``base_disturbed``: the base's runs spread by more than ``2 × NOISE`` (max / min − 1): the machine was
  disturbed during the check, and the speed-up is said not to be trusted;
* ``prediction_error`` = predicted samples/s / measured samples/s - 1
  (+0.10: the model promised 10% more than the re-run delivered; -0.10:
  10% less);
* ``within_interval``: whether the measured samples/s fell inside the checked
  recommendation's interval (``analysis.intervals``; ``interval`` holds its
  bounds), null when it has none or nothing was measured;
* ``verdict_words``: the comparison in one sentence; for a change whose
  interval reached x1.0 it also says the change was presented as one that
  may not help, not as a gain (``--verify`` checks the top recommendation
  all the same: plain_loop's only one, x1.22 in x0.85-x1.75, measured x0.67).

Both sides are measurements on whatever else the machine was doing. How far one fresh-process run moves is
measured by the check itself where it repeated a side (``rerun_noise``): the pooled sd of ln(samples/s) of the
base's runs and the change's about their own means, shrunk toward the prior ``RERUN_CV`` with ``PRIOR_DF``
degrees of freedom (two runs a side say little alone). An error inside z(0.9) × √2 × that (one run against
another) is reported as within the noise of a re-run; the summary's intervals take the same ``rerun_cv``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pipeprof import format as fmt
from pipeprof.analysis.intervals import RERUN_CV, Z_90, Interval
from pipeprof.numbers import finite

NOISE = 0.15  # the base's runs spreading by more than 2 × this (max / min − 1) flag a disturbed machine
PRIOR_DF = 2  # the prior's weight in the pooled re-run noise, as degrees of freedom of measured runs


@dataclass(frozen=True)
class RerunNoise:
    """How far one fresh-process run moves (sd of ln samples/s): ``cv`` as used, ``measured_cv`` the check's
    own repeated runs' (None: no side repeated), on ``df`` degrees of freedom, and the ``prior_cv``."""

    cv: float
    measured_cv: float | None
    df: int
    prior_cv: float = RERUN_CV

    @property
    def band(self) -> float:
        """One run against another at 90 %: z(0.9) × √2 × cv (as a fraction of samples/s)."""
        return Z_90 * math.sqrt(2) * self.cv

    def to_json(self) -> dict[str, Any]:
        return {"cv": self.cv, "measured_cv": self.measured_cv, "df": self.df, "prior_cv": self.prior_cv}


def rerun_noise(record: Any, prior_cv: float = RERUN_CV) -> RerunNoise:
    """The re-run noise a verification record measured (``RerunNoise``), the prior alone where no side ran
    twice. Each side's runs are taken about their own mean, so the change's effect is not noise."""
    sides = [record.get(key) for key in ("base_runs_samples_per_s", "measured_runs_samples_per_s")] \
        if isinstance(record, dict) else []
    return pooled_noise(sides, prior_cv)


def pooled_noise(sides: Any, prior_cv: float = RERUN_CV) -> RerunNoise:
    """``RerunNoise`` from groups of fresh-process runs' samples/s, each group one setting (a list each)."""
    ss, df = 0.0, 0
    for side in sides:
        logs = [math.log(v) for v in (finite(r) for r in (side if isinstance(side, list) else []))
                if v is not None and v > 0]
        if len(logs) >= 2:
            mean = sum(logs) / len(logs)
            ss += sum((x - mean) ** 2 for x in logs)
            df += len(logs) - 1
    if df == 0:
        return RerunNoise(prior_cv, None, 0, prior_cv)
    measured = math.sqrt(ss / df)
    return RerunNoise(math.sqrt((PRIOR_DF * prior_cv ** 2 + ss) / (PRIOR_DF + df)), measured, df, prior_cv)


def verification(record: Any, samples_per_s: float | None,
                 interval: Interval | None = None) -> dict[str, Any] | None:
    """summary.json's ``verification`` from run.json's record (None when ``--verify`` was not asked);
    ``interval``: the checked recommendation's (``analysis.intervals``), None when it has none."""
    if not isinstance(record, dict):
        return None
    out = dict(record)
    out["rerun_noise"] = rerun_noise(record).to_json()
    measured = finite(record.get("measured_samples_per_s"))
    within = interval.contains(measured) if interval is not None and record.get("status") == "complete" else None
    out.update(measured_speedup=None, prediction_error=None, within_interval=within, base_disturbed=None,
               interval=interval.to_json() if interval is not None else None)
    predicted = finite(record.get("predicted_samples_per_s"))
    if record.get("status") != "complete" or measured is None:
        out["verdict_words"] = _not_measured(record)
        return out
    base = finite(record.get("base_samples_per_s"))
    out["base_disturbed"] = base_disturbed(record.get("base_runs_samples_per_s"))
    against = base or samples_per_s
    if against:
        out["measured_speedup"] = measured / against
    if predicted is not None and measured > 0:
        out["prediction_error"] = predicted / measured - 1
    out["verdict_words"] = _words(out)
    return out


def base_disturbed(runs: Any) -> bool:
    """Whether the runs as run (samples/s, fresh processes) spread by more than ``2 × NOISE`` (max / min − 1):
    the machine was disturbed during the check (``run --verify``, ``tune``'s confirmation)."""
    rates = [r for r in (finite(x) for x in (runs if isinstance(runs, list) else [])) if r is not None]
    return bool(len(rates) >= 2 and min(rates) > 0 and max(rates) / min(rates) - 1 > 2 * NOISE)


def _words(v: dict[str, Any]) -> str:
    predicted, measured = v.get("predicted_speedup"), v.get("measured_speedup")
    error = v.get("prediction_error")
    parts = []
    if predicted is not None and measured is not None:
        parts.append(f"predicted ×{predicted:.2f}, measured ×{measured:.2f}")
    runs, base_runs = v.get("measured_runs_samples_per_s") or [], v.get("base_runs_samples_per_s") or []
    if base_runs:
        parts.append(f"medians of {len(base_runs)} runs as run ({fmt.significant(min(base_runs))}–"
                     f"{fmt.significant(max(base_runs))} samples/s) and {len(runs)} with the change "
                     f"({fmt.significant(min(runs))}–{fmt.significant(max(runs))}), interleaved")
    if v.get("base_disturbed"):
        parts.append("the runs as run spread by more than the machine's noise: the base was disturbed, so this "
                     "speed-up is not to be trusted")
    if error is not None:
        how = "too high" if error > 0 else "too low"
        noise = rerun_noise(v)
        where = "within" if abs(math.log1p(error)) <= noise.band else "beyond"
        source = (f"these runs' own spread, sd {100 * noise.measured_cv:.0f}% on {noise.df} df with the "
                  f"prior's {100 * noise.prior_cv:.0f}%" if noise.measured_cv is not None else
                  f"the prior sd {100 * noise.prior_cv:.0f}%: no side ran twice")
        parts.append(f"the prediction was {100 * abs(error):.0f}% {how} ({where} the ±{100 * noise.band:.0f}% "
                     f"a re-run moves, from {source})")
    bounds = (v.get("interval") or {}).get("samples_per_s")
    if v.get("within_interval") is not None and bounds:
        where = "inside" if v["within_interval"] else "outside"
        parts.append(f"measured {where} the predicted interval {fmt.significant(bounds[0])}–"
                     f"{fmt.significant(bounds[1])} samples/s")
    if (v.get("interval") or {}).get("may_not_help"):
        parts.append("the change was presented as one that may not help (its interval reaches ×1.0), "
                     "not as a gain")
    return "; ".join(parts) or "measured, but nothing to compare with"


def _not_measured(record: dict[str, Any]) -> str:
    status = record.get("status") or "unknown"
    reason = record.get("reason")
    if status == "not applicable":
        return f"nothing to verify: {reason}"
    return f"re-run {status}" + (f": {reason}" if reason else "")

