"""The CUDA side of pipeprof held against the real API's behaviour, without a GPU: no CUDA initialisation in
the script's process before the script makes one, the training device (not torch's current one) timed and
read, device spans between neighbouring events, no host synchronisation during counted steps."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import pipeprof
from pipeprof.gpu_check.sim_device import CASES, SimDevice, timer_fractions
from pipeprof.measure.clock import FakeClock
from pipeprof.script.device_clock import DeviceMarks
from pipeprof.script.event_file import read_events
from pipeprof.script.hooks import cuda_seen
from pipeprof.script.protocol import EVENTS_ENV

REPO = Path(pipeprof.__file__).resolve().parent.parent

FORKING_SCRIPT = textwrap.dedent("""
    import os, sys
    import torch
    # What a script that forks CUDA-using children checks first: the child may initialise CUDA state.
    pid = os.fork()
    if pid == 0:
        os._exit(3 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    print("child-bad-fork", os.waitstatus_to_exitcode(status) == 3)
""")


def test_a_child_forked_after_the_hooks_start_is_not_in_bad_fork(tmp_path):
    # The installed torch is a CUDA build: torch.cuda.is_available() runs cuInit even without a GPU, and
    # a child forked after it is "in bad fork" (it could not initialise CUDA). pipeprof's start must not.
    script = tmp_path / "forks.py"
    script.write_text(FORKING_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO), EVENTS_ENV: str(tmp_path / "events.jsonl")}
    done = subprocess.run([sys.executable, "-m", "pipeprof.script.boot", str(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "child-bad-fork False" in done.stdout
    start = read_events(tmp_path / "events.jsonl").start
    assert start["cuda_available"] is False  # no GPU here, found without cuInit


class _Cuda:
    """torch.cuda as ``cuda_seen`` uses it; ``is_available`` would initialise CUDA and is counted."""

    def __init__(self, initialized: bool, nvml_count: int) -> None:
        self.initialized, self.nvml_count, self.inits = initialized, nvml_count, 0

    def is_initialized(self) -> bool:
        return self.initialized

    def is_available(self) -> bool:
        self.inits += 1
        return True

    def _device_count_nvml(self) -> int:
        return self.nvml_count


def test_cuda_is_seen_through_nvml_until_the_script_initialises_it():
    before = _Cuda(initialized=False, nvml_count=2)
    assert cuda_seen(before) is True and before.inits == 0
    assert cuda_seen(_Cuda(initialized=False, nvml_count=-1)) is False  # NVML unreadable: none seen
    after = _Cuda(initialized=True, nvml_count=-1)
    assert cuda_seen(after) is True and after.inits == 1  # initialised by the script: torch's own answer
    assert cuda_seen(torch.cuda) is False


# --- the simulated device behaves like torch.cuda's events -----------------------------------------------

def test_simulated_events_follow_torchs_semantics_and_float32_milliseconds():
    clock = FakeClock(0.0)
    device = SimDevice(clock)
    never = device.event()
    assert never.query()  # torch: an event never recorded is complete
    never.synchronize()  # and waiting for it returns at once
    with pytest.raises(ValueError):  # torch's own check, before CUDA (torch 2.x: "Both events must be recorded")
        never.elapsed_time(never)
    start = device.event()
    start.record()
    clock.advance(4 * 3600.0)  # four hours later
    end = device.event()
    end.record()
    assert end.elapsed_time(end) == 0.0
    ms = start.elapsed_time(end)
    assert ms == float(np.float32(4 * 3600e3))  # a float32 count of milliseconds, as cudaEventElapsedTime's
    other = SimDevice(clock, index=1).event()
    other.record()
    with pytest.raises(RuntimeError):
        start.elapsed_time(other)  # two devices' events: invalid resource handle


def test_an_event_never_recorded_is_counted_dropped_not_raised():
    clock = FakeClock(0.0)
    device = SimDevice(clock)
    marks = DeviceMarks()
    done = device.event()
    done.record()
    marks.mark(0.0, done)
    marks.mark(0.5, device.event())  # never recorded: torch raises ValueError, not a CUDA RuntimeError
    assert marks.resolve(final=True) == [("G", 0.0, 0.0)]
    assert marks.dropped == 1


def test_device_times_hours_into_a_run_are_read_between_neighbouring_events():
    # Against one origin, a float32 millisecond count four hours on is ~0.5 ms coarse: a 1.25 ms step span
    # would read 1 ms or 1.5 ms. Read between neighbours, each span is exact to the microsecond.
    clock = FakeClock(0.0)
    device = SimDevice(clock)
    marks = DeviceMarks()
    first = device.event()
    first.record()
    marks.mark(0.0, first)
    clock.advance(4 * 3600.0)
    for i in range(20):
        clock.advance(0.00125)
        event = device.event()
        event.record()
        marks.mark(float(i + 1), event)
    resolved = marks.resolve(final=True)
    spans = np.diff([g[2] for g in resolved[1:]])
    assert spans == pytest.approx([0.00125] * 19, abs=1e-6)
    assert marks.dropped == 0


# --- side streams, the training device, lost events: what the event file says -----------------------------

def _run(events):
    from pipeprof.script.event_file import Events
    from pipeprof.script.event_steps import script_steps
    return script_steps(Events.of(events), 0.0, warmup_steps=0)


def _loop(copy_overlapped: int, device_event=None):
    """Two steps of a loop that waits 1 ms in next(), copies for 4 ms and computes to 10 ms (device times)."""
    events = [["L", 0, {"number": 0, "name": "train"}], ["I", 0, 0.0, 0.0]]
    for k in range(2):
        t = 10.0 * k
        events += [["N", 0, t, t + 1, 8, [None] * 9, None], ["G", t, 0.010 * k], ["G", t + 1, 0.010 * k + 0.001],
                   ["C", t + 1, t + 1.5, 1024, 0.004, copy_overlapped], ["O", t + 9], ["G", t + 9, 0.010 * k + 0.010]]
    if device_event is not None:
        events.append(["D", 30.0, device_event])
    return events


def test_a_copy_on_a_side_stream_is_not_taken_out_of_the_compute():
    serial = _run(_loop(0)).steps.iloc[1]
    overlapped = _run(_loop(1)).steps.iloc[1]
    assert serial["h2d_s"] == pytest.approx(0.004) and serial["compute_s"] == pytest.approx(0.005)
    assert overlapped["h2d_s"] == 0.0  # beside the compute (a prefetcher's copy): no serial time of the step
    assert overlapped["compute_s"] == pytest.approx(0.009)


def test_the_training_device_and_lost_device_events_are_said():
    cut = _run(_loop(0, {"device": "cuda:1", "refused_in_graph_capture": 3, "unresolved": 0}))
    assert cut.device == "cuda:1"
    assert cut.timing["device_events_lost"] == {"refused_in_graph_capture": 3, "unresolved": 0}
    assert "device_events_lost" not in _run(_loop(0, {"device": "cuda:0"})).timing


# --- the scenario step timer: no host synchronisation during counted steps; a device error keeps the steps ---

def test_a_long_run_synchronises_the_host_once_at_its_end():
    for name in ("input-bound", "host-ahead"):  # the device idle at times, or always behind the host
        case = dataclasses.replace(next(c for c in CASES if c.name == name), steps=600)
        seen = timer_fractions(case)
        assert seen["synchronizes"] <= 1, name  # the rows are made as their events complete (query())
        assert seen["timing"] == "cuda-events"


class FailingEvent:
    """A CUDA event on a device that hits a sticky error once ``broken[0]`` is set: every call raises."""

    def __init__(self, event, broken):
        self.event, self.broken = event, broken

    def _check(self):
        if self.broken[0]:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def record(self):
        self.event.record()

    def query(self):
        self._check()
        return self.event.query()

    def synchronize(self):
        self._check()
        self.event.synchronize()

    def elapsed_time(self, end):
        self._check()
        return self.event.elapsed_time(end.event)


def test_a_sticky_cuda_error_keeps_every_step_on_the_host_clock_and_says_so():
    from pipeprof.measure.steps import StepTimer

    clock = FakeClock(0.0)
    device, broken = SimDevice(clock), [False]
    timer = StepTimer(clock, 0.0, warmup_steps=1, device_events=lambda: FailingEvent(device.event(), broken),
                      keep_steps=2)
    for step in range(12):
        if step == 8:
            broken[0] = True  # a kernel faulted: the context is unusable from here on
        timer.begin()
        clock.advance(0.003)
        timer.waited()
        device.copy(0.001, pinned=True)
        timer.copied()
        device.launch(0.002, host_s=0.0005)  # the device keeps up: the early steps are rows before the error
        timer.computed(1, 0.5, 1.0)
    timer.finish()
    rows = timer.rows()
    assert [r["step"] for r in rows] == list(range(12))  # none lost
    assert rows[2]["loss"] == 0.5  # resolved before the error, on the device's clock
    assert rows[11]["loss"] != rows[11]["loss"]  # NaN: its loss could not be read
    assert rows[11]["step_s"] > 0 and rows[11]["h2d_s"] >= 0
    timing = timer.timing()
    assert timing["method"] == "mixed" and "illegal memory access" in timing["reason"]


# --- pipeprof's own runs: the training device, by its ordinal --------------------------------------------

def test_a_scenario_run_records_the_cuda_ordinal_it_trains_on():
    from pipeprof.pipeline.train import resolve_device

    assert str(resolve_device("auto", cuda_available=True)) == "cuda:0"
    assert str(resolve_device("cuda", cuda_available=True)) == "cuda:0"
    assert str(resolve_device("auto", cuda_available=False)) == "cpu"


def test_the_step_timers_events_are_recorded_on_the_training_devices_stream():
    from pipeprof.measure.cuda_device import StreamEvent, device_sync

    cuda = FakeStreams()
    device = torch.device("cuda", 1)
    start, end = StreamEvent(device, cuda), StreamEvent(device, cuda)
    start.record()
    end.record()
    assert cuda.recorded_on == ["stream of cuda:1", "stream of cuda:1"]  # not the current device's (0)
    assert start.elapsed_time(end) == 2.5
    assert device_sync(torch.device("cpu")) is None


class FakeStreams:
    """torch.cuda's events and streams as ``StreamEvent`` uses them."""

    def __init__(self):
        self.recorded_on = []
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing

            def record(self, stream=None):
                cuda.recorded_on.append(stream or "stream of the current device")

            def elapsed_time(self, end):
                return 2.5

        self.Event = Event

    def current_stream(self, device=None):
        return f"stream of {device}" if device is not None else "stream of the current device"


# --- DDP: the ranks agree on stopping without a host synchronisation per step -----------------------------

def test_ranks_agree_on_stopping_rarely_not_at_every_step():
    from pipeprof.workload.distributed import AGREE_EVERY_STEPS, DistributedParts

    parts = DistributedParts(rank=0, world_size=2, backend="nccl", device=torch.device("cuda", 1))
    agreed = []
    parts.agree = lambda stop: agreed.append(stop) or stop  # the all-reduce and its host read
    decide = parts.agreeing(lambda step, samples: step >= 40)
    stops = [decide(i, 32) for i in range(3 * AGREE_EVERY_STEPS)]
    assert len(agreed) == 3  # once every AGREE_EVERY_STEPS steps, at the same steps on every rank
    assert stops.index(True) == 2 * AGREE_EVERY_STEPS - 1  # the first agreement after the rank wanted to stop
    assert agreed == [False, True, True]


def test_a_side_stream_prefetcher_on_the_simulated_device_is_not_blamed_on_h2d(tmp_path):
    """A prefetcher (NVIDIA's data_prefetcher) copies the next batch on a side stream while the current one
    trains: the 3 ms copies hide behind 8 ms of kernels, the device's step is its kernels. Under the real
    hooks, the copies are recorded on the stream they were issued on and kept out of the step's serial time."""
    from torch.utils.data import DataLoader

    from pipeprof.gpu_check.sim_device import SimCuda, hooks_profiler
    from pipeprof.script.event_steps import read_events, script_steps
    from pipeprof.script.patches import Patches

    clock = FakeClock(100.0)
    main, side = SimDevice(clock), SimDevice(clock)  # two streams of one device
    sim = SimCuda(main)
    steps, warmup = 40, 5

    def load(i):
        clock.advance(0.002)
        return torch.zeros(4)

    def copying(original):
        def to(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            sim.current.launch(0.003, kind="h2d")  # queued on the current stream: the side one here
            out.sim_device = 0  # on the simulated device (SimCuda.holds)
            return out
        return to

    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    own = Patches()
    own.apply(torch.Tensor, "to", copying)
    path = tmp_path / "events.jsonl"
    try:
        with hooks_profiler(path)(clock, sim):
            ahead = None
            for x in DataLoader(list(range(steps)), batch_size=None, num_workers=0, collate_fn=load):
                with sim.using(side):
                    x.to(torch.float64, non_blocking=True)
                if ahead is None:
                    ahead = x
                    continue
                main.wait_stream(side)  # torch.cuda.current_stream().wait_stream(side)
                main.launch(0.008, host_s=0.0005)
                weight.grad = torch.ones(1)
                optimizer.step()
    finally:
        own.undo()
    cut = script_steps(read_events(path), 100.0, warmup)
    counted = cut.steps[~cut.steps["warmup"].astype(bool)]
    assert cut.timing["method"] == "cuda-events"
    assert counted["h2d_s"].sum() == 0.0  # every copy was beside the compute
    assert counted["step_s"].median() == pytest.approx(0.008, abs=1e-6)  # the device's pace: its kernels
    assert counted["compute_s"].median() == pytest.approx(0.008, abs=1e-6)


def test_the_real_cuda_device_times_the_training_device_while_another_is_current(tmp_path):
    """A rank training on cuda:1 with device 0 current (``.to(f"cuda:{rank}")`` without ``set_device``): the real
    ``CudaDevice`` over the simulated torch.cuda times cuda:1's stream, as the device saw it, and never asks
    anything of device 0 (no context there)."""
    from support.sim_cuda import SimTorchCuda, where_simulated

    from pipeprof.gpu_check.sim_device import device_truth, hooks_profiler, run_loop
    from pipeprof.script.device_clock import CudaDevice
    from pipeprof.script.event_steps import read_events, script_steps

    case = next(c for c in CASES if c.name == "host-ahead")
    clock, apis = FakeClock(100.0), []

    def real_device(stream):
        api = SimTorchCuda(clock, {stream.index: stream}, current=0)
        apis.append(api)
        return CudaDevice(api, where=where_simulated)

    path = tmp_path / "events.jsonl"
    run_loop(case, clock, hooks_profiler(path), hooks_device=real_device, device_index=1)
    cut = script_steps(read_events(path), 100.0, case.warmup_steps)
    assert apis[0].contexts == {1}  # device 0, the current one, untouched
    assert cut.device == "cuda:1" and cut.timing["method"] == "cuda-events"
    truth = device_truth(case)
    counted = cut.steps[~cut.steps["warmup"].astype(bool)]
    assert counted["data_wait_s"].sum() / counted["step_s"].sum() == pytest.approx(truth["data_wait"], abs=0.005)
    assert counted["h2d_s"].sum() / counted["step_s"].sum() == pytest.approx(truth["h2d"], abs=0.005)


def test_copy_events_of_older_files_read_as_serial_and_new_ones_keep_the_side_stream_flag(tmp_path):
    from pipeprof.script.hooks import _line

    old = '["C", 1.000000000, 1.500000000, 64, 0.250000000]\n'  # written before the side-stream flag
    new = _line(("C", 2.0, 2.5, 64, 0.25, 1))
    plain = _line(("C", 3.0, 3.5, 64, None))
    assert new == '["C", 2.000000000, 2.500000000, 64, 0.250000000, 1]\n'
    assert plain == '["C", 3.000000000, 3.500000000, 64, null, 0]\n'
    path = tmp_path / "events.jsonl"
    path.write_text(old + new + plain)
    copies = read_events(path).tables["C"]
    assert copies["overlapped"].tolist() == [0.0, 1.0, 0.0]
    assert copies["device_s"].tolist()[:2] == [0.25, 0.25]
    path.write_text(new + plain)  # one shape: the fast path
    assert read_events(path).tables["C"]["overlapped"].tolist() == [1.0, 0.0]


def test_the_collective_wait_absence_names_the_backend_that_reduces():
    from pipeprof.pipeline.train import collective_wait_absence

    assert "NCCL" not in collective_wait_absence("gloo") and "(gloo)" in collective_wait_absence("gloo")
    assert "(nccl)" in collective_wait_absence("nccl")
