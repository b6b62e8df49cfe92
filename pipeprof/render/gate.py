"""The words and the JSON of the regression gate (``pipeprof.analysis.gate``): why each run passed or failed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeprof.analysis.gate import GateResult

VERDICT = {"slower": "FAIL", "undecided": "UNDECIDED"}


def gate_line(r: GateResult) -> str:
    """One line: the outcome, the measured ratio with its interval, the rule that decided it, and whether the two
    runs trained different workloads."""
    line = _decided(r)
    if r.workloads is not None:
        line += (f"; note: {r.label} runs {r.workloads[1]} and {r.baseline_label} runs {r.workloads[0]}: two "
                 "different workloads, compared all the same")
    return line


def _decided(r: GateResult) -> str:
    head = f"gate: {VERDICT.get(r.outcome, 'PASS')} {r.label} vs {r.baseline_label}"
    if r.outcome == "undecided":
        ratio = "" if r.ratio is None else f" (throughput ratio {r.ratio:.3f}, no interval)"
        return (f"{head}: cannot tell a slowdown from noise{ratio}: {r.reason}; "
                "profile more steps so each run has throughput windows")
    assert r.ratio is not None and r.low is not None and r.high is not None and r.slowdown_pct is not None
    measured = f"throughput {r.ratio:.3f}x the baseline's (95% interval {r.low:.3f}-{r.high:.3f})"
    limit = f"--fail-if-slower {r.fail_if_slower_pct:g}%"
    why = {
        "slower": f"{r.slowdown_pct:.1f}% slower, more than {limit}, and beyond the runs' joint noise "
                  "(the whole interval is below 1)",
        "slower-within-threshold": f"{r.slowdown_pct:.1f}% slower, beyond the noise but within {limit}",
        "within-noise": "within the runs' joint noise (the interval contains 1)",
        "faster": f"{-r.slowdown_pct:.1f}% faster, beyond the noise",
    }[r.outcome]
    return f"{head}: {measured}: {why}"


def gate_json(results: Sequence[GateResult], status: int) -> dict[str, Any]:
    """The gate's result for CI logs: ``exit_status`` (``analysis.gate.gate_exit_status``), ``passed`` and one
    entry per run."""
    return {
        "kind": "gate",
        "exit_status": status,
        "passed": status == 0,
        "runs": [{"run": r.label, "baseline": r.baseline_label, "outcome": r.outcome, "failed": r.failed,
                  "fail_if_slower_pct": r.fail_if_slower_pct, "threshold_ratio": r.threshold_ratio,
                  "throughput_ratio": r.ratio, "low": r.low, "high": r.high, "slowdown_pct": r.slowdown_pct,
                  "reason": r.reason, "why": gate_line(r),
                  "different_workloads": None if r.workloads is None else
                  {"baseline": r.workloads[0], "run": r.workloads[1]}} for r in results],
    }
