"""Intervals: how far each recommendation's prediction could move with the noise of what it was computed from.

A prediction is arithmetic over measured inputs — the counted steps' waits and compute, the loading records'
fetch / prep / collate, the CPU samples, any measured what-if's repeated windows — and each of those was one
draw from a noisy machine. ``intervals(run, recommendations)`` gives every recommendation an ``Interval``:
the predicted samples/s and speed-up at ``LEVEL`` (0.8: from the 10th to the 90th percentile), or null
bounds with the reason in ``method``. Pure: no clock, no torch; a seeded generator, so the same run folder
always gives the same summary.json.

The method
==========

1. **Resample the run** (``resample_run``), ``RESAMPLES`` times with ``SEED``:

   * counted steps by a *circular block bootstrap*: blocks of ``block_length(n)`` consecutive steps (10, at
     most a fifth of the run, so there are at least 5 blocks), each starting anywhere in the run (wrapping
     round), laid end to end until the run's length. Blocks keep the autocorrelation of a machine that is
     slow for a second at a time, which resampling single steps would average away. Each epoch's first
     counted step stays in place: it carries the evidence of a slow start (persistent workers) once per epoch,
     which a resample would otherwise drop or repeat. A position keeps its step number, epoch and start time
     (so the run's window and epochs are the original's); its values are the drawn step's;
   * the loading records follow their step (a batch's fetch / prep / collate goes wherever its step went), and
     so do the transforms' (``transforms.csv``: the per-transform and decode costs behind issue 18's advice);
   * the system samples inside the counted window (CPU %) by the same block rule, on their own timeline;
   * every measured what-if that run.json keeps with its repeated windows (a list under a key ending
     ``_per_window``, beside the scalar of the same name without the suffix: contract 4 of issue 17) has its
     windows drawn again with replacement; the scalar moves by the ratio of the drawn windows' mean to the
     recorded windows' mean.

2. **Predict again** on each resample through the public functions only — ``attribution``, the verdict and
   ``recommend.predict_change`` (the model's prediction for a given change, recommended or not) or, for a
   code change (no setting to pass), the resample's ``recommend`` list matched by ``change`` and
   ``code_change``. A resample in which the model cannot predict the change (or, without ``predict_change``,
   does not list it: it predicts it less than ``MIN_GAIN``) counts as no gain: its rate is the resample's
   own measured samples/s. A prediction below that rate is kept as it is: a change that may slow the run.

3. **The bounds.** ``RESAMPLES`` (8: each costs an attribution) are too few for their 10th and 90th percentiles to be stable
   (those are the first and last draws), but enough for a standard error: the spread ``sd`` of ln(predicted samples/s)
   over the resamples gives the half-width ``t(0.9, B - 1) · sd`` (Student's t: the sd is itself estimated
   from ``B`` draws). It is widened by the run's own run-to-run noise: the coefficient of variation ``cv`` of
   samples/s between the counted steps' windows (``windows.throughput_windows``, ~1 s each), as
   ``z(0.9) · cv`` added in quadrature — a re-run of the change is one more draw from that machine. The
   Two calibrated terms are added in quadrature as well (``RERUN_CV``, ``MODEL_ERROR``, measured by the
   yardstick ``benchmarks/predict.py``): a re-run in a fresh process moves further than windows within one run
   do, and the model has an error of its own that no resample of its inputs shows -- smaller for a prediction
   from a what-if probe of the changed setting (its ``tier``: ``measured``) than for an estimate
   (``estimated``). The
   interval is ``point · exp(±half)``, taken wider where the resamples' own 10th / 90th percentiles reach
   further (a change that several resamples predicted no gain for). It always contains the point
   prediction. ``speedup`` is ``samples_per_s`` over the run's measured samples/s.

A speed-up interval reaching down to x1.0 (``may_not_help``) is not presented as a gain: ``ranked`` puts
such recommendations after the certain gains, and the renderers say "may not help". Not modelled: the
model's own error case by case (only its typical size by kind, from the yardstick ``benchmarks/predict.py``);
and drift between runs larger than the yardstick saw.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipeprof import track_record
from pipeprof.analysis.attribution import Attribution, attribution
from pipeprof.analysis.change_model import ModelCheck
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.recommend import (
    WHOLE_BATCHES,
    WHOLE_BATCHES_CODE,
    Recommendation,
    model_check,
    predict_change,
    recommend,
)
from pipeprof.analysis.steps import counted_steps, counted_window_s
from pipeprof.analysis.verdict import verdict_from_attribution
from pipeprof.analysis.windows import throughput_windows
from pipeprof.numbers import finite
from pipeprof.run_folder import Run
from pipeprof.run_meta import JsonObject, as_object

LEVEL = 0.8  # the 10th to the 90th percentile
RESAMPLES = 8  # each costs one resample, attribution and prediction
SEED = 17  # fixed: the same run folder gives the same summary.json
BLOCK_STEPS = 10
MIN_BLOCKS = 5
PER_WINDOW = "_per_window"
Z_90 = 1.2815515655446004
# t(0.9, df) for df = 1..20; beyond, z + (z^3 + z) / (4 df) is within 0.002.
_T_90 = (3.0777, 1.8856, 1.6377, 1.5332, 1.4759, 1.4398, 1.4149, 1.3968, 1.3830, 1.3722,
         1.3634, 1.3562, 1.3502, 1.3450, 1.3406, 1.3368, 1.3334, 1.3304, 1.3277, 1.3253)
NO_STEPS = "no counted steps to resample"
# Calibrated on the yardstick (benchmarks/predict.py, 2 shared cores, 2026-12-01; BENCHMARKS.md): a re-run in a
# fresh process is one more draw from the machine, whose samples/s moved by a median 11 % between the same base
# run twice (8 pairs: sd of ln(ratio) 0.14, so 0.10 a run) -- more than the windows within one run move; and
# the model's own error, which the bootstrap cannot see: predictions from a measured what-if (the probe ran the
# changed setting's pieces) missed by a median ~10 %, the estimated ones by ~25 %.
RERUN_CV = 0.10
MODEL_ERROR = {"measured": 0.10, "estimated": 0.25}


@dataclass(frozen=True)
class Interval:
    """The range a recommendation's prediction holds at ``level``; summary.json's item ``interval``.

    ``samples_per_s`` and ``speedup`` are (low, high), or None with the reason in ``method``;
    ``may_not_help``: the speed-up interval reaches x1.0 or below, so the change is not a certain gain.
    """

    samples_per_s: tuple[float, float] | None
    speedup: tuple[float, float] | None
    method: str
    level: float = LEVEL

    @property
    def may_not_help(self) -> bool:
        return self.speedup is not None and self.speedup[0] <= 1.0

    def contains(self, samples_per_s: float | None) -> bool | None:
        """Whether a measured samples/s lies inside; None when there are no bounds or no measurement."""
        value = finite(samples_per_s)
        if self.samples_per_s is None or value is None:
            return None
        low, high = self.samples_per_s
        return low <= value <= high

    def to_json(self) -> JsonObject:
        return {"samples_per_s": list(self.samples_per_s) if self.samples_per_s else None,
                "speedup": list(self.speedup) if self.speedup else None, "level": self.level,
                "method": self.method, "may_not_help": self.may_not_help}

    @classmethod
    def from_json(cls, data: Any) -> Interval:
        """The inverse of ``to_json`` (``may_not_help`` follows from ``speedup``, as it was written)."""
        d = as_object(data)
        level = finite(d.get("level"))
        return cls(samples_per_s=_pair(d.get("samples_per_s")), speedup=_pair(d.get("speedup")),
                   method=str(d.get("method") or ""), level=LEVEL if level is None else level)


def _pair(value: Any) -> tuple[float, float] | None:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    low, high = finite(value[0]), finite(value[1])
    return (low, high) if low is not None and high is not None else None


def none(reason: str) -> Interval:
    """An interval with no bounds, and why."""
    return Interval(None, None, reason)


def t_90(df: int) -> float:
    """The 0.9 quantile of Student's t with ``df`` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T_90):
        return _T_90[df - 1]
    return Z_90 + (Z_90**3 + Z_90) / (4 * df)


def block_length(n: int, block_steps: int = BLOCK_STEPS) -> int:
    """Steps per block for ``n`` steps: ``block_steps``, at most ``n // MIN_BLOCKS``, at least 1."""
    return max(1, min(block_steps, n // MIN_BLOCKS))


def circular_blocks(n: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` indices into 0..n-1: blocks of ``length`` consecutive indices from random starts, wrapping round."""
    if n <= 0:
        return np.zeros(0, dtype=int)
    count = math.ceil(n / length)
    starts = rng.integers(0, n, size=count)
    return ((starts[:, None] + np.arange(length)[None, :]) % n).reshape(-1)[:n]


def resample_run(run: Run, rng: np.random.Generator, *, block_steps: int = BLOCK_STEPS) -> Run:
    """One block-bootstrap resample of ``run`` (the module's step 1): a Run of the same shape."""
    steps = run.steps.reset_index(drop=True)
    warm = steps["warmup"].astype(bool).to_numpy()
    positions = np.flatnonzero(~warm)
    if len(positions) == 0:
        return run
    counted = steps.iloc[positions]
    starts = _epoch_starts(counted)
    free = positions[~starts]  # the positions a resample fills
    drawn = free[circular_blocks(len(free), block_length(len(free), block_steps), rng)]
    source = positions.copy()
    source[~starts] = drawn
    new_steps = _take_rows(steps, positions, source, keep=("step", "epoch", "t_start_s", "warmup"))
    numbers = pd.to_numeric(steps["step"], errors="coerce").to_numpy(dtype=float)
    return Run(meta=_resample_windows(run.meta, rng), steps=new_steps, samples=_resample_samples(run, rng),
               processes=run.processes,
               loading=_follow_steps(run.loading, numbers[source], numbers[positions]),
               transforms=_follow_steps(run.transforms, numbers[source], numbers[positions]),
               functions=run.functions, device_memory=run.device_memory, attachments=run.attachments)


def _take_rows(table: pd.DataFrame, positions: np.ndarray, source: np.ndarray,
               keep: Sequence[str] = ()) -> pd.DataFrame:
    """``table`` with the rows at ``positions`` holding the values of the rows at ``source`` (column by column,
    each keeping its dtype), but for the ``keep`` columns."""
    columns = {}
    for name in table.columns:
        values = table[name].to_numpy()
        if name not in keep:
            values = values.copy()
            values[positions] = values[source]
        columns[name] = values
    return pd.DataFrame(columns, index=table.index)


def _epoch_starts(counted: pd.DataFrame) -> np.ndarray:
    """A mask over the counted steps: the first counted step of each epoch."""
    if "epoch" not in counted:
        return np.zeros(len(counted), dtype=bool)
    epoch = counted["epoch"].to_numpy()
    return np.concatenate(([True], epoch[1:] != epoch[:-1])) if len(epoch) else np.zeros(0, dtype=bool)


def _follow_steps(loading: pd.DataFrame, drawn: np.ndarray, positions: np.ndarray) -> pd.DataFrame:
    """The loading records with the batches of each counted step (numbers ``positions``) replaced by those of
    the step drawn for it (``drawn``, in the same order)."""
    if loading is None or loading.empty or "step" not in loading:
        return loading
    step = pd.to_numeric(loading["step"], errors="coerce").to_numpy(dtype=float)
    order = np.argsort(step, kind="stable")
    ordered = step[order]
    first, last = np.searchsorted(ordered, drawn, "left"), np.searchsorted(ordered, drawn, "right")
    counts = last - first
    # the rows of each drawn step, one run after another: first[j], first[j] + 1, ..., last[j] - 1
    offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    rows = order[np.repeat(first, counts) + offsets]
    others = np.flatnonzero(~np.isin(step, positions))
    out = loading.iloc[np.concatenate([others, rows])].reset_index(drop=True)
    new_step = np.concatenate([step[others], np.repeat(positions, counts)])
    out["step"] = new_step.astype(np.int64) if np.isfinite(new_step).all() else new_step
    return out


def _resample_samples(run: Run, rng: np.random.Generator) -> pd.DataFrame:
    """The system samples inside the counted window, block-resampled in time order; the rest as they are."""
    samples = run.samples
    start_s, end_s = counted_window_s(run.steps)
    if samples is None or samples.empty or "t_s" not in samples or math.isnan(start_s):
        return samples
    samples = samples.reset_index(drop=True)
    t = pd.to_numeric(samples["t_s"], errors="coerce")
    inside = np.flatnonzero(((t >= start_s) & (t <= end_s)).to_numpy())
    if len(inside) < 2:
        return samples
    drawn = inside[circular_blocks(len(inside), block_length(len(inside)), rng)]
    return _take_rows(samples, inside, drawn, keep=("t_s",))


def _resample_windows(value: Any, rng: np.random.Generator) -> Any:
    """run.json with every ``X_per_window`` list drawn again with replacement and ``X`` moved with its mean."""
    if isinstance(value, list):
        return [_resample_windows(v, rng) for v in value]
    if not isinstance(value, dict):
        return value
    # In sorted key order, so the draws do not depend on the dict's order: run.json is written with its keys
    # sorted, and a summary derived before the save must equal the one derived from the saved folder.
    keys = sorted(value, key=str)
    drawn_values = {k: _resample_windows(value[k], rng) for k in keys}
    out = {k: drawn_values[k] for k in value}
    for key in keys:
        windows = value[key]
        scalar = key[: -len(PER_WINDOW)] if key.endswith(PER_WINDOW) else None
        rates = np.array([finite(w) for w in windows] if isinstance(windows, list) else [], dtype=float)
        if scalar is None or len(rates) < 2 or not np.isfinite(rates).all() or finite(value.get(scalar)) is None:
            continue
        mean = float(rates.mean())
        if mean <= 0:
            continue
        drawn = rng.choice(rates, size=len(rates), replace=True)
        out[key] = [float(r) for r in drawn]
        out[scalar] = float(value[scalar]) * float(drawn.mean()) / mean
    return out


def intervals(run: Run, recommendations: Sequence[Recommendation], *, probe: JsonObject | None = None,
              resamples: int = RESAMPLES, seed: int = SEED, rerun_cv: float = RERUN_CV,
              model_error: dict[str, float] | None = None, attr: Attribution | None = None,
              rerun_measured: bool = False, checks: JsonObject | None = None) -> tuple[Interval, ...]:
    """One ``Interval`` per recommendation, in order (the module docstring's method).

    ``probe``: the machine probe the recommendations were derived with (default: run.json's); ``rerun_cv`` and
    ``model_error`` (by ``model_kind``): fixed terms of step 3 in place of ``RERUN_CV`` and the model's own error
    (``own_error``); ``attr``: the run's attribution with ``probe``, where the caller has it (else computed here);
    ``rerun_measured``: ``rerun_cv`` is this machine's, measured by repeated runs (``verification.rerun_noise``);
    ``checks``: this machine's track record of checked predictions as the run found it (``pipeprof.track_record``;
    default: run.json's), whose tiers with enough checks replace the yardstick's typical error.
    The honest negative (no change, no code change) and a recommendation without a prediction get no bounds.
    """
    if not recommendations:
        return ()
    probe = probe if probe is not None else run.info.probe
    current = _rate(run.steps)
    predicted = [finite(r.predicted_samples_per_s) for r in recommendations]
    wanted = [i for i, r in enumerate(recommendations) if (r.change or r.code_change) and predicted[i]]
    if current is None or not wanted:
        reason = NO_STEPS if current is None else "no change is predicted: nothing to bound"
        return tuple(_no_bounds(r, reason) for r in recommendations)
    rng = np.random.default_rng(seed)
    draws = np.full((resamples, len(recommendations)), np.nan)
    found = np.zeros(len(recommendations), dtype=int)
    for b in range(resamples):
        again = resample_run(run, rng)
        rate_b = _rate(again.steps) or current
        for i, value in _predict(again, probe, recommendations, wanted).items():
            found[i] += value is not None
            draws[b, i] = value if value is not None else rate_b  # not predicted (not listed): no gain
    noise = finite(throughput_windows(run.steps).cv)
    record = checks if checks is not None else run.info.track_record
    attr = attr if attr is not None else attribution(run, probe)  # the summary's own, where it has one
    check = model_check(run, attr)
    run_workers = int(attr.cpu.num_workers or 0)
    out = []
    for i, rec in enumerate(recommendations):
        if i not in wanted:
            out.append(_no_bounds(rec, "no change is predicted: nothing to bound"))
            continue
        kind = model_kind(rec)
        prior = Prior.of(record, kind)
        error, checked = (model_error[kind], False) if model_error is not None else \
            own_error(kind, check, int(rec.change.get("loader.num_workers", run_workers)), prior.error)
        out.append(_bounds(float(predicted[i] or 0.0), draws[:, i], current, noise, int(found[i]), seed,
                           rerun_cv, kind, error, checked, rerun_measured, prior))
    return tuple(out)


@dataclass(frozen=True)
class Prior:
    """The model's typical error for a tier before this run's own evidence: this machine's track record where it
    has enough checks of the tier (``checks``), else the yardstick's (``MODEL_ERROR``, ``checks`` None)."""

    error: float
    checks: int | None = None

    @classmethod
    def of(cls, record: Any, kind: str) -> Prior:
        found = track_record.model_error(record, kind)
        return cls(found[0], found[1]) if found is not None else cls(MODEL_ERROR[kind])

    @property
    def typical(self) -> str:
        """Whose typical error it is, as the interval's method names it."""
        return "the yardstick's typical" if self.checks is None else "this machine's track record's typical"

    def words(self) -> str:
        if self.checks is None:
            return f"{self.typical}: pipeprof's benchmark of its own predictions"
        return f"this machine's track record: the median of its last {self.checks} checks"


def own_error(kind: str, check: ModelCheck, workers: int, prior: float | None = None) -> tuple[float, bool]:
    """The model's own error for a prediction of ``kind`` at ``workers`` workers, and whether this run measured
    more of it than ``prior`` (the tier's typical error, the floor: ``Prior``; default ``MODEL_ERROR``'s): an
    estimate of workers takes the furthest the workers' estimate missed a measurement of this run
    (``recommend.model_check``); a measured prediction, how far the as-run loop measured again after the run
    moved from the run."""
    prior = MODEL_ERROR[kind] if prior is None else prior
    seen = (check.estimate_error if workers > 0 else None) if kind == "estimated" else check.remeasured
    return (seen, True) if seen is not None and seen > prior else (prior, False)


def _no_bounds(rec: Recommendation, reason: str) -> Interval:
    if rec.predicted_samples_per_s is None:
        return none("not predicted, so not bounded")
    return none(reason)


def _predict(run: Run, probe: JsonObject | None, recs: Sequence[Recommendation],
             wanted: Sequence[int]) -> dict[int, float | None]:
    """The resample's predicted samples/s for each wanted recommendation (None: no prediction of it)."""
    attr = attribution(run, probe)
    verdict = verdict_from_attribution(attr)
    listed: list[Recommendation] | None = None
    out: dict[int, float | None] = {}
    for i in wanted:
        rec = recs[i]
        change = dict(rec.change)
        if rec.code_change is not None and rec.code_change == WHOLE_BATCHES_CODE:
            change[WHOLE_BATCHES] = True  # predict_change's key for that code change
        if change:
            again = predict_change(run, attr, verdict, change)
            out[i] = finite(again.predicted_samples_per_s) if again is not None else None
            continue
        if listed is None:
            listed = recommend(run, attr, verdict)
        match = next((r for r in listed if r.change == rec.change and r.code_change == rec.code_change), None)
        out[i] = finite(match.predicted_samples_per_s) if match is not None else None
    return out


def model_kind(rec: Recommendation) -> str:
    """The prediction's tier as the model error knows it: ``measured`` (the change itself ran after the run)
    or ``estimated``."""
    return "measured" if rec.tier == "measured" else "estimated"


def _bounds(point: float, draws: np.ndarray, current: float, noise: float | None, found: int,
            seed: int, rerun_cv: float, kind: str, model_error: float, checked: bool,
            rerun_measured: bool, prior: Prior) -> Interval:
    resamples = len(draws)
    logs = np.log(np.clip(draws, 1e-12, None))  # a prediction of no samples at all: very far down, not -inf
    spread = float(logs.std(ddof=1)) if resamples >= 2 else 0.0
    boot = t_90(resamples - 1) * spread if resamples >= 2 else 0.0
    widen = Z_90 * noise if noise is not None else 0.0
    rerun, model = Z_90 * rerun_cv, Z_90 * model_error
    half = math.sqrt(boot ** 2 + widen ** 2 + rerun ** 2 + model ** 2)
    tail = (1 - LEVEL) / 2
    low = min(point * math.exp(-half), float(np.quantile(draws, tail)), point)
    high = max(point * math.exp(half), float(np.quantile(draws, 1 - tail)), point)
    method = (f"block bootstrap of the run's steps, loading records, CPU samples and measured what-ifs "
              f"({resamples} resamples, seed {seed}; "
              + ("predicted in all" if found == resamples else f"predicted in {found}, the others counted as no gain")
              + "): "
              f"t(0.9) × sd of ln(prediction) = ±{100 * boot:.1f}%, widened by the run's window-to-window noise "
              + (f"z(0.9) × cv {100 * noise:.1f}% = ±{100 * widen:.1f}%" if noise is not None else
                 "(none: too few counted steps for 2 windows)")
              + f", a re-run's noise z(0.9) × {100 * rerun_cv:.0f}%"
              + (" (with this machine's, from --verify's repeated runs)" if rerun_measured else "")
              + f" and the {kind} model's own error z(0.9) × "
                f"{100 * model_error:.0f}% ("
              + ("as this run measured it: " + ("the workers' estimate against its own measurements" if kind ==
                                                "estimated" else "the as-run loop measured again after the run")
                 + f", above {prior.typical}" if checked else prior.words())
              + f"): ±{100 * half:.1f}% in all")
    return Interval((low, high), (low / current, high / current), method)


def _rate(steps: pd.DataFrame) -> float | None:
    """Samples/s of the counted steps, None without any."""
    counted = counted_steps(steps) if len(steps) else steps
    samples = float(pd.to_numeric(counted["samples"], errors="coerce").sum()) if len(counted) else 0.0
    seconds = float(pd.to_numeric(counted["step_s"], errors="coerce").sum()) if len(counted) else 0.0
    return samples / seconds if samples > 0 and seconds > 0 else None


def ranked(recommendations: Sequence[Recommendation],
           bounds: Sequence[Interval]) -> tuple[tuple[Recommendation, ...], tuple[Interval, ...]]:
    """Recommendations (and their intervals) with the certain gains first and those that may not help after
    them, each group in its order (by tier, then predicted speed-up).

    Changes of one tier and group that are within each other's noise (each one's prediction inside the other's
    interval) are ranked the same way every time, whatever the run's noise: the smaller change first (fewer
    settings, fewer workers and threads; ``_smaller``), each with a ``within_noise`` note naming the others.
    Two profiles of one script then give the same top advice unless their measurements differ beyond it."""
    order = sorted(range(len(recommendations)), key=lambda i: bounds[i].may_not_help)
    recs, ivals = [recommendations[i] for i in order], [bounds[i] for i in order]
    out_recs: list[Recommendation] = []
    out_bounds: list[Interval] = []
    start = 0
    while start < len(recs):
        end = start + 1
        while end < len(recs) and _same_group(recs[start], ivals[start], recs[end], ivals[end]) and \
                any(_within_noise(recs[j], ivals[j], recs[end], ivals[end]) for j in range(start, end)):
            end += 1
        tied = sorted(range(start, end), key=lambda j: _smaller(recs[j]))
        for j in tied:
            others = tuple(dict(recs[o].change) for o in tied if o != j)
            note = (*recs[j].note, Reason("within_noise", {"others": others})) if others else recs[j].note
            out_recs.append(dataclasses.replace(recs[j], note=note))
            out_bounds.append(ivals[j])
        start = end
    return tuple(out_recs), tuple(out_bounds)


def _same_group(a: Recommendation, ia: Interval, b: Recommendation, ib: Interval) -> bool:
    return a.tier == b.tier and ia.may_not_help == ib.may_not_help


def _within_noise(a: Recommendation, ia: Interval, b: Recommendation, ib: Interval) -> bool:
    """Each of two setting changes predicted inside the other's interval."""
    if not (a.change and b.change) or a.code_change is not None or b.code_change is not None:
        return False
    return bool(ia.contains(b.predicted_samples_per_s)) and bool(ib.contains(a.predicted_samples_per_s))


_RESOURCES = ("loader.num_workers", "train.threads", "loader.prefetch_factor")  # what a larger value costs


def _smaller(rec: Recommendation) -> tuple[int, float, str]:
    """The order of changes within each other's noise: fewer settings, then fewer workers, threads and batches
    held ahead, then by name: never by the noisy prediction."""
    cost = sum(float(v) for k, v in rec.change.items() if k in _RESOURCES and isinstance(v, (int, float)))
    return len(rec.change), cost, repr(sorted(rec.change.items()))
