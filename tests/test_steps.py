"""Step timing arithmetic, driven by a fake clock and fake device events."""

import pytest

from pipeprof.measure.clock import FakeClock
from pipeprof.measure.steps import StepTimer, ThroughputTimer


def drive(timer, clock, phases, samples=32):
    """Run steps with (wait_s, h2d_s, compute_s, bookkeeping_s) each on the fake clock."""
    for epoch, (wait_s, h2d_s, compute_s, extra_s) in enumerate(phases):
        timer.begin()
        clock.advance(wait_s)
        timer.waited()
        clock.advance(h2d_s)
        timer.copied()
        clock.advance(compute_s)
        timer.computed(samples, loss=1.5 - 0.1 * epoch, correct=samples // 2, epoch=0)
        clock.advance(extra_s)
    timer.finish()


def test_host_clock_phases_and_step_span():
    clock = FakeClock(100.0)
    timer = StepTimer(clock, t0_s=100.0, warmup_steps=1)
    drive(timer, clock, [(0.5, 0.01, 0.2, 0.02), (0.1, 0.02, 0.3, 0.03), (0.0, 0.0, 0.4, 0.05)])
    rows = timer.rows()
    assert [r["warmup"] for r in rows] == [True, False, False]
    assert rows[0]["t_start_s"] == 0.0
    assert rows[1]["t_start_s"] == pytest.approx(0.73)
    assert rows[1]["data_wait_s"] == pytest.approx(0.1)
    assert rows[1]["host_wait_s"] == pytest.approx(0.1)
    assert rows[1]["h2d_s"] == pytest.approx(0.02)
    assert rows[1]["compute_s"] == pytest.approx(0.3)
    # begin-to-begin: the loop's own bookkeeping after compute belongs to the step
    assert rows[1]["step_s"] == pytest.approx(0.45)
    # the last step ends at finish()
    assert rows[2]["step_s"] == pytest.approx(0.45)
    assert rows[2]["loss"] == pytest.approx(1.3)
    assert rows[2]["correct"] == 16
    assert timer.method == "host-clock"


class FakeEvent:
    """A device event stamped by a fake device timeline (seconds)."""

    def __init__(self, device):
        self.device = device
        self.at_s = None

    def record(self):
        self.device.recorded.append(self)

    def elapsed_time(self, end):
        return (end.at_s - self.at_s) * 1e3  # milliseconds, like torch.cuda.Event

    def synchronize(self):
        self.device.synchronized += 1

    def query(self):
        return False  # never known done before the end: the timer must wait for it then


class FakeDevice:
    def __init__(self):
        self.recorded = []
        self.synchronized = 0

    def event(self):
        return FakeEvent(self)


def test_device_events_attribute_async_compute_to_compute_not_to_the_next_wait():
    """Host launches compute in 1 ms and waits 50 ms for data, while the device computes 40 ms.

    Host clocks would call each step ~98% data wait. On the device timeline the
    device is busy 40 ms of every 51 ms step and idle only 11 ms, and the wait
    is only the part of the idle gap the host spent blocked in next().
    """
    clock = FakeClock(0.0)
    device = FakeDevice()
    timer = StepTimer(clock, t0_s=0.0, warmup_steps=0, device_events=device.event)
    drive(timer, clock, [(0.050, 0.0, 0.001, 0.0)] * 3)
    # Device timeline: step i's copy starts once its batch is there (host time
    # after the wait) and takes 1 ms; compute takes 40 ms.
    events = device.recorded
    assert len(events) == 9  # three per step, none synchronized during the run
    assert device.synchronized == 0
    t = 0.0
    for i in range(3):
        start, copied, done = events[3 * i : 3 * i + 3]
        t = max(t, 0.051 * i + 0.050)  # the host issues the copy after its wait
        start.at_s, copied.at_s, done.at_s = t, t + 0.001, t + 0.041
        t = done.at_s
    rows = timer.rows()
    assert device.synchronized == 1  # once, lazily, when resolving
    r = rows[1]
    assert r["h2d_s"] == pytest.approx(0.001)
    assert r["compute_s"] == pytest.approx(0.040)
    assert r["step_s"] == pytest.approx(0.051)  # compute end to compute end
    assert r["host_wait_s"] == pytest.approx(0.050)
    assert r["data_wait_s"] == pytest.approx(0.010)  # the device sat idle 10 ms
    assert r["data_wait_s"] + r["h2d_s"] + r["compute_s"] <= r["step_s"] + 1e-12
    assert timer.method == "cuda-events"


def test_device_idle_gap_larger_than_host_wait_goes_to_other():
    clock = FakeClock(0.0)
    device = FakeDevice()
    timer = StepTimer(clock, t0_s=0.0, device_events=device.event)
    drive(timer, clock, [(0.002, 0.0, 0.001, 0.0)] * 2)
    e = device.recorded
    for ev, at in zip(e, [0.0, 0.001, 0.005, 0.025, 0.026, 0.030]):  # 20 ms idle gap, 2 ms of it waiting
        ev.at_s = at
    r = timer.rows()[1]
    assert r["data_wait_s"] == pytest.approx(0.002)
    assert r["step_s"] == pytest.approx(0.025)
    other = r["step_s"] - r["data_wait_s"] - r["h2d_s"] - r["compute_s"]
    assert other == pytest.approx(0.018)


def test_throughput_timer_counts_after_warmup_and_synchronizes():
    clock = FakeClock(0.0)
    syncs = []
    timer = ThroughputTimer(clock, warmup_steps=2, synchronize=lambda: syncs.append(clock()))
    drive(timer, clock, [(0.1, 0.0, 0.4, 0.0)] * 6, samples=10)
    assert timer.samples == 40
    assert timer.samples_per_s == pytest.approx(40 / 2.0)
    assert syncs == [pytest.approx(1.0), pytest.approx(3.0)]


def test_paused_time_is_taken_out_of_the_wait_and_the_step():
    clock = FakeClock(0.0)
    timer = StepTimer(clock, t0_s=0.0)
    timer.begin()
    clock.advance(0.01)
    timer.pause()
    clock.advance(5.0)  # e.g. dropping the page cache: not training
    timer.resume()
    clock.advance(0.02)
    timer.waited()
    clock.advance(0.001)
    timer.copied()
    clock.advance(0.1)
    timer.computed(8, 1.0, 4)
    timer.finish()
    row = timer.rows()[0]
    assert row["data_wait_s"] == pytest.approx(0.03)
    assert row["step_s"] == pytest.approx(0.131)


def test_throughput_timer_excludes_paused_time():
    clock = FakeClock(0.0)
    timer = ThroughputTimer(clock, warmup_steps=0)
    timer.begin()
    timer.pause()
    clock.advance(3.0)
    timer.resume()
    clock.advance(1.0)
    timer.computed(10, 0.0, 0)
    timer.finish()
    assert timer.samples_per_s == pytest.approx(10.0)


def test_ready_batches_reads_the_loader_queue():
    import math

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from pipeprof.measure.prefetch import ready_batches

    loader = DataLoader(TensorDataset(torch.zeros(400, 4)), batch_size=10, num_workers=2, prefetch_factor=3)
    iterator = iter(loader)
    next(iterator)
    import time

    deadline = time.monotonic() + 10
    while ready_batches(iterator) < 6 and time.monotonic() < deadline:  # workers fill 2 x 3 slots
        time.sleep(0.01)
    assert ready_batches(iterator) == 6
    next(iterator)
    assert ready_batches(iterator) <= 6
    del iterator
    assert math.isnan(ready_batches(iter(DataLoader(TensorDataset(torch.zeros(4, 1))))))  # no queue: unknown


def test_a_long_run_streams_its_rows_to_disk_and_they_read_back_the_same(tmp_path):
    """With a file-backed spool only ~keep_steps steps (and one chunk of rows) stay in memory."""
    from pipeprof.measure.spool import Spool
    from pipeprof.run_folder import STEP_COLUMNS

    phases = [(0.002 * (i % 7), 0.0005, 0.003, 0.001) for i in range(500)]
    clock_a, clock_b = FakeClock(0.0), FakeClock(0.0)
    held = StepTimer(clock_a, t0_s=0.0, warmup_steps=5, keep_steps=10 ** 6)
    streamed = StepTimer(clock_b, t0_s=0.0, warmup_steps=5, keep_steps=8,
                         spool=Spool(STEP_COLUMNS, folder=tmp_path, name="steps", chunk_rows=50))
    drive(held, clock_a, phases)
    largest_pending = 0
    for i, (wait, h2d, compute, other) in enumerate(phases):  # drive() by hand, watching what stays in memory
        streamed.begin()
        clock_b.advance(wait)
        streamed.waited()
        clock_b.advance(h2d)
        streamed.copied()
        clock_b.advance(compute)
        streamed.computed(32, loss=1.5 - 0.1 * i, correct=16, epoch=0)
        clock_b.advance(other)
        largest_pending = max(largest_pending, len(streamed._pending))
    streamed.finish()
    assert largest_pending <= 2 * 8 + 1 and len(streamed.spool._rows) < 50
    assert streamed.spool.path.stat().st_size > 0  # written as it went
    a, b = held.frame(), streamed.frame()
    assert list(b.columns) == STEP_COLUMNS and len(b) == 500 == streamed.steps
    for column in ("step", "epoch", "samples"):
        assert b[column].tolist() == a[column].tolist()
    assert b["warmup"].tolist() == a["warmup"].tolist()
    for column in ("t_start_s", "data_wait_s", "h2d_s", "compute_s", "step_s", "loss"):
        assert b[column].to_numpy() == pytest.approx(a[column].to_numpy())
