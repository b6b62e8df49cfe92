"""The regression gate of ``pipeprof compare --fail-if-slower PCT``: is a run slower than the baseline, for real?

Pure: reads the comparison ``pipeprof.analysis.compare.compare_runs`` made
(its throughput ratio, NEW over BASE, with the 95% interval of the joint
noise of the two runs' window rates) and returns one ``GateResult`` a run.

A run **fails** when both hold:

* its throughput is below the baseline's by more than ``PCT`` percent
  (the ratio is under ``1 - PCT/100``), and
* the slowdown is beyond the noise: the whole interval lies below 1.

Inside the noise (the interval contains 1), slower by no more than ``PCT``, or
faster, it passes. Without an interval (a run too short for throughput
windows) the gate cannot tell a slowdown from noise: the outcome is
``undecided``, with the comparison's reason, never a pass by default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pipeprof.analysis.compare import Comparison, ThroughputRatio, as_comparison
from pipeprof.numbers import finite

Outcome = Literal["slower", "slower-within-threshold", "within-noise", "faster", "undecided"]
FAILING: frozenset[str] = frozenset({"slower"})


@dataclass(frozen=True)
class GateResult:
    """One run against the baseline. ``ratio``/``low``/``high``: its samples/s over the baseline's, with the 95%
    interval; ``threshold_ratio`` = 1 - ``fail_if_slower_pct``/100; ``reason``: why undecided, else None."""

    label: str
    baseline_label: str
    outcome: Outcome
    fail_if_slower_pct: float
    threshold_ratio: float
    ratio: float | None
    low: float | None
    high: float | None
    reason: str | None = None
    # (the baseline's, this run's) where they trained different workloads (``compare.workload``): None when the
    # same or not recorded
    workloads: tuple[str, str] | None = None

    @property
    def failed(self) -> bool:
        return self.outcome in FAILING

    @property
    def slowdown_pct(self) -> float | None:
        """How much slower than the baseline, in percent (negative: faster); None without a ratio."""
        return None if self.ratio is None else 100.0 * (1.0 - self.ratio)


def check_pct(fail_if_slower_pct: float) -> float:
    """``fail_if_slower_pct`` if it is a percentage a slowdown can exceed (>= 0 and < 100), else ValueError."""
    value = finite(fail_if_slower_pct)
    if value is None or not 0.0 <= value < 100.0:
        raise ValueError(f"expected a percentage >= 0 and < 100, got {fail_if_slower_pct!r}")
    return value


def gate_one(ratio: ThroughputRatio | Mapping[str, Any], fail_if_slower_pct: float, *, label: str,
             baseline_label: str) -> GateResult:
    """The gate for one comparison's ``throughput_ratio`` (``compare.throughput_ratio()``'s record, or compare.json's
    entry, read as ``compare.ThroughputRatio``)."""
    pct = check_pct(fail_if_slower_pct)
    threshold = 1.0 - pct / 100.0
    read = ratio if isinstance(ratio, ThroughputRatio) else ThroughputRatio.from_json(ratio)
    r, low, high = read.ratio, read.low, read.high
    outcome: Outcome
    reason = None
    if r is None or low is None or high is None:
        outcome = "undecided"
        reason = read.reason or "no throughput ratio with an interval"
    elif low <= 1.0 <= high:
        outcome = "within-noise"
    elif low > 1.0:
        outcome = "faster"
    elif r < threshold:
        outcome = "slower"
    else:
        outcome = "slower-within-threshold"
    return GateResult(label=label, baseline_label=baseline_label, outcome=outcome, fail_if_slower_pct=pct,
                      threshold_ratio=threshold, ratio=r, low=low, high=high, reason=reason)


def regression_gate(compare: Comparison | Mapping[str, Any], fail_if_slower_pct: float) -> list[GateResult]:
    """One ``GateResult`` per run compared with the baseline in ``compare`` (compare.json's content, read once:
    ``compare.Comparison``)."""
    c = as_comparison(compare)
    base = (c.runs[0].label or "baseline") if c.runs else "baseline"
    out = []
    for r in c.comparisons:
        run = c.runs[r.run] if r.run is not None and r.run < len(c.runs) else None
        result = gate_one(r.throughput_ratio, fail_if_slower_pct, baseline_label=base,
                          label=(run.label if run is not None else None) or f"run {r.run}")
        theirs, ours = (c.runs[0].workload if c.runs else None), (run.workload if run is not None else None)
        if theirs is not None and ours is not None and theirs != ours:
            result = dataclasses.replace(result, workloads=(theirs, ours))
        out.append(result)
    return out


def gate_exit_status(results: Sequence[GateResult]) -> int:
    """1 when a run failed the gate; else 2 when one could not be judged (too short to tell noise); else 0."""
    if any(r.failed for r in results):
        return 1
    if any(r.outcome == "undecided" for r in results):
        return 2
    return 0
