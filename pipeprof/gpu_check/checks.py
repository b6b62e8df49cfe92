"""The invariants ``make gpu-check`` asserts, as pure functions over what a run left behind.

Each takes the records already read (run.json, summary.json, steps.csv,
samples.csv as dicts and DataFrames, a probe's dict) and returns an
``Outcome``: ``pass`` or ``fail`` with a one-line detail that carries the
numbers. Nothing here reads a clock, a file or the GPU, so every invariant is
tested on synthetic records without one (tests/test_gpu_check.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pipeprof.numbers import finite

STATUSES = ("pass", "fail", "skipped")
DEVICE_CLOCK = "cuda-events"
STEP_TOLERANCE = 0.01  # data_wait + h2d + compute may exceed the step by 1 % (separate event pairs, rounding)
AGREEMENT_POINTS = 10.0  # simulated vs real device: fractions within 10 percentage points
COMPUTE_BOUND_MIN_UTIL_PCT = 60.0
INPUT_BOUND_MAX_UTIL_PCT = 40.0
MATMUL_RATIO_RANGE = (0.05, 20.0)  # a misaligned size's GFLOP/s over 1024's: anything outside is a broken timing


@dataclass(frozen=True)
class Outcome:
    """One check's result: ``status`` in STATUSES, ``detail`` one line with the numbers."""

    status: str
    detail: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


def passed(detail: str) -> Outcome:
    return Outcome("pass", detail)


def failed(detail: str) -> Outcome:
    return Outcome("fail", detail)


def skipped(detail: str) -> Outcome:
    return Outcome("skipped", detail)


def all_of(outcomes: Iterable[Outcome]) -> Outcome:
    """One outcome for several invariants of one run: a fail if any failed (its details first), else a pass."""
    items = list(outcomes)
    if not items:
        return failed("nothing was checked")
    bad = [o for o in items if o.status == "fail"]
    if bad:
        return failed("; ".join(o.detail for o in bad))
    return passed("; ".join(o.detail for o in items))


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


# ---- a run --------------------------------------------------------------------------------------


def run_complete(meta: Mapping[str, Any]) -> Outcome:
    """run.json ``status`` is complete (else the error the run recorded)."""
    status = meta.get("status")
    if status == "complete":
        return passed("run complete")
    return failed(f"run {status}: {meta.get('error')}")


def timing_on_device(meta: Mapping[str, Any], summary: Mapping[str, Any] | None = None) -> Outcome:
    """``timing.method`` is the device clock in run.json and, where it has one, in summary.json."""
    found = []
    for where, doc in (("run.json", meta), ("summary.json", summary)):
        if doc is None or (where == "summary.json" and "timing" not in doc):
            continue
        timing = doc.get("timing")
        method = timing.get("method") if isinstance(timing, Mapping) else None
        if method != DEVICE_CLOCK:
            reason = timing.get("reason") if isinstance(timing, Mapping) else None
            return failed(f"{where} timing.method is {method!r}, not {DEVICE_CLOCK!r}"
                          + (f" ({reason})" if reason else ""))
        found.append(where)
    return passed(f"timing.method {DEVICE_CLOCK} ({', '.join(found)})")


def parts_within_step(steps: pd.DataFrame, tolerance: float = STEP_TOLERANCE) -> Outcome:
    """data_wait_s + h2d_s + compute_s <= step_s * (1 + tolerance) for every counted (not warm-up) step.

    A part that is missing (NaN) counts 0; a step without a step time is not counted.
    """
    if steps.empty or "step_s" not in steps:
        return failed("no steps recorded")
    counted = steps[~steps["warmup"].astype(str).str.lower().isin(("true", "1"))] if "warmup" in steps else steps
    step_s = pd.to_numeric(counted["step_s"], errors="coerce")
    counted, step_s = counted[step_s.notna()], step_s[step_s.notna()]
    if counted.empty:
        return failed("no counted step has a step time")
    parts = sum(pd.to_numeric(counted.get(c, pd.Series(0.0, index=counted.index)), errors="coerce").fillna(0.0)
                for c in ("data_wait_s", "h2d_s", "compute_s"))
    over = parts - step_s * (1 + tolerance)
    bad = counted[over > 1e-9]
    if len(bad):
        worst = (parts / step_s)[bad.index].idxmax()
        row = counted.loc[worst]
        return failed(f"{len(bad)} of {len(counted)} counted steps have data_wait + h2d + compute > step "
                      f"(+{_pct(tolerance)}): step {row.get('step')} parts {parts[worst]:.6f} s, "
                      f"step {step_s[worst]:.6f} s")
    return passed(f"data_wait + h2d + compute <= step in all {len(counted)} counted steps "
                  f"(largest share {(parts / step_s).max():.3f})")


def gpu_columns_in_range(samples: pd.DataFrame) -> Outcome:
    """The GPU columns are sampled (some value) and in range: every ``gpu_*_pct`` in 0-100, memory > 0."""
    if "gpu_util_pct" not in samples or "gpu_mem_used_bytes" not in samples:
        present = [c for c in samples.columns if str(c).startswith("gpu")]
        return failed(f"samples.csv lacks gpu_util_pct / gpu_mem_used_bytes (GPU columns: {present or 'none'})")
    problems, shown = [], []
    for column in sorted(c for c in samples.columns if str(c).startswith("gpu")):
        values = pd.to_numeric(samples[column], errors="coerce").dropna()
        if column in ("gpu_util_pct", "gpu_mem_used_bytes") and values.empty:
            problems.append(f"{column} never sampled")
            continue
        if values.empty:
            continue
        if column.endswith("_pct") and not values.between(0, 100).all():
            problems.append(f"{column} out of 0-100: {values.min():g}..{values.max():g}")
        elif column == "gpu_mem_used_bytes" and not (values > 0).all():
            problems.append(f"{column} not > 0: min {values.min():g}")
        elif column.endswith(("_bytes", "_bytes_per_s")) and not (values >= 0).all():
            problems.append(f"{column} negative: min {values.min():g}")
        shown.append(f"{column} {values.min():g}..{values.max():g}")
    if problems:
        return failed("; ".join(problems))
    return passed(f"GPU columns in range ({len(samples)} samples: {', '.join(shown)})")


def gpu_util_pct(summary: Mapping[str, Any], samples: pd.DataFrame) -> float | None:
    """Mean GPU utilization over the counted steps (summary.json's), else over every sample."""
    gpu = summary.get("gpu")
    if isinstance(gpu, Mapping) and finite(gpu.get("mean_util_pct")) is not None:
        return finite(gpu.get("mean_util_pct"))
    values = pd.to_numeric(samples.get("gpu_util_pct", pd.Series(dtype=float)), errors="coerce").dropna()
    return float(values.mean()) if len(values) else None


def utilization(summary: Mapping[str, Any], samples: pd.DataFrame, *, above: float | None = None,
                below: float | None = None) -> Outcome:
    """The run's mean GPU utilization is > ``above`` (a compute-bound run) or < ``below`` (an input-bound one)."""
    util = gpu_util_pct(summary, samples)
    fractions = summary.get("fractions") or {}
    shares = ", ".join(f"{k} {_pct(v)}" for k in ("data_wait", "compute")
                       if (v := finite(fractions.get(k))) is not None)
    if util is None:
        return failed("no GPU utilization was sampled")
    text = f"mean GPU utilization {util:.1f} %" + (f" ({shares})" if shares else "")
    if above is not None and not util > above:
        return failed(f"{text}, expected > {above:g} %")
    if below is not None and not util < below:
        return failed(f"{text}, expected < {below:g} %")
    bound = f"> {above:g} %" if above is not None else f"< {below:g} %" if below is not None else "no bound"
    return passed(f"{text}, {bound}")


def data_wait_below(summary: Mapping[str, Any], limit: float) -> Outcome:
    """The data-wait share of step time is below ``limit`` (a fraction): the device-resident ceiling."""
    wait = finite((summary.get("fractions") or {}).get("data_wait"))
    if wait is None:
        return failed("summary.json has no data_wait fraction")
    if not wait < limit:
        return failed(f"data_wait {_pct(wait)} of step time, expected < {_pct(limit)}")
    return passed(f"data_wait {_pct(wait)} < {_pct(limit)}")


# ---- the probe ---------------------------------------------------------------------------------


def pinned_at_least_pageable(h2d: Mapping[str, Any]) -> Outcome:
    """The probe's pinned host-to-device bandwidth is >= its pageable one (both measured)."""
    if "absent" in h2d:
        return failed(f"h2d absent: {h2d['absent']}")
    rates = {}
    for name in ("pinned", "pageable"):
        part = h2d.get(name) or {}
        rate = finite(part.get("median_bytes_per_s"))
        if rate is None or rate <= 0:
            return failed(f"{name} h2d not measured: {part.get('absent') or part}")
        rates[name] = rate
    text = (f"pinned {rates['pinned'] / 1e9:.2f} GB/s, pageable {rates['pageable'] / 1e9:.2f} GB/s "
            f"(x{rates['pinned'] / rates['pageable']:.2f}, {h2d.get('buffer_bytes')} byte copies)")
    if rates["pinned"] < rates["pageable"]:
        return failed(f"pinned slower than pageable: {text}")
    return passed(text)


def matmul_on_gpu(matmul: Mapping[str, Any], gpu: Mapping[str, Any], sizes: Iterable[int]) -> Outcome:
    """Every size measured on CUDA with GFLOP/s > 0 and a finite ratio to the first in MATMUL_RATIO_RANGE;
    the detail gives each size's GFLOP/s and ratio beside NVML's memory bus width."""
    device = str(matmul.get("device") or "")
    if not device.startswith("cuda"):
        return failed(f"matmul measured on {device or 'no device'}, not CUDA")
    entries = matmul.get("sizes") or {}
    low, high = MATMUL_RATIO_RANGE
    shown, problems = [], []
    for n in sizes:
        entry = entries.get(str(n))
        if entry is None:
            problems.append(f"size {n} missing")
            continue
        rate, ratio = finite(entry.get("median_gflop_per_s")), finite(entry.get("ratio_to_reference"))
        if rate is None or rate <= 0 or ratio is None or not low <= ratio <= high:
            problems.append(f"size {n}: {rate} GFLOP/s, ratio {ratio}")
            continue
        shown.append(f"{n}: {rate:.0f} GFLOP/s x{ratio:.3f}")
    devices = gpu.get("devices") or []
    width = devices[0].get("memory_bus_width_bits") if devices else None
    bus = f"memory bus {width} bits" if width is not None else f"memory bus width absent ({gpu.get('absent')})"
    if problems:
        return failed(f"{'; '.join(problems)} ({bus})")
    return passed(f"{'; '.join(shown)}; {bus}; TF32 {matmul.get('float32_matmul_precision')}")


# ---- the simulated device -----------------------------------------------------------------------


def fractions_agree(measured: Mapping[str, Any], expected: Mapping[str, Any],
                    keys: tuple[str, ...] = ("data_wait", "compute"), points: float = AGREEMENT_POINTS) -> Outcome:
    """Each of ``keys`` (fractions of step time) on the real device within ``points`` percentage points of
    the simulated device's."""
    shown: list[str] = []
    bad: list[str] = []
    for key in keys:
        real, sim = finite(measured.get(key)), finite(expected.get(key))
        if real is None or sim is None:
            bad.append(f"{key}: real {real}, simulated {sim}")
            continue
        gap = 100 * abs(real - sim)
        text = f"{key} real {_pct(real)} vs simulated {_pct(sim)}"
        (bad if gap > points else shown).append(text if gap <= points else f"{text} ({gap:.1f} points apart)")
    if bad:
        return failed(f"{'; '.join(bad)} (limit {points:g} points)")
    return passed("; ".join(shown))
