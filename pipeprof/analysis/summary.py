"""The summary: headline statistics of one run, derived from its raw records.

Pure functions over the run's DataFrames; nothing here times, samples or
renders. ``summarize(run)`` returns the ``summary.json`` contract documented
in the README (``SUMMARY_SCHEMA_VERSION`` is bumped on incompatible change).
``attribution`` comes from ``pipeprof.analysis.attribution``, ``verdict`` from
``pipeprof.analysis.verdict``, ``recommendations`` from ``pipeprof.analysis.recommend``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from pipeprof.analysis.attribution import attribution
from pipeprof.analysis.hotspots import code_profile
from pipeprof.analysis.recommend import recommend
from pipeprof.analysis.steps import counted_steps, counted_window_s
from pipeprof.analysis.thresholds import COMPUTE_BOUND_FRACTION, H2D_BOUND_FRACTION, INPUT_BOUND_FRACTION
from pipeprof.analysis.verdict import Verdict, verdict_from_attribution
from pipeprof.analysis.verification import verification
from pipeprof.analysis.windows import throughput_windows
from pipeprof.run_folder import Run

SUMMARY_SCHEMA_VERSION = 1

# final_loss and accuracy describe the end of training, not its average.
TAIL_FRACTION = 0.10


def bottleneck(verdict: Verdict) -> tuple[str, str]:
    """summary.json's ``bottleneck`` and ``bottleneck_reason``: the verdict's class in its coarse form
    (``verdict.COARSE_CLASSES``) and the reason in plain words, from the verdict's own evidence."""
    klass = verdict.coarse
    evidence = verdict.evidence
    wait, h2d = evidence.get("data_wait_fraction"), evidence.get("h2d_fraction")
    if klass == "unknown" or wait is None:
        return klass, "no counted steps: nothing to judge"
    pct = 100 * wait
    if klass == "compute":
        return klass, (f"compute-bound: only {pct:.1f}% of step time was spent waiting for data "
                       f"(under {100 * COMPUTE_BOUND_FRACTION:.0f}%)")
    if klass == "h2d":
        return klass, (f"bound by the copy to the device: {100 * (h2d or 0.0):.0f}% of step time moved batches "
                       f"host → device (from {100 * H2D_BOUND_FRACTION:.0f}%, and no less than the "
                       f"{pct:.0f}% waiting for data)")
    if verdict.degree == "input-bound":
        reason = (f"input-bound: {pct:.0f}% of step time was spent waiting for data "
                  f"(input-bound from {100 * INPUT_BOUND_FRACTION:.0f}%)")
    else:
        reason = (f"partly input-bound: {pct:.0f}% of step time was spent waiting for data "
                  f"(between {100 * COMPUTE_BOUND_FRACTION:.0f}% and {100 * INPUT_BOUND_FRACTION:.0f}%)")
    return klass, reason + ("; no single cause" if klass == "balanced" else "")


def _in_window(samples: pd.DataFrame, window: tuple[float, float]) -> pd.DataFrame:
    start_s, end_s = window
    if samples.empty or math.isnan(start_s):
        return samples.iloc[0:0]
    return samples.loc[(samples["t_s"] >= start_s) & (samples["t_s"] <= end_s)]


def _stat(series: pd.Series, how: str) -> float | None:
    values = pd.to_numeric(series, errors="coerce").dropna()
    if values.empty:
        return None  # not measured: null in JSON, never a silent zero
    return float(getattr(values, how)())


def summarize(run: Run, probe: dict[str, Any] | None = None) -> dict[str, Any]:
    """The summary.json contract for ``run`` (see README, "summary.json").

    ``probe`` is the JSON of ``pipeprof probe`` (machine ceilings; default: the
    one ``pipeprof run`` stored in run.json when the machine had been probed); without it
    the disk comparison in ``attribution`` is absent, with the reason. Keys added
    on top of the README's table (schema 1, additive):

    * ``attribution``: the direct evidence, every number with its unit in its
      name (``attribution.attribution``: ``step``, ``loading``, ``cpu``, ``disk``,
      ``gpu``, ``prefetch``, ``data``, ``cache``; ``{"absent": reason}`` for
      what was not measured).
    * ``verdict``: ``{"class", "rule", "degree", "sentence", "evidence",
      "notes"}`` (``verdict.verdict``); ``class`` is one of ``compute``,
      ``input:fetch``, ``input:prep``, ``input:main``, ``h2d``, ``balanced``, ``unknown``;
      ``bottleneck`` is its coarse form (``verdict.coarse``: ``input`` for every ``input:*``)
      and ``bottleneck_reason`` says it in words, so the two never disagree.
    * ``recommendations``: ``[{"change", "predicted_samples_per_s",
      "predicted_speedup", "reason", "model"}]`` ranked by predicted speed-up
      (``recommend.recommend``; its model is in that module's docstring).
    * ``verification``: predicted against measured speed-up of the top
      recommendation after ``run --verify`` (``verification.verification``),
      else null.
    * ``code_profile``: ``{"cprofile", "pyspy"}``, the code-level view
      (``hotspots.code_profile``), each ``{"absent": reason}`` when off.
    """
    steps = run.steps
    counted = counted_steps(steps)
    n = len(counted)
    step_s = counted["step_s"].to_numpy(dtype=float)
    duration_s = float(step_s.sum())
    samples = int(counted["samples"].sum())
    attr = attribution(run, probe if probe is not None else run.meta.get("probe"))
    frac = attr.fractions
    judged = verdict_from_attribution(attr)
    klass, reason = bottleneck(judged)

    tail = counted.tail(max(1, math.ceil(TAIL_FRACTION * n))) if n else counted
    tail_samples = float(tail["samples"].sum())

    window = counted_window_s(steps)
    during = _in_window(run.samples, window)
    processes = run.processes

    summary: dict[str, Any] = {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "scenario": run.name,
        "device": run.meta.get("device"),
        "steps": n,
        "warmup_steps": int(steps["warmup"].astype(bool).sum()),
        "samples": samples,
        "duration_s": duration_s,
        "samples_per_s": samples / duration_s if duration_s > 0 else None,
        "step_time_s": {
            "median": float(np.median(step_s)) if n else None,
            "p90": float(np.percentile(step_s, 90)) if n else None,
            "mean": float(step_s.mean()) if n else None,
        },
        "fractions": frac,
        "bottleneck": klass,
        "bottleneck_reason": reason,
        "cpu": {
            "cores": run.meta.get("environment", {}).get("cpu_cores"),
            "mean_util": _stat(during.get("cpu_util_pct", pd.Series(dtype=float)), "mean"),
            "peak_util": _stat(during.get("cpu_util_pct", pd.Series(dtype=float)), "max"),
            "main_mean_pct": _stat(during.get("main_cpu_pct", pd.Series(dtype=float)), "mean"),
            "workers_mean_pct": _stat(during.get("workers_cpu_pct", pd.Series(dtype=float)), "mean"),
        },
        "memory": {
            "peak_rss_bytes": _stat(run.samples.get("tree_rss_bytes", pd.Series(dtype=float)), "max"),
            "peak_main_rss_bytes": _stat(run.samples.get("main_rss_bytes", pd.Series(dtype=float)), "max"),
            "peak_workers_rss_bytes": _stat(run.samples.get("workers_rss_bytes", pd.Series(dtype=float)), "max"),
            "uss_bytes": uss_snapshot(processes),
        },
        "disk": {
            "mean_read_bytes_per_s": _stat(during.get("read_bytes_per_s", pd.Series(dtype=float)), "mean"),
            "read_bytes": _read_bytes(processes),
        },
        "gpu": _gpu_summary(during) if run.meta.get("gpu", {}).get("available") else None,
        "loading": attr.loading_summary,
        "cache": attr.cache_check,
        "final_loss": float(tail["loss"].mean()) if n else None,
        "accuracy": _accuracy(tail["correct"], tail_samples),
        "absences": dict(run.meta.get("absences", {})),
        "steady": run.meta.get("steady"),
        # How the run ended (run.json's status and error): complete, interrupted (Ctrl-C, SIGTERM) or failed.
        "status": run.meta.get("status"),
        "error": run.meta.get("error"),
    }
    if run.meta.get("kind") == "script":  # pipeprof profile / pipeprof.profile(): what ran, and its loaders
        summary.update({k: run.meta.get(k) for k in ("script", "loaders", "step_source")})
    summary["attribution"] = attr.to_json()
    summary["verdict"] = judged.to_json()
    summary["recommendations"] = [r.to_json() for r in recommend(run, attr, judged)]
    summary["verification"] = verification(run.meta.get("verification"), summary["samples_per_s"])
    summary["throughput"] = throughput_windows(run.steps)
    summary["code_profile"] = code_profile(run)
    return summary


def _accuracy(correct: pd.Series, samples: float) -> float | None:
    """Correct over samples; None when not recorded (a script's own loop keeps its accuracy to itself)."""
    total = pd.to_numeric(correct, errors="coerce").sum(min_count=1)
    return float(total) / samples if samples and pd.notna(total) else None


def uss_snapshot(processes: pd.DataFrame) -> dict[str, Any] | None:
    """Largest USS seen per role, summed over the processes of one snapshot."""
    if processes.empty or "uss_bytes" not in processes:
        return None
    snaps = processes.dropna(subset=["uss_bytes"])
    if snaps.empty:
        return None
    per_tick = snaps.groupby(["t_s", "role"])["uss_bytes"].sum().unstack("role")
    return {
        "main": float(per_tick["main"].max()) if "main" in per_tick else None,
        "workers": float(per_tick["worker"].max()) if "worker" in per_tick else 0.0,
        "snapshots": int(len(per_tick)),
    }


def _read_bytes(processes: pd.DataFrame) -> float | None:
    """Disk bytes read by the process tree: each process's last counter minus its first."""
    if processes.empty:
        return None
    per_pid = processes.dropna(subset=["read_bytes"]).groupby("pid")["read_bytes"]
    if per_pid.ngroups == 0:
        return None
    return float((per_pid.max() - per_pid.min()).sum())


def _gpu_summary(during: pd.DataFrame) -> dict[str, Any]:
    def col(name: str) -> pd.Series:
        return during.get(name, pd.Series(dtype=float))

    return {
        "mean_util_pct": _stat(col("gpu_util_pct"), "mean"),
        "peak_mem_used_bytes": _stat(col("gpu_mem_used_bytes"), "max"),
        "mean_pcie_rx_bytes_per_s": _stat(col("pcie_rx_bytes_per_s"), "mean"),
        "mean_pcie_tx_bytes_per_s": _stat(col("pcie_tx_bytes_per_s"), "mean"),
    }
