"""A change point in a long job's windows: where its step time moved, and by how much (pure).

The test, stated: over the windows' median step times ``x[0..n)``, every split
``k`` (each side at least ``MIN_SIDE`` windows) is scored by the difference of
the two sides' means; the best split is a change point when that difference
exceeds ``THRESHOLD_SIGMAS`` standard errors of it, the noise estimated from
the windows themselves: the pooled within-side standard deviation (so a
step that moves the level does not inflate its own noise), with a floor of
``MIN_RELATIVE_CHANGE`` of the earlier level (a 1% drift over a week is not
news). One change point, the strongest: a job whose step time moved twice
shows the larger move (the timeline shows both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_SIDE = 3  # windows on each side of a split
THRESHOLD_SIGMAS = 4.0  # the difference of means, in standard errors, from which it is a change
MIN_RELATIVE_CHANGE = 0.05  # and at least this share of the level before it


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first window after the change
    before_s: float  # mean of the windows' step times before it
    after_s: float
    sigmas: float  # the difference in standard errors

    @property
    def ratio(self) -> float:
        return self.after_s / self.before_s if self.before_s else math.nan

    def to_json(self) -> dict[str, float | int]:
        return {"index": self.index, "before_s": self.before_s, "after_s": self.after_s, "sigmas": self.sigmas,
                "ratio": self.ratio}


def change_point(values: Sequence[float]) -> ChangePoint | None:
    """The strongest change of level in ``values`` that passes the test (module docstring), or None."""
    x = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(x)
    if n < 2 * MIN_SIDE:
        return None
    prefix = [0.0]
    prefix_sq = [0.0]
    for v in x:
        prefix.append(prefix[-1] + v)
        prefix_sq.append(prefix_sq[-1] + v * v)
    best: ChangePoint | None = None
    for k in range(MIN_SIDE, n - MIN_SIDE + 1):
        n1, n2 = k, n - k
        m1, m2 = prefix[k] / n1, (prefix[n] - prefix[k]) / n2
        ss = (prefix_sq[k] - n1 * m1 * m1) + (prefix_sq[n] - prefix_sq[k] - n2 * m2 * m2)
        sd = math.sqrt(max(ss, 0.0) / (n - 2))
        se = sd * math.sqrt(1 / n1 + 1 / n2)
        diff = abs(m2 - m1)
        if diff < MIN_RELATIVE_CHANGE * abs(m1):
            continue
        sigmas = diff / se if se > 0 else math.inf
        if sigmas >= THRESHOLD_SIGMAS and (best is None or sigmas > best.sigmas):
            best = ChangePoint(k, m1, m2, sigmas)
    return best
