"""The live view's input: one window's aggregate (``LiveWindow``), and how an attach's window becomes one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pipeprof.attach.shares import sampled_shares


@dataclass(frozen=True)
class LiveWindow:
    """The aggregate of the last window; None where not measured (with ``absent`` saying why)."""

    t_end_s: float
    window_s: float
    sampled: bool  # shares of py-spy samples (attach), not of timed steps
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    data_wait_fraction: float | None = None
    h2d_fraction: float | None = None
    compute_fraction: float | None = None
    ready_batches_mean: float | None = None  # the prefetch queue
    queue_capacity_batches: int | None = None
    worker_busy_fraction: Mapping[str, float] = field(default_factory=dict)  # worker label -> busy share
    gpu_util_pct: float | None = None
    gpu_mem_bytes: float | None = None
    absent: Mapping[str, str] = field(default_factory=dict)  # "steps", "queue", "gpu" -> why not shown


def attached_window(rows: list[dict[str, Any]], window_s: float) -> LiveWindow:
    """The LiveWindow of one attach window's stacks.csv rows (shares of samples; no steps, no queue)."""
    shares = sampled_shares(pd.DataFrame(rows))
    f = shares.fractions()
    t_end = max((r["t_end_s"] for r in rows), default=0.0)
    busy = {str(w.pid): w.busy.fraction for w in shares.workers}
    absent = {"steps": "sampled from outside", "queue": "not visible from outside", "gpu": "not in this view"}
    return LiveWindow(t_end_s=t_end, window_s=window_s, sampled=True,
                      data_wait_fraction=f["data_wait"] if shares.training_samples else None,
                      h2d_fraction=f["h2d"] if shares.training_samples else None,
                      compute_fraction=f["compute"] if shares.training_samples else None,
                      worker_busy_fraction=busy, absent=absent)
