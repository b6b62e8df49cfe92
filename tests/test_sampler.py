"""SystemSampler: arithmetic and bookkeeping against a scripted fake psutil, plus one real run."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections import namedtuple

import pandas as pd
import pytest

from pipeprof.measure.clock import FakeClock
from pipeprof.measure.gpu import ProcessGpu
from pipeprof.measure.sampler import SystemSampler, _next_deadline_s, main_thread_children
from pipeprof.run_folder import GPU_PROCESS_COLUMNS, GPU_SAMPLE_COLUMNS, PROCESS_COLUMNS, SAMPLE_COLUMNS
from pipeprof.script.job import rank_processes, rank_samples

ProcCpu = namedtuple("pcputimes", "user system children_user children_system")
CoreCpu = namedtuple("scputimes", "user nice system idle iowait irq softirq steal guest guest_nice")
Mem = namedtuple("pmem", "rss vms")
Io = namedtuple("pio", "read_count write_count read_bytes write_bytes")
FullMem = namedtuple("pfullmem", "rss vms uss")


class FakeNoSuchProcess(Exception):
    """Stands for psutil.NoSuchProcess."""


class FakeZombieProcess(FakeNoSuchProcess):
    """Stands for psutil.ZombieProcess (a NoSuchProcess, as in psutil)."""


class FakeAccessDenied(Exception):
    """Stands for psutil.AccessDenied."""


class FakeProcess:
    """A process whose counters the test sets by hand; ``gone`` makes every read raise."""

    def __init__(self, pid, cpu_s=0.0, rss=1000, read_bytes=0, uss=500):
        self.pid, self.cpu_s, self.rss, self.read_bytes, self.uss = pid, cpu_s, rss, read_bytes, uss
        self.gone = None  # an exception class every read raises, when set
        self.io_error = self.uss_error = None  # an exception io_counters / memory_full_info raise
        self.kids = []
        self.children_calls = self.uss_calls = 0

    def _check(self, error=None):
        if self.gone is not None:
            raise self.gone(self.pid)
        if error is not None:
            raise error

    def ppid(self):
        self._check()
        return 1

    def cmdline(self):
        self._check()
        return ["python", f"fake-{self.pid}"]

    def cpu_times(self):
        self._check()
        return ProcCpu(self.cpu_s / 2, self.cpu_s / 2, 99.0, 99.0)  # children_* must be ignored

    def memory_info(self):
        self._check()
        return Mem(self.rss, 10 * self.rss)

    def io_counters(self):
        self._check(self.io_error)
        return Io(1, 1, self.read_bytes, 0)

    def memory_full_info(self):
        self.uss_calls += 1
        self._check(self.uss_error)
        return FullMem(self.rss, 10 * self.rss, self.uss)

    def children(self, recursive=False):
        assert recursive
        self._check()
        self.children_calls += 1
        return list(self.kids)


class FakePsutil:
    NoSuchProcess = FakeNoSuchProcess
    ZombieProcess = FakeZombieProcess
    AccessDenied = FakeAccessDenied

    def __init__(self, root, cores=2):
        self.root = root
        self.cores = [[0.0] * 10 for _ in range(cores)]  # CoreCpu fields, seconds

    def Process(self, pid):
        assert pid == self.root.pid
        return self.root

    def cpu_times(self, percpu=False):
        assert percpu
        return [CoreCpu(*c) for c in self.cores]

    def core(self, i, **add_s):
        """Advance core i's counters by the given seconds per field."""
        for name, seconds in add_s.items():
            self.cores[i][CoreCpu._fields.index(name)] += seconds


def make(root=None, **kw):
    root = root or FakeProcess(100)
    ps = FakePsutil(root)
    clock = FakeClock(0.0)
    sampler = SystemSampler(root.pid, 10.0, clock=clock, psutil_module=ps, **kw)
    return sampler, ps, clock, root


def rows_of(sampler, pid):
    return [r for r in sampler.process_rows() if r["pid"] == pid]


def nan(x):
    return isinstance(x, float) and math.isnan(x)


def test_cpu_pct_from_deltas_nan_on_first_tick():
    sampler, ps, clock, root = make()
    root.cpu_s = 3.0
    sampler.tick()
    clock.advance(1.0)
    root.cpu_s += 0.5
    sampler.tick()
    clock.advance(0.5)
    root.cpu_s += 1.0  # two cores' worth over half a second
    sampler.tick()

    first, second, third = sampler.sample_rows()
    assert nan(first["main_cpu_pct"]) and nan(rows_of(sampler, 100)[0]["cpu_pct"])
    assert second["main_cpu_pct"] == pytest.approx(50.0)
    assert third["main_cpu_pct"] == pytest.approx(200.0)
    assert [r["t_s"] for r in sampler.sample_rows()] == [0.0, 1.0, 1.5]
    assert all(r["workers_cpu_pct"] == 0.0 and r["workers"] == 0 for r in sampler.sample_rows())


def test_system_cpu_per_core_and_mean():
    sampler, ps, clock, _ = make()
    ps.core(0, user=5.0, idle=5.0)
    sampler.tick()
    clock.advance(1.0)
    ps.core(0, user=0.4, system=0.1, idle=0.5)  # 50% busy
    ps.core(1, user=0.1, idle=0.6, iowait=0.3)  # iowait is not busy: 10%
    sampler.tick()
    clock.advance(1.0)
    # Guest time is already inside user on Linux; counting it twice would give 66.7%.
    ps.core(0, user=0.5, guest=0.5, idle=0.5)
    ps.core(1, user=1.0)
    sampler.tick()

    first, second, third = sampler.sample_rows()
    assert nan(first["cpu_core0_pct"]) and nan(first["cpu_core1_pct"]) and nan(first["cpu_util_pct"])
    assert second["cpu_core0_pct"] == pytest.approx(50.0)
    assert second["cpu_core1_pct"] == pytest.approx(10.0)
    assert second["cpu_util_pct"] == pytest.approx(30.0)
    assert third["cpu_core0_pct"] == pytest.approx(50.0)
    assert third["cpu_core1_pct"] == pytest.approx(100.0)
    assert third["cpu_util_pct"] == pytest.approx(75.0)


def test_core_with_no_elapsed_jiffies_is_unknown_not_idle():
    sampler, ps, clock, _ = make()
    sampler.tick()
    clock.advance(0.1)
    ps.core(0, user=0.1)
    sampler.tick()
    row = sampler.sample_rows()[1]
    assert row["cpu_core0_pct"] == pytest.approx(100.0)
    assert nan(row["cpu_core1_pct"])
    assert row["cpu_util_pct"] == pytest.approx(100.0)  # mean over the cores that are known


def test_rates_over_a_sliver_of_a_period_are_unknown():
    sampler, ps, clock, root = make()  # 10 Hz: period 0.1 s
    sampler.tick()
    clock.advance(0.1)
    root.cpu_s += 0.05
    sampler.tick()
    clock.advance(0.004)  # e.g. the final tick right after a regular one
    root.cpu_s += 0.01  # one 10 ms jiffy: would read 250%
    sampler.stop()
    regular, final = sampler.sample_rows()[1:]
    assert regular["main_cpu_pct"] == pytest.approx(50.0)
    assert nan(final["main_cpu_pct"]) and nan(final["read_bytes_per_s"])
    assert final["main_rss_bytes"] == 1000  # levels are still recorded


def test_workers_appear_and_vanish():
    sampler, ps, clock, root = make()
    a, b, c = FakeProcess(201, read_bytes=10_000), FakeProcess(202, read_bytes=50), FakeProcess(203)
    sampler.tick()  # t=0: main only
    root.kids = [a]
    clock.advance(1.0)
    sampler.tick()  # t=1: refresh finds a, which has no baseline yet
    row = sampler.sample_rows()[-1]
    assert row["workers"] == 1 and nan(row["workers_cpu_pct"])
    assert rows_of(sampler, 201)[0]["role"] == "worker" and rows_of(sampler, 100)[0]["role"] == "main"

    root.kids = [a, b, c]
    a.cpu_s += 0.25
    clock.advance(1.0)
    sampler.tick()  # t=2: b and c are new: only a's 25% is known
    row = sampler.sample_rows()[-1]
    assert row["workers"] == 3 and row["workers_cpu_pct"] == pytest.approx(25.0)
    assert row["workers_rss_bytes"] == 3000 and row["tree_rss_bytes"] == 4000

    # a exits and c turns zombie between tree refreshes: dropped, no crash.
    a.gone, c.gone = FakeNoSuchProcess, FakeZombieProcess
    b.cpu_s += 0.1
    b.read_bytes += 1000
    clock.advance(0.5)
    sampler.tick()
    row = sampler.sample_rows()[-1]
    assert row["workers"] == 1 and row["workers_cpu_pct"] == pytest.approx(20.0)
    assert row["read_bytes_per_s"] == pytest.approx(2000.0)  # a's 10_000 bytes do not count as -10_000
    assert row["workers_rss_bytes"] == 1000
    assert {r["pid"] for r in sampler.process_rows() if r["t_s"] == 2.5} == {100, 202}
    # every descendant seen is described once, as first seen, also after it is gone
    assert [(d["pid"], d["ppid"], d["cmdline"], d["first_t_s"]) for d in sampler.descendants()] == [
        (201, 1, ["python", "fake-201"], 1.0), (202, 1, ["python", "fake-202"], 2.0),
        (203, 1, ["python", "fake-203"], 2.0)]

    root.kids = []  # all workers gone: back to a true zero
    b.gone = FakeNoSuchProcess
    clock.advance(1.0)
    sampler.tick()
    row = sampler.sample_rows()[-1]
    assert row["workers"] == 0 and row["workers_cpu_pct"] == 0.0 and row["workers_rss_bytes"] == 0


def test_children_called_once_per_tree_refresh_not_every_tick():
    sampler, ps, clock, root = make(tree_refresh_s=1.0)
    for _ in range(9):  # t = 0, 0.25, ..., 2.0
        sampler.tick()
        clock.advance(0.25)
    assert root.children_calls == 3  # at t = 0, 1.0, 2.0
    sampler.stop()  # the final tick looks for workers once more
    assert root.children_calls == 4


def test_a_worker_started_between_refreshes_is_sampled_at_the_next_tick():
    """A pass's workers can start and end between two tree refreshes (a short epoch on a fast machine): the
    kernel's list of each process's children, read every tick, brings the refresh forward."""
    kernel: dict[int, list[int]] = {}
    sampler, ps, clock, root = make(tree_refresh_s=1.0, children_of=kernel.get)
    worker = FakeProcess(201)
    sampler.tick()  # t=0: main only
    root.kids, kernel[100] = [worker], [201]  # forked at t=0.1, gone by t=0.9
    for _ in range(3):
        clock.advance(0.25)
        sampler.tick()
    worker.gone, root.kids, kernel[100] = FakeNoSuchProcess, [], []
    clock.advance(0.25)
    sampler.tick()
    assert [r["t_s"] for r in rows_of(sampler, 201)] == [0.25, 0.5, 0.75]
    assert rows_of(sampler, 201)[0]["role"] == "worker" and root.children_calls == 2  # t=0, and once at 0.25


def test_children_of_the_main_thread_read_from_the_kernel():
    """The default reader of the kernel's list: this process's own children, None for a pid that is not."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        kids = main_thread_children(os.getpid())
        assert kids is None or child.pid in kids  # None: a kernel without the list (the refresh still runs)
    finally:
        child.kill()
        child.wait()
    assert main_thread_children(2**22 + 1) is None  # above any pid_max: no such process


def test_uss_only_every_interval_and_at_stop():
    worker = FakeProcess(201, uss=700)
    root = FakeProcess(100, uss=300)
    root.kids = [worker]
    sampler, ps, clock, _ = make(root, uss_interval_s=1.0)
    for _ in range(9):  # t = 0 .. 2.0 in 0.25 s steps
        sampler.tick()
        clock.advance(0.25)
    assert root.uss_calls == worker.uss_calls == 2
    with_uss = sorted({r["t_s"] for r in sampler.process_rows() if not nan(r["uss_bytes"])})
    assert with_uss == [1.0, 2.0]
    sampler.stop()
    assert root.uss_calls == worker.uss_calls == 3
    final = [r for r in sampler.process_rows() if r["t_s"] == 2.25]
    assert {r["pid"]: r["uss_bytes"] for r in final} == {100: 300, 201: 700}
    assert "uss_bytes" not in sampler.sample_rows()[0]


def test_read_bytes_per_s():
    worker = FakeProcess(201, read_bytes=1_000_000)
    root = FakeProcess(100, read_bytes=1000)
    root.kids = [worker]
    sampler, ps, clock, _ = make(root)
    sampler.tick()
    clock.advance(0.5)
    root.read_bytes += 4096
    worker.read_bytes += 1_000_000
    sampler.tick()
    first, second = sampler.sample_rows()
    assert nan(first["read_bytes_per_s"])
    assert second["read_bytes_per_s"] == pytest.approx((4096 + 1_000_000) / 0.5)
    assert rows_of(sampler, 201)[-1]["read_bytes"] == 2_000_000  # cumulative, as psutil reports


@pytest.mark.parametrize("error, text", [(AttributeError("no such method"), "platform"), (FakeAccessDenied("x"), "AccessDenied")])
def test_missing_io_counters_or_uss_is_nan_and_an_absence(error, text):
    sampler, ps, clock, root = make()
    root.io_error = root.uss_error = error
    sampler.tick()
    clock.advance(1.0)
    root.cpu_s += 0.3
    sampler.stop()
    assert set(sampler.absences) == {"io_counters", "uss"} and text in sampler.absences["io_counters"]
    row, final = sampler.sample_rows()[-1], rows_of(sampler, 100)[-1]
    assert nan(row["read_bytes_per_s"]) and row["main_cpu_pct"] == pytest.approx(30.0)  # still sampled
    assert nan(final["uss_bytes"]) and nan(final["read_bytes"]) and final["rss_bytes"] == 1000


def test_reused_pid_gets_fresh_baselines():
    old = FakeProcess(201, cpu_s=100.0)
    root = FakeProcess(100)
    root.kids = [old]
    sampler, ps, clock, _ = make(root)
    sampler.tick()
    new = FakeProcess(201, cpu_s=1.0)  # same pid, different process (unequal to the old one)
    root.kids = [new]
    clock.advance(1.0)
    sampler.tick()
    assert nan(rows_of(sampler, 201)[-1]["cpu_pct"])  # not (1 - 100) / 1 s


def test_root_gone_does_not_crash():
    worker = FakeProcess(201, rss=2000)
    root = FakeProcess(100)
    root.kids = [worker]
    sampler, ps, clock, _ = make(root)
    sampler.tick()
    root.gone = FakeNoSuchProcess
    clock.advance(1.0)
    sampler.tick()
    row = sampler.sample_rows()[-1]
    assert nan(row["main_cpu_pct"]) and nan(row["main_rss_bytes"])
    assert row["workers"] == 1 and row["tree_rss_bytes"] == 2000


class FakeGpu:
    """A GpuMonitor stand-in: fixed device readings, per-process readings the test sets (``on_gpu``)."""

    def __init__(self, on_gpu=None):
        self.absences = {"pcie_tx_bytes_per_s": "not supported"}
        self.calls = 0
        self.on_gpu = on_gpu or ProcessGpu(util_pct={}, mem_bytes={})

    def sample(self):
        self.calls += 1
        return {"gpu_util_pct": 90.0, "gpu_mem_used_bytes": 2**30,
                "pcie_rx_bytes_per_s": 1024.0, "pcie_tx_bytes_per_s": float("nan"),
                "gpu_sm_clock_mhz": 1400.0, "gpu_power_w": 250.0}

    def process_sample(self, tree_pids=()):
        return self.on_gpu


def test_gpu_columns_and_absences_with_a_gpu_monitor():
    gpu = FakeGpu()
    sampler, _, clock, _ = make(gpu=gpu)
    sampler.tick()
    clock.advance(0.1)
    sampler.tick()
    assert gpu.calls == 2
    for row in sampler.sample_rows():
        assert row["gpu_util_pct"] == 90.0 and row["gpu_mem_used_bytes"] == 2**30
        assert row["gpu_sm_clock_mhz"] == 1400.0 and row["gpu_power_w"] == 250.0
        assert set(GPU_SAMPLE_COLUMNS) <= set(row)
    assert sampler.absences == {"pcie_tx_bytes_per_s": "not supported"}


def test_per_process_gpu_columns_and_tree_totals():
    worker = FakeProcess(201)
    root = FakeProcess(100)
    root.kids = [worker]
    # 100 trains on the GPU, its worker holds a little memory (a CUDA context), 999 is another user's.
    gpu = FakeGpu(ProcessGpu(util_pct={100: 70.0, 999: 20.0}, mem_bytes={100: 3 * 2**30, 201: 2**20, 999: 2**32}))
    sampler, _, _, _ = make(root, gpu=gpu)
    sampler.tick()
    assert all(list(r) == PROCESS_COLUMNS + GPU_PROCESS_COLUMNS for r in sampler.process_rows())
    main, = rows_of(sampler, 100)
    child, = rows_of(sampler, 201)
    assert (main["gpu_util_pct"], main["gpu_mem_bytes"]) == (70.0, 3 * 2**30)
    assert (child["gpu_util_pct"], child["gpu_mem_bytes"]) == (0.0, 2**20)  # listed, no SM time
    row = sampler.sample_rows()[0]
    assert row["gpu_proc_util_pct"] == 70.0  # the tree only: not 999's
    assert row["gpu_proc_mem_bytes"] == 3 * 2**30 + 2**20
    assert "gpu_proc_mem_bytes" not in sampler.absences


def test_per_process_gpu_without_a_reading_is_nan_not_zero():
    root = FakeProcess(100)
    root.kids = [FakeProcess(201)]
    gpu = FakeGpu(ProcessGpu(util_pct=None, mem_bytes={100: 2**30}))  # the util buffer was empty this tick
    sampler, _, _, _ = make(root, gpu=gpu)
    sampler.tick()
    assert all(nan(r["gpu_util_pct"]) for r in sampler.process_rows())
    row = sampler.sample_rows()[0]
    assert nan(row["gpu_proc_util_pct"]) and row["gpu_proc_mem_bytes"] == 2**30


def test_gpu_processes_never_of_the_tree_are_named_as_unknown():
    """In a container NVML reports host pids: the tree is never listed, so its zero would be a silent lie."""
    gpu = FakeGpu(ProcessGpu(util_pct={}, mem_bytes={31337: 2**30}))
    sampler, _, clock, _ = make(gpu=gpu)
    sampler.tick()
    assert "another PID namespace" in sampler.absences["gpu_proc_mem_bytes"]
    assert "another PID namespace" in sampler.absences["gpu_proc_util_pct"]
    samples, processes = sampler.frames()
    assert samples["gpu_proc_util_pct"].isna().all() and samples["gpu_proc_mem_bytes"].isna().all()  # not 0
    assert processes["gpu_util_pct"].isna().all() and processes["gpu_mem_bytes"].isna().all()
    assert samples["gpu_util_pct"].tolist() == [90.0]  # the whole GPU's readings stand
    gpu.on_gpu = ProcessGpu(util_pct={}, mem_bytes={31337: 2**30, 100: 2**20})  # the tree's context appears
    clock.advance(0.1)
    sampler.tick()
    assert "gpu_proc_mem_bytes" not in sampler.absences
    samples, processes = sampler.frames()
    assert samples["gpu_proc_mem_bytes"].tolist() == [0.0, 2**20]  # matched: before its context, a true 0


def test_utilization_samples_of_host_pids_alone_also_make_the_trees_readings_unknown():
    """No memory list (usedGpuMemory not available): the utilization buffer's pids still tell the namespace."""
    gpu = FakeGpu(ProcessGpu(util_pct={31337: 80.0}, mem_bytes=None))
    sampler, _, _, _ = make(gpu=gpu)
    sampler.tick()
    samples, processes = sampler.frames()
    assert samples["gpu_proc_util_pct"].isna().all() and processes["gpu_util_pct"].isna().all()  # not 0 %
    assert "another PID namespace" in sampler.absences["gpu_proc_util_pct"]


def test_row_keys_follow_the_contract():
    root = FakeProcess(100)
    root.kids = [FakeProcess(201)]
    sampler, _, _, _ = make(root)
    sampler.tick()
    row = sampler.sample_rows()[0]
    assert list(row) == SAMPLE_COLUMNS + ["cpu_core0_pct", "cpu_core1_pct"]
    assert not set(GPU_SAMPLE_COLUMNS) & set(row)
    assert all(list(r) == PROCESS_COLUMNS for r in sampler.process_rows())  # no GPU columns without a GPU


def test_t_s_is_relative_to_the_given_t0():
    root = FakeProcess(100)
    clock = FakeClock(100.0)
    sampler = SystemSampler(100, clock=clock, t0_s=90.0, psutil_module=FakePsutil(root))
    sampler.tick()
    assert sampler.sample_rows()[0]["t_s"] == 10.0
    default_t0 = SystemSampler(100, clock=clock, psutil_module=FakePsutil(root))
    clock.advance(2.5)
    default_t0.tick()
    assert default_t0.sample_rows()[0]["t_s"] == 2.5


@pytest.mark.parametrize("kw", [{"sample_hz": 0}, {"tree_refresh_s": -1}, {"uss_interval_s": 0}])
def test_bad_settings_are_refused(kw):
    with pytest.raises(ValueError):
        SystemSampler(100, psutil_module=FakePsutil(FakeProcess(100)), **kw)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_failing_thread_is_reported_by_stop():
    class Broken(FakePsutil):
        calls = 0

        def cpu_times(self, percpu=False):
            self.calls += 1
            if self.calls > 1:
                raise ValueError("bug in the sampler")
            return super().cpu_times(percpu)

    ps = Broken(FakeProcess(100))
    sampler = SystemSampler(100, 200.0, psutil_module=ps)
    sampler.start()
    give_up = time.perf_counter() + 5.0
    while ps.calls < 2 and time.perf_counter() < give_up:
        time.sleep(0.01)
    with pytest.raises(RuntimeError, match="thread failed") as info:
        sampler.stop()
    assert isinstance(info.value.__cause__, ValueError)


def test_ticks_stay_on_a_fixed_grid_and_skip_missed_deadlines():
    assert _next_deadline_s(1.0, 0.95, 0.1) == 1.0  # on time: wait for it
    assert _next_deadline_s(1.0, 1.0, 0.1) == pytest.approx(1.1)
    assert _next_deadline_s(1.0, 1.25, 0.1) == pytest.approx(1.3)  # 1.0, 1.1, 1.2 missed: skipped
    assert _next_deadline_s(1.0, 1.25, 0.1) > 1.25


def test_stop_is_prompt_with_a_long_period():
    sampler = SystemSampler(os.getpid(), 0.2)  # one tick every 5 s
    started = time.perf_counter()
    with sampler:
        time.sleep(0.05)
    assert time.perf_counter() - started < 1.0
    assert len(sampler.sample_rows()) == 2  # the start tick and the final tick


def test_real_thread_against_this_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)"])
    try:
        sampler = SystemSampler(os.getpid(), 20.0, tree_refresh_s=0.05)
        with sampler:
            # Wait for ticks rather than a fixed time: a VM stall must not fail the test.
            give_up = time.perf_counter() + 30.0
            while len(sampler.sample_rows()) < 6 and time.perf_counter() < give_up:
                sum(range(10_000))  # keep the main process busy
    finally:
        child.kill()
        child.wait()
    samples = sampler.sample_rows()
    assert len(samples) >= 7
    times = [r["t_s"] for r in samples]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert all(r["main_rss_bytes"] > 0 and r["tree_rss_bytes"] >= r["main_rss_bytes"] for r in samples)
    assert max(r["workers"] for r in samples) >= 1  # the child process was found
    later = samples[1:]
    assert all(0.0 <= r["cpu_util_pct"] <= 100.0 for r in later if not nan(r["cpu_util_pct"]))
    assert any(r["main_cpu_pct"] > 10.0 for r in later if not nan(r["main_cpu_pct"]))
    assert all(r["read_bytes_per_s"] >= 0 for r in later if not nan(r["read_bytes_per_s"]))
    final_main = [r for r in sampler.process_rows() if r["pid"] == os.getpid()][-1]
    assert final_main["uss_bytes"] > 0 or "uss" in sampler.absences


def test_each_rank_gets_its_own_gpu_share_from_the_processes_table():
    # A node: the launcher 10, ranks 100 and 200, rank 100's DataLoader worker 101; two ticks.
    processes = pd.DataFrame([
        {"t_s": t, "pid": pid, "role": "worker", "cpu_pct": 1.0, "rss_bytes": 1, "read_bytes": 0,
         "uss_bytes": float("nan"), "gpu_util_pct": util, "gpu_mem_bytes": mem}
        for t, pid, util, mem in [(0.0, 10, 0.0, 0.0), (0.0, 100, 60.0, 2**30), (0.0, 101, 0.0, 2**20),
                                  (0.0, 200, 30.0, 2**31), (1.0, 10, float("nan"), 0.0),
                                  (1.0, 100, float("nan"), 2**30), (1.0, 101, float("nan"), 2**20),
                                  (1.0, 200, float("nan"), 2**31)]])
    samples = pd.DataFrame({"t_s": [0.0, 1.0], "gpu_util_pct": [95.0, 90.0],
                            "gpu_proc_util_pct": [90.0, float("nan")], "gpu_proc_mem_bytes": [3 * 2**30 + 2**20] * 2})
    rank0 = rank_samples(samples, processes, 100, [101])
    assert list(rank0["gpu_proc_util_pct"][:1]) == [60.0] and nan(rank0["gpu_proc_util_pct"][1])  # no reading
    assert list(rank0["gpu_proc_mem_bytes"]) == [2**30 + 2**20] * 2
    assert list(rank0["gpu_util_pct"]) == [95.0, 90.0]  # the device's, as it is
    rank1 = rank_samples(samples, processes, 200, [])
    assert list(rank1["gpu_proc_util_pct"][:1]) == [30.0] and list(rank1["gpu_proc_mem_bytes"]) == [2**31] * 2
    assert set(rank_processes(processes, 200, [])["gpu_util_pct"].dropna()) == {30.0}
    cpu_only = rank_samples(samples.drop(columns=["gpu_proc_util_pct", "gpu_proc_mem_bytes"]),
                            processes.drop(columns=["gpu_util_pct", "gpu_mem_bytes"]), 100, [101])
    assert "gpu_proc_util_pct" not in cpu_only
