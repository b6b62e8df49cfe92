"""A recommendation's predicted speed-up with its interval, as the terminal and the report write it.

``×1.80 (1.50–2.10)`` for a certain gain; ``×1.05 (may not help: ×0.97–1.12)`` where the interval reaches
x1.0 (summary.json's ``interval.may_not_help``, ``pipeprof.analysis.intervals``); ``×1.80`` alone for a
summary without bounds (from before intervals, or null bounds).
"""

from __future__ import annotations

from typing import Any

from pipeprof import format as fmt
from pipeprof.numbers import finite
from pipeprof.run_folder import as_dict

MAY_NOT_HELP = "may not help"


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
    if speedup is None:
        return missing
    text = f"×{fmt.number(speedup, 2)}"
    pair = bounds(rec)
    if pair is None:
        return text
    span = f"{fmt.number(pair[0], 2)}–{fmt.number(pair[1], 2)}"
    return f"{text} ({MAY_NOT_HELP}: ×{span})" if may_not_help(rec) else f"{text} ({span})"
