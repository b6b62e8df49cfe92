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
* ``verdict_words``: the comparison in one sentence, written at the edge (``render.verification_text``, which
  summary.json's writer and the report call): this module returns the numbers (``Verification``).

Both sides are measurements on whatever else the machine was doing. How far one fresh-process run moves is
measured by the check itself where it repeated a side (``rerun_noise``): the pooled sd of ln(samples/s) of the
base's runs and the change's about their own means, shrunk toward the prior ``RERUN_CV`` with ``PRIOR_DF``
degrees of freedom (two runs a side say little alone). An error inside z(0.9) × √2 × that (one run against
another) is reported as within the noise of a re-run; the summary's intervals take the same ``rerun_cv``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipeprof.analysis.intervals import RERUN_CV, Z_90, Interval
from pipeprof.numbers import finite
from pipeprof.run_meta import JsonObject, as_object

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

    def to_json(self) -> JsonObject:
        return {"cv": self.cv, "measured_cv": self.measured_cv, "df": self.df, "prior_cv": self.prior_cv}


def rerun_noise(record: JsonObject | None, prior_cv: float = RERUN_CV) -> RerunNoise:
    """The re-run noise a verification record measured (``RerunNoise``), the prior alone where no side ran
    twice. Each side's runs are taken about their own mean, so the change's effect is not noise."""
    sides = [record.get(key) for key in ("base_runs_samples_per_s", "measured_runs_samples_per_s")] \
        if isinstance(record, dict) else []
    return pooled_noise(sides, prior_cv)


def pooled_noise(sides: Iterable[object], prior_cv: float = RERUN_CV) -> RerunNoise:
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


DERIVED = ("rerun_noise", "measured_speedup", "prediction_error", "within_interval", "base_disturbed", "interval",
           "verdict_words")  # summary.json's keys on top of run.json's record (the words written at the edge)


@dataclass(frozen=True)
class Verification:
    """summary.json's ``verification``: run.json's raw record (``record``: the change, the prediction made at
    the time, the re-run's status, samples/s, runs and folder, kept as stored) and what is derived from it."""

    record: JsonObject  # run.json's verification record, as stored
    rerun_noise: RerunNoise
    measured_speedup: float | None = None
    prediction_error: float | None = None
    within_interval: bool | None = None
    base_disturbed: bool | None = None
    interval: Interval | None = None

    @property
    def status(self) -> str:
        return str(self.record.get("status") or "unknown")

    @property
    def measured(self) -> bool:
        """Whether the re-run completed and measured samples/s (else there is nothing to compare)."""
        return self.status == "complete" and finite(self.record.get("measured_samples_per_s")) is not None

    def number(self, key: str) -> float | None:
        """A number of the record (``predicted_samples_per_s``, ``predicted_speedup``...), None if not one."""
        return finite(self.record.get(key))

    def runs(self, key: str) -> list[float]:
        """``base_runs_samples_per_s`` or ``measured_runs_samples_per_s``: the finite ones."""
        values = self.record.get(key)
        return [v for v in (finite(x) for x in (values if isinstance(values, list) else [])) if v is not None]

    def text(self, key: str) -> str | None:
        value = self.record.get(key)
        return None if value is None else str(value)

    def texts(self, key: str) -> list[str]:
        """A list of the record as words (``dropped``: what the re-run could not set); empty where it is none."""
        values = self.record.get(key)
        return [str(v) for v in values] if isinstance(values, list) else []

    def to_json(self) -> JsonObject:
        return {**self.record, "rerun_noise": self.rerun_noise.to_json(), "measured_speedup": self.measured_speedup,
                "prediction_error": self.prediction_error, "within_interval": self.within_interval,
                "base_disturbed": self.base_disturbed,
                "interval": self.interval.to_json() if self.interval is not None else None}

    @staticmethod
    def from_json(data: Any) -> Verification | None:
        """summary.json's ``verification`` read back (None where there is none)."""
        if not isinstance(data, dict):
            return None
        noise = as_object(data.get("rerun_noise"))
        within, disturbed = data.get("within_interval"), data.get("base_disturbed")
        return Verification(
            record={k: v for k, v in data.items() if k not in DERIVED},
            rerun_noise=RerunNoise(float(finite(noise.get("cv")) or RERUN_CV), finite(noise.get("measured_cv")),
                                   int(noise.get("df") or 0), float(finite(noise.get("prior_cv")) or RERUN_CV)),
            measured_speedup=finite(data.get("measured_speedup")), prediction_error=finite(data.get("prediction_error")),
            within_interval=within if isinstance(within, bool) else None,
            base_disturbed=disturbed if isinstance(disturbed, bool) else None,
            interval=Interval.from_json(data["interval"]) if isinstance(data.get("interval"), dict) else None)


def verification(record: JsonObject | None, samples_per_s: float | None, interval: Interval | None = None,
                 noise: RerunNoise | None = None) -> Verification | None:
    """summary.json's ``verification`` from run.json's record (None when ``--verify`` was not asked);
    ``interval``: the checked recommendation's (``analysis.intervals``), None when it has none; ``noise``: the
    record's ``rerun_noise`` where the caller has it already."""
    if not isinstance(record, dict):
        return None
    measured = finite(record.get("measured_samples_per_s"))
    complete = record.get("status") == "complete"
    v = Verification(dict(record), noise if noise is not None else rerun_noise(record), interval=interval,
                     within_interval=interval.contains(measured) if interval is not None and complete else None)
    if not complete or measured is None:
        return v
    against = finite(record.get("base_samples_per_s")) or samples_per_s
    predicted = finite(record.get("predicted_samples_per_s"))
    return dataclasses.replace(
        v, base_disturbed=base_disturbed(record.get("base_runs_samples_per_s")),
        measured_speedup=measured / against if against else None,
        prediction_error=predicted / measured - 1 if predicted is not None and measured > 0 else None)


def base_disturbed(runs: object) -> bool:
    """Whether the runs as run (samples/s, fresh processes) spread by more than ``2 × NOISE`` (max / min − 1):
    the machine was disturbed during the check (``run --verify``, ``tune``'s confirmation)."""
    rates = [r for r in (finite(x) for x in (runs if isinstance(runs, list) else [])) if r is not None]
    return bool(len(rates) >= 2 and min(rates) > 0 and max(rates) / min(rates) - 1 > 2 * NOISE)
