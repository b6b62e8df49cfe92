"""Plots for the HTML report: DataFrames in, inline SVG strings out.

Each function takes a run's tables (already cut by the analysis module where
statistics are involved) and returns an ``<svg>`` element as a string, or
``None`` when there is nothing to draw, so the report can say "not measured"
instead of showing an empty chart. Long runs are drawn from consecutive bins
of at most ``MAX_POINTS`` points so an SVG stays small.

Uses matplotlib's object-oriented ``Figure`` API: no pyplot, no global
backend state, nothing interactive. Plot text is fixed by this module (never
user input), and matplotlib escapes it for XML anyway.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import PathPatch
from matplotlib.path import Path

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

# One color per phase, used by every plot and by the HTML fractions bar.
PHASE_COLORS = {
    "data_wait": "#d62728",
    "h2d": "#ff7f0e",
    "collective_wait": "#8c564b",
    "compute": "#1f77b4",
    "other": "#9e9e9e",
}
PHASE_LABELS = {
    "data_wait": "data wait",
    "h2d": "host → device",
    "collective_wait": "collective wait",
    "compute": "compute",
    "other": "other",
}
# One color per part of making a batch (loading timeline and split).
LOADING_COLORS = {
    "fetch": "#8c564b",
    "core_wait": "#e377c2",
    "prep": "#9467bd",
    "collate": "#17becf",
}
LOADING_LABELS = {
    "fetch": "fetch (off CPU: storage, sleep)",
    "core_wait": "waiting for a core",
    "prep": "prep (on CPU: decode, transform)",
    "collate": "collate",
}
UNKNOWN_IN_FETCH = "core_wait"  # unknown (no schedstat, older runs): not drawn, fetch holds it

SPAN_COLOR = "#d4d4d4"
MAIN_COLOR = "#1f77b4"
WORKERS_COLOR = "#2ca02c"
MACHINE_COLOR = "#555555"
WARMUP_COLOR = "#e8e8e8"
EXCLUDED_COLOR = "#fbe7b5"  # time inside the counted window that no counted step holds (evaluation passes)

# Spans of time not counted: (start_s, end_s, name), e.g. (12.0, 12.4, "evaluation (not counted)").
Spans = Sequence[tuple[float, float, str]]
# Not-counted spans of one name closer than this share of the time axis are drawn as one band.
MERGE_FRACTION = 0.002


# About this many bars/points per series at most; longer series are binned.
MAX_POINTS = 600
# Batches drawn on the loading timeline at most, all workers together.
MAX_BATCH_BARS = 400

_MIB = 1024.0**2
_FIG_SIZE = (9.0, 2.8)  # inches; the page scales the SVG to its width
_RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",  # text stays text: smaller files, system fonts
    "svg.hashsalt": "pipeprof",  # deterministic ids, so the same run renders the same bytes
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "legend.frameon": False,
}


def loading_parts(frame: pd.DataFrame, suffix: str) -> dict[str, str]:
    """The parts of making a batch to draw and their colors: waiting for a core only where it was measured."""
    column = f"{UNKNOWN_IN_FETCH}{suffix}"
    known = column in frame and pd.to_numeric(frame[column], errors="coerce").notna().any()
    return {p: c for p, c in LOADING_COLORS.items() if p != UNKNOWN_IN_FETCH or known}


def step_breakdown_svg(breakdown: pd.DataFrame, phases: Sequence[str] | None = None) -> str | None:
    """Stacked per-step time (ms) of data wait, h2d, collective wait, compute and other over step index.

    ``breakdown`` is ``analysis.summary.step_breakdown(steps)``: counted steps
    with ``other_s``. ``phases`` are the keys of ``PHASE_COLORS`` to draw (all when None; the report leaves
    collective wait out of a run that had none). Runs longer than ``MAX_POINTS`` steps are drawn as the
    mean per step over bins of consecutive steps.
    """
    shown = [p for p in PHASE_COLORS if phases is None or p in phases]
    columns = [f"{p}_s" for p in shown]
    if breakdown is None or breakdown.empty or any(c not in breakdown for c in ["step", *columns]):
        return None
    df = breakdown[["step", *columns]].apply(pd.to_numeric, errors="coerce").dropna()
    if df.empty:
        return None
    df, per_bin = _binned(df)
    x = df["step"].to_numpy(dtype=float)
    ys = [df[c].to_numpy(dtype=float) * 1e3 for c in columns]
    with rc_context(_RC):
        fig, ax = _figure()
        labels = [PHASE_LABELS[p] for p in shown]
        colors = [PHASE_COLORS[p] for p in shown]
        if len(x) == 1:
            bottom: float | np.ndarray = 0.0
            for y, label, color in zip(ys, labels, colors):
                ax.bar(x, y, bottom=bottom, width=0.8, color=color, label=label)
                bottom = bottom + y
        else:
            # Few steps read best as levels, one per step; many as a line (half the SVG).
            step = "mid" if len(x) <= 200 else None
            ax.stackplot(x, ys, labels=labels, colors=colors, step=step, linewidth=0)
            ax.set_xlim(x[0], x[-1])
        ax.set_xlabel("step (counted steps only)")
        unit = "ms per step" if per_bin == 1 else f"ms per step (mean of {per_bin}-step bins)"
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        _legend(ax)
        return _svg(fig, "steps")


def cpu_svg(samples: pd.DataFrame, window: tuple[float, float] | None = None,
            excluded: Spans = ()) -> str | None:
    """CPU over time: machine (% of all cores) and training process vs workers (% of one core).

    ``window`` is the counted-steps window ``(start_s, end_s)``; time outside
    it (warm-up, shutdown) is shaded.
    """
    df = _sample_columns(samples, ["cpu_util_pct", "main_cpu_pct", "workers_cpu_pct"])
    if df is None:
        return None
    return _time_panels(df, window, excluded, "cpu",
                        ([("cpu_util_pct", "machine", MACHINE_COLOR)], "% of all cores", 105),
                        ([("main_cpu_pct", "training process", MAIN_COLOR),
                          ("workers_cpu_pct", "DataLoader workers (sum)", WORKERS_COLOR)], "% of one core", None))


def memory_svg(samples: pd.DataFrame, window: tuple[float, float] | None = None,
               excluded: Spans = ()) -> str | None:
    """Resident memory (MiB) over time of the training process and of the workers."""
    df = _sample_columns(samples, ["main_rss_bytes", "workers_rss_bytes"])
    if df is None:
        return None
    df[["main_rss_bytes", "workers_rss_bytes"]] = df[["main_rss_bytes", "workers_rss_bytes"]] / _MIB
    # RSS counts pages shared with the parent once per worker: an upper bound.
    return _time_panels(df, window, excluded, "memory", ([("main_rss_bytes", "training process", MAIN_COLOR),
                                                ("workers_rss_bytes", "DataLoader workers (RSS sum)", WORKERS_COLOR)],
                                               "RSS (MiB)", None))


def disk_svg(samples: pd.DataFrame, window: tuple[float, float] | None = None,
             excluded: Spans = ()) -> str | None:
    """Real disk reads of the process tree over time, MiB/s."""
    df = _sample_columns(samples, ["read_bytes_per_s"])
    if df is None:
        return None
    df["read_bytes_per_s"] = df["read_bytes_per_s"] / _MIB
    return _time_panels(df, window, excluded, "disk", ([("read_bytes_per_s", "disk reads", MAIN_COLOR)],
                                             "disk reads (MiB/s)", None), fill=True)


def gpu_svg(samples: pd.DataFrame, window: tuple[float, float] | None = None,
            excluded: Spans = ()) -> str | None:
    """GPU utilization (%) and memory used (MiB) over time; None without GPU columns."""
    df = _sample_columns(samples, ["gpu_util_pct", "gpu_mem_used_bytes"])
    if df is None:
        return None
    df["gpu_mem_used_bytes"] = df["gpu_mem_used_bytes"] / _MIB
    return _time_panels(df, window, excluded, "gpu",
                        ([("gpu_util_pct", "GPU utilization", MAIN_COLOR)], "utilization (%)", 105),
                        ([("gpu_mem_used_bytes", "GPU memory used", WORKERS_COLOR)], "memory (MiB)", None))


def loading_timeline_svg(loading: pd.DataFrame, window: tuple[float, float] | None = None,
                         excluded: Spans = ()) -> str | None:
    """One row per worker; each batch a bar from its first fetch to the end of its collate.

    ``loading`` is the run's loading table (every batch, warm-up included;
    ``window`` shades time outside the counted steps). A bar is split by the
    share of fetch, prep and collate in the batch — fetch and prep alternate
    sample by sample, so the split says how much, not when. Runs with more
    than ``MAX_BATCH_BARS`` batches draw bins of consecutive batches of a
    worker instead: a bar spans the bin, its height is the share of the bin
    the worker spent making batches, its colors split that time.
    """
    if loading is None or loading.empty:
        return None
    colors = loading_parts(loading, "_s")
    columns = ["worker", "t_start_s", "t_end_s", *(f"{p}_s" for p in colors)]
    if any(c not in loading for c in columns):
        return None
    df = loading[columns].apply(pd.to_numeric, errors="coerce").fillna({f"{UNKNOWN_IN_FETCH}_s": 0.0}).dropna()
    if df.empty:
        return None
    df = df.sort_values(["worker", "t_start_s"]).reset_index(drop=True)
    df["busy_s"] = df["t_end_s"] - df["t_start_s"]
    per_bin = max(1, math.ceil(len(df) / MAX_BATCH_BARS))
    if per_bin > 1:
        rank = df.groupby("worker").cumcount() // per_bin
        agg = {"t_start_s": "min", "t_end_s": "max", "busy_s": "sum", **{f"{p}_s": "sum" for p in colors}}
        df = df.groupby([df["worker"], rank]).agg(agg).reset_index(level=0).reset_index(drop=True)
    span = (df["t_end_s"] - df["t_start_s"]).to_numpy(dtype=float)
    parts = df[[f"{p}_s" for p in colors]].to_numpy(dtype=float)
    if per_bin > 1:
        # Fill the bin's span, split by share; busy share of the bin as height.
        total = parts.sum(axis=1, keepdims=True)
        parts = np.divide(parts * span[:, None], total, out=np.zeros_like(parts), where=total > 0)
        height = 0.8 * np.clip(np.divide(df["busy_s"].to_numpy(dtype=float), span, out=np.ones_like(span),
                                         where=span > 0), 0.0, 1.0)
    else:
        height = np.full(len(df), 0.8)
    workers = sorted(df["worker"].unique())
    row = df["worker"].map({w: i for i, w in enumerate(workers)}).to_numpy(dtype=float)
    with rc_context(_RC):
        fig, ax = _figure(height_in=min(7.0, 1.2 + 0.35 * len(workers)))
        ax.set_axisbelow(True)
        _shade(ax, pd.concat([df["t_start_s"], df["t_end_s"]]), window, excluded=excluded)
        left = df["t_start_s"].to_numpy(dtype=float)
        _rectangles(ax, left, span, row, np.full(len(df), 0.8), SPAN_COLOR,
                    "batch span" if per_bin == 1 else "bin span")
        for i, (part, color) in enumerate(colors.items()):
            _rectangles(ax, left, parts[:, i], row, height, color, LOADING_LABELS[part])
            left = left + parts[:, i]
        ax.set_yticks(range(len(workers)), labels=[worker_name(w) for w in workers])
        ax.set_ylim(len(workers) - 0.5, -0.5)  # first worker on top
        ax.grid(axis="y", visible=False)
        label = "time since run start (s)"
        if per_bin > 1:
            label += f"; bins of {per_bin} batches per worker, bar height = share of the bin spent making batches"
        ax.set_xlabel(label)
        _legend(ax)
        return _svg(fig, "loading-timeline")


def loading_split_svg(breakdown: pd.DataFrame) -> str | None:
    """Mean fetch, prep and collate time per sample (µs), stacked, one bar per worker.

    ``breakdown`` is ``analysis.loading.loading_breakdown(...)``.
    """
    if breakdown is None or breakdown.empty:
        return None
    colors = loading_parts(breakdown, "_per_sample_s")
    columns = [f"{p}_per_sample_s" for p in colors]
    if any(c not in breakdown for c in ["worker", *columns]):
        return None
    df = (breakdown[["worker", *columns]].apply(pd.to_numeric, errors="coerce")
          .fillna({f"{UNKNOWN_IN_FETCH}_per_sample_s": 0.0}).dropna())
    if df.empty:
        return None
    y = np.arange(len(df))
    with rc_context(_RC):
        fig, ax = _figure(height_in=min(7.0, 1.2 + 0.35 * len(df)))
        ax.set_axisbelow(True)
        left = np.zeros(len(df))
        for part, color in colors.items():
            width = df[f"{part}_per_sample_s"].to_numpy(dtype=float) * 1e6
            ax.barh(y, width, left=left, height=0.6, color=color, label=LOADING_LABELS[part])
            left = left + width
        ax.set_yticks(y, labels=[worker_name(w) for w in df["worker"]])
        ax.set_ylim(len(df) - 0.5, -0.5)
        ax.grid(axis="y", visible=False)
        ax.set_xlabel("µs per sample (mean over counted batches)")
        _legend(ax)
        return _svg(fig, "loading-split")


def prefetch_queue_svg(steps: pd.DataFrame, capacity_batches: float | None) -> str | None:
    """Batches ready in the prefetch queue when each counted step asked, with the capacity line.

    ``steps`` are the counted steps (``analysis.summary.counted_steps``) with
    ``ready_batches``; ``capacity_batches`` is ``num_workers * prefetch_factor``
    (from the summary's attribution). Runs longer than ``MAX_POINTS`` steps are
    drawn as the mean per bin of consecutive steps with the bin's min–max as a
    band. None when no step has a reading.
    """
    if steps is None or steps.empty or any(c not in steps for c in ("step", "ready_batches")):
        return None
    df = steps[["step", "ready_batches"]].apply(pd.to_numeric, errors="coerce").dropna()
    if df.empty:
        return None
    per_bin = max(1, math.ceil(len(df) / MAX_POINTS))
    with rc_context(_RC):
        fig, ax = _figure()
        if per_bin == 1:
            x, y = df["step"].to_numpy(dtype=float), df["ready_batches"].to_numpy(dtype=float)
            ax.fill_between(x, y, step="mid", color=WORKERS_COLOR, alpha=0.25, linewidth=0)
            ax.step(x, y, where="mid", color=WORKERS_COLOR, linewidth=1.2, label="batches ready")
        else:
            g = df.groupby(np.arange(len(df)) // per_bin)
            x = g["step"].mean().to_numpy(dtype=float)
            ax.fill_between(x, g["ready_batches"].min().to_numpy(dtype=float),
                            g["ready_batches"].max().to_numpy(dtype=float), color=WORKERS_COLOR, alpha=0.2,
                            linewidth=0, label="min–max in bin")
            ax.plot(x, g["ready_batches"].mean().to_numpy(dtype=float), color=WORKERS_COLOR, linewidth=1.2,
                    label=f"batches ready (mean of {per_bin}-step bins)")
        if len(x) > 1:
            ax.set_xlim(x[0], x[-1])
        top = float(df["ready_batches"].max())
        if capacity_batches:
            ax.axhline(capacity_batches, color=MACHINE_COLOR, linestyle="--", linewidth=1.0,
                       label=f"capacity: {capacity_batches:g} (num_workers × prefetch_factor)")
            top = max(top, float(capacity_batches))
        ax.set_ylim(0, top * 1.1 + 0.5)
        ax.set_xlabel("step (counted steps only)")
        ax.set_ylabel("batches ready")
        _legend(ax)
        return _svg(fig, "prefetch")


# The rank x step heatmaps: the two waits drawn, and the colormap both share (one scale, in ms).
RANK_WAITS = (("data_wait_s", "data wait"), ("collective_wait_s", "collective wait"))
RANK_CMAP = "YlOrRd"


def rank_heatmap_svg(ranks: Sequence[tuple[str, pd.DataFrame]]) -> str | None:
    """Data wait and collective wait per step (ms), one row per rank and one column per step, as two heatmaps.

    ``ranks`` is ``[(row label, counted steps), ...]`` in rank order (``analysis.steps.counted_steps`` of each
    rank's run); columns are the step numbers, so the ranks' steps line up as DDP keeps them in lock-step. Both
    panels share one color scale, so a wait for data on one rank and the wait in collectives it causes on the
    others read alike. More than ``MAX_POINTS`` steps are drawn as means over bins of consecutive steps. None
    when no rank has a counted step.
    """
    columns = [c for c, _ in RANK_WAITS]
    tables = []
    for label, steps in ranks:
        if steps is None or steps.empty or any(c not in steps for c in ["step", *columns]):
            continue
        df = steps[["step", *columns]].apply(pd.to_numeric, errors="coerce").dropna(subset=["step"])
        if not df.empty:
            tables.append((label, df.groupby("step")[columns].mean()))
    if not tables:
        return None
    step_index = sorted(set().union(*(set(t.index) for _, t in tables)))
    per_bin = max(1, math.ceil(len(step_index) / MAX_POINTS))
    bins = np.arange(len(step_index)) // per_bin
    grids = {}
    for column in columns:
        rows = [t[column].reindex(step_index).to_numpy(dtype=float) * 1e3 for _, t in tables]
        grid = np.vstack(rows)
        if per_bin > 1:  # mean per bin, ignoring steps a rank did not record (NaN where it recorded none)
            grid = pd.DataFrame(grid.T).groupby(bins).mean().to_numpy(dtype=float).T
        grids[column] = grid
    finite_values = np.concatenate([g[np.isfinite(g)] for g in grids.values()])
    vmax = float(finite_values.max()) if finite_values.size and finite_values.max() > 0 else 1.0
    first, last = float(step_index[0]), float(step_index[-1])
    n = len(tables)
    with rc_context(_RC):
        fig, axes = _figure(rows=2, height_in=min(9.0, 1.5 + 2 * (0.35 + 0.22 * n)))
        width_in = _FIG_SIZE[0]  # room for "rank 12 (node-name)" on the left and the color scale on the right
        fig.subplots_adjust(left=1.4 / width_in, right=1 - 1.0 / width_in)
        image = None
        for ax, (column, title) in zip(axes, RANK_WAITS, strict=True):
            image = ax.imshow(np.ma.masked_invalid(grids[column]), aspect="auto", interpolation="nearest",
                              cmap=RANK_CMAP, vmin=0.0, vmax=vmax, extent=(first - 0.5, last + 0.5, n - 0.5, -0.5))
            ax.set_title(f"{title} per step (ms)", loc="left", fontsize=9)
            ax.grid(visible=False)
            ticks = np.arange(n) if n <= 16 else np.linspace(0, n - 1, 9).round().astype(int)
            ax.set_yticks(ticks, labels=[tables[i][0] for i in ticks])
        axes[-1].set_xlabel("step (counted steps only)" if per_bin == 1
                            else f"step (counted steps only; mean of {per_bin}-step bins)")
        if image is not None:
            top, bottom = axes[0].get_position(), axes[-1].get_position()
            cax = fig.add_axes((top.x1 + 0.015, bottom.y0, 0.012, top.y1 - bottom.y0))
            fig.colorbar(image, cax=cax).set_label("ms per step (both panels)")
        return _svg(fig, "ranks")


def worker_name(worker: float) -> str:
    """Row label of a loading table's worker id: "main" is the training process (-1)."""
    return "main" if int(worker) < 0 else f"worker {int(worker)}"


Panel = tuple[list[tuple[str, str, str]], str, float | None]  # lines (column, label, color), y label, y max


def _time_panels(df: pd.DataFrame, window: tuple[float, float] | None, excluded: Spans, name: str, *panels: Panel,
                 fill: bool = False) -> str:
    """One or more time plots sharing the x axis (binned to MAX_POINTS), warm-up shaded on each."""
    df, per_bin = _binned(df)
    with rc_context(_RC):
        fig, axes = _figure(rows=len(panels))
        axes = list(axes) if len(panels) > 1 else [axes]
        for i, (ax, (lines, ylabel, ymax)) in enumerate(zip(axes, panels)):
            _shade(ax, df["t_s"], window, label=i == 0, excluded=excluded)
            for column, label, color in lines:
                _line(ax, df, column, label, color, fill=fill)
            ax.set_ylabel(ylabel)
            ax.set_ylim(0, ymax)
            _legend(ax)
        _time_axis(axes[-1], per_bin)
        return _svg(fig, name)


# -- helpers -----------------------------------------------------------------


def _sample_columns(samples: pd.DataFrame | None, columns: Sequence[str]) -> pd.DataFrame | None:
    """``t_s`` and the wanted columns as numbers, or None when none of them has data."""
    if samples is None or samples.empty or "t_s" not in samples:
        return None
    present = [c for c in columns if c in samples]
    if not present:
        return None
    df = samples[["t_s", *present]].apply(pd.to_numeric, errors="coerce")
    df = df.dropna(subset=["t_s"])
    if df[present].notna().sum().sum() == 0:
        return None
    for c in columns:
        if c not in df:
            df[c] = np.nan
    return df.sort_values("t_s").reset_index(drop=True)


def _binned(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Means over bins of consecutive rows so at most ``MAX_POINTS`` remain; and the bin size."""
    per_bin = max(1, math.ceil(len(df) / MAX_POINTS))
    if per_bin == 1:
        return df.reset_index(drop=True), 1
    bins = np.arange(len(df)) // per_bin
    return df.groupby(bins).mean().reset_index(drop=True), per_bin


def _figure(rows: int = 1, height_in: float | None = None):
    # Fixed margins rather than an automatic layout: every plot's axes then
    # start and end at the same x, so time axes line up down the page.
    width_in = _FIG_SIZE[0]
    if height_in is None:
        height_in = _FIG_SIZE[1] * (1 if rows == 1 else 1.5)
    fig = Figure(figsize=(width_in, height_in))
    fig.subplots_adjust(left=0.8 / width_in, right=1 - 0.15 / width_in,
                        bottom=0.5 / height_in, top=1 - 0.3 / height_in, hspace=0.45)
    axes = fig.subplots(rows, 1, sharex=True) if rows > 1 else fig.subplots()
    return fig, axes


def _rectangles(ax: Axes, left: np.ndarray, width: np.ndarray, y: np.ndarray, height: np.ndarray, color: str,
                label: str) -> None:
    """Many filled rectangles (centered on ``y``) as one compound path: one SVG element, not one per bar."""
    keep = width > 0
    x0, y_mid, h = left[keep], y[keep], height[keep]
    x1, y0, y1 = x0 + width[keep], y_mid - h / 2, y_mid + h / 2
    if not len(x0):
        return
    corners = np.stack([np.c_[x0, y0], np.c_[x1, y0], np.c_[x1, y1], np.c_[x0, y1], np.c_[x0, y0]], axis=1)
    codes = np.tile([Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY], len(x0))
    ax.add_patch(PathPatch(Path(corners.reshape(-1, 2), codes), facecolor=color, linewidth=0, label=label))


def _line(ax: Axes, df: pd.DataFrame, column: str, label: str, color: str, fill: bool = False) -> None:
    if column not in df or df[column].notna().sum() == 0:
        return
    x, y = df["t_s"].to_numpy(dtype=float), df[column].to_numpy(dtype=float)
    ax.plot(x, y, color=color, linewidth=1.2, label=label)
    if fill:
        ax.fill_between(x, y, color=color, alpha=0.2, linewidth=0)


def _shade(ax: Axes, t_s: pd.Series, window: tuple[float, float] | None, label: bool = True,
           excluded: Spans = ()) -> None:
    """Grey out time before the first counted step (warm-up) and after the last one; shade and name the
    ``excluded`` spans inside (evaluation passes), one legend entry per name."""
    if window is None or t_s.empty:
        return
    named: set[str] = set()
    for start_s, end_s, name in _merged(excluded, float(t_s.max() - min(t_s.min(), 0.0))):
        ax.axvspan(start_s, end_s, color=EXCLUDED_COLOR, linewidth=0, zorder=0,
                   label=name if label and name not in named else None)
        named.add(name)
    start_s, end_s = window
    if math.isnan(start_s) or math.isnan(end_s):
        return
    first_s, last_s = float(min(t_s.min(), 0.0)), float(t_s.max())
    if start_s > first_s:
        ax.axvspan(first_s, start_s, color=WARMUP_COLOR, linewidth=0, zorder=0,
                   label="warm-up (not counted)" if label else None)
    if last_s > end_s:
        ax.axvspan(end_s, last_s, facecolor="#f4f4f4", hatch="//", edgecolor="#d0d0d0", linewidth=0,
                   zorder=0, label="after last step" if label else None)
    ax.set_xlim(first_s, last_s)


def _merged(spans: Spans, range_s: float) -> list[tuple[float, float, str]]:
    """The spans by start, those of one name closer than ``MERGE_FRACTION`` of the axis merged: one shaded
    band where the eye sees one, and an SVG that stays small with a thousand validation passes."""
    out: list[tuple[float, float, str]] = []
    gap_s = MERGE_FRACTION * range_s
    for start_s, end_s, name in sorted(spans):
        if out and out[-1][2] == name and start_s - out[-1][1] <= gap_s:
            out[-1] = (out[-1][0], max(out[-1][1], end_s), name)
        else:
            out.append((start_s, end_s, name))
    return out


def _time_axis(ax: Axes, per_bin: int) -> None:
    label = "time since run start (s)"
    if per_bin > 1:
        label += f", mean of {per_bin}-tick bins"
    ax.set_xlabel(label)


def _legend(ax: Axes) -> None:
    # Above the axes in one row: it never hides data, and every plot keeps the
    # same axes width, so time axes line up down the page.
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(handles), fontsize=8,
                  borderaxespad=0.2, handlelength=1.5, columnspacing=1.2)


_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_ID = re.compile(r'\bid="([^"]+)"')
_PATH_DATA = re.compile(r'\bd="([^"]*)"')
_LONG_FLOAT = re.compile(r"(\d+\.\d{2})\d+")


def _svg(fig: Figure, prefix: str) -> str:
    """The figure as an ``<svg>`` element for inlining: no prolog, metadata or shared ids."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    text = _METADATA.sub("", _PROLOG.sub("", buf.getvalue(), count=1))
    # Path coordinates are in points; a hundredth of a point is plenty and halves the size.
    text = _PATH_DATA.sub(lambda m: 'd="' + _LONG_FLOAT.sub(r"\1", m.group(1)) + '"', text)
    # Several SVGs share one HTML document, whose ids must be unique: prefix them.
    ids = set(_ID.findall(text))
    if ids:
        pattern = re.compile(r'(id="|#)(' + "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)) + r')\b')
        text = pattern.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", text)
    return text.strip()


# For the other pages' plots (sweep, tune): the same figure geometry and SVG inlining.
new_figure = _figure
svg_element = _svg


def style() -> Any:
    """The plots' matplotlib settings, as a context (for the other modules' plots)."""
    return rc_context(_RC)
