"""Reading numbers out of summaries: a finite float or None (null, NaN, infinities, junk)."""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> float | None:
    """``value`` as a finite float, or None when it is missing or not a number (a bool is not a number here).

    The one finite-number check: analysis, renderers and ``pipeprof.format`` all read values through it."""
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def scaled(value: Any, factor: float) -> float | None:
    """``value * factor`` when ``value`` is a finite number, else None."""
    v = finite(value)
    return None if v is None else v * factor
