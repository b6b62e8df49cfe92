"""Device-clock attribution, tested on a simulated asynchronous GPU (``pipeprof.gpu_check.sim_device``).

A real training loop (a DataLoader, ``.to``, an optimizer) runs under the real
script hooks, the Python API and the scenario step timer, on a simulated
stream whose kernels and copies take known times while a fake host clock
moves only when the host works or waits. The truth is read off the simulated
device's own timeline; pipeprof sees only its events.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

import pipeprof
from pipeprof.gpu_check.sim_device import (
    CASES,
    LoopCase,
    SimDevice,
    device_truth,
    hooks_profiler,
    run_loop,
    simulated_fractions,
    timer_fractions,
)
from pipeprof.measure.clock import FakeClock
from pipeprof.script.device_clock import DeviceMarks
from pipeprof.script.event_steps import HOST_ONLY, read_events, script_steps

CASE = {c.name: c for c in CASES}
POINT = 0.005  # half a point: the simulation is exact, this is float and step-edge slack


# --- the simulated device itself ------------------------------------------------------------------------

def test_an_event_is_reached_at_once_on_an_idle_device_and_after_the_queue_on_a_busy_one():
    clock = FakeClock(10.0)
    device = SimDevice(clock)
    idle = device.event()
    idle.record()
    assert idle.at_s == 10.0 and idle.query()
    device.launch(0.008, host_s=0.001)  # queued at 10.001, runs to 10.009
    behind = device.event()
    behind.record()
    assert behind.at_s == pytest.approx(10.009)
    assert not behind.query()  # the host is at 10.001
    with pytest.raises(RuntimeError):
        idle.elapsed_time(behind)  # CUDA raises for an event not reached yet
    behind.synchronize()
    assert clock() == pytest.approx(10.009) and device.synchronizes == 1
    assert idle.elapsed_time(behind) == pytest.approx(9.0)  # ms


def test_a_pageable_copy_waits_for_the_queue_and_a_pinned_one_does_not():
    clock = FakeClock(0.0)
    device = SimDevice(clock)
    device.launch(0.010)
    device.copy(0.002, pinned=True)
    assert clock() == 0.0  # queued: the host goes on
    device.copy(0.002, pinned=False)
    assert clock() == pytest.approx(0.014)  # behind the kernel and the first copy, then its own


def test_device_marks_resolve_in_order_without_waiting_until_the_end():
    clock = FakeClock(0.0)
    device = SimDevice(clock)
    marks = DeviceMarks()
    first = device.event()
    first.record()
    marks.mark(0.0, first)
    device.launch(0.050)
    later = device.event()
    later.record()
    marks.mark(0.001, later)
    assert marks.resolve() == [("G", 0.0, 0.0)]  # the second is not reached: kept, nothing waited for
    assert device.synchronizes == 0 and len(marks) == 1
    clock.advance(0.060)
    assert marks.resolve() == [("G", 0.001, pytest.approx(0.050))]
    assert device.synchronizes == 0


# --- the script hooks on the simulated device -----------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_hooks_attribute_each_step_as_the_device_saw_it(case):
    truth = device_truth(case)
    seen = simulated_fractions(case)
    assert seen["timing"]["method"] == "cuda-events"
    assert seen["timing"]["parts"] == {"data_wait": "cuda-events", "h2d": "cuda-events", "compute": "cuda-events"}
    assert seen["data_wait"] == pytest.approx(truth["data_wait"], abs=POINT)
    assert seen["h2d"] == pytest.approx(truth["h2d"], abs=POINT)
    # the device idling while the host queues the kernels is the step's compute (launch overhead)
    assert seen["compute"] + seen["other"] == pytest.approx(truth["compute"] + truth["other"], abs=POINT)


def test_input_bound_by_hand():
    """10 ms to load, 1 ms copy, 4 ms kernels queued in 0.5 ms: the host's step is 10.5 ms; the device works 5 ms
    of it and sits idle 5.5 ms in next() (it finished the kernels 4.5 ms into the host's 10 ms wait)."""
    seen = simulated_fractions(CASE["input-bound"])
    assert seen["data_wait"] == pytest.approx(5.5 / 10.5, abs=1e-6)
    assert seen["h2d"] == pytest.approx(1 / 10.5, abs=1e-6)
    assert seen["compute"] == pytest.approx(4 / 10.5, abs=1e-6)


def test_a_batch_that_arrives_while_the_device_is_busy_counts_no_wait(tmp_path):
    case = CASE["host-ahead"]  # 5 ms in next(), the device 9 ms behind per step
    path = tmp_path / "events.jsonl"
    timeline = run_loop(case, FakeClock(100.0), hooks_profiler(path))
    steps = script_steps(read_events(path), 100.0, case.warmup_steps).steps
    counted = steps[~steps["warmup"]]
    assert counted["host_wait_s"].min() == pytest.approx(case.load_s)  # the host did sit in next()
    assert counted["data_wait_s"].max() == pytest.approx(0.0, abs=1e-9)  # but the device never idled for it
    assert counted["step_s"].median() == pytest.approx(case.copy_s + case.compute_s)  # the device's pace
    assert timeline.device.synchronizes == 1  # the run's last flush, once: never a synchronize per step


def test_events_are_written_during_the_run_not_only_at_the_end(tmp_path):
    """The event log resolves device events as the device reaches them (query()), at each flush."""
    case = dataclasses.replace(CASE["input-bound"], steps=120)  # 1.26 s of host time: flushes every 0.5 s
    path = tmp_path / "events.jsonl"
    written_during = []

    def profiling(clock, device):
        context = hooks_profiler(path)(clock, device)

        class Watch:
            def __enter__(self):
                return context.__enter__()

            def __exit__(self, *exc):
                written_during.append(sum(1 for line in path.read_text().splitlines() if line.startswith('["G"')))
                return context.__exit__(*exc)
        return Watch()

    run_loop(case, FakeClock(100.0), profiling)
    total = sum(1 for line in path.read_text().splitlines() if line.startswith('["G"'))
    # around each next() and at each step end, around iter() and the last next(); but not before the first batch
    # copy names the training device (iter() and the first next(): 4)
    assert total == 3 * case.steps + 4 - 4
    assert 0 < written_during[0] < total  # most were resolved and written before the end


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_without_a_device_clock_the_hooks_report_the_host_clock_and_say_so(case):
    seen = simulated_fractions(case, device_clock=False)
    assert seen["timing"]["method"] == "host-clock"
    assert seen["timing"]["reason"] == HOST_ONLY
    assert seen["timing"]["parts"]["h2d"] == "host-clock"
    # the host's own view: its time in next() over its step
    host_step_s = case.load_s + case.launch_s
    if not case.pinned or case.sync_every_step:
        host_step_s = None  # the host also waited for the device: no simple expression
    if host_step_s is not None:
        assert seen["data_wait"] == pytest.approx(case.load_s / host_step_s, abs=POINT)


def test_the_host_clock_overstates_the_stall_when_the_host_runs_ahead():
    """Why the device clock: with the host ahead, host time in next() is no stall at all."""
    case = CASE["host-ahead"]
    assert simulated_fractions(case, device_clock=False)["data_wait"] == pytest.approx(5 / 5.5, abs=POINT)
    assert simulated_fractions(case)["data_wait"] == pytest.approx(0.0, abs=POINT)
    # and a pageable copy's host time holds the previous step's kernels, which the device clock does not
    pageable = CASE["pageable"]
    assert simulated_fractions(pageable, device_clock=False)["h2d"] > 2 * device_truth(pageable)["h2d"]
    assert simulated_fractions(pageable)["h2d"] == pytest.approx(device_truth(pageable)["h2d"], abs=POINT)


def test_steps_begun_before_cuda_was_initialized_are_host_timed_and_the_run_says_mixed(tmp_path):
    case = LoopCase("late-init", load_s=0.005, copy_s=0.001, compute_s=0.008, steps=12, warmup_steps=2)
    path = tmp_path / "events.jsonl"

    def late(clock, device):  # the device's clock can be read from the 6th mark on (model.cuda() mid-loop)
        calls = {"n": 0}
        mark = device.mark

        def mark_late():
            calls["n"] += 1
            return mark() if calls["n"] > 12 else None
        device.mark = mark_late
        return hooks_profiler(path)(clock, device)

    run_loop(case, FakeClock(100.0), late)
    cut = script_steps(read_events(path), 100.0, case.warmup_steps)
    assert cut.timing["method"] == "mixed"
    assert "counted steps have host times without a device event" in cut.timing["reason"]
    late_steps = cut.steps[cut.steps["step"] >= 6]
    assert late_steps["data_wait_s"].max() == pytest.approx(0.0, abs=1e-9)


# --- the Python API and the scenario step timer ---------------------------------------------------------

@pytest.mark.parametrize("name", ["input-bound", "host-ahead"])
def test_the_python_api_attributes_as_the_device_saw_it(tmp_path, name):
    case = CASE[name]
    holder = {}

    def profiling(clock, device):
        holder["prof"] = pipeprof.profile(f"sim-{name}", out=tmp_path, quiet=True, warmup_steps=case.warmup_steps,
                                          clock=clock, device=device)
        return holder["prof"]

    run_loop(case, FakeClock(100.0), profiling)
    summary, truth = holder["prof"].summary, device_truth(case)
    assert summary["timing"]["method"] == "cuda-events"
    assert summary["fractions"]["data_wait"] == pytest.approx(truth["data_wait"], abs=POINT)
    assert summary["fractions"]["h2d"] == pytest.approx(truth["h2d"], abs=POINT)
    run_json = json.loads((holder["prof"].folder / "run.json").read_text())
    assert run_json["timing"]["parts"]["data_wait"] == "cuda-events"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_scenario_step_timer_attributes_as_the_device_saw_it(case):
    truth, seen = device_truth(case), timer_fractions(case)
    assert seen["timing"] == "cuda-events"
    assert seen["data_wait"] == pytest.approx(truth["data_wait"], abs=POINT)
    assert seen["h2d"] == pytest.approx(truth["h2d"], abs=POINT)
    assert seen["compute"] + seen["other"] == pytest.approx(truth["compute"] + truth["other"], abs=POINT)
    if not case.sync_every_step:
        assert seen["synchronizes"] == 1  # resolving at the end, once


def test_the_scenario_step_timer_without_events_is_the_host_clock():
    case = CASE["host-ahead"]
    seen = timer_fractions(case, device_clock=False)
    assert seen["timing"] == "host-clock"
    assert seen["data_wait"] == pytest.approx(case.load_s / (case.load_s + case.launch_s), abs=POINT)


class GrowingCuda:
    """torch.cuda's allocator counters as a stand-in: 1 MiB more allocated at every read."""

    def __init__(self):
        self.allocated = 100 << 20
        self.resets = 0

    def is_initialized(self):
        return True

    def memory_allocated(self, device):
        self.allocated += 1 << 20
        return self.allocated

    def memory_reserved(self, device):
        return 512 << 20

    def max_memory_allocated(self, device):
        return self.allocated + (8 << 20)

    def max_memory_reserved(self, device):
        return 512 << 20

    def reset_peak_memory_stats(self):
        self.resets += 1


def test_the_hooks_write_torch_cuda_memory_once_a_window_at_step_ends(tmp_path):
    from pipeprof.measure.cuda_memory import CudaMemoryWindows

    case = dataclasses.replace(CASE["input-bound"], steps=200)  # 2.1 s of host time: windows of 0.5 s
    path, cuda = tmp_path / "events.jsonl", GrowingCuda()
    run_loop(case, FakeClock(100.0), hooks_profiler(path, CudaMemoryWindows(cuda, window_s=0.5, device=0)))
    memory = script_steps(read_events(path), 100.0, case.warmup_steps).device_memory
    assert list(memory.columns) == ["t_s", "allocated_bytes", "reserved_bytes", "peak_allocated_bytes",
                                    "peak_reserved_bytes"]
    assert 5 <= len(memory) <= 7  # the first step end, one per 0.5 s of 2.1 s, and the end
    assert memory["t_s"].iloc[0] == pytest.approx(0.0105, abs=1e-6)  # from the run's t0, at the first step end
    gaps = memory["t_s"].diff().dropna().iloc[:-1]
    assert (gaps >= 0.5 - 1e-9).all() and (gaps < 0.5 + 0.0106).all()  # at the first step end past the window
    assert memory["allocated_bytes"].is_monotonic_increasing
    assert (memory["peak_allocated_bytes"] > memory["allocated_bytes"]).all()
    assert cuda.resets == 0  # the script's own peaks are never reset


def _trainer_loop(path, evaluate: bool):
    """A trainer-style loop on the simulated device: two batches a step (gradient accumulation) and, when
    ``evaluate``, a validation pass after each epoch. Load 6 ms a batch, copy 1 ms, kernels 4 ms (in evaluation
    too: the device then leaves a pass as it leaves a training step, and the steps after it are the same)."""
    import torch
    from torch.utils.data import DataLoader

    from pipeprof.gpu_check.sim_device import SimCuda
    from pipeprof.script.patches import Patches

    clock = FakeClock(100.0)
    device = SimDevice(clock)

    class Loads(torch.utils.data.Dataset):
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            clock.advance(0.006)
            return torch.zeros(2)

    def simulated_to(original):
        def to(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            device.copy(0.001, pinned=True)
            out.sim_device = 0  # a copy to the simulated device (SimCuda.holds)
            return out
        return to

    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    train = DataLoader(Loads(16), batch_size=1)
    val = DataLoader(Loads(4), batch_size=1)
    own = Patches()
    own.apply(torch.Tensor, "to", simulated_to)
    try:
        with hooks_profiler(path)(clock, SimCuda(device)):
            for _epoch in range(3):
                for i, x in enumerate(train):
                    x.to(torch.float64, non_blocking=True)
                    device.launch(0.004, host_s=0.0005)
                    if i % 2 == 1:
                        weight.grad = torch.ones(1)
                        optimizer.step()
                if evaluate:
                    for v in val:
                        v.to(torch.float64, non_blocking=True)
                        device.launch(0.004, host_s=0.0005)
    finally:
        own.undo()
    return script_steps(read_events(path), 100.0, 2).steps


def test_evaluation_passes_are_left_out_of_steps_on_the_device_clock_too(tmp_path):
    plain = _trainer_loop(tmp_path / "plain.jsonl", evaluate=False)
    with_eval = _trainer_loop(tmp_path / "eval.jsonl", evaluate=True)
    assert len(plain) == len(with_eval) == 24  # 8 steps of 2 batches an epoch
    for column in ("step_s", "data_wait_s", "h2d_s", "compute_s"):
        assert with_eval[column].to_numpy() == pytest.approx(plain[column].to_numpy(), abs=1e-6), column
    # by hand: a step is 2 x (6 ms load + 0.5 ms launch); the device works 2 x 5 ms, idles 2 x 1.5 ms in next()
    counted = with_eval[~with_eval["warmup"]]
    assert counted["step_s"].median() == pytest.approx(0.013)
    assert counted["data_wait_s"].median() == pytest.approx(0.003)
    assert counted["host_wait_s"].median() == pytest.approx(0.012)


class FakeTorchCuda:
    """torch.cuda as ``CudaDevice`` uses it: events record on the stream given (torch: the current device's
    current stream when none is), streams are per device, and a stream may be capturing a CUDA graph."""

    def __init__(self, current=0, capturing=False, refuse=False):
        self.current, self.capturing, self.refuse, self.initialized = current, capturing, refuse, True
        self.recorded_on = []  # the device of each recorded event's stream
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing

            def record(self, stream=None):
                if cuda.refuse:
                    raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
                cuda.recorded_on.append(cuda.current if stream is None else stream)

        self.Event = Event

    def is_initialized(self):
        return self.initialized

    def current_stream(self, device=None):
        return self.current if device is None else device  # a stream stands for its device here

    def is_current_stream_capturing(self):
        return self.capturing


class CudaTensor:
    is_cuda = True

    def __init__(self, index):
        self.device = type("device", (), {"index": index, "type": "cuda"})()


def test_events_are_recorded_on_the_training_devices_stream_not_the_current_one():
    from pipeprof.script.device_clock import CudaDevice

    cuda = FakeTorchCuda(current=0)
    device = CudaDevice(cuda)
    assert device.mark() is None  # no batch on CUDA yet: the training device is not known, nothing recorded
    assert device.holds(CudaTensor(1))  # .to(f"cuda:{rank}") without set_device: cuda:1, current still 0
    assert not device.holds(CudaTensor(0))
    assert device.mark() is not None and device.stream() == 1
    assert cuda.recorded_on == [1]  # never on device 0's stream (no context made there)


def test_a_stream_that_refuses_an_event_leaves_the_step_to_the_host_clock():
    """Recording a timing event while a stream is captured into a CUDA graph is refused and counted (written at
    the end, ``D``): the step is timed on the host, said so; no mark, no crash."""
    from pipeprof.script.device_clock import CudaDevice

    device = CudaDevice(FakeTorchCuda(capturing=True))
    device.holds(CudaTensor(0))
    assert device.mark() is None and device.refused == 1
    raising = CudaDevice(FakeTorchCuda(refuse=True))
    raising.holds(CudaTensor(0))
    assert raising.mark() is None and raising.refused == 1
    uninitialized = FakeTorchCuda()
    uninitialized.initialized = False  # CUDA not initialized: nothing is asked of it
    quiet = CudaDevice(uninitialized)
    quiet.holds(CudaTensor(0))
    assert quiet.mark() is None and quiet.refused == 0
