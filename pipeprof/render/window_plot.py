"""The whole job's windows as one chart: a light run's step times, an attach's sampled data-wait share.

Only draws: the points come from summary.json (``light.timeline`` /
``sampled.timeline``), the change point from ``analysis.change_point``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib import rc_context

from pipeprof.analysis.sections import LightWindow, SampledWindow
from pipeprof.render import plots


def _hours(t_s: np.ndarray) -> tuple[np.ndarray, str]:
    span = float(t_s.max() - t_s.min()) if len(t_s) else 0.0
    for unit, scale in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if span >= 2 * scale:
            return t_s / scale, unit
    return t_s, "s"


def window_timeline_svg(windows: Sequence[LightWindow] | Sequence[SampledWindow], series: Sequence[tuple[str, str, str]],
                        ylabel: str, scale: float = 1.0, change_t_s: float | None = None) -> str | None:
    """``series``: (the window's field, label, colour), drawn against the window's middle; ``scale`` multiplies the
    values (1e3: seconds as ms); a dashed line at ``change_t_s``, the change point's time."""
    mids = [(float(w.t_start_s) + float(w.t_end_s)) / 2 for w in windows
            if w.t_start_s is not None and w.t_end_s is not None]
    if len(mids) != len(windows) or not windows:
        return None
    x, unit = _hours(np.array(mids))
    drawn = False
    with rc_context(plots._RC):
        fig, ax = plots._figure()
        for key, label, color in series:
            values = [getattr(w, key) for w in windows]
            y = np.array([np.nan if v is None else float(v) * scale for v in values])
            if np.isfinite(y).any():
                ax.plot(x, y, color=color, label=label, linewidth=1.2, marker="." if len(x) <= 60 else None)
                drawn = True
        if not drawn:
            return None
        if change_t_s is not None:
            at = _hours(np.array([change_t_s, *mids]))[0][0]
            ax.axvline(at, color="#444444", linestyle="--", linewidth=1, label="change point")
        ax.set_xlabel(f"time since start ({unit})")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        plots._legend(ax)
        return plots._svg(fig, "windows")
