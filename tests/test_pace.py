"""The probes' pace (analysis.pace): measured from the run's own loop again, every probe read at the run's."""

import pytest

from pipeprof.analysis.pace import paced, probes_pace

WHAT_IFS = {
    "device_loop": {"samples_per_s": 900.0, "samples_per_s_per_window": [800.0, 900.0, 1000.0], "threads": 1,
                    "steps_per_window": [8, 9, 10], "parts": 2},
    "loader_workers": {"1": {"samples_per_s": 4000.0, "samples_per_s_per_window": [4000.0, 4000.0],
                             "receive_cpu_s_per_sample": 1e-5, "receive_cpu_s_per_sample_per_window": [1e-5, 1e-5],
                             "worker_cpu_s_per_sample": 2e-4, "startup_s": 0.05, "num_workers": 1}},
    "train_as_run": {"samples_per_s": 720.0, "samples_per_s_per_window": [700.0, 720.0, 740.0], "num_workers": 0},
    "train_workers": {"1": {"samples_per_s": 600.0, "compute_samples_per_s": 1200.0, "threads": 1}},
    "ram_loader": {"absent": "the data is already in RAM"},
    "took_s": 4.2,
}


def test_the_pace_is_the_runs_own_loop_again_over_the_run():
    pace = probes_pace(WHAT_IFS, "ram", 800.0)
    assert pace is not None and pace.factor == pytest.approx(0.9) and pace.source == "train_as_run"
    assert "720" in pace.words() and "800" in pace.words() and "x0.900" in pace.words()
    # Data on the device: the device loop is the run's own loop.
    device = probes_pace(WHAT_IFS, "device", 1000.0)
    assert device is not None and device.factor == pytest.approx(0.9) and device.source == "device_loop"


@pytest.mark.parametrize("what_ifs, run_rate", [
    ({**WHAT_IFS, "train_as_run": {"absent": "the run had 1 worker"}}, 800.0),
    ({k: v for k, v in WHAT_IFS.items() if k != "train_as_run"}, 800.0),
    (WHAT_IFS, None),
    (WHAT_IFS, 0.0),
    ({**WHAT_IFS, "train_as_run": {"samples_per_s": float("nan")}}, 800.0),
])
def test_no_pace_where_the_runs_own_loop_was_not_measured_again(what_ifs, run_rate):
    assert probes_pace(what_ifs, "ram", run_rate) is None


def test_every_probe_is_read_at_the_runs_pace_and_nothing_else_moves():
    out = paced(WHAT_IFS, 0.8)
    assert out["device_loop"]["samples_per_s"] == pytest.approx(900.0 / 0.8)
    assert out["device_loop"]["samples_per_s_per_window"] == pytest.approx([1000.0, 1125.0, 1250.0])
    assert out["device_loop"]["steps_per_window"] == [8, 9, 10] and out["device_loop"]["threads"] == 1
    workers = out["loader_workers"]["1"]
    assert workers["samples_per_s"] == pytest.approx(5000.0)
    assert workers["receive_cpu_s_per_sample"] == pytest.approx(0.8e-5)  # seconds a sample: shorter at the pace
    assert workers["receive_cpu_s_per_sample_per_window"] == pytest.approx([0.8e-5, 0.8e-5])
    assert workers["worker_cpu_s_per_sample"] == pytest.approx(1.6e-4)
    assert workers["startup_s"] == 0.05 and workers["num_workers"] == 1  # a start-up is not a rate
    assert out["train_workers"]["1"]["compute_samples_per_s"] == pytest.approx(1500.0)
    assert out["ram_loader"] == WHAT_IFS["ram_loader"] and out["took_s"] == 4.2
    assert WHAT_IFS["device_loop"]["samples_per_s"] == 900.0  # a new dict: the record is not touched
