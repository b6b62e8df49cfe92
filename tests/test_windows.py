"""Windowed throughput and the steady-state test, from hand-made steps tables."""

import math

import numpy as np
import pandas as pd
import pytest

from pipeprof.analysis.windows import (
    assign_windows,
    coefficient_of_variation,
    is_stable,
    t_975,
    throughput_windows,
    window_count,
)
from pipeprof.pipeline.derive import summarize
from pipeprof.run_folder import STEP_COLUMNS, Run


def make_steps(step_s, samples, warmup=0, warmup_step_s=5.0):
    """Counted steps with the given durations and batch sizes, after ``warmup`` slow warm-up steps."""
    step_s = [warmup_step_s] * warmup + list(step_s)
    samples = [1] * warmup + list(samples)
    t = np.concatenate([[0.0], np.cumsum(step_s)[:-1]])
    return pd.DataFrame({"step": range(len(step_s)), "epoch": 0, "warmup": [i < warmup for i in range(len(step_s))],
                         "t_start_s": t, "data_wait_s": 0.0, "h2d_s": 0.0, "compute_s": step_s, "step_s": step_s,
                         "host_wait_s": 0.0, "samples": samples, "loss": 1.0, "correct": 0,
                         "ready_batches": np.nan}, columns=STEP_COLUMNS)


def test_known_window_rates_give_known_mean_and_interval():
    # 4 windows of 10 steps x 0.1 s (4 s: one window per second); rates set by the batch sizes
    rates = [1000, 1100, 900, 1000]
    samples = [r * 0.1 for r in rates for _ in range(10)]
    w = throughput_windows(make_steps([0.1] * 40, samples, warmup=5))  # the 5 s warm-up steps do not count
    assert w["reason"] is None and w["split"] == "time"
    assert w["windows"] == 4 and w["window_s"] == pytest.approx(1.0)
    assert w["steps_per_window"] == {"min": 10, "max": 10}
    assert w["per_window_samples_per_s"] == pytest.approx(rates)
    std = math.sqrt(20000 / 3)
    assert w["mean"] == pytest.approx(1000) and w["median"] == pytest.approx(1000)
    assert (w["min"], w["max"]) == pytest.approx((900, 1100))
    assert w["std"] == pytest.approx(std) and w["cv"] == pytest.approx(std / 1000)
    assert w["se"] == pytest.approx(std / 2)  # equal windows: the standard error of the plain mean
    half = 3.1824 * std / 2  # t(0.975, 3 df) * std / sqrt(4)
    assert w["ci95_low"] == pytest.approx(1000 - half, rel=1e-4)
    assert w["ci95_high"] == pytest.approx(1000 + half, rel=1e-4)


def test_too_few_steps_give_nulls_with_a_reason():
    w = throughput_windows(make_steps([0.01] * 9, [10] * 9, warmup=3))
    assert w["windows"] == 0 and w["per_window_samples_per_s"] == []
    assert all(w[k] is None for k in ("mean", "median", "min", "max", "cv", "ci95_low", "ci95_high", "window_s"))
    assert "only 9 counted steps" in w["reason"] and "10" in w["reason"]

    none = throughput_windows(make_steps([], [], warmup=4))
    assert none["reason"] == "no counted steps" and none["mean"] is None
    empty = throughput_windows(pd.DataFrame(columns=STEP_COLUMNS))
    assert empty["reason"] == "no counted steps"
    still = throughput_windows(make_steps([0.0] * 20, [10] * 20))
    assert "no time" in still["reason"] and still["mean"] is None


def test_window_count_rule():
    assert window_count(25, 0.125) == 3  # short run: at least 3 windows ...
    assert window_count(12, 0.1) == 2  # ... as far as 5 steps per window allow
    assert window_count(9, 0.1) == 1  # no spread from here
    assert window_count(1000, 50.0) == 50  # long run: one window per second
    assert window_count(100, 50.0) == 20  # ... but never under 5 steps per window
    assert window_count(0, 1.0) == 0 and window_count(10, 0.0) == 0


def test_long_run_gets_one_second_windows():
    w = throughput_windows(make_steps([0.05] * 1000, [64] * 1000))
    assert w["windows"] == 50 and w["window_s"] == pytest.approx(1.0)
    assert w["cv"] == pytest.approx(0.0, abs=1e-9)
    assert w["ci95_low"] == pytest.approx(1280) and w["ci95_high"] == pytest.approx(1280)


def test_a_stall_falls_back_to_equal_step_counts():
    step_s = [0.01] * 15 + [10.0] + [0.01] * 15  # one 10 s stall: time windows would hold 1 step
    index, split = assign_windows(np.array(step_s), 6)
    assert split == "steps" and np.bincount(index).tolist() == [6, 5, 5, 5, 5, 5]
    w = throughput_windows(make_steps(step_s, [10] * 31))
    assert w["split"] == "steps" and w["windows"] == 6 and w["steps_per_window"]["min"] >= 5
    # the stall window is slow, and so the spread is wide
    assert min(w["per_window_samples_per_s"]) < 10 and w["cv"] > 0.4


def test_unequal_windows_weigh_by_duration():
    # 3 windows of 5 steps (too few steps for time windows): 0.5 s, 1 s and 0.25 s, all at 1000 samples/s but one
    step_s = [0.1] * 5 + [0.2] * 5 + [0.05] * 5
    samples = [100] * 5 + [100] * 5 + [25] * 5  # rates 1000, 500, 500
    w = throughput_windows(make_steps(step_s, samples))
    assert w["split"] == "steps" and w["windows"] == 3
    assert w["per_window_samples_per_s"] == pytest.approx([1000, 500, 500])
    assert w["mean"] == pytest.approx(1125 / 1.75)  # total samples over total time, not the plain mean 666.7
    s, t = np.array([500, 500, 125]), np.array([0.5, 1.0, 0.25])
    se = math.sqrt(np.sum((s - w["mean"] * t) ** 2) / 6) / t.mean()
    assert w["se"] == pytest.approx(se)
    assert w["mean"] - 4.3027 * se < 0 and w["ci95_low"] == 0.0  # a t-interval over 3 windows, cut at 0 samples/s
    assert w["ci95_high"] == pytest.approx(w["mean"] + 4.3027 * se, rel=1e-4)
    assert w["cv"] == pytest.approx(np.std([1000, 500, 500], ddof=1) / (2000 / 3))


def test_mean_of_time_windows_matches_the_overall_rate_for_steady_steps():
    rng = np.random.default_rng(0)
    step_s = rng.uniform(0.009, 0.011, 400)
    w = throughput_windows(make_steps(step_s, [128] * 400))
    assert w["windows"] == 4
    assert w["mean"] == pytest.approx(128 * 400 / step_s.sum())
    assert w["ci95_low"] < 128 * 400 / step_s.sum() < w["ci95_high"]


def test_t_quantiles():
    assert t_975(1) == pytest.approx(12.706, abs=1e-3)
    assert t_975(10) == pytest.approx(2.228, abs=1e-3)
    assert t_975(30) == pytest.approx(2.042, abs=1e-3)
    assert t_975(31) < t_975(30) and t_975(31) == pytest.approx(2.0395, abs=1e-3)
    assert t_975(60) == pytest.approx(2.0003, abs=1e-3) and t_975(120) == pytest.approx(1.9799, abs=1e-3)
    assert t_975(1e6) == pytest.approx(1.96, abs=1e-3)
    assert t_975(3.7) == t_975(3)  # fractional df rounds down: a wider interval, never a narrower one
    with pytest.raises(ValueError):
        t_975(0.5)


def test_is_stable():
    assert is_stable([1000.0] * 5)
    assert is_stable([500, 2000, 800, 1000, 1001, 999, 1002, 998])  # noisy start, settled last five
    assert not is_stable([1000, 1001, 999, 1002])  # fewer windows than last_n: not enough evidence
    assert not is_stable([1000, 1100, 900, 1050, 950])  # cv ~ 0.08
    assert is_stable([1000, 1100, 900, 1050, 950], cv_threshold=0.1)
    assert is_stable([1000, 1100, 900, 1050, 950, 1000, 1001], last_n=2)
    assert not is_stable([0.0] * 5) and not is_stable([-1.0] * 5)
    assert not is_stable([1000, 1000, math.nan, 1000, 1000])
    with pytest.raises(ValueError):
        is_stable([1.0, 1.0], last_n=1)
    assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(math.sqrt(2) / 2)
    assert coefficient_of_variation([1.0]) is None


def test_is_stable_uses_the_same_cv_as_the_windows():
    w = throughput_windows(make_steps([0.1] * 50, [10, 11] * 25))
    rates = w["per_window_samples_per_s"]
    assert w["windows"] == 5
    assert coefficient_of_variation(rates) == pytest.approx(w["cv"])
    assert is_stable(rates, cv_threshold=w["cv"] + 1e-9) and not is_stable(rates, cv_threshold=w["cv"])


def test_summary_has_the_throughput_key():
    steps = make_steps([0.1] * 40, [100] * 40, warmup=2)
    run = Run(meta={"scenario": {"name": "t"}, "device": "cpu", "gpu": {"available": False}}, steps=steps)
    s = summarize(run)
    assert s["throughput"]["windows"] == 4
    assert s["throughput"]["mean"] == pytest.approx(s["samples_per_s"])
