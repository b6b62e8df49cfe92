"""Comparing runs: throughput ratio with its uncertainty, fraction changes, verdicts, differing settings.

The first run is the baseline; every other run is compared against it.
Pure: takes each run's records and summary (``pipeline.derive.summarize(run)``), returns the
``compare.json`` dict. Runs are referred to by their position in ``runs``
(0 = the baseline).

**Noise rules** — which differences are said to be *within noise*:

* **throughput**: the ratio of the runs' samples/s (the ``throughput``
  windows' ``mean``, which is the summary's ``samples_per_s``;
  ``pipeprof.analysis.windows``) with a 95% interval from the delta method
  in log space: ``ln r ± t · se`` with ``se = sqrt((se_a / mean_a)² +
  (se_b / mean_b)²)`` (each run's standard error of its mean, from its
  window rates) and ``t`` Student's 0.975 quantile at the Welch-Satterthwaite
  degrees of freedom (``k - 1`` per run for ``k`` windows). The change is within noise when the
  interval contains 1. Without windows in either run (too few steps) the
  ratio is the ratio of ``samples_per_s``, with no interval, and
  ``within_noise`` is null with the reason.
* **fractions** (data wait, h2d, compute, other: shares of step time): a
  change of less than ``FRACTION_NOISE_PP`` (2) percentage points either way
  is within noise.
* **verdict class**: categorical, reported as changed or not; no noise rule.

The interval covers the variation *within* each run (window to window) only.
A re-run on a shared machine can differ by more (about ±15% on the 2-core
development machine), so a ratio outside its interval is a real difference
between these two runs, not proof that the setting causes it; repeat the
runs to include run-to-run noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pipeprof.analysis.steps import PHASES as STEP_PHASES
from pipeprof.analysis.windows import t_975
from pipeprof.numbers import finite
from pipeprof.run_folder import Run, as_dict

COMPARE_SCHEMA_VERSION = 1
FRACTION_NOISE_PP = 2.0  # percentage points of step time
PHASES = (*STEP_PHASES, "other")  # summary.json's fractions

NOISE_RULES = {
    "throughput": "within noise when the 95% interval of the throughput ratio contains 1 "
                  "(delta method in log space over the runs' window rates, Welch degrees of freedom)",
    "fractions": f"within noise when the change is under {FRACTION_NOISE_PP:g} percentage points",
    "scope": "the interval covers variation within each run only; re-runs on a shared machine can differ more",
}


def flatten_settings(scenario: Any, prefix: str = "") -> dict[str, Any]:
    """run.json's ``scenario`` as ``{"section.key": value}`` (top-level keys stay bare: ``name``)."""
    flat: dict[str, Any] = {}
    if not isinstance(scenario, dict):
        return flat
    for key, value in scenario.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_settings(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def differing_settings(scenarios: Sequence[Any]) -> list[dict[str, Any]]:
    """The scenario keys whose value is not the same in every run, sorted by key.

    Each: ``{"key", "values"}`` (one value per run; null where absent) and
    ``absent_in`` (positions of the runs without the key, e.g. older runs).
    """
    flat = [flatten_settings(s) for s in scenarios]
    keys = sorted(set().union(*flat)) if flat else []
    rows = []
    for key in keys:
        present = [key in f for f in flat]
        values = [f.get(key) for f in flat]
        if all(present) and all(v == values[0] for v in values[1:]):
            continue
        rows.append({"key": key, "values": values, "absent_in": [i for i, p in enumerate(present) if not p]})
    return rows


def throughput_ratio(baseline: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """``other`` over ``baseline`` throughput with its 95% interval (see the module's noise rules).

    Both arguments are summaries (``samples_per_s`` and the ``throughput``
    windows). Returns ``ratio``, ``low``, ``high``, ``df`` (degrees of
    freedom), ``method``, ``within_noise`` and ``reason`` (why there is no
    interval, else null).
    """
    wa, wb = as_dict(baseline.get("throughput")), as_dict(other.get("throughput"))
    ma, mb = finite(wa.get("mean")), finite(wb.get("mean"))
    sa, sb = finite(wa.get("se")), finite(wb.get("se"))
    ka, kb = int(wa.get("windows") or 0), int(wb.get("windows") or 0)
    if ma is not None and mb is not None and sa is not None and sb is not None and ma > 0 and mb > 0 \
            and ka >= 2 and kb >= 2:
        ratio = mb / ma
        va, vb = (sa / ma) ** 2, (sb / mb) ** 2  # squared relative standard errors
        se = math.sqrt(va + vb)
        if se == 0:  # identical windows in both runs: no spread to speak of
            return _ratio(ratio, ratio, ratio, None, "ratio of samples/s (no spread in either run)")
        df = (va + vb) ** 2 / (va**2 / (ka - 1) + vb**2 / (kb - 1))
        half = t_975(df) * se
        return _ratio(ratio, ratio * math.exp(-half), ratio * math.exp(half), df,
                      "ratio of samples/s, 95% interval by the delta method in log space (Welch df)")
    ra, rb = finite(baseline.get("samples_per_s")), finite(other.get("samples_per_s"))
    plain = rb / ra if ra and rb is not None and ra > 0 else None
    reasons = [f"{name}: {w.get('reason') or 'no throughput windows'}"
               for name, w in (("the baseline", wa), ("this run", wb)) if finite(w.get("mean")) is None]
    reason = "; ".join(reasons) or "a run's window rates have no usable spread"
    return dict(_ratio(plain, None, None, None, "ratio of samples/s (no interval)"), reason=reason)


def _ratio(ratio: float | None, low: float | None, high: float | None, df: float | None,
           method: str) -> dict[str, Any]:
    within = None if low is None or high is None else bool(low <= 1.0 <= high)
    return {"ratio": ratio, "low": low, "high": high, "df": df, "method": method, "within_noise": within,
            "reason": None}


def fraction_changes(baseline: dict[str, Any], other: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per phase: ``baseline`` and ``value`` (fractions of step time), ``delta_pp`` and ``within_noise``."""
    fa, fb = as_dict(baseline.get("fractions")), as_dict(other.get("fractions"))
    out = {}
    for phase in PHASES:
        a, b = finite(fa.get(phase)), finite(fb.get(phase))
        delta_pp = None if a is None or b is None else 100.0 * (b - a)
        out[phase] = {"baseline": a, "value": b, "delta_pp": delta_pp,
                      "within_noise": None if delta_pp is None else abs(delta_pp) < FRACTION_NOISE_PP}
    return out


def run_entry(label: str, folder: str, run: Run, summary: dict[str, Any]) -> dict[str, Any]:
    """What compare.json keeps of one run: identity, status, throughput, fractions, verdict."""
    meta = run.info
    verdict = as_dict(summary.get("verdict"))
    return {
        "label": label,
        "folder": folder,
        "scenario": summary.get("scenario") or run.name,
        "created_utc": meta.created_utc,
        "status": meta.status,
        "device": summary.get("device"),
        "overrides": [str(o) for o in meta.overrides or []],
        "steps": summary.get("steps"),
        "samples_per_s": summary.get("samples_per_s"),
        "throughput": as_dict(summary.get("throughput")),
        "fractions": {p: finite(as_dict(summary.get("fractions")).get(p)) for p in PHASES},
        "bottleneck": summary.get("bottleneck"),
        "verdict": {"class": verdict.get("class"), "sentence": verdict.get("sentence")},
    }


def compare_runs(runs: Sequence[tuple[str, str, Run, dict[str, Any]]], *,
                 created_utc: str | None = None) -> dict[str, Any]:
    """compare.json for ``runs`` = ``(label, folder, run, summary)``, the first being the baseline.

    Keys: ``schema_version``, ``kind`` ("compare"), ``created_utc``, ``baseline`` (0), ``runs`` (``run_entry`` each),
    ``comparisons`` (one per non-baseline run: ``run`` position,
    ``throughput_ratio``, ``fractions``, ``verdict`` {``baseline``, ``value``,
    ``changed``}, ``settings`` (keys that differ from the baseline),
    ``within_noise`` and ``beyond_noise`` (names of the measured differences
    on each side of the noise rules)), ``settings`` (``differing_settings``
    over all runs), ``noise`` (the rules and the fraction threshold).
    """
    if len(runs) < 2:
        raise ValueError("comparing needs at least two runs")
    entries = [run_entry(label, folder, run, summary) for label, folder, run, summary in runs]
    base_summary = runs[0][3]
    comparisons = []
    for i, (_, _, run, summary) in enumerate(runs[1:], start=1):
        ratio = throughput_ratio(base_summary, summary)
        fractions = fraction_changes(base_summary, summary)
        checks = {"throughput": ratio["within_noise"], **{p: f["within_noise"] for p, f in fractions.items()}}
        base_class, klass = entries[0]["verdict"]["class"], entries[i]["verdict"]["class"]
        comparisons.append({
            "run": i,
            "throughput_ratio": ratio,
            "fractions": fractions,
            "verdict": {"baseline": base_class, "value": klass, "changed": base_class != klass},
            "settings": [d["key"] for d in differing_settings([runs[0][2].info.scenario, run.info.scenario])],
            "within_noise": [name for name, within in checks.items() if within is True],
            "beyond_noise": [name for name, within in checks.items() if within is False],
        })
    return {
        "schema_version": COMPARE_SCHEMA_VERSION,
        "kind": "compare",
        "created_utc": created_utc,
        "baseline": 0,
        "runs": entries,
        "comparisons": comparisons,
        "settings": differing_settings([run.info.scenario for _, _, run, _ in runs]),
        "noise": {"fraction_pp": FRACTION_NOISE_PP, "rules": NOISE_RULES},
    }
