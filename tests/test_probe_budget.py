"""The probes' budgets after a run follow its step time and its length (measure.windows.probes_budget)."""

from __future__ import annotations

import pytest

from pipeprof.measure.windows import BUDGET_S, MIN_PROBES_S, WINDOW_S, probes_budget


def test_a_short_run_of_1_ms_steps_takes_at_most_3_s_of_probes():
    # quick: 7 s of training at ~1 ms a step: 3 s of probes (they took 5.5 s), windows of the default 0.1 s
    budget = probes_budget(7.0, 0.001)
    assert budget == {"total_budget_s": MIN_PROBES_S, "window_s": WINDOW_S, "budget_s": BUDGET_S}


def test_a_300_ms_gpu_step_gets_windows_of_several_steps_not_of_a_third_of_one():
    budget = probes_budget(120.0, 0.3)  # 400 steps of 300 ms
    assert budget["total_budget_s"] == pytest.approx(12.0)  # 10 % of the run's own training time
    assert budget["window_s"] == pytest.approx(0.9)  # 3 steps, not 0.1 s (a third of one step)
    assert budget["budget_s"] == pytest.approx(11 * 0.3)  # warm-up and 3 windows of 3 steps
    assert budget["budget_s"] <= budget["total_budget_s"]


def test_a_probe_never_takes_more_than_all_the_probes_together():
    budget = probes_budget(10.0, 2.0)  # 5 steps of 2 s
    assert budget["total_budget_s"] == MIN_PROBES_S and budget["budget_s"] == MIN_PROBES_S


def test_unknown_times_take_the_defaults():
    assert probes_budget(None, None) == {"total_budget_s": MIN_PROBES_S, "window_s": WINDOW_S, "budget_s": BUDGET_S}
