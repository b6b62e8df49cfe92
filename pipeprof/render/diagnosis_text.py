"""The differential analysis in words (``analysis.differential``): why a stall fraction is null or was clamped,
why a cross-check could not be made, and its notes. ``diagnosis_words`` writes them into the analysis where
``pipeline.diagnose`` makes diagnosis.json, which the terminal table and diagnosis.html read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pipeprof import format as fmt
from pipeprof.analysis.reasons import WRITTEN, Reason


class _Worded(Protocol):
    """A record of the differential analysis (``Differential``, ``Stalls``, ``CrossChecks``): JSON with its
    reasons in the words given."""

    def to_json(self, words: Callable[[Reason], str]) -> dict[str, Any]: ...


def diagnosis_words(analysis: _Worded) -> dict[str, Any]:
    """The differential analysis (or a part of it) as diagnosis.json holds it: each ``Reason`` in words."""
    return analysis.to_json(reason_words)


def reason_words(r: Reason) -> str:
    """One reason of the differential analysis in words."""
    return _WORDS[r.kind](r)


def _missing_run(r: Reason) -> str:
    return f"{r['run']} run ({reason_words(r.parts[0])})"


def _out_of_order(how: str) -> Callable[[Reason], str]:
    def said(r: Reason) -> str:
        other = "the compute ceiling" if r["other"] == "compute" else f"the {r['other']} run"
        return (f"the {r['run']} run ({fmt.rate(r['samples_per_s'])}) was {how} than {other} "
                f"({fmt.rate(r['other_samples_per_s'])})")
    return said


def _clamped(r: Reason) -> str:
    return (f"{fmt.pct(r['unclamped'], 1)} clamped to {fmt.pct(r['clamped'], 1)}: "
            f"{'; '.join(reason_words(p) for p in r.parts)} — the model needs "
            "t_compute <= t_prep <= t_real, so this is run-to-run noise or interference")


_WORDS: dict[str, Callable[[Reason], str]] = {
    WRITTEN: lambda r: str(r["text"]),
    "no_throughput": lambda r: "no throughput was measured",
    "no_samples_per_s": lambda r: "its summary has no samples/s (no counted steps)",
    "missing_run": _missing_run,
    "needs_runs": lambda r: "needs the " + " and ".join(reason_words(p) for p in r.parts),
    "run_faster": _out_of_order("faster"),
    "run_slower": _out_of_order("slower"),
    "clamped": _clamped,
    "real_missing": lambda r: ("the real run is missing ("
                               + (reason_words(r.parts[0]) if r.parts else "no summary") + ")"),
    "no_data_wait": lambda r: "the real run has no data-wait fraction (no counted steps)",
    "stall_unknown": lambda r: "the differential stall is not known (see null_reasons)",
    "no_loading_records": lambda r: ("the real run has no loading records (data on the device, or "
                                     "profile.loading = false)"),
    "no_loading_time": lambda r: "the real run measured no loading time",
    "split_unknown": lambda r: "the differential fetch/prep split is not known (see null_reasons)",
    "stall_too_small": lambda r: (f"the differential stall ({fmt.pct(r['stall'], 1)}) is under "
                                  f"{fmt.pct(r['min_stall'], 1)}: too little to split between fetch and prep"),
    "number_missing": lambda r: "a number is missing",
    "decode_is_fetch_here": lambda r: (
        "decoding is prep in the direct attribution (prep_s) but fetch in the differential one "
        "(the prep run holds decoded samples), so the differential fetch share is larger by the decode cost"),
    "workers_overlap": lambda r: (f"with {r['num_workers']} workers loading overlaps compute: the direct split is of "
                                  "loading work, the differential one of the stall the workers did not hide"),
    "workers_share_the_cpu": lambda r: (
        "workers share the CPU with the training step; a step slowed by them counts as compute in the "
        "direct attribution and as stall in the differential one"),
}
