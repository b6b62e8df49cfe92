"""A sweep's (or tune's) predictions checked against its own points: the predictions' track record on this machine.

Each complete point keeps its run's predictions (``predictions``: change, samples/s, tier, interval). A
prediction *lands* on another point when its change, applied to the point's settings, gives exactly that
other point's settings (every key of the change among the swept settings; a change of a setting the sweep
held fixed lands nowhere). Each such pair is a row ``{from, change, to, predicted, measured, error, inside,
tier}`` (``error`` = predicted / measured − 1; ``inside``: the measured samples/s within the prediction's 80 %
interval, null without bounds), and the ``summary`` counts them: ``pairs``, ``median_abs_error``,
``worst_abs_error``, ``inside_share`` (over the rows with bounds). Pure: sweep.json's points in, records out.

A point measured on a disturbed machine says little of a prediction. A pair is marked (``disturbed``: one
entry per end that was) where a point

* never settled: it ran until its time budget without its windows' throughput reaching the run's own
  steadiness threshold (``steady.stopped == "budget"`` and ``steady.cv > steady.cv_threshold``, or too few
  windows for a cv: a cache still filling, a neighbour's bursts), or
* shared the machine: processes outside the job kept at least ``OTHER_LOAD_WORTH_SAYING`` of the cores busy
  during its run (its ``outside_share``, from the CPU the sampler saw; the rule that names them beside the
  advice). A neighbour steadily busy slows a point steadily: its windows settle, its number is the neighbour's.

``summary.undisturbed`` is the same summary over the rows with neither end marked: the track record the
machine's other load did not write.

``prediction_check`` returns the typed records (``PredictionCheck``), which the sweep and tune pipelines write
into their document with ``to_json``.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pipeprof.analysis.thresholds import OTHER_LOAD_WORTH_SAYING
from pipeprof.loader_rules import prefetch_factor
from pipeprof.numbers import finite
from pipeprof.run_meta import JsonObject, as_int, as_object


def point_predictions(summary: JsonObject) -> list[JsonObject]:
    """A run's summary.json's recommendations that change a setting and have a number, as sweep.json's point
    keeps them."""
    out = []
    for rec in summary.get("recommendations") or []:
        if not isinstance(rec, dict) or not rec.get("change") or finite(rec.get("predicted_samples_per_s")) is None:
            continue
        bounds = (rec.get("interval") or {}).get("samples_per_s")
        out.append({"change": dict(rec["change"]), "predicted_samples_per_s": float(rec["predicted_samples_per_s"]),
                    "tier": rec.get("tier"), "interval": list(bounds) if isinstance(bounds, list) else None})
    return out


def prediction_check(points: Sequence[JsonObject]) -> PredictionCheck:
    """sweep.json's (and tune.json's) ``prediction_check`` over its ``points`` as written (``sweep.point_record``):
    the rows and their summary (module docstring)."""
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
            disturbed = tuple(d for d in (disturbance(source), disturbance(target)) if d is not None)
            rows.append(CheckedPair(source=source.get("label"), change=change, target=target.get("label"),
                                    predicted=predicted, measured=measured, error=predicted / measured - 1,
                                    inside=inside, tier=pred.get("tier"), disturbed=disturbed))
    return PredictionCheck(rows=tuple(rows), summary=dataclasses.replace(
        summarize(rows), undisturbed=summarize(r for r in rows if not r.disturbed)))


def disturbance(point: JsonObject) -> Disturbance | None:
    """How a point (sweep.json's, as written) was disturbed (module docstring); None where it was not, or nothing
    says so."""
    steady = as_object(point.get("steady"))
    cv, threshold = finite(steady.get("cv")), finite(steady.get("cv_threshold"))
    never_settled = steady.get("stopped") == "budget" and (cv is None or (threshold is not None and cv > threshold))
    outside = finite(point.get("outside_share"))
    shared = outside is not None and outside >= OTHER_LOAD_WORTH_SAYING
    if not (never_settled or shared):
        return None
    return Disturbance(point=point.get("label"), never_settled=never_settled, cv=cv if never_settled else None,
                       outside_share=outside if shared else None)


def _as_loaded(settings: JsonObject) -> JsonObject:
    """Settings (a point's ``change``) as the DataLoader runs them: an unset ``prefetch_factor`` with workers is its
    default, and none without (``loader_rules.prefetch_factor``), so 2 workers at the default equal 2 workers at 2."""
    out = dict(settings)
    if "loader.prefetch_factor" in out:
        workers = out.get("loader.num_workers")
        out["loader.prefetch_factor"] = prefetch_factor(int(workers or 0), out["loader.prefetch_factor"])
    return out


def summarize(rows: Iterable[CheckedPair]) -> TrackRecord:
    """``summary``: pairs, median and worst |error|, inside share (over the rows with bounds)."""
    rows = list(rows)
    errors = [abs(r.error) for r in rows]
    bounded = [r.inside for r in rows if r.inside is not None]
    return TrackRecord(pairs=len(rows), median_abs_error=statistics.median(errors) if errors else None,
                       worst_abs_error=max(errors) if errors else None,
                       inside_share=sum(bounded) / len(bounded) if bounded else None)


# -- the records, and sweep.json read back ---------------------------------------------------------------------------
# ``prediction_check`` builds these; ``to_json`` writes sweep.json's (tune.json's) section, ``from_json`` reads it
# back for the renderers.


@dataclass(frozen=True)
class Disturbance:
    """How one point was disturbed (``disturbance``): the point, whether it never settled (its last ``cv``), and
    the share of the cores processes outside the job kept busy (None: not worth saying)."""

    point: Any
    never_settled: bool
    cv: float | None
    outside_share: float | None

    def to_json(self) -> JsonObject:
        return {"point": self.point, "never_settled": self.never_settled, "cv": self.cv,
                "outside_share": self.outside_share}

    @classmethod
    def from_json(cls, data: Any) -> Disturbance:
        d = as_object(data)
        return cls(point=d.get("point"), never_settled=bool(d.get("never_settled")), cv=finite(d.get("cv")),
                   outside_share=finite(d.get("outside_share")))


@dataclass(frozen=True)
class CheckedPair:
    """One row of ``prediction_check.rows``: a prediction from one point's recommendations (``source``, its
    ``change``) against the point measured with that change (``target``), in samples/s, with the error
    (predicted / measured - 1), whether the measurement fell inside the interval, and what disturbed either end."""

    source: Any
    change: JsonObject
    target: Any
    predicted: float | None
    measured: float | None
    error: float
    inside: bool | None
    tier: Any
    disturbed: tuple[Disturbance, ...]

    def to_json(self) -> JsonObject:
        return {"from": self.source, "change": dict(self.change), "to": self.target, "predicted": self.predicted,
                "measured": self.measured, "error": self.error, "inside": self.inside, "tier": self.tier,
                "disturbed": [d.to_json() for d in self.disturbed]}

    @classmethod
    def from_json(cls, data: Any) -> CheckedPair:
        d = as_object(data)
        change, inside, disturbed = d.get("change"), d.get("inside"), d.get("disturbed")
        return cls(source=d.get("from"), change=dict(change) if isinstance(change, dict) else {}, target=d.get("to"),
                   predicted=finite(d.get("predicted")), measured=finite(d.get("measured")), error=float(d["error"]),
                   inside=inside if isinstance(inside, bool) else None, tier=d.get("tier"),
                   disturbed=tuple(Disturbance.from_json(x) for x in disturbed if isinstance(x, dict))
                   if isinstance(disturbed, list) else ())


@dataclass(frozen=True)
class TrackRecord:
    """``prediction_check.summary``: the pairs, their median and worst |error| and the share inside the interval
    (over the rows with bounds; None: no row), and ``undisturbed``, the same over the undisturbed pairs (None: not
    written)."""

    pairs: int = 0
    median_abs_error: float | None = None
    worst_abs_error: float | None = None
    inside_share: float | None = None
    undisturbed: TrackRecord | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"pairs": self.pairs, "median_abs_error": self.median_abs_error,
                           "worst_abs_error": self.worst_abs_error, "inside_share": self.inside_share}
        if self.undisturbed is not None:
            out["undisturbed"] = self.undisturbed.to_json()
        return out

    @classmethod
    def from_json(cls, data: Any) -> TrackRecord:
        d = as_object(data)
        undisturbed = d.get("undisturbed")
        return cls(pairs=as_int(d.get("pairs")) or 0, median_abs_error=finite(d.get("median_abs_error")),
                   worst_abs_error=finite(d.get("worst_abs_error")), inside_share=finite(d.get("inside_share")),
                   undisturbed=cls.from_json(undisturbed) if isinstance(undisturbed, dict) else None)


@dataclass(frozen=True)
class PredictionCheck:
    """``prediction_check``: its rows, and their ``summary`` (pairs, median and worst |error|, inside share;
    ``undisturbed`` the same over the undisturbed pairs)."""

    rows: tuple[CheckedPair, ...]
    summary: TrackRecord

    def to_json(self) -> JsonObject:
        return {"rows": [r.to_json() for r in self.rows], "summary": self.summary.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> PredictionCheck | None:
        if not isinstance(data, dict):
            return None
        rows = data.get("rows")
        return cls(rows=tuple(CheckedPair.from_json(r) for r in rows if isinstance(r, dict)) if rows else (),
                   summary=TrackRecord.from_json(data.get("summary")))
