"""Device memory over the counted steps: torch.cuda's peaks, and whether allocated memory creeps up.

Pure: reads ``Run.device_memory`` (DEVICE_MEMORY_COLUMNS, one row per window
of about 0.5 s, CUDA runs only) and the steps' counted window.

A window counts when it overlaps the counted steps: row ``i`` covers
``(t_s[i-1], t_s[i]]`` (the first from the run's start), so the window that
holds the first counted step counts, as does the last row (the run's end,
read just after the last step).

The creep rule (``CREEP_RULE``), over the allocated bytes at the counted
windows' ends (what tensors still hold between steps; the per-window peaks
swing with each step's activations and are left out):

* at least ``MIN_WINDOWS`` windows, else no verdict (``growing`` false);
* the least-squares slope (bytes/s) times the counted duration is the
  growth; it must exceed the noise floor ``max(64 MiB, 5 % of the first
  quarter's median)``,
* and the last quarter's median must exceed the first quarter's by as much:
  a single late spike (a bigger last batch, an evaluation pass) lifts the
  slope but not the medians, and a one-time rise at the start (lazy
  optimizer state) lifts neither once it is in the first quarter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipeprof.analysis.steps import counted_steps, counted_window_s
from pipeprof.numbers import finite
from pipeprof.run_folder import Run
from pipeprof.run_meta import JsonObject

MIN_WINDOWS = 4
NOISE_FLOOR_BYTES = 64 * 2**20
NOISE_FRACTION = 0.05  # of the first quarter's allocated bytes
CREEP_RULE = ("least-squares growth of allocated bytes over the counted steps > max(64 MiB, 5% of the first "
              "quarter's median), and the last quarter's median above the first quarter's by as much "
              f"(at least {MIN_WINDOWS} windows)")


@dataclass(frozen=True)
class MemoryCreep:
    """Whether allocated device memory grew across the counted steps beyond noise (``CREEP_RULE``)."""

    growing: bool
    growth_bytes: float | None  # fitted growth over the counted duration; None: too few windows
    per_step_bytes: float | None  # growth_bytes / counted steps
    threshold_bytes: float | None = None  # the noise floor the growth was held against

    def to_json(self) -> JsonObject:
        return {"growing": self.growing, "growth_bytes": self.growth_bytes, "per_step_bytes": self.per_step_bytes,
                "rule": CREEP_RULE}

    @classmethod
    def from_json(cls, data: Any) -> MemoryCreep | None:
        if not isinstance(data, dict):
            return None
        return cls(growing=bool(data.get("growing")), growth_bytes=finite(data.get("growth_bytes")),
                   per_step_bytes=finite(data.get("per_step_bytes")))


@dataclass(frozen=True)
class DeviceMemory:
    """summary.json's ``device_memory``: the counted windows' peaks and the creep check, or ``absent``."""

    absent: str | None = None
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    windows: int = 0
    creep: MemoryCreep | None = None

    def to_json(self) -> JsonObject:
        if self.absent is not None:
            return {"absent": self.absent}
        return {"peak_allocated_bytes": self.peak_allocated_bytes, "peak_reserved_bytes": self.peak_reserved_bytes,
                "windows": self.windows, "creep": self.creep.to_json() if self.creep else None}

    @classmethod
    def from_json(cls, data: Any) -> DeviceMemory | None:
        """None for a summary without the section (an older one)."""
        if not isinstance(data, dict):
            return None
        if data.get("absent") is not None:
            return cls(absent=str(data["absent"]))
        return cls(peak_allocated_bytes=finite(data.get("peak_allocated_bytes")),
                   peak_reserved_bytes=finite(data.get("peak_reserved_bytes")), windows=int(data.get("windows") or 0),
                   creep=MemoryCreep.from_json(data.get("creep")))


def device_memory(run: Run) -> DeviceMemory:
    """The device memory of ``run``'s counted steps (see the module docstring), or absent with the reason."""
    table = run.device_memory
    if table.empty:
        return DeviceMemory(absent=_absent_reason(run))
    start_s, end_s = counted_window_s(run.steps)
    if math.isnan(start_s):
        return DeviceMemory(absent="no counted steps")
    t_s = pd.to_numeric(table["t_s"], errors="coerce")
    began_s = t_s.shift(1, fill_value=-math.inf)  # each row's window starts where the previous one ended
    rows = table[(t_s > start_s) & (began_s < end_s)]
    if rows.empty:
        return DeviceMemory(absent="no torch.cuda memory window overlaps the counted steps")
    return DeviceMemory(peak_allocated_bytes=_max(rows["peak_allocated_bytes"]),
                        peak_reserved_bytes=_max(rows["peak_reserved_bytes"]), windows=len(rows),
                        creep=memory_creep(rows["t_s"], rows["allocated_bytes"], end_s - start_s,
                                           len(counted_steps(run.steps))))


def memory_creep(t_s: pd.Series, allocated_bytes: pd.Series, duration_s: float, steps: int) -> MemoryCreep:
    """``CREEP_RULE`` over window ends ``t_s`` (s) and the allocated bytes then, for counted steps lasting
    ``duration_s`` seconds in all."""
    t = pd.to_numeric(t_s, errors="coerce").to_numpy(dtype=float)
    y = pd.to_numeric(allocated_bytes, errors="coerce").to_numpy(dtype=float)
    known = ~(np.isnan(t) | np.isnan(y))
    t, y = t[known], y[known]
    if len(t) < MIN_WINDOWS or np.ptp(t) <= 0:
        return MemoryCreep(growing=False, growth_bytes=None, per_step_bytes=None)
    slope_bytes_per_s = float(np.polyfit(t, y, 1)[0])
    growth = slope_bytes_per_s * duration_s
    quarter = max(1, math.ceil(len(y) / 4))
    first, last = float(np.median(y[:quarter])), float(np.median(y[-quarter:]))
    threshold = max(NOISE_FLOOR_BYTES, NOISE_FRACTION * first)
    return MemoryCreep(growing=growth > threshold and last - first > threshold, growth_bytes=growth,
                       per_step_bytes=growth / steps if steps else None, threshold_bytes=threshold)


def _max(series: pd.Series) -> float | None:
    peak = pd.to_numeric(series, errors="coerce").max()
    return float(peak) if pd.notna(peak) else None


def _absent_reason(run: Run) -> str:
    recorded = run.info.absences.get("device_memory")
    if recorded:
        return str(recorded)
    device = run.settings.device
    if not device.startswith("cuda"):
        return f"torch.cuda memory is read on CUDA only: the training device was {device}"
    return "no torch.cuda memory window was recorded (CUDA never initialized, or a run from before they were)"
