"""The report's "Inside the sample" chart: one loader's transforms and decode calls as ranked horizontal bars
(µs per sample, wall), each with its on-CPU time marked. Formats a ``transform_view.LoaderView``; computes nothing.
"""

from __future__ import annotations

import numpy as np
from matplotlib.artist import Artist
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from pipeprof.render import plots
from pipeprof.render.transform_view import LoaderView

DECODE_COLOR = "#8c564b"
FIXED_COLOR = "#9467bd"  # a deterministic transform
RANDOM_COLOR = "#ff7f0e"
UNKNOWN_COLOR = "#9e9e9e"  # randomness not known
CPU_MARK = "#111111"


def bars_svg(view: LoaderView, prefix: str) -> str | None:
    """The view's parts as ranked horizontal bars (µs per sample, wall), the CPU time marked on each; None
    without parts."""
    parts = view.parts
    if not parts:
        return None
    y = np.arange(len(parts))
    wall = np.array([p.per_sample_s for p in parts]) * 1e6
    colors = [DECODE_COLOR if p.decode else {True: RANDOM_COLOR, False: FIXED_COLOR, None: UNKNOWN_COLOR}[p.random]
              for p in parts]
    with plots.style():
        fig, ax = plots.new_figure(height_in=min(7.0, 1.0 + 0.32 * len(parts)))
        fig.subplots_adjust(left=0.36)  # room for the transforms' names
        ax.set_axisbelow(True)
        ax.barh(y, wall, height=0.6, color=colors)
        cpu = [(i, p.cpu_per_sample_s * 1e6) for i, p in enumerate(parts) if p.cpu_per_sample_s is not None]
        if cpu:
            ax.plot([c for _, c in cpu], [i for i, _ in cpu], linestyle="none", marker="|", markersize=12,
                    markeredgewidth=2, color=CPU_MARK)
        ax.set_yticks(y, labels=[_short(p.name) for p in parts])
        ax.set_ylim(len(parts) - 0.5, -0.5)
        ax.grid(axis="y", visible=False)
        ax.set_xlabel("µs per sample (wall; the mark: on-CPU)")
        used = set(colors)
        kinds = ((FIXED_COLOR, "deterministic"), (RANDOM_COLOR, "random"), (UNKNOWN_COLOR, "random: unknown"),
                 (DECODE_COLOR, "decode"))
        handles: list[Artist] = [Patch(color=c, label=label) for c, label in kinds if c in used]
        if cpu:
            handles.append(Line2D([], [], linestyle="none", marker="|", markersize=10, markeredgewidth=2,
                                  color=CPU_MARK, label="on-CPU"))
        ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(handles), fontsize=8,
                  borderaxespad=0.2, handlelength=1.5, columnspacing=1.2)
        return plots.svg_element(fig, prefix)


def _short(name: str, width: int = 40) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"
