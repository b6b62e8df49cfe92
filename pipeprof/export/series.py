"""What an export sends to a tracker: a run's records as scalar series, per step and per window. Pure.

``export_series(run)`` returns an ``ExportSeries``: a long table of points
(``tag``, ``step``, ``value``, ``t_s``: the run time at the end of that step,
seconds) and the groups it could not fill, each with its reason (an absence
is said, never sent as zeros).

Per step (every row of steps.csv, warm-up included): ``step/data_wait_ms``,
``step/h2d_ms``, ``step/compute_ms``, ``step/other_ms`` (the rest of the step),
``step/collective_wait_ms`` (only when a step waited in collectives),
``step/samples_per_s`` and ``step/prefetch_queue_batches`` (the batches ready
when the step asked; only where observed).

Per window (the throughput windows of the counted steps,
``pipeprof.analysis.windows``; each point at the window's last step):
``window/samples_per_s``; ``worker/<id>/busy_share`` (the share of the window
a DataLoader worker — or ``main``, the training process loading itself —
spent making batches); ``worker/<id>/cpu_pct`` and ``worker/<id>/rss_mib``,
``main/cpu_pct`` and ``main/rss_mib`` (% of one core, MiB) from the sampler's
ticks; ``machine/cpu_util_pct``; ``gpu/util_pct`` and ``gpu/mem_used_mib`` when
a GPU was sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeprof.analysis.loading import worker_label
from pipeprof.analysis.steps import PHASES, counted_steps
from pipeprof.analysis.windows import assign_windows, window_count
from pipeprof.run_folder import Run

MIB = 1024 * 1024
POINT_COLUMNS = ["tag", "step", "value", "t_s"]


@dataclass(frozen=True)
class ExportSeries:
    """``points``: columns ``POINT_COLUMNS`` sorted by step then tag; ``absent``: (group, reason) pairs."""

    points: pd.DataFrame
    absent: tuple[tuple[str, str], ...]

    def tags(self) -> list[str]:
        return sorted(set(self.points["tag"]))


def _numeric(df: pd.DataFrame, column: str) -> pd.Series:
    if column not in df:
        return pd.Series(np.nan, index=df.index, dtype=float)
    return pd.to_numeric(df[column], errors="coerce").astype(float)


def step_points(steps: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """The per-step series of ``steps`` (steps.csv) as points, and what is absent."""
    absent: list[tuple[str, str]] = []
    if steps.empty:
        return pd.DataFrame(columns=POINT_COLUMNS), [("step", "the run has no steps")]
    step_s = _numeric(steps, "step_s")
    parts = {p: _numeric(steps, f"{p}_s").fillna(0.0) if p == "collective_wait" else _numeric(steps, f"{p}_s")
             for p in PHASES}
    series = {f"step/{p}_ms": 1000.0 * parts[p] for p in ("data_wait", "h2d", "compute")}
    if bool((parts["collective_wait"] > 0).any()):
        series["step/collective_wait_ms"] = 1000.0 * parts["collective_wait"]
    series["step/other_ms"] = 1000.0 * (step_s - sum(parts.values())).clip(lower=0.0)
    series["step/samples_per_s"] = _numeric(steps, "samples") / step_s.where(step_s > 0)
    ready = _numeric(steps, "ready_batches")
    if ready.notna().any():
        series["step/prefetch_queue_batches"] = ready
    else:
        absent.append(("step/prefetch_queue_batches", "the prefetch queue was not observable in this run"))
    end_s = _numeric(steps, "t_start_s") + step_s
    index = steps["step"].astype(int)
    frames = [pd.DataFrame({"tag": tag, "step": index, "value": values, "t_s": end_s}) for tag, values in series.items()]
    points = pd.concat(frames, ignore_index=True)
    return points[np.isfinite(points["value"].to_numpy(dtype=float))], absent


def step_windows(steps: pd.DataFrame) -> pd.DataFrame:
    """The throughput windows of the counted steps: ``window``, ``step`` (its last), ``t0_s``, ``t1_s``,
    ``samples_per_s``; empty when the run is too short for two windows."""
    counted = counted_steps(steps) if len(steps) else steps
    step_s = _numeric(counted, "step_s").to_numpy()
    if len(step_s) == 0 or not np.isfinite(step_s).all() or not step_s.sum() > 0:
        return pd.DataFrame(columns=["window", "step", "t0_s", "t1_s", "samples_per_s"])
    k = window_count(len(step_s), float(step_s.sum()))
    if k < 2:
        return pd.DataFrame(columns=["window", "step", "t0_s", "t1_s", "samples_per_s"])
    index, _ = assign_windows(step_s, k)
    df = pd.DataFrame({"window": index, "step": counted["step"].astype(int).to_numpy(),
                       "t0_s": _numeric(counted, "t_start_s").to_numpy(), "step_s": step_s,
                       "samples": _numeric(counted, "samples").to_numpy()})
    g = df.groupby("window")
    out = pd.DataFrame({"step": g["step"].max(), "t0_s": g["t0_s"].min(), "busy_s": g["step_s"].sum(),
                        "samples": g["samples"].sum()})
    last = df.loc[g["t0_s"].idxmax()].set_index("window")
    out["t1_s"] = last["t0_s"] + last["step_s"]
    out["samples_per_s"] = out["samples"] / out["busy_s"]
    return out.reset_index()[["window", "step", "t0_s", "t1_s", "samples_per_s"]]


def _overlap_s(t0: np.ndarray, t1: np.ndarray, a: float, b: float) -> float:
    return float(np.clip(np.minimum(t1, b) - np.maximum(t0, a), 0.0, None).sum())


def window_points(run: Run, windows: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """The per-window series (see the module docstring) over ``windows`` (``step_windows``)."""
    rows: list[tuple[str, int, float, float]] = []
    absent: list[tuple[str, str]] = []
    loading, processes, samples = run.loading, run.processes, run.samples
    pid_worker: dict[int, str] = {}
    if not loading.empty and {"worker", "pid"} <= set(loading):
        for worker, pid in loading[["worker", "pid"]].dropna().drop_duplicates().itertuples(index=False):
            pid_worker[int(pid)] = worker_label(worker)
    else:
        absent.append(("worker/*/busy_share", "the run has no loading records"))
    gpu = samples if "gpu_util_pct" in samples and _numeric(samples, "gpu_util_pct").notna().any() else None
    if gpu is None:
        absent.append(("gpu", "no GPU was sampled in this run"))
    if processes.empty:
        absent.append(("main, worker/*: cpu_pct, rss_mib", "the sampler recorded no processes"))
    for a, b, step, rate in zip(_numeric(windows, "t0_s").tolist(), _numeric(windows, "t1_s").tolist(),
                                windows["step"].astype(int).tolist(), _numeric(windows, "samples_per_s").tolist()):
        length = b - a
        rows.append(("window/samples_per_s", step, rate, b))
        if pid_worker and length > 0:
            known = loading[_numeric(loading, "worker").notna()]  # a batch without a worker id is no one's
            for worker, spans in known.groupby(known["worker"].map(worker_label)):
                busy = _overlap_s(_numeric(spans, "t_start_s").to_numpy(), _numeric(spans, "t_end_s").to_numpy(), a, b)
                rows.append((f"worker/{worker}/busy_share", step, busy / length, b))
        if not processes.empty:
            ticks = processes[(_numeric(processes, "t_s") >= a) & (_numeric(processes, "t_s") <= b)]
            for pid, by_pid in ticks.groupby("pid"):
                role = str(by_pid["role"].iloc[0])
                name = "main" if role == "main" else f"worker/{pid_worker.get(int(pid), f'pid{int(pid)}')}"
                for tag, values in ((f"{name}/cpu_pct", _numeric(by_pid, "cpu_pct")),
                                    (f"{name}/rss_mib", _numeric(by_pid, "rss_bytes") / MIB)):
                    if values.notna().any():
                        rows.append((tag, step, float(values.mean()), b))
        tick = samples[(_numeric(samples, "t_s") >= a) & (_numeric(samples, "t_s") <= b)] if len(samples) else samples
        for tag, column, scale in (("machine/cpu_util_pct", "cpu_util_pct", 1.0),
                                   ("gpu/util_pct", "gpu_util_pct", 1.0), ("gpu/mem_used_mib", "gpu_mem_used_bytes", MIB)):
            if tag.startswith("gpu/") and gpu is None:
                continue
            values = _numeric(tick, column) / scale
            if len(values) and values.notna().any():
                rows.append((tag, step, float(values.mean()), b))
    return pd.DataFrame(rows, columns=POINT_COLUMNS), absent


def export_series(run: Run) -> ExportSeries:
    """The run's series for a tracker: per step and per window (see the module docstring)."""
    by_step, absent = step_points(run.steps)
    windows = step_windows(run.steps)
    if windows.empty:
        by_window = pd.DataFrame(columns=POINT_COLUMNS)
        absent.append(("window", "too few counted steps for two throughput windows"))
    else:
        by_window, more = window_points(run, windows)
        absent += more
    points = pd.concat([df for df in (by_step, by_window) if not df.empty] or [by_step], ignore_index=True)
    points = points.astype({"step": int, "value": float, "t_s": float}).sort_values(["step", "tag"], kind="stable")
    return ExportSeries(points=points.reset_index(drop=True), absent=tuple(absent))
