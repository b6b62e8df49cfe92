"""The counted steps: the first stage of the analysis, which every later one builds on.

Pure functions over the steps table (``run.steps``: one row per training step,
times in seconds). ``attribution``, ``verdict``, ``recommend`` and ``summary``
import from here, never the other way round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pipeprof.run_meta import JsonObject, as_number, as_object

# The parts of a training step the step timer measures; "other" is the rest of the step.
PHASES = ("data_wait", "h2d", "collective_wait", "compute")


@dataclass(frozen=True)
class StepTime:
    """summary.json ``step_time_s``: the counted steps' median, p90 and mean step time in seconds (None: no
    counted step, or a light run's median and p90, which only its windows keep)."""

    median: float | None = None
    p90: float | None = None
    mean: float | None = None

    def to_json(self) -> JsonObject:
        return {"median": self.median, "p90": self.p90, "mean": self.mean}

    @classmethod
    def from_json(cls, data: Any) -> StepTime:
        d = as_object(data)
        return cls(median=as_number(d.get("median")), p90=as_number(d.get("p90")), mean=as_number(d.get("mean")))


def counted_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Steps after warm-up: the ones every statistic is computed over."""
    return steps.loc[~steps["warmup"].astype(bool)]


def step_breakdown(steps: pd.DataFrame) -> pd.DataFrame:
    """Counted steps with ``other_s`` = step time not in data wait, h2d or compute."""
    df = counted_steps(steps).copy()
    if "collective_wait_s" not in df:  # a table built before collectives were measured: one process, none
        df["collective_wait_s"] = 0.0
    df["other_s"] = (df["step_s"] - df[[f"{p}_s" for p in PHASES]].sum(axis=1)).clip(lower=0.0)
    return df


def fractions(steps: pd.DataFrame) -> dict[str, float]:
    """Share of counted step time in each phase; the five values sum to 1."""
    df = step_breakdown(steps)
    total_s = float(df["step_s"].sum())
    if total_s <= 0:
        return {p: math.nan for p in (*PHASES, "other")}
    parts = {p: float(df[f"{p}_s"].sum()) for p in PHASES}
    parts["other"] = float(df["other_s"].sum())
    # On CUDA the phases come from device events and the step from their span;
    # rounding can make the parts overshoot the whole by a hair, so normalize.
    denominator = max(total_s, sum(parts.values()))
    return {p: v / denominator for p, v in parts.items()}


def counted_window_s(steps: pd.DataFrame) -> tuple[float, float]:
    """Start and end (run time, seconds) of the counted steps."""
    df = counted_steps(steps)
    if df.empty:
        return math.nan, math.nan
    return float(df["t_start_s"].iloc[0]), float(df["t_start_s"].iloc[-1] + df["step_s"].iloc[-1])
