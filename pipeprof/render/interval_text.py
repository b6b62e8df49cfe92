"""A recommendation's predicted speed-up with its interval, as the terminal and the report write it.

``×1.80 (1.50–2.10), measured`` for a certain gain, its tier after it (``measured`` or ``estimated``, summary.json's
``tier``); ``×1.05 (may not help: ×0.97–1.12), estimated`` where the interval reaches x1.0 (``interval.may_not_help``,
``pipeprof.analysis.intervals``); ``×1.80`` alone for a summary without bounds or tier (from before them);
``not predicted: try --verify or tune`` for a change nothing measured carries.
"""

from __future__ import annotations

from typing import Any

from pipeprof import format as fmt
from pipeprof.numbers import finite
from pipeprof.run_folder import as_dict

MAY_NOT_HELP = "may not help"
NOT_PREDICTED = "not predicted: try --verify or tune"


def bounds(rec: dict[str, Any]) -> tuple[float, float] | None:
    """The speed-up interval of a summary.json recommendation, or None."""
    pair = as_dict(rec.get("interval")).get("speedup")
    if not isinstance(pair, list) or len(pair) != 2:
        return None
    low, high = finite(pair[0]), finite(pair[1])
    return (low, high) if low is not None and high is not None else None


def may_not_help(rec: dict[str, Any]) -> bool:
    """Whether a recommendation's interval says it may not be a gain."""
    return bool(as_dict(rec.get("interval")).get("may_not_help"))


def speedup_text(rec: dict[str, Any], *, missing: str = fmt.NOT_MEASURED) -> str:
    """``×1.80 (1.50–2.10)``, ``×1.05 (may not help: ×0.97–1.12)``, ``×1.80``; ``missing`` when not predicted."""
    speedup = finite(rec.get("predicted_speedup"))
    tier = rec.get("tier")
    if speedup is None:
        return NOT_PREDICTED if tier == "not_predicted" else missing
    text = f"×{fmt.number(speedup, 2)}"
    pair = bounds(rec)
    if pair is not None:
        span = f"{fmt.number(pair[0], 2)}–{fmt.number(pair[1], 2)}"
        text = f"{text} ({MAY_NOT_HELP}: ×{span})" if may_not_help(rec) else f"{text} ({span})"
    change = rec.get("change") or rec.get("code_change")  # the honest negative: no tier to say
    return f"{text}, {tier}" if tier in ("measured", "estimated") and change else text
