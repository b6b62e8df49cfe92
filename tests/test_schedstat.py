"""Waiting for a core: the run-queue reader, the split of a script's off-CPU time, and real runs on this machine."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import pickle
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from pipeprof.measure import schedstat
from pipeprof.measure.schedstat import RunQueueWait, core_wait_s
from pipeprof.script import batches
from pipeprof.script.batches import Tagged, TimedCollate, install_fetch
from pipeprof.script.patches import Patches

LINUX_SCHEDSTAT = os.path.exists(schedstat.PATH) and (RunQueueWait()() or 0.0) > 0

# -- the reader --------------------------------------------------------------------------------------------


def test_a_reading_is_the_second_field_in_seconds(tmp_path):
    path = tmp_path / "schedstat"
    path.write_text("37213269 4000000 23\n")
    read = RunQueueWait(str(path))
    assert read() == pytest.approx(0.004)
    path.write_text("37213269 6500000 24\n")  # the same open file, read again at offset 0
    assert read() == pytest.approx(0.0065)


@pytest.mark.parametrize("text", ["garbage\n", ""])
def test_odd_schedstat_reads_as_unknown(tmp_path, text):
    path = tmp_path / "schedstat"
    path.write_text(text)
    assert RunQueueWait(str(path))() is None


def test_zero_readings_are_unknown_only_where_the_kernel_does_not_account_waits(tmp_path, monkeypatch):
    path = tmp_path / "schedstat"
    path.write_text("37213269 0 23\n")
    assert RunQueueWait(str(path))() == 0.0  # accounting off, or a thread that has not waited yet
    monkeypatch.setattr(schedstat, "_ACCOUNTING", [False])
    assert core_wait_s(0.010, 0.0, 0.0) is None  # off: every thread reads 0 forever; unknown, never 0
    assert core_wait_s(0.010, 0.0, 0.002) == pytest.approx(0.002)
    monkeypatch.setattr(schedstat, "_ACCOUNTING", [True])
    assert core_wait_s(0.010, 0.0, 0.0) == 0.0  # on: a new worker that never waited for a core


def test_accounting_is_read_from_the_first_process(tmp_path, monkeypatch):
    monkeypatch.setattr(schedstat, "_ACCOUNTING", [])
    (tmp_path / "on").write_text("123 456 7\n")
    assert schedstat.accounting_on(str(tmp_path / "on"))
    monkeypatch.setattr(schedstat, "_ACCOUNTING", [])
    (tmp_path / "off").write_text("123 0 7\n")
    assert not schedstat.accounting_on(str(tmp_path / "off"))
    monkeypatch.setattr(schedstat, "_ACCOUNTING", [])
    assert not schedstat.accounting_on(str(tmp_path / "missing"))


def test_a_missing_file_reads_as_unknown(tmp_path):
    assert RunQueueWait(str(tmp_path / "nothing"))() is None


def test_each_thread_reads_its_own_file(tmp_path):
    path = tmp_path / "schedstat"
    path.write_text("1 2000 3\n")
    read = RunQueueWait(str(path))
    fds: list[int | None] = []

    def read_and_note() -> None:
        assert read() == pytest.approx(2e-6)
        fds.append(read._local.file.fd)

    read_and_note()
    read_and_note()  # kept open
    thread = threading.Thread(target=read_and_note)
    thread.start()
    thread.join()
    assert fds[0] == fds[1] and fds[2] != fds[0] and None not in fds
    assert pickle.loads(pickle.dumps(read)).path == str(path)  # a spawned worker opens its own


def test_the_core_wait_is_the_delta_capped_to_the_off_cpu_time():
    assert core_wait_s(0.010, 1.000, 1.004) == pytest.approx(0.004)
    assert core_wait_s(0.010, 1.000, 1.050) == pytest.approx(0.010)  # readings and clocks a moment apart
    assert core_wait_s(0.010, 1.004, 1.000) == 0.0
    assert core_wait_s(-0.001, 1.000, 1.004) == 0.0
    assert core_wait_s(0.010, None, 1.004) is None and core_wait_s(0.010, 1.0, None) is None


@pytest.mark.skipif(not LINUX_SCHEDSTAT, reason="no /proc/thread-self/schedstat (not Linux, or schedstats off)")
def test_a_real_reading_grows_and_costs_about_a_microsecond():
    read = RunQueueWait()
    first = read()
    for _ in range(2000):
        last = read()
    assert first is not None and last is not None and last >= first
    t0 = time.perf_counter()
    for _ in range(2000):
        read()
    assert (time.perf_counter() - t0) / 2000 < 50e-6  # ~1 µs here; generous for a loaded machine


# -- a script's batches: off-CPU time split in _timed_fetch, on fake readings ------------------------------


class FakeClocks:
    """Wall, thread CPU and run-queue readings, scripted: ``__getitem__`` of each sample advances them."""

    def __init__(self, known: bool = True) -> None:
        self.wall, self.cpu, self.queue, self.known = 10.0, 1.0, 0.5, known

    def run_queue(self):
        return self.queue if self.known else None


class ScriptedSamples(Dataset):
    """Each sample: 3 ms on the CPU, 5 ms off it, of which 2 ms runnable waiting for a core."""

    def __init__(self, clocks: FakeClocks) -> None:
        self.clocks = clocks

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        c = self.clocks
        c.wall += 0.008
        c.cpu += 0.003
        c.queue += 0.002
        return torch.tensor([float(i)])


@pytest.fixture
def fake_clocks(monkeypatch):
    def make(known: bool = True) -> FakeClocks:
        clocks = FakeClocks(known)
        monkeypatch.setattr(batches, "clock", lambda: clocks.wall)
        monkeypatch.setattr(batches, "cpu_clock", lambda: clocks.cpu)
        monkeypatch.setattr(batches, "run_queue", clocks.run_queue)
        return clocks
    return make


def _records(loader: DataLoader) -> list[list]:
    patches = Patches()
    install_fetch(patches, SimpleNamespace(live=True))
    try:
        out = []
        for batch in loader:
            assert isinstance(batch, Tagged)
            out.append(batch.record)
        return out
    finally:
        patches.undo()


def test_a_script_batch_splits_off_cpu_time_into_fetch_and_waiting_for_a_core(fake_clocks):
    clocks = fake_clocks()
    records = _records(DataLoader(ScriptedSamples(clocks), batch_size=4, collate_fn=TimedCollate(default_collate)))
    assert len(records) == 2
    for r in records:
        worker, _, _, _, fetch_s, prep_s, _, samples, core_s = r
        assert worker == -1 and samples == 4
        assert prep_s == pytest.approx(4 * 0.003)
        assert core_s == pytest.approx(4 * 0.002)
        assert fetch_s == pytest.approx(4 * 0.003)  # 5 ms off the CPU, 2 of them waiting for a core


def test_a_script_batch_without_schedstat_keeps_off_cpu_time_as_fetch_and_says_unknown(fake_clocks):
    clocks = fake_clocks(known=False)
    records = _records(DataLoader(ScriptedSamples(clocks), batch_size=4, collate_fn=TimedCollate(default_collate)))
    for r in records:
        assert r[8] is None  # unknown, never 0
        assert r[4] == pytest.approx(4 * 0.005)


# -- real runs on this machine: CPU-only work crowded out, and sleep ------------------------------------


class Burning(Dataset):
    """CPU-only ``__getitem__``: about 3 ms of Python arithmetic, nothing off the CPU but preemption."""

    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int):
        t = time.thread_time()
        x = 0
        while time.thread_time() - t < 0.003:
            x += 1
        return torch.tensor([float(i)])


class Sleeping(Dataset):
    SLEEP_S = 0.004

    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int):
        time.sleep(self.SLEEP_S)
        return torch.tensor([float(i)])


def _burn(stop: threading.Event) -> None:
    block = b"x" * 2**22
    while not stop.is_set():
        hashlib.sha256(block).digest()  # releases the GIL: a core really busy, not a thread waiting for the GIL


def _worker_records(dataset: Dataset, burners: int) -> list[list]:
    loader = DataLoader(dataset, batch_size=8, num_workers=1, collate_fn=TimedCollate(default_collate),
                        multiprocessing_context="fork")
    stop = threading.Event()
    threads = [threading.Thread(target=_burn, args=(stop,), daemon=True) for _ in range(burners)]
    for t in threads:
        t.start()
    try:
        return _records(loader)
    finally:
        stop.set()
        for t in threads:
            t.join()


@pytest.mark.skipif(not LINUX_SCHEDSTAT, reason="no /proc/thread-self/schedstat (not Linux, or schedstats off)")
def test_a_cpu_only_worker_crowded_out_waits_for_a_core_and_fetches_nothing():
    records = _worker_records(Burning(), burners=max(2, os.cpu_count() or 1))  # a burning thread per core
    fetch_s = sum(r[4] for r in records)
    core_s = sum(r[8] for r in records)
    assert core_s > 0.01  # 96 × 3 ms of CPU work against busy cores: it waited for one
    assert core_s > 2 * fetch_s
    # nothing else takes it off the CPU: near-0 fetch in the typical batch (a batch may take a page fault)
    assert statistics.median(r[4] / (r[4] + r[5] + r[8]) for r in records) < 0.05


@pytest.mark.serial  # a wait for a core held to a bound: alone, not beside another test's processes
@pytest.mark.skipif(not LINUX_SCHEDSTAT, reason="no /proc/thread-self/schedstat (not Linux, or schedstats off)")
def test_a_sleeping_worker_fetches_about_its_sleep_and_waits_little_for_a_core():
    records = _worker_records(Sleeping(), burners=0)
    sleep_s = len(Sleeping()) * Sleeping.SLEEP_S
    fetch_s = sum(r[4] for r in records)
    core_s = sum(r[8] for r in records)
    # sleeping is off the CPU and never on a run queue (the readings bracket the clocks: a little slack)
    assert 0.9 * sleep_s <= fetch_s <= 1.5 * sleep_s + 0.01
    assert core_s < sleep_s  # waking up on a loaded machine waits for a core, for less than the sleep


# -- the whole program: pipeprof profile on a crowded machine ---------------------------------------------

FIXTURE = Path(__file__).parent / "fixtures" / "crowded_cores.py"


def _profile(tmp_path: Path, *args: str) -> tuple[dict, list[dict[str, str]]]:
    """summary.json and loading.csv's rows of ``pipeprof profile`` on the fixture."""
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "pipeprof", "profile", "--out", str(out), "--quiet", "--",
                           "python", str(FIXTURE), "--samples", "160", *args],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    (summary,) = out.glob("*/summary.json")
    with open(summary.parent / "loading.csv", newline="") as f:
        return json.loads(summary.read_text()), list(csv.DictReader(f))


@pytest.mark.integration
@pytest.mark.skipif(not LINUX_SCHEDSTAT, reason="no /proc/thread-self/schedstat (not Linux, or schedstats off)")
def test_profiled_in_memory_data_on_busy_cores_waits_for_a_core_not_for_storage(tmp_path):
    s, rows = _profile(tmp_path, "--burners", str(max(2, os.cpu_count() or 1)))
    loading = s["loading"]
    assert loading["core_wait_per_sample_s"] > 0
    assert loading["fractions"]["core_wait"] > 2 * loading["fractions"]["fetch"]  # was all "fetch" before
    assert loading["fractions"]["fetch"] < 0.25
    share = [float(r["fetch_s"]) / sum(float(r[c]) for c in ("fetch_s", "core_wait_s", "prep_s")) for r in rows]
    assert statistics.median(share) < 0.05  # the typical batch fetched nothing (a batch may take a page fault)
    assert s["verdict"]["class"] != "input:fetch"


@pytest.mark.integration
@pytest.mark.skipif(not LINUX_SCHEDSTAT, reason="no /proc/thread-self/schedstat (not Linux, or schedstats off)")
def test_profiled_sleeping_getitem_is_fetch_of_about_the_sleep(tmp_path):
    loading = _profile(tmp_path, "--sleep-ms", "3", "--transform-ms", "0")[0]["loading"]
    assert 0.0027 <= loading["fetch_per_sample_s"] <= 0.006
    assert loading["core_wait_per_sample_s"] < 0.003


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_opens_its_own_file(tmp_path):
    path = tmp_path / "schedstat"
    path.write_text("1 2000 3\n")
    read = RunQueueWait(str(path))
    read()
    assert hasattr(read._local, "file")
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread's file is forgotten, a reading opens the child's own
        ok = not hasattr(read._local, "file") and read() == pytest.approx(2e-6) and hasattr(read._local, "file")
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
