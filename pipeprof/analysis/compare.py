"""Comparing runs: throughput ratio with its uncertainty, fraction changes, verdicts, differing settings.

The first run is the baseline; every other run is compared against it.
Pure: takes each run's records and summary (``pipeline.derive.summarize(run)``), returns the
``compare.json`` document; its parts are the typed records below (``ThroughputRatio``, ``FractionChange``,
``SettingDifference``), which compare.json is read back into as well. Runs are referred to by their position in ``runs``
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

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeprof.analysis.reasons import WRITTEN
from pipeprof.analysis.steps import PHASES as STEP_PHASES
from pipeprof.analysis.summary import Summary, as_summary
from pipeprof.analysis.windows import Throughput, t_975
from pipeprof.numbers import finite
from pipeprof.run_folder import Run
from pipeprof.run_meta import JsonObject, as_object, as_str

COMPARE_SCHEMA_VERSION = 1
FRACTION_NOISE_PP = 2.0  # percentage points of step time
PHASES = (*STEP_PHASES, "other")  # summary.json's fractions

NOISE_RULES = {
    "throughput": "within noise when the 95% interval of the throughput ratio contains 1 "
                  "(delta method in log space over the runs' window rates, Welch degrees of freedom)",
    "fractions": f"within noise when the change is under {FRACTION_NOISE_PP:g} percentage points",
    "scope": "the interval covers variation within each run only; re-runs on a shared machine can differ more",
}


def flatten_settings(scenario: Any, prefix: str = "") -> JsonObject:
    """run.json's ``scenario`` as ``{"section.key": value}`` (top-level keys stay bare: ``name``), each value as
    recorded."""
    flat: JsonObject = {}
    if not isinstance(scenario, dict):
        return flat
    for key, value in scenario.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_settings(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def differing_settings(scenarios: Sequence[Any]) -> list[SettingDifference]:
    """The scenario keys whose value is not the same in every run, sorted by key.

    Each: its ``key``, ``values`` (one value per run; None where absent) and
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
        rows.append(SettingDifference(key=key, values=tuple(values),
                                      absent_in=frozenset(i for i, p in enumerate(present) if not p)))
    return rows


def throughput_ratio(baseline: Summary | Mapping[str, Any], other: Summary | Mapping[str, Any]) -> ThroughputRatio:
    """``other`` over ``baseline`` throughput with its 95% interval (see the module's noise rules).

    Both arguments are summaries (``samples_per_s`` and the ``throughput``
    windows; a summary.json's dict is read first, ``as_summary``). Returns ``ratio``, ``low``, ``high``, ``df``
    (degrees of freedom), ``method``, ``within_noise`` and ``reason`` (why there is no interval, else None).
    """
    a, b = as_summary(baseline), as_summary(other)
    wa, wb = a.throughput or Throughput(), b.throughput or Throughput()
    ma, mb = finite(wa.mean), finite(wb.mean)
    sa, sb = finite(wa.se), finite(wb.se)
    ka, kb = wa.windows, wb.windows
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
    ra, rb = finite(a.samples_per_s), finite(b.samples_per_s)
    plain = rb / ra if ra and rb is not None and ra > 0 else None
    reasons = [f"{name}: {w.reason or 'no throughput windows'}"
               for name, w in (("the baseline", wa), ("this run", wb)) if finite(w.mean) is None]
    reason = "; ".join(reasons) or "a run's window rates have no usable spread"
    return dataclasses.replace(_ratio(plain, None, None, None, "ratio of samples/s (no interval)"), reason=reason)


def _ratio(ratio: float | None, low: float | None, high: float | None, df: float | None,
           method: str) -> ThroughputRatio:
    within = None if low is None or high is None else bool(low <= 1.0 <= high)
    return ThroughputRatio(ratio=ratio, low=low, high=high, df=df, method=method, within_noise=within)


def fraction_changes(baseline: Summary | Mapping[str, Any],
                     other: Summary | Mapping[str, Any]) -> dict[str, FractionChange]:
    """Per phase: ``baseline`` and ``value`` (fractions of step time), ``delta_pp`` and ``within_noise``."""
    fa, fb = as_summary(baseline).fractions, as_summary(other).fractions
    out = {}
    for phase in PHASES:
        a, b = finite(fa.get(phase)), finite(fb.get(phase))
        delta_pp = None if a is None or b is None else 100.0 * (b - a)
        out[phase] = FractionChange(baseline=a, value=b, delta_pp=delta_pp,
                                    within_noise=None if delta_pp is None else abs(delta_pp) < FRACTION_NOISE_PP)
    return out


def workload(run: Run) -> str | None:
    """What a run trained, to tell an A/B of one workload from two different ones: a script's file (or ``-m``
    module), whatever its arguments; a scenario's file (a sweep's points share it), else its name."""
    script = run.info.script
    command = script.recorded.get("command") if script is not None else None
    if isinstance(command, list) and all(isinstance(w, str) for w in command):
        words = command[1:]
        for i, word in enumerate(words):
            if word == "-m" and i + 1 < len(words):
                return f"-m {words[i + 1]}"
            if word.endswith(".py"):
                return Path(word).name
        return " ".join(command[:2]) or None
    scenario_file = run.meta.get("scenario_file")
    return Path(scenario_file).name if isinstance(scenario_file, str) and scenario_file else run.name


def run_entry(label: str, folder: str, run: Run, summary: Summary | Mapping[str, Any]) -> JsonObject:
    """What compare.json keeps of one run (its entry, as written): identity, status, throughput, fractions,
    verdict."""
    meta, s = run.info, as_summary(summary)
    return {
        "label": label,
        "folder": folder,
        "scenario": s.scenario or run.name,
        "workload": workload(run),
        "created_utc": meta.created_utc,
        "status": meta.status,
        "device": s.device,
        "overrides": [str(o) for o in meta.overrides or []],
        "steps": s.steps,
        "samples_per_s": s.samples_per_s,
        "throughput": s.throughput.to_json() if s.throughput is not None else {},
        "fractions": {p: finite(s.fractions.get(p)) for p in PHASES},
        "bottleneck": s.bottleneck,
        # the sentence as the run's summary.json has it (written at the edge: pipeline.derive.summarize)
        "verdict": {"class": s.verdict.klass, "sentence": s.verdict.reason.values.get("text")
                    if s.verdict.reason.kind == WRITTEN else None},
    }


def compare_runs(runs: Sequence[tuple[str, str, Run, Summary | Mapping[str, Any]]], *,
                 created_utc: str | None = None) -> JsonObject:
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
    summaries = [as_summary(summary) for _, _, _, summary in runs]  # read once, typed
    entries = [run_entry(label, folder, run, summary) for (label, folder, run, _), summary in zip(runs, summaries)]
    base_summary = summaries[0]
    comparisons = []
    for i, ((_, _, run, _), summary) in enumerate(zip(runs[1:], summaries[1:]), start=1):
        ratio = throughput_ratio(base_summary, summary)
        fractions = fraction_changes(base_summary, summary)
        checks = {"throughput": ratio.within_noise, **{p: f.within_noise for p, f in fractions.items()}}
        base_class, klass = entries[0]["verdict"]["class"], entries[i]["verdict"]["class"]
        comparisons.append({
            "run": i,
            "throughput_ratio": ratio.to_json(),
            "fractions": {p: f.to_json() for p, f in fractions.items()},
            "verdict": {"baseline": base_class, "value": klass, "changed": base_class != klass},
            "settings": [d.key for d in differing_settings([runs[0][2].info.scenario, run.info.scenario])],
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
        "settings": [d.to_json() for d in differing_settings([run.info.scenario for _, _, run, _ in runs])],
        "noise": {"fraction_pp": FRACTION_NOISE_PP, "rules": NOISE_RULES},
    }


# -- compare.json read back ----------------------------------------------------------------------------------------
# The typed reader of compare.json (what ``compare_runs`` writes, with each run's ``report`` link): the renderers
# parse the document once (``Comparison.from_json``) and read these fields.


@dataclass(frozen=True)
class ThroughputRatio:
    """A comparison's ``throughput_ratio``: the ratio of samples/s to the baseline's, its 95% interval, the
    degrees of freedom, the method in words, whether it is within noise and why there is no interval."""

    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    df: float | None = None
    method: str | None = None
    within_noise: bool | None = None
    reason: str | None = None

    def to_json(self) -> JsonObject:
        return {"ratio": self.ratio, "low": self.low, "high": self.high, "df": self.df, "method": self.method,
                "within_noise": self.within_noise, "reason": self.reason}

    @classmethod
    def from_json(cls, data: Any) -> ThroughputRatio:
        d = as_object(data)
        return cls(ratio=finite(d.get("ratio")), low=finite(d.get("low")), high=finite(d.get("high")),
                   df=finite(d.get("df")), method=as_str(d.get("method")), within_noise=_bool(d.get("within_noise")),
                   reason=as_str(d.get("reason")))


@dataclass(frozen=True)
class FractionChange:
    """A phase's share of step time in the baseline and in this run, the change in percentage points and whether
    it is within noise."""

    baseline: float | None = None
    value: float | None = None
    delta_pp: float | None = None
    within_noise: bool | None = None

    def to_json(self) -> JsonObject:
        return {"baseline": self.baseline, "value": self.value, "delta_pp": self.delta_pp,
                "within_noise": self.within_noise}

    @classmethod
    def from_json(cls, data: Any) -> FractionChange:
        d = as_object(data)
        return cls(baseline=finite(d.get("baseline")), value=finite(d.get("value")),
                   delta_pp=finite(d.get("delta_pp")), within_noise=_bool(d.get("within_noise")))


@dataclass(frozen=True)
class ComparedRun:
    """One of compare.json's ``runs`` (``run_entry``), with the link to its report where the comparison has one.
    ``samples_per_s`` and ``fractions`` as the summary recorded them (None: not measured)."""

    label: str | None = None
    folder: str | None = None
    scenario: str | None = None
    workload: str | None = None  # ``workload``: None in a compare.json written before it
    status: str | None = None
    report: str | None = None
    overrides: tuple[str, ...] = ()
    samples_per_s: float | None = None
    throughput: Throughput | None = None
    fractions: dict[str, float | None] = field(default_factory=dict)
    verdict_class: str | None = None
    verdict_sentence: str | None = None

    @classmethod
    def from_json(cls, data: Any) -> ComparedRun:
        d = as_object(data)
        verdict = as_object(d.get("verdict"))
        return cls(label=_text(d.get("label")), folder=_text(d.get("folder")), scenario=_text(d.get("scenario")),
                   workload=_text(d.get("workload")), status=_text(d.get("status")), report=as_str(d.get("report")),
                   overrides=tuple(str(o) for o in d.get("overrides") or []),
                   samples_per_s=finite(d.get("samples_per_s")), throughput=Throughput.from_json(d.get("throughput")),
                   fractions={str(k): finite(v) for k, v in as_object(d.get("fractions")).items()},
                   verdict_class=_text(verdict.get("class")), verdict_sentence=_text(verdict.get("sentence")))


@dataclass(frozen=True)
class RunComparison:
    """One of compare.json's ``comparisons``: run ``run`` against the baseline."""

    run: int | None
    throughput_ratio: ThroughputRatio
    fractions: dict[str, FractionChange]
    verdict_changed: bool

    @classmethod
    def from_json(cls, data: Any) -> RunComparison:
        d = as_object(data)
        run = d.get("run")
        return cls(run=run if isinstance(run, int) and not isinstance(run, bool) else None,
                   throughput_ratio=ThroughputRatio.from_json(d.get("throughput_ratio")),
                   fractions={str(k): FractionChange.from_json(v) for k, v in as_object(d.get("fractions")).items()},
                   verdict_changed=bool(as_object(d.get("verdict")).get("changed")))


@dataclass(frozen=True)
class SettingDifference:
    """A scenario key whose value differs between the runs: one value per run, and the runs without it."""

    key: str
    values: tuple[Any, ...]
    absent_in: frozenset[int]

    def to_json(self) -> JsonObject:
        return {"key": self.key, "values": list(self.values), "absent_in": sorted(self.absent_in)}

    @classmethod
    def from_json(cls, data: Any) -> SettingDifference:
        d = as_object(data)
        return cls(key=str(d.get("key")), values=tuple(d.get("values") or []),
                   absent_in=frozenset(i for i in d.get("absent_in") or [] if isinstance(i, int)))


@dataclass(frozen=True)
class Comparison:
    """compare.json read back: when it was made, its runs (the first the baseline), each other run's comparison,
    the settings that differ, and the noise rules (``fraction_pp``: a share's threshold in percentage points)."""

    created_utc: str | None
    runs: tuple[ComparedRun, ...]
    comparisons: tuple[RunComparison, ...]
    settings: tuple[SettingDifference, ...]
    fraction_pp: float | None
    rules: JsonObject

    def comparison_of(self, run: int) -> RunComparison | None:
        """The comparison of run ``run`` (None for the baseline, or a run not compared)."""
        return next((c for c in self.comparisons if c.run == run), None)

    @classmethod
    def from_json(cls, data: Any) -> Comparison:
        d = as_object(data)
        noise = as_object(d.get("noise"))
        return cls(created_utc=as_str(d.get("created_utc")),
                   runs=tuple(ComparedRun.from_json(r) for r in _objects(d.get("runs"))),
                   comparisons=tuple(RunComparison.from_json(c) for c in _objects(d.get("comparisons"))),
                   settings=tuple(SettingDifference.from_json(s) for s in _objects(d.get("settings"))),
                   fraction_pp=finite(noise.get("fraction_pp")), rules=dict(as_object(noise.get("rules"))))


def as_comparison(value: Comparison | Mapping[str, Any]) -> Comparison:
    """``value`` itself, or compare.json's dict read back (``Comparison.from_json``): what the renderers take."""
    return value if isinstance(value, Comparison) else Comparison.from_json(value)


def _objects(value: Any) -> list[JsonObject]:
    """The JSON objects of a list (an entry of another type is not one of ours: left out)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    """A value compare.json holds as text, as text (``str`` of a number); None where it is null or missing."""
    return None if value is None else str(value)
