"""How one window of an attach's stacks becomes the live view's ``LiveWindow``."""

from __future__ import annotations

from typing import Any

import pandas as pd

from pipeprof.analysis.live_window import LiveWindow, finite_or_none
from pipeprof.attach.shares import sampled_shares


def attached_window(rows: list[dict[str, Any]], window_s: float, gpu: dict[str, Any] | None = None,
                    gpu_absent: str | None = None) -> LiveWindow:
    """The LiveWindow of one attach window's stacks.csv rows (shares of samples; no steps, no queue); ``gpu``: the
    sampler's last tick (the tree's GPU use, matched by pid)."""
    shares = sampled_shares(pd.DataFrame(rows))
    f = shares.fractions()
    t_end = max((r["t_end_s"] for r in rows), default=0.0)
    busy = {str(w.pid): w.busy.fraction for w in shares.workers}
    util, mem = finite_or_none((gpu or {}).get("gpu_proc_util_pct")), finite_or_none((gpu or {}).get("gpu_proc_mem_bytes"))
    absent = {"steps": "sampled from outside", "queue": "not visible from outside"}
    if util is None:
        absent["gpu"] = gpu_absent or "no reading of the process tree's GPU use"
    return LiveWindow(t_end_s=t_end, window_s=window_s, sampled=True,
                      data_wait_fraction=f["data_wait"] if shares.training_samples else None,
                      h2d_fraction=f["h2d"] if shares.training_samples else None,
                      compute_fraction=f["compute"] if shares.training_samples else None,
                      worker_busy_fraction=busy, gpu_util_pct=util, gpu_mem_bytes=mem, absent=absent)
