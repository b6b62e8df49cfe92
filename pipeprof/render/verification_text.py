"""A ``--verify`` check in words: the sentence summary.json keeps as ``verification.verdict_words``, and the
terminal's and the report's line. The numbers are the typed record's (``analysis.verification``)."""

from __future__ import annotations

import math
import sys

from pipeprof import format as fmt
from pipeprof.analysis.verification import Verification


def verification_words(v: Verification) -> str:
    """The check in one sentence: what was predicted and measured, the runs, the noise, the interval."""
    if not v.measured:
        reason = v.text("reason")
        if v.status == "not applicable":
            return f"nothing to verify: {reason}"
        return f"re-run {v.status}" + (f": {reason}" if reason else "")
    predicted = v.number("predicted_speedup")
    parts = []
    if predicted is not None and v.measured_speedup is not None:
        parts.append(f"predicted ×{predicted:.2f}, measured ×{v.measured_speedup:.2f}")
    runs, base_runs = v.runs("measured_runs_samples_per_s"), v.runs("base_runs_samples_per_s")
    if base_runs:
        parts.append(f"medians of {len(base_runs)} runs as run ({fmt.significant(min(base_runs))}–"
                     f"{fmt.significant(max(base_runs))} samples/s) and {len(runs)} with the change"
                     + (f" ({fmt.significant(min(runs))}–{fmt.significant(max(runs))})" if runs else "")
                     + ", interleaved")
    if v.base_disturbed:
        parts.append("the runs as run spread by more than the machine's noise: the base was disturbed, so this "
                     "speed-up is not to be trusted")
    if v.prediction_error is not None:
        parts.append(_error_words(v))
    bounds = v.interval.samples_per_s if v.interval is not None else None
    if v.within_interval is not None and bounds:
        where = "inside" if v.within_interval else "outside"
        parts.append(f"measured {where} the predicted interval {fmt.significant(bounds[0])}–"
                     f"{fmt.significant(bounds[1])} samples/s")
    if v.interval is not None and v.interval.may_not_help:
        parts.append("the change was presented as one that may not help (its interval reaches ×1.0), "
                     "not as a gain")
    return "; ".join(parts) or "measured, but nothing to compare with"


def _error_words(v: Verification) -> str:
    error, noise = v.prediction_error or 0.0, v.rerun_noise
    how = "too high" if error > 0 else "too low"
    where = "within" if abs(math.log1p(error)) <= noise.band else "beyond"
    source = (f"these runs' own spread, sd {100 * noise.measured_cv:.0f}% on {noise.df} df with the "
              f"prior's {100 * noise.prior_cv:.0f}%" if noise.measured_cv is not None else
              f"the prior sd {100 * noise.prior_cv:.0f}%: no side ran twice")
    return (f"the prediction was {100 * abs(error):.0f}% {how} ({where} the ±{100 * noise.band:.0f}% "
            f"a re-run moves, from {source})")


def print_verification(v: Verification | None) -> None:
    """One line on stderr: what was verified and how the prediction fared; the re-run's folder on another."""
    if v is None:
        return
    print(f"verify: {v.text('set') or 'nothing'}: {verification_words(v)}", file=sys.stderr)
    folder = v.text("folder")
    if folder:
        print(f"verify run: {folder}", file=sys.stderr)
