"""Steady-state measurement on a fake clock: when the loop stops, and what counts as warm-up."""

import pytest

from pipeprof.measure.clock import FakeClock
from pipeprof.measure.steady import SteadyState, variation


def drive(state: SteadyState, clock: FakeClock, step_times_s, samples: int = 100) -> int | None:
    """Feed steps of the given durations; the step at which the state said stop, or None."""
    state.begin()
    for i, took_s in enumerate(step_times_s):
        clock.advance(took_s)
        if state.after_step(i, samples):
            return i
    return None


def test_a_slow_start_then_a_steady_rate_stops_once_five_windows_agree_and_the_start_is_warm_up():
    clock = FakeClock()
    state = SteadyState(clock, warmup_steps=0, cv=0.05, windows=5, window_s=0.5)
    # 32 slow steps (a page cache filling: 1/16 s), then steady 1/128 s steps (exact in binary).
    times = [1 / 16] * 32 + [1 / 128] * 1000
    stop = drive(state, clock, times)
    assert state.stopped == "stable"
    # windows of 0.5 s: four slow windows of 8 steps (steps 0..31), then windows of 64 fast steps.
    assert state.counted_from() == 32  # nothing of the slow start is counted
    assert stop == 32 + 5 * 64 - 1  # stopped at the end of the fifth steady window
    meta = state.meta()
    assert meta["cv"] == pytest.approx(0.0, abs=1e-9) and meta["counted_from_step"] == 32
    assert meta["window_samples_per_s"] == pytest.approx([100 * 128] * 5)


def test_an_unsteady_run_stops_at_its_budget_and_counts_its_last_windows():
    clock = FakeClock()
    state = SteadyState(clock, warmup_steps=0, cv=0.05, windows=3, window_s=0.1, max_seconds=2.0)
    times = [0.01 if (i // 10) % 2 else 0.03 for i in range(10_000)]  # alternating fast and slow stretches
    stop = drive(state, clock, times)
    assert state.stopped == "budget"
    assert sum(times[: stop + 1]) == pytest.approx(2.0, abs=0.03)
    assert state.meta()["cv"] > 0.05
    assert state.counted_from() is not None and state.counted_from() > 0


def test_a_slow_start_that_is_itself_steady_for_five_windows_is_taken_as_the_steady_state():
    """The documented limit: a transient steady for ``windows`` windows looks like the steady state."""
    clock = FakeClock()
    state = SteadyState(clock, warmup_steps=0, cv=0.05, windows=5, window_s=0.5)
    assert drive(state, clock, [1 / 16] * 40 + [1 / 128] * 1000) == 39
    assert state.counted_from() == 0


def test_without_steady_only_the_budget_stops_and_nothing_becomes_warm_up_when_steps_run_out():
    clock = FakeClock()
    state = SteadyState(clock, warmup_steps=1, steady=False, window_s=0.05, max_seconds=0)
    assert drive(state, clock, [0.01] * 200) is None
    assert state.stopped == "steps" and state.counted_from() is None


def test_a_window_needs_three_steps_however_long_they_are():
    clock = FakeClock()
    state = SteadyState(clock, warmup_steps=0, cv=0.5, windows=2, window_s=0.01)
    stop = drive(state, clock, [1.0] * 10)
    assert stop == 5  # two windows of three 1-s steps


def test_variation():
    assert variation([10.0, 10.0]) == 0.0
    assert variation([9.0, 11.0]) == pytest.approx(0.1)
    assert variation([]) is None and variation([0.0, 0.0]) is None
