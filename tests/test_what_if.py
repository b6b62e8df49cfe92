"""The what-if probes after a run (measure.what_if): windows on a fake clock, small real workloads, run.json."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import torch

from pipeprof.measure.clock import FakeClock
from pipeprof.measure.loading import LoadingRecorder, TimedDataset
from pipeprof.measure.probe_plan import probe_plan, workers_wanted
from pipeprof.measure.what_if import (
    TOTAL_BUDGET_S,
    Windows,
    as_run_probe,
    as_the_run_reads,
    both_parts,
    device_batches,
    device_loop,
    loader_alone,
    loader_workers,
    measure_what_ifs,
    train_workers,
    workers_to_probe,
)
from pipeprof.pipeline.train import build_workload, profile_scenario, train_loop
from pipeprof.scenario import DataSpec, LoaderSpec, ModelSpec, ProfileSpec, Scenario, TrainSpec
from pipeprof.script.segments import plan
from pipeprof.storage.device import DeviceBatches
from pipeprof.storage.pagecache import DropResult


def tiny(storage: str = "ram", cache: str = "warm", samples: int = 512, steps: int = 12) -> Scenario:
    return Scenario(name=f"what-if-{storage}", data=DataSpec(storage=storage, samples=samples, cache=cache),
                    loader=LoaderSpec(batch_size=32, num_workers=0), model=ModelSpec(hidden=[16]),
                    train=TrainSpec(steps=steps, warmup_steps=2, device="cpu"), profile=ProfileSpec(sample_hz=10))


def run_steps(windows: Windows, clock: FakeClock, step_s: float, samples: int = 32, cap: int = 1000) -> int:
    for i in range(cap):
        clock.advance(step_s)
        if windows.step_done(samples):
            return i + 1
    raise AssertionError("the windows never stopped")


def test_windows_are_time_bounded_and_keep_every_window_rate():
    clock = FakeClock()
    win = Windows(clock, window_s=0.12, windows=3, warmup=2, budget_s=10.0)
    steps = run_steps(win, clock, 0.05)
    # A window closes at the first step end 0.12 s after it opened: 3 steps of 50 ms = 0.15 s.
    assert steps == 2 + 3 * 3
    out = win.result(batch_size=32)
    assert out["samples_per_s_per_window"] == pytest.approx([3 * 32 / 0.15] * 3)
    assert out["samples_per_s"] == pytest.approx(3 * 32 / 0.15)
    assert out["steps_per_window"] == [3, 3, 3] and out["cut_short"] is False and out["batch_size"] == 32


def test_windows_median_of_uneven_windows():
    clock = FakeClock()
    win = Windows(clock, window_s=0.1, windows=3, warmup=0, budget_s=10.0)
    for step_s in (0.1, 0.2, 0.4):  # one step per window: 320, 160, 80 samples/s
        clock.advance(step_s)
        done = win.step_done(32)
    assert done
    assert win.result()["samples_per_s_per_window"] == pytest.approx([320.0, 160.0, 80.0])
    assert win.result()["samples_per_s"] == pytest.approx(160.0)


def test_the_budget_cuts_the_open_window_short():
    clock = FakeClock()
    win = Windows(clock, window_s=0.5, windows=3, warmup=1, budget_s=0.5)
    # Warm-up ends at 0.2 s; steps end at 0.4 and 0.6 s: the budget is spent, the window (2 steps, 0.4 s) closes.
    assert run_steps(win, clock, 0.2) == 3
    out = win.result()
    assert out["samples_per_s_per_window"] == pytest.approx([2 * 32 / 0.4])
    assert out["cut_short"] is True


def test_a_window_holds_at_least_min_steps_however_long_they_take():
    clock = FakeClock()
    win = Windows(clock, window_s=0.1, windows=2, warmup=0, budget_s=10.0, min_steps=3)
    # Steps of 0.2 s pass window_s at the first, but a window waits for its third: 3 x 32 samples in 0.6 s.
    assert run_steps(win, clock, 0.2) == 6
    out = win.result()
    assert out["steps_per_window"] == [3, 3] and out["samples_per_s_per_window"] == pytest.approx([160.0, 160.0])
    assert out["cut_short"] is False


def test_a_window_short_of_min_steps_when_the_budget_ends_is_cut_short():
    clock = FakeClock()
    win = Windows(clock, window_s=0.1, windows=3, warmup=0, budget_s=0.5, min_steps=4)
    assert run_steps(win, clock, 0.2) == 3  # 0.6 s: spent with 3 steps in the only window
    out = win.result()
    assert out["steps_per_window"] == [3] and out["cut_short"] is True


def test_a_window_the_budget_ends_short_of_min_steps_is_dropped_beside_a_full_one():
    clock = FakeClock()
    win = Windows(clock, window_s=0.1, windows=3, warmup=0, budget_s=0.7, min_steps=3)
    # One full window of 3 steps (0.6 s), then the budget ends after 1 step of the next: that one is dropped.
    assert run_steps(win, clock, 0.2) == 4
    out = win.result()
    assert out["steps_per_window"] == [3] and out["samples_per_s_per_window"] == pytest.approx([160.0])
    assert out["cut_short"] is True


def test_steps_slower_than_the_budget_leave_the_probe_absent_with_the_reason():
    clock = FakeClock()
    win = Windows(clock, window_s=0.1, windows=3, warmup=2, budget_s=0.5)
    assert run_steps(win, clock, 0.4) == 2  # spent during the warm-up
    out = win.result()
    assert "samples_per_s" not in out and "budget" in out["absent"]


def test_the_device_loop_is_the_real_loop_over_on_device_data_taken_by_a_shuffled_index():
    work = build_workload(tiny("ram"))
    batches = device_batches(work)
    assert isinstance(batches, DeviceBatches) and batches.shuffle
    assert tuple(batches.dataset.x.shape) == (512, 784) and batches.batch_size == 32
    clock, seen = FakeClock(), []
    step = work.step_fn

    def timed_step(x, y):
        seen.append(x)
        clock.advance(0.01)  # every step 10 ms on the fake clock
        return step(x, y)

    work.step_fn = timed_step
    out = device_loop(work, train_loop, clock, window_s=0.045, windows=2, warmup=1, budget_s=10.0)
    # 1 warm-up step, then two windows of 5 steps of 10 ms (the first step end 45 ms on): 32 x 5 / 0.05 samples/s.
    assert len(seen) == 1 + 2 * 5
    assert out["samples_per_s_per_window"] == pytest.approx([32 * 5 / 0.05] * 2)
    rows = batches.dataset.x
    first = seen[0]
    matches = [(rows == first[i]).all(dim=1).nonzero().flatten().tolist() for i in range(len(first))]
    assert all(len(m) == 1 for m in matches)  # each row of a batch is a row of the on-device tensor
    assert [m[0] for m in matches] != list(range(32))  # in shuffled order, not the first 32 rows


def test_a_device_run_probes_its_own_batches():
    work = build_workload(tiny("device"))
    assert device_batches(work) is work.data.batches


def test_the_loader_alone_counts_its_samples_per_second():
    clock = FakeClock()

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 100

        def __getitem__(self, i):
            clock.advance(0.001)  # 1 ms a sample
            return torch.zeros(4), 0

    out = loader_alone(Slow(), 10, clock, window_s=0.015, windows=3, warmup=1, budget_s=10.0)
    # A batch of 10 takes 10 ms: a window closes after 2 batches; the collate takes no fake time.
    assert out["samples_per_s_per_window"] == pytest.approx([1000.0] * 3)
    assert out["num_workers"] == 0


@pytest.mark.parametrize("storage, cache, loader, ram, as_run", [
    ("ram", "warm", True, "already in RAM", True),
    ("memmap", "warm", True, None, True),
    ("memmap", "cold", True, None, "read cold"),
    ("device", "warm", "on the device", "already on the device", "device_loop is the run's own loop"),
])
def test_which_probes_run_and_why_the_others_do_not(tmp_path, storage, cache, loader, ram, as_run):
    work = build_workload(tiny(storage, cache), tmp_path)
    out = measure_what_ifs(work, train_loop, window_s=0.02, windows=2, budget_s=0.3)
    if as_run is True:  # the run's own loop again (0 workers: its own batches), at its threads: the probes' pace
        assert out["train_as_run"]["samples_per_s"] > 0 and out["train_as_run"]["num_workers"] == 0
        assert out["train_as_run"]["threads"] == torch.get_num_threads()
    else:
        assert as_run in out["train_as_run"]["absent"]
    loop = out["device_loop"]  # run twice, before and after the loader probes: both parts' windows kept
    assert loop["parts"] == 2 and len(loop["samples_per_s_per_window"]) == len(loop["steps_per_window"]) >= 2
    assert loop["samples_per_s"] == pytest.approx(np.median(loop["samples_per_s_per_window"]))
    if loader is True:
        assert out["loader_alone"]["samples_per_s"] > 0
        assert out["loader_workers"]["1"]["samples_per_s"] > 0  # the run's k + 1 first
    else:
        assert loader in out["loader_alone"]["absent"] and loader in out["loader_workers"]["absent"]
    if ram is None:
        assert out["ram_loader"]["samples_per_s"] > 0 and len(out["ram_loader"]["samples_per_s_per_window"]) == 2
    else:
        assert ram in out["ram_loader"]["absent"]


def test_the_loader_probes_read_samples_as_the_runs_timed_loader_does_and_record_nothing(tmp_path):
    # A run that records its loading times every sample (TimedDataset) and batch (TimedCollate): the probes pay
    # the same per sample, and their batches' records go nowhere.
    recorder = LoadingRecorder()
    work = build_workload(tiny("memmap"), tmp_path, recorder=recorder)
    read, collate = as_the_run_reads(work, work.data.dataset)
    assert isinstance(read, TimedDataset) and read.dataset is work.data.dataset
    assert collate is work.data.batches.collate_fn
    out = measure_what_ifs(work, train_loop, window_s=0.02, windows=2, budget_s=0.3)
    assert out["loader_alone"]["samples_per_s"] > 0 and out["loader_workers"]["1"]["samples_per_s"] > 0
    assert out["ram_loader"]["samples_per_s"] > 0
    assert recorder.batches == 0
    plain = build_workload(tiny("memmap"), tmp_path)  # a run that does not record its loading: as it is
    assert as_the_run_reads(plain, plain.data.dataset) == (plain.data.dataset, None)


def test_a_probe_in_two_parts_keeps_every_window_and_their_median():
    first = {"samples_per_s": 20.0, "samples_per_s_per_window": [10.0, 20.0, 30.0], "steps_per_window": [1, 2, 3],
             "took_s": 0.3, "cut_short": False, "threads": 2}
    second = {**first, "samples_per_s_per_window": [40.0, 50.0], "steps_per_window": [4, 5], "took_s": 0.2,
              "cut_short": True}
    both = both_parts(first, second)
    assert both["samples_per_s"] == 30.0 and both["samples_per_s_per_window"] == [10.0, 20.0, 30.0, 40.0, 50.0]
    assert both["steps_per_window"] == [1, 2, 3, 4, 5] and both["took_s"] == pytest.approx(0.5)
    assert both["cut_short"] is True and both["parts"] == 2 and both["threads"] == 2
    absent = {"absent": "not started: the probes after a run take at most 3 s"}
    assert both_parts(first, absent) == first and both_parts(absent, second) == second


class FakeDrop:
    """pagecache.drop as the probes call it: records each call and whether the dataset's own map was closed."""

    def __init__(self, dataset, dropped: bool = True, reason: str | None = None) -> None:
        self.dataset, self.dropped, self.reason = dataset, dropped, reason
        self.calls: list[tuple[list, bool]] = []

    def __call__(self, paths):
        self.calls.append((list(paths), self.dataset._x is None))
        return DropResult(files=len(paths), bytes_total=1, resident_before_bytes=1, resident_after_bytes=0,
                          dropped=self.dropped, reason=self.reason)


def test_data_read_cold_is_probed_cold_each_loader_after_its_files_are_dropped(tmp_path, monkeypatch):
    import pipeprof.measure.what_if as what_if

    work = build_workload(tiny("memmap", "cold"), tmp_path)
    fake = FakeDrop(work.data.dataset)
    monkeypatch.setattr(what_if, "drop", fake)
    out = measure_what_ifs(work, train_loop, window_s=0.02, windows=2, budget_s=0.3)
    probed = [out["loader_alone"], *[v for v in out["loader_workers"].values() if isinstance(v, dict)],
              *[v for v in out["train_workers"].values() if isinstance(v, dict)],
              *[v for v in out.get("train_threads", {}).values() if isinstance(v, dict)]]
    assert all(entry["cold"] is True and entry["samples_per_s"] > 0 for entry in probed)
    assert len(fake.calls) == len(probed)  # one drop before each loader probe of the run's storage
    assert all(paths == work.data.dataset.paths() and closed for paths, closed in fake.calls)
    assert work.data.dataset._x is None  # nothing stays mapped after the probes
    assert out["drops_s"] == pytest.approx(sum(entry["drop_s"] for entry in probed))
    assert "cold" not in out["ram_loader"]  # decoded samples in RAM are not read from the disk


def test_data_read_cold_whose_page_cache_cannot_be_dropped_is_not_probed_warm(tmp_path, monkeypatch):
    import pipeprof.measure.what_if as what_if

    work = build_workload(tiny("memmap", "cold"), tmp_path)
    monkeypatch.setattr(what_if, "drop", FakeDrop(work.data.dataset, dropped=False, reason="on tmpfs"))
    out = measure_what_ifs(work, train_loop, window_s=0.02, windows=2, budget_s=0.3)
    assert "page cache could not be dropped: on tmpfs" in out["loader_alone"]["absent"]
    assert out["loader_workers"]["absent"] == out["loader_alone"]["absent"]


@pytest.mark.serial  # seconds against a budget: alone, not beside another test's processes
def test_a_run_records_its_what_ifs_within_the_time_budget(tmp_path):
    started_s = time.monotonic()
    run = profile_scenario(tiny("memmap", steps=20), cache_root=tmp_path)
    assert run.meta["status"] == "complete"
    what_ifs = run.meta["what_ifs"]
    total_s = what_ifs["budget"]["total_budget_s"]  # the run's own: max(3 s, 10 % of its training)
    assert total_s == pytest.approx(3.0)  # a run of 20 steps
    rates = what_ifs["device_loop"]["samples_per_s_per_window"]  # the first probe
    assert rates and all(np.isfinite(rates)) and what_ifs["device_loop"]["samples_per_s"] == pytest.approx(
        np.median(rates))
    for name in ("loader_alone", "ram_loader"):  # measured, or not started on a machine too busy for them
        entry = what_ifs[name]
        assert entry.get("samples_per_s_per_window") or "not started" in entry["absent"], entry
    # Every probe within the budget: a probe's last step can overshoot its budget by one step, and a k-worker
    # probe's workers take their time to shut down (2.82 s seen once in a full suite on 2 loaded cores).
    assert what_ifs["took_s"] < total_s + 0.5
    assert time.monotonic() - started_s > what_ifs["took_s"]


def test_profile_what_ifs_false_leaves_the_probes_out_and_says_so(tmp_path):
    scenario = tiny("ram", steps=10)
    off = dataclasses.replace(scenario, profile=dataclasses.replace(scenario.profile, what_ifs=False))
    run = profile_scenario(off, cache_root=tmp_path)
    assert run.meta["status"] == "complete" and run.meta["what_ifs"] == {"absent": "off (profile.what_ifs = false)"}


def test_an_interrupt_during_the_probes_keeps_every_step_and_marks_the_run_interrupted(tmp_path, monkeypatch):
    import pipeprof.pipeline.train as train_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "measure_what_ifs", interrupted)
    run = profile_scenario(tiny("ram", steps=10), cache_root=tmp_path)
    assert run.meta["status"] == "interrupted" and len(run.steps) == 10
    assert "interrupted during the probes" in run.meta["what_ifs"]["absent"]


def test_the_threads_probe_runs_the_loop_at_one_thread_and_gives_the_threads_back():
    work = build_workload(tiny("ram"))
    before, seen = torch.get_num_threads(), []
    step = work.step_fn

    def counting_step(x, y):
        seen.append(torch.get_num_threads())
        return step(x, y)

    work.step_fn = counting_step
    out = device_loop(work, train_loop, threads=1, window_s=0.01, windows=2, budget_s=0.3)
    assert out["threads"] == 1 and set(seen) == {1} and len(out["samples_per_s_per_window"]) == 2
    assert torch.get_num_threads() == before


@pytest.mark.serial  # the probe must fit its budget of seconds: alone, not beside another test's processes
@pytest.mark.parametrize("threads, cores, probed", [(2, 2, 1), (1, 2, 2), (1, 4, 4), (1, 1, None)])
def test_the_threads_probe_measures_the_threads_a_change_goes_to(monkeypatch, threads, cores, probed):
    # From more than one thread: the loop at 1. From 1: at the usable cores (what a change up would give).
    import pipeprof.measure.what_if as what_if

    monkeypatch.setattr(what_if, "usable_cores", lambda: cores)
    work = build_workload(tiny("ram"))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = measure_what_ifs(work, train_loop, window_s=0.01, windows=1, budget_s=0.2)
    finally:
        torch.set_num_threads(before)
    if probed is None:
        assert "no other number of threads" in out["device_loop_threads"]["absent"]
    else:
        assert out["device_loop_threads"]["threads"] == probed and out["device_loop_threads"]["samples_per_s"] > 0
    assert out["device_loop"]["threads"] == threads


def test_a_probe_that_could_not_end_within_the_total_budget_is_not_started(tmp_path):
    work = build_workload(tiny("memmap"), tmp_path)
    out = measure_what_ifs(work, train_loop, window_s=0.01, windows=1, budget_s=TOTAL_BUDGET_S)
    assert out["device_loop"]["samples_per_s"] > 0  # the first always runs
    for name in ("loader_alone", "ram_loader"):
        assert "not started" in out[name]["absent"]


class Busy(torch.utils.data.Dataset):
    """Samples that cost their worker ~0.3 ms of CPU each."""

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        end = time.thread_time() + 3e-4
        while time.thread_time() < end:
            pass
        return torch.zeros(16), 0


def test_the_k_worker_loader_measures_its_rate_the_receive_cost_and_the_workers_cpu_and_leaves_no_worker():
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    reads = iter(range(10_000))
    thread_clock = lambda: next(reads) * 1e-3  # noqa: E731 -- each next() is measured as 1 ms of CPU
    out = loader_workers(Busy(), 32, 1, seed=0, thread_clock=thread_clock, window_s=0.05, windows=2, warmup=2,
                         budget_s=1.0)
    assert out["num_workers"] == 1 and out["startup_s"] > 0
    rates = out["samples_per_s_per_window"]
    assert len(rates) == 2 and all(0 < r < 1 / 3e-4 * 1.2 for r in rates)  # one worker: at most ~3,300/s
    assert all(n >= 2 for n in out["steps_per_window"])  # k + 1 batches at least: not one worker's burst
    assert out["receive_cpu_s_per_sample_per_window"] == pytest.approx([1e-3 / 32] * 2)
    assert 0.5 * 3e-4 < out["worker_cpu_s_per_sample"] < 3 * 3e-4
    after = {p.pid for p in psutil.Process().children(recursive=True) if p.is_running()
             and p.status() != psutil.STATUS_ZOMBIE}
    assert after <= before  # the worker was shut down


def test_the_trained_probe_times_the_real_loop_fed_by_k_workers_and_leaves_no_worker(tmp_path):
    # The real training loop over a 2-worker DataLoader of the run's dataset; each training step takes 10 ms of
    # the fake clock (the batch's wait takes none): 32 samples / 10 ms, in the loop's rate and its compute's.
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    work = build_workload(tiny("memmap", samples=2048), tmp_path)
    clock = FakeClock()
    step = work.step_fn

    def ten_ms(x, y):
        clock.advance(0.01)
        return step(x, y)

    work.step_fn = ten_ms
    out = train_workers(work, train_loop, work.data.dataset, 2, clock, window_s=0.045, windows=2, warmup=2,
                        budget_s=10.0)
    assert out["num_workers"] == 2 and out["threads"] == torch.get_num_threads() and out["batch_size"] == 32
    assert out["samples_per_s_per_window"] == pytest.approx([3200.0] * 2)
    assert out["compute_samples_per_s_per_window"] == pytest.approx([3200.0] * 2)
    assert out["steps_per_window"] == [5, 5]  # 45 ms: 5 steps of 10 ms (at least k + 1 = 3)
    assert out["startup_s"] == pytest.approx(0.01)  # the first step (its wait for the workers took no fake time)
    assert out["warmup_steps"] == 2 * 2 + 1  # the first, then the k x prefetch_factor batches asked for at iter()
    after = {p.pid for p in psutil.Process().children(recursive=True) if p.is_running()
             and p.status() != psutil.STATUS_ZOMBIE}
    assert after <= before  # the workers were shut down


def test_a_run_with_workers_on_disk_also_trains_on_decoded_samples_from_ram_at_its_own_k(tmp_path):
    scenario = tiny("memmap")
    one = dataclasses.replace(scenario, loader=dataclasses.replace(scenario.loader, num_workers=1))
    out = measure_what_ifs(build_workload(one, tmp_path), train_loop, window_s=0.02, windows=2, budget_s=0.3)
    assert list(out["train_workers"])[:2] == ["2", "0"]  # k + 1, k - 1: the training process making its own
    assert set(out["train_ram_workers"]) == {"1"}
    other = out["device_loop_threads"]
    if other.get("absent") is None:  # the run's worker beside the other number of threads
        assert set(out["train_threads"]) == {"1"} and out["train_threads"]["1"]["threads"] == other["threads"]
        assert torch.get_num_threads() != other["threads"]  # given back
    else:  # not measured (one core; not started, or no window closed, within the budget on a loaded machine)
        for entry in out.get("train_threads", {}).values():  # one measured all the same went to the other threads
            assert entry.get("absent") or entry["threads"] != torch.get_num_threads()
    for entry in (out["train_workers"]["2"], out["train_ram_workers"]["1"]):
        assert entry["samples_per_s"] > 0 and entry["compute_samples_per_s"] >= entry["samples_per_s"] * 0.99
    zero = measure_what_ifs(build_workload(scenario, tmp_path), train_loop, window_s=0.02, windows=2,
                            budget_s=0.3)
    assert list(zero["train_workers"])[:2] == ["1", "2"]  # the plan's k + 1, then more while the budget lasts
    assert "train_ram_workers" not in zero  # no workers of its own to keep with decoded samples in RAM


def test_the_trained_probes_go_one_worker_each_way_but_not_to_zero_for_data_read_cold():
    def workers(k, cold, cores=2):
        return [(v.num_workers, v.extra) for v in probe_plan(k, 2, cores, cold=cold) if v.key == "train_workers"]

    assert workers(1, cold=False) == [(2, False), (0, False), (3, True), (4, True)]
    assert workers(1, cold=True) == [(2, False), (3, True), (4, True)]  # no 0: a cold probe reads every page cold
    assert workers(3, cold=True) == [(4, False), (2, False)]


def test_more_workers_go_first_to_the_number_the_runs_own_step_asks_for_then_up_a_ladder_to_twice_the_cores():
    def extras(k, cores, wanted=None):
        return [v.num_workers for v in probe_plan(k, 1, cores, cpu=False, wanted=wanted) if v.extra]

    # a 2-core machine: every number, as before
    assert extras(0, 2) == [2, 3, 4] and extras(1, 2) == [3, 4]
    # a 64-core GPU machine with 4 workers: a budget of a few variants reaches tens of workers, not 6, 7, 8...
    assert extras(4, 64) == [6, 9, 14, 21, 32, 48, 72, 108, 128]
    def planned(k, cores, wanted=None):  # the trained probes run whatever the extras' budget
        return [v.num_workers for v in probe_plan(k, 1, cores, cpu=False, wanted=wanted)
                if v.key == "train_workers" and not v.extra]

    # its run waited half of each 200 ms step: 4 workers took 0.8 s a batch, 8 keep up with 0.1 s of compute;
    # 8 is the top candidate, planned right after k ± 1 (measured, not estimated), and no longer an extra
    wanted = workers_wanted(4, 0.2, 0.1)
    assert wanted == 8 and planned(4, 64, wanted) == [5, 3, 8] and extras(4, 64, wanted)[:2] == [6, 9]
    # a 16-core machine, no workers, 30 ms of loading in a 40 ms step: 3 workers would feed 10 ms of compute
    assert workers_wanted(0, 0.04, 0.03) == 3 and planned(0, 16, 3) == [1, 3] and 3 not in extras(0, 16, 3)
    # a 2-core machine whose step asks for 4: the top candidate is the 2 there are cores for, then 4 first of
    # the extras (a loader waiting on storage may use more workers than cores)
    assert planned(0, 2, 4) == [1, 2] and extras(0, 2, 4) == [4, 3]
    # k + 1 is probed anyway, and a number past 2 x cores is not planned
    assert extras(4, 64, 5) == extras(4, 64) and planned(4, 64, 5) == [5, 3]
    assert extras(4, 4, 40) == extras(4, 4) and planned(4, 4, 40) == [5, 3]
    # nothing measured, or the whole step waiting: no estimate
    assert workers_wanted(2, None, 0.1) is None and workers_wanted(2, 0.1, 0.1) is None
    assert workers_wanted(2, 0.1, 0.0) == 2  # no wait: the run's own workers already keep up


def test_a_scenarios_probes_and_a_scripts_segments_follow_one_plan():
    assert plan(1, 2, 2) == probe_plan(1, 2, 2)  # script.segments' plan is the probe plan
    assert [v.key for v in probe_plan(0, 2, 2)][:3] == ["train_as_run", "train_workers", "train_threads"]
    assert not [v for v in probe_plan(0, 2, 2, cold=True) if v.key == "train_as_run"]
    assert not [v for v in probe_plan(1, 2, 2, cpu=False) if v.key == "train_threads"]  # a GPU job's compute


def test_the_numbers_of_workers_probed_start_next_to_the_runs():
    assert workers_to_probe(0, 2) == [1, 2, 3, 4]
    assert workers_to_probe(2, 2) == [3, 1, 4]
    assert workers_to_probe(1, 1) == [2]


@pytest.mark.parametrize("k, cold, words", [(1, False, "bursts"), (2, False, "2 workers"), (0, True, "read cold")])
def test_the_runs_own_loop_is_measured_again_only_where_its_batches_come_steadily(k, cold, words):
    def probe():
        raise AssertionError("not to be measured")

    assert words in as_run_probe(k, cold, probe)["absent"]
    assert as_run_probe(0, False, lambda: {"samples_per_s": 1.0}) == {"samples_per_s": 1.0}


def test_a_stretched_budget_waits_for_the_windows_batches_up_to_its_limit():
    # Steps of 0.15 s, a budget of 0.35 s: plain, the budget ends in the first window (one step, cut short);
    # stretched, the warm-up and both windows' 2 batches run (0.9 s); steps of 0.5 s stop at the limit, 1.2 s.
    plain = Windows(FakeClock(), windows=2, warmup=2, budget_s=0.35, min_steps=2)
    clock = FakeClock()
    assert run_steps(plain, plain.clock, 0.15) == 3 and plain.short and plain.steps_per_window == [1]
    stretched = Windows(clock, windows=2, warmup=2, budget_s=0.35, min_steps=2, full_budget_s=1.2)
    assert run_steps(stretched, clock, 0.15) == 6
    assert stretched.steps_per_window == [2, 2] and not stretched.short
    assert stretched.rates == pytest.approx([32 * 2 / 0.3] * 2)
    slow_clock = FakeClock()
    slow = Windows(slow_clock, windows=2, warmup=2, budget_s=0.35, min_steps=2, full_budget_s=1.2)
    assert run_steps(slow, slow_clock, 0.5) == 3  # 1.5 s >= 1.2 s: spent, the open window closed short
    assert slow.short
