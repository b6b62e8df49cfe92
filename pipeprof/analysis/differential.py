"""Differential analysis: fetch and prep stalls from three short runs of one scenario (DS-Analyzer style).

After DS-Analyzer (Mohan et al., "Analyzing and Mitigating Data Stalls in DNN
Training", VLDB 2021). ``pipeprof diagnose`` trains the same scenario three
times, each with a fresh workload, and this module turns their summaries into
stall fractions. Pure functions over ``summary.json`` dicts; nothing here
trains, times or renders; the results are typed records (``Differential``), which
``to_json`` writes into diagnosis.json with their reasons in words.

The three runs (``RUNS``), from fastest to slowest in principle:

* ``compute`` — the compute ceiling: the data resident on the training device,
  batches taken by index, no DataLoader, the transform applied to the whole
  batch on the device. Its per-sample time is the training step itself.
* ``prep`` — prep only: the data already decoded in RAM behind the same
  DataLoader settings and the same transform. It adds what preparing samples
  costs the loop and is not hidden behind compute: per-sample indexing, the
  transform, collate, worker hand-off.
* ``real`` — the scenario as given (fetch + prep). It adds reading from the
  real placement (page cache, cold disk, emulated throttle) and, for encoded
  images, decoding: run ``prep`` holds decoded samples, so decoding falls in
  the fetch stall here, while the direct attribution counts it as ``prep_s``.

With ``T_x`` the samples/s of run ``x`` and ``t_x = 1 / T_x`` seconds per
sample, the stalls are the increments in per-sample time, each as a share of
the real run's per-sample time:

    fetch_stall = (t_real - t_prep)    / t_real
    prep_stall  = (t_prep - t_compute) / t_real
    compute     =  t_compute           / t_real      (the three sum to 1)
    stall       = 1 - t_compute / t_real = fetch_stall + prep_stall

The model assumes the costs add up and the compute itself does not change
between runs. On a CPU the second is only approximately true: DataLoader
workers share the cores with torch's threads, so a step computes more slowly
in the real run, and that slow-down shows up here as stall while the direct
attribution calls it compute — one reason the two can disagree.

Run-to-run noise can order the runs the wrong way round (a prep run faster
than the ceiling, or slower than the real run). The per-sample times are then
clamped into the model's order t_compute <= t_prep <= t_real (a prep run
slower than the real one counts as the real one: no fetch stall), so no stall
is negative, none exceeds 1 and the three shares still sum to 1. Every
fraction that clamping changed is in ``clamped``, with its unclamped value
(also in ``unclamped``) and the reason.
A fraction that needs a run that failed is null, with the reason in
``null_reasons``.

Cross-check against the direct attribution of run ``real`` (its own
``summary.json``), each pair within ``TOLERANCE`` (absolute, in fractions):

* ``data_wait``: the direct share of step time spent waiting for data
  against the differential ``stall``.
* ``fetch_share``: the direct share of loading time spent fetching
  (``loading.fractions.fetch``; prep and collate are the rest) against the
  differential ``fetch_stall / (fetch_stall + prep_stall)``. Left out (null,
  with the reason) when the stall is under ``MIN_STALL_TO_SPLIT``: splitting
  next to nothing is noise. With workers, the direct split is of loading
  *work*, the differential one of *stall* (what the workers did not hide), so
  a disagreement there is a finding, not necessarily an error.

A disagreement beyond the tolerance is reported (``agree: false``, both
numbers), never hidden.

Why a fraction is null or clamped, and a check's reason and notes, are ``Reason``
records (a kind plus its numbers); ``render.diagnosis_text`` words them where
``pipeline.diagnose`` writes diagnosis.json.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.thresholds import MIN_STALL_TO_SPLIT
from pipeprof.numbers import finite as _finite
from pipeprof.run_meta import JsonObject

RUNS = ("compute", "prep", "real")

RUN_TITLES = {
    "compute": "compute ceiling (data on the device)",
    "prep": "prep only (decoded data in RAM)",
    "real": "real placement (fetch + prep)",
}

# Two attributions of one pipeline "agree" when they are this close (absolute,
# as fractions: 0.10 = 10 percentage points). On the 2-core development machine
# a single short run's throughput varies by about +-15%, so tighter is noise.
TOLERANCE = 0.10


FRACTIONS = ("fetch_stall", "prep_stall", "stall", "compute")

# Which runs each fraction needs.
_NEEDS = {
    "fetch_stall": ("prep", "real"),
    "prep_stall": ("compute", "prep", "real"),
    "stall": ("compute", "real"),
    "compute": ("compute", "real"),
}


def throughput(summary: Mapping[str, Any] | None) -> float | None:
    """A summary's samples/s, or None when it is missing, null or not a positive number."""
    value = _finite((summary or {}).get("samples_per_s"))
    return value if value is not None and value > 0 else None


def _why_missing(missing: Mapping[str, str | Reason] | None) -> dict[str, Reason]:
    """Why each run is missing: the caller's words (a run's status and error, as recorded) or a reason."""
    return {run: why if isinstance(why, Reason) else Reason.written(why) for run, why in (missing or {}).items()}


Words = Callable[[Reason], str]  # a reason in words (``render.diagnosis_text.reason_words``)


@dataclass(frozen=True)
class Stalls:
    """``stall_fractions``: the fractions (clamped into the model's order), before clamping, and the reasons of
    those clamped and those null; each keyed by ``FRACTIONS`` (``clamped`` and ``null_reasons`` only hold the
    affected ones)."""

    fractions: dict[str, float | None]
    unclamped: dict[str, float | None]
    clamped: dict[str, Reason]
    null_reasons: dict[str, Reason]

    def to_json(self, words: Words) -> JsonObject:
        """diagnosis.json's keys, each reason in ``words``."""
        return {"fractions": dict(self.fractions), "unclamped": dict(self.unclamped),
                "clamped": {k: words(r) for k, r in self.clamped.items()},
                "null_reasons": {k: words(r) for k, r in self.null_reasons.items()}}


@dataclass(frozen=True)
class Agreement:
    """One cross-check as made: the direct and the differential share, their difference (direct - differential),
    whether they agree (None: not checked, ``reason`` says why) and its notes."""

    direct: float | None
    differential: float | None
    difference: float | None
    agree: bool | None
    reason: Reason | None
    notes: tuple[Reason, ...] = ()

    def to_json(self, words: Words) -> JsonObject:
        return {"direct": self.direct, "differential": self.differential, "difference": self.difference,
                "agree": self.agree, "reason": words(self.reason) if self.reason is not None else None,
                "notes": [words(n) for n in self.notes]}


@dataclass(frozen=True)
class CrossChecks:
    """``cross_check``: the tolerance, whether the checks agree (False when any disagrees, None when none could
    be made) and the two checks."""

    tolerance: float
    agree: bool | None
    data_wait: Agreement
    fetch_share: Agreement

    def to_json(self, words: Words) -> JsonObject:
        return {"tolerance": self.tolerance, "agree": self.agree, "data_wait": self.data_wait.to_json(words),
                "fetch_share": self.fetch_share.to_json(words)}


@dataclass(frozen=True)
class Differential:
    """``differential``: each run's samples/s and seconds per sample (None: missing), the stalls and the
    cross-check."""

    samples_per_s: dict[str, float | None]
    seconds_per_sample: dict[str, float | None]
    stalls: Stalls
    cross_check: CrossChecks

    def to_json(self, words: Words) -> JsonObject:
        """diagnosis.json's analysis keys, each reason in ``words``."""
        return {"samples_per_s": dict(self.samples_per_s), "seconds_per_sample": dict(self.seconds_per_sample),
                **self.stalls.to_json(words), "cross_check": self.cross_check.to_json(words)}


def stall_fractions(samples_per_s: Mapping[str, float | None],
                    missing: Mapping[str, str | Reason] | None = None) -> Stalls:
    """Fetch, prep and total stall and the compute share from the three runs' samples/s.

    ``samples_per_s`` maps ``compute`` / ``prep`` / ``real`` to samples/s
    (None: the run is missing); ``missing`` gives the reason a run is missing.
    """
    why_missing = _why_missing(missing)
    t = {run: (1.0 / v if v else None) for run, v in ((r, samples_per_s.get(r)) for r in RUNS)}
    for run in RUNS:
        if t[run] is None:
            why_missing.setdefault(run, Reason("no_throughput"))
    unclamped: dict[str, float | None] = dict.fromkeys(FRACTIONS)
    null_reasons: dict[str, Reason] = {}
    for name in FRACTIONS:
        lacking = [r for r in _NEEDS[name] if t[r] is None]
        if lacking:
            null_reasons[name] = Reason("needs_runs", {}, tuple(
                Reason("missing_run", {"run": r}, (why_missing[r],)) for r in lacking))
    unclamped.update(_fractions(t["compute"], t["prep"], t["real"], null_reasons))

    # Noise can order the runs the wrong way round; clamp the per-sample times
    # into the model's order t_compute <= t_prep <= t_real, so that every
    # fraction stays in [0, 1] and fetch + prep + compute still sum to 1.
    tc, tp, tr = t["compute"], t["prep"], t["real"]
    causes = []

    def out_of_order(kind: str, run: str, other: str) -> Reason:
        return Reason(kind, {"run": run, "samples_per_s": samples_per_s.get(run), "other": other,
                             "other_samples_per_s": samples_per_s.get(other)})

    if tc is not None and tr is not None and tr < tc:
        causes.append(out_of_order("run_faster", "real", "compute"))
        tr = tc
    if tp is not None and tr is not None and tp > tr:
        causes.append(out_of_order("run_slower", "prep", "real"))
        tp = tr
    if tp is not None and tc is not None and tp < tc:
        causes.append(out_of_order("run_faster", "prep", "compute"))
        tp = tc
    fractions = _fractions(tc, tp, tr, null_reasons)
    clamped: dict[str, Reason] = {}
    for name, value in fractions.items():
        before = unclamped[name]
        if value is not None and before is not None and abs(value - before) > 1e-12:
            clamped[name] = Reason("clamped", {"unclamped": before, "clamped": value}, tuple(causes))
    return Stalls(fractions=fractions, unclamped=unclamped, clamped=clamped, null_reasons=null_reasons)


def _fractions(tc: float | None, tp: float | None, tr: float | None,
               null_reasons: Mapping[str, Reason]) -> dict[str, float | None]:
    """The model's formulas on per-sample times (seconds); None where ``null_reasons`` says so."""
    out: dict[str, float | None] = dict.fromkeys(FRACTIONS)
    if "fetch_stall" not in null_reasons and tr is not None and tp is not None:
        out["fetch_stall"] = (tr - tp) / tr
    if "prep_stall" not in null_reasons and tr is not None and tp is not None and tc is not None:
        out["prep_stall"] = (tp - tc) / tr
    if "stall" not in null_reasons and tr is not None and tc is not None:
        out["stall"] = 1.0 - tc / tr
        out["compute"] = tc / tr
    return out


def cross_check(real: Mapping[str, Any] | None, fractions: Mapping[str, float | None], *,
                storage: str | None = None, num_workers: int | None = None,
                missing_reason: str | Reason | None = None, tolerance: float = TOLERANCE) -> CrossChecks:
    """Direct attribution of run ``real`` against the differential fractions (see the module docstring).

    ``real`` is the real run's summary.json, as read (None when it failed, ``missing_reason``
    says why); ``fractions`` are ``stall_fractions(...).fractions``;
    ``storage`` and ``num_workers`` of the real run only add notes. Each check (``data_wait``,
    ``fetch_share``) has ``direct``, ``differential``, ``difference`` (direct - differential),
    ``agree`` (True / False / None when a number is missing), ``reason`` (why
    null) and ``notes`` (``Reason`` records); the top-level ``agree`` is False when any check
    disagrees, True when all agree, None when none could be made.
    """
    why = _why_missing({"real": missing_reason}).get("real") if missing_reason else None
    real_reason = Reason("real_missing", {}, (why,) if why is not None else ())
    direct_wait = _finite(((real or {}).get("fractions") or {}).get("data_wait"))
    wait_reason = None
    if real is None:
        wait_reason = real_reason
    elif direct_wait is None:
        wait_reason = Reason("no_data_wait")
    elif fractions.get("stall") is None:
        wait_reason = Reason("stall_unknown")
    data_wait = _check(direct_wait, fractions.get("stall"), wait_reason, tolerance)

    loading = (real or {}).get("loading")
    direct_fetch = _finite(((loading or {}).get("fractions") or {}).get("fetch"))
    fetch, prep = fractions.get("fetch_stall"), fractions.get("prep_stall")
    stall = None if fetch is None or prep is None else fetch + prep
    split_reason = None
    if real is None:
        split_reason = real_reason
    elif direct_fetch is None:
        split_reason = Reason("no_loading_records" if not loading else "no_loading_time")
    elif stall is None:
        split_reason = Reason("split_unknown")
    elif stall < MIN_STALL_TO_SPLIT:
        split_reason = Reason("stall_too_small", {"stall": stall, "min_stall": MIN_STALL_TO_SPLIT})
    share = fetch / stall if split_reason is None and fetch is not None and stall is not None else None
    fetch_notes = [Reason("decode_is_fetch_here")] if storage == "images" else []
    if num_workers:
        fetch_notes.append(Reason("workers_overlap", {"num_workers": num_workers}))
        data_wait = dataclasses.replace(data_wait, notes=(*data_wait.notes, Reason("workers_share_the_cpu")))
    fetch_share = dataclasses.replace(_check(direct_fetch, share, split_reason, tolerance), notes=tuple(fetch_notes))

    flags = [c.agree for c in (data_wait, fetch_share) if c.agree is not None]
    return CrossChecks(tolerance=tolerance, agree=all(flags) if flags else None, data_wait=data_wait,
                       fetch_share=fetch_share)


def differential(summaries: Mapping[str, Mapping[str, Any] | None], *,
                 missing: Mapping[str, str | Reason] | None = None, storage: str | None = None,
                 num_workers: int | None = None, tolerance: float = TOLERANCE) -> Differential:
    """The whole analysis from the three runs' summaries (summary.json, as read; None: the run failed,
    ``missing`` says why): see ``stall_fractions`` and ``cross_check``.
    """
    missing = _why_missing(missing)
    rates: dict[str, float | None] = {}
    for run in RUNS:
        rates[run] = throughput(summaries.get(run))
        if rates[run] is None and summaries.get(run) is not None:
            missing.setdefault(run, Reason("no_samples_per_s"))
    stalls = stall_fractions(rates, missing)
    return Differential(
        samples_per_s=rates,
        seconds_per_sample={run: (1.0 / v if v else None) for run, v in rates.items()},
        stalls=stalls,
        cross_check=cross_check(summaries.get("real"), stalls.fractions, storage=storage,
                                num_workers=num_workers, missing_reason=missing.get("real"), tolerance=tolerance),
    )


def _check(direct: float | None, differential_value: float | None, reason: Reason | None,
           tolerance: float) -> Agreement:
    if reason is not None or direct is None or differential_value is None:
        return Agreement(direct=direct, differential=differential_value, difference=None, agree=None,
                         reason=reason or Reason("number_missing"))
    difference = direct - differential_value
    # A hair of float slack, so that exactly "tolerance apart" agrees.
    agree = abs(difference) <= tolerance + 1e-12
    return Agreement(direct=direct, differential=differential_value, difference=difference, agree=agree, reason=None)

# -- diagnosis.json read back ---------------------------------------------------------------------------------------
# The typed reader of diagnosis.json (``pipeline.diagnose.build_diagnosis``: the runs, then ``differential``'s keys):
# the renderers parse it once and read these fields.


@dataclass(frozen=True)
class CrossCheck:
    """One cross-check: the direct and the differential share, their difference, whether they agree (None: not
    checked, ``reason`` says why) and its notes."""

    direct: float | None = None
    differential: float | None = None
    difference: float | None = None
    agree: bool | None = None
    reason: Any = None
    notes: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Any) -> CrossCheck:
        d = data if isinstance(data, dict) else {}
        agree = d.get("agree")
        return cls(direct=_finite(d.get("direct")), differential=_finite(d.get("differential")),
                   difference=_finite(d.get("difference")), agree=agree if isinstance(agree, bool) else None,
                   reason=d.get("reason"), notes=tuple(str(n) for n in d.get("notes") or []))


@dataclass(frozen=True)
class DiagnosedRun:
    """One of the diagnosis's runs (real, no-fetch, no-prep): what it was, how it ended, its samples/s and its
    data-wait share (None: not measured). Values printed as recorded stay as recorded."""

    title: Any = None
    storage: Any = None
    num_workers: Any = None
    status: Any = None
    error: Any = None
    samples_per_s: float | None = None
    data_wait: float | None = None

    @classmethod
    def from_json(cls, data: Any) -> DiagnosedRun:
        d = data if isinstance(data, dict) else {}
        return cls(title=d.get("title"), storage=d.get("storage"), num_workers=d.get("num_workers"),
                   status=d.get("status"), error=d.get("error"), samples_per_s=_finite(d.get("samples_per_s")),
                   data_wait=_finite(d.get("data_wait")))


@dataclass(frozen=True)
class Diagnosis:
    """diagnosis.json read back: its scenario and steps per run, the runs by role, seconds per sample, the stall
    fractions (clamped ones with their reason and unclamped value; null ones with theirs) and the cross-checks
    with their tolerance (a share of step time)."""

    scenario: Any
    steps_per_run: Any
    runs: dict[str, DiagnosedRun]
    seconds_per_sample: dict[str, float | None]
    fractions: dict[str, float | None]
    clamped: JsonObject
    unclamped: dict[str, float | None]
    null_reasons: JsonObject
    tolerance: float | None
    checks: dict[str, CrossCheck]

    @classmethod
    def from_json(cls, data: Any) -> Diagnosis:
        d = data if isinstance(data, dict) else {}

        def obj(key: str) -> JsonObject:
            value = d.get(key)
            return value if isinstance(value, dict) else {}

        check = obj("cross_check")
        return cls(scenario=d.get("scenario"), steps_per_run=d.get("steps_per_run"),
                   runs={str(k): DiagnosedRun.from_json(v) for k, v in obj("runs").items()},
                   seconds_per_sample={str(k): _finite(v) for k, v in obj("seconds_per_sample").items()},
                   fractions={str(k): _finite(v) for k, v in obj("fractions").items()},
                   clamped=dict(obj("clamped")), unclamped={str(k): _finite(v) for k, v in obj("unclamped").items()},
                   null_reasons=dict(obj("null_reasons")), tolerance=_finite(check.get("tolerance")),
                   checks={str(k): CrossCheck.from_json(v) for k, v in check.items() if isinstance(v, dict)})
