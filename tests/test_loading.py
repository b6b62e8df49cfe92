"""Worker-side loading timing: the wrappers on a fake clock, real DataLoaders, and the analysis."""

from __future__ import annotations

import os
import pickle
import time

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import DataLoader, default_collate
from torch.utils.data._utils.pin_memory import pin_memory

from pipeprof.analysis.loading import BREAKDOWN_COLUMNS, counted_batches, loading_breakdown, loading_summary
from pipeprof.measure.clock import FakeClock
from pipeprof.measure.loading import MAIN_PROCESS, LoadingRecorder, LoadRecord, TimedCollate, TimedDataset
from pipeprof.measure.schedstat import no_run_queue
from pipeprof.pipeline.derive import summarize
from pipeprof.run_folder import LOADING_COLUMNS, STEP_COLUMNS, Run
from pipeprof.storage.base import SampleDataset

# -- the wrappers, on a fake clock ---------------------------------------------------


class ScriptedDataset(SampleDataset):
    """fetch(i) takes fetch_s[i] and prep takes prep_s[i] on the fake clock; sample i reads 100 + i bytes."""

    def __init__(self, clock: FakeClock, fetch_s: list[float], prep_s: list[float]) -> None:
        super().__init__(np.arange(len(fetch_s)) % 10)
        self.clock, self.fetch_s, self.prep_s = clock, fetch_s, prep_s

    def read(self, index: int) -> tuple[int, int]:
        self.clock.advance(self.fetch_s[index])
        return index, 100 + index

    def decode(self, payload: int) -> torch.Tensor:
        self.clock.advance(self.prep_s[payload])
        return torch.tensor([float(payload)])


class SlowCollate:
    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock, self.seconds = clock, seconds

    def __call__(self, samples):
        self.clock.advance(self.seconds)
        return default_collate(samples)


FETCH_S = [0.010, 0.030, 0.020, 0.001, 0.002]
PREP_S = [0.005, 0.001, 0.004, 0.0005, 0.0005]


def scripted(start_s: float = 100.0, run_queue=None):
    clock = FakeClock(start_s)
    recorder = LoadingRecorder(clock, t0_s=start_s, run_queue=run_queue or no_run_queue)
    dataset = recorder.wrap_dataset(ScriptedDataset(clock, FETCH_S, PREP_S))
    return clock, recorder, dataset, recorder.collate_fn(SlowCollate(clock, 0.003))


def test_fetch_prep_collate_sums_on_a_fake_clock():
    clock, recorder, dataset, collate = scripted()
    clock.advance(1.0)  # the batch starts 1 s into the run
    x, y, record = collate([dataset[i] for i in (0, 1, 2)])
    assert torch.equal(x, torch.tensor([[0.0], [1.0], [2.0]])) and y.tolist() == [0, 1, 2]
    assert record.worker == MAIN_PROCESS and record.pid == os.getpid()
    assert record.samples == 3 and record.nbytes == 100 + 101 + 102
    assert record.fetch_s == pytest.approx(0.060, abs=1e-12)
    assert record.prep_s == pytest.approx(0.010, abs=1e-12)
    assert record.collate_s == pytest.approx(0.003, abs=1e-12)
    assert record.fetch_max_s == pytest.approx(0.030, abs=1e-12)
    assert record.t_start_s == pytest.approx(1.0, abs=1e-12)
    assert record.t_end_s == pytest.approx(1.073, abs=1e-12)
    # no time outside the three parts on a fake clock: they add up exactly
    assert record.fetch_s + record.prep_s + record.collate_s == pytest.approx(record.t_end_s - record.t_start_s)


def test_collate_closes_the_batch_so_the_next_one_starts_from_zero():
    clock, recorder, dataset, collate = scripted()
    first = collate([dataset[i] for i in (0, 1)])[2]
    clock.advance(0.5)  # idle between batches belongs to neither
    second = collate([dataset[i] for i in (3, 4)])[2]
    assert first.samples == 2 and second.samples == 2
    assert second.fetch_s == pytest.approx(0.003) and second.prep_s == pytest.approx(0.001)
    assert second.t_start_s == pytest.approx(first.t_end_s + 0.5)
    assert second.fetch_max_s == pytest.approx(0.002)


def test_recorders_do_not_share_open_batches():
    clock, _, dataset, collate = scripted()
    _, _, other_dataset, other_collate = scripted()
    dataset[0]
    other_dataset[1]
    assert collate([dataset[2]])[2].fetch_s == pytest.approx(0.030)
    assert other_collate([other_dataset[3]])[2].fetch_s == pytest.approx(0.031)


def test_a_few_clock_reads_per_sample_and_per_batch():
    reads = []

    def clock():
        reads.append(1)
        return float(len(reads))

    recorder = LoadingRecorder(clock)
    dataset = recorder.wrap_dataset(ScriptedDataset(FakeClock(), [0.0] * 5, [0.0] * 5))
    collate = recorder.collate_fn()
    for i in range(5):
        dataset[i]
    assert len(reads) == 15  # three per sample
    collate([dataset[0]])
    assert len(reads) == 15 + 3 + 2  # two per batch


def test_unwrapped_dataset_gives_an_empty_record():
    clock = FakeClock(5.0)
    recorder = LoadingRecorder(clock, t0_s=5.0)
    _, _, record = recorder.collate_fn(SlowCollate(clock, 0.002))([(torch.zeros(1), 0)])
    assert record.samples == 0 and record.fetch_s == 0.0 and record.collate_s == pytest.approx(0.002)


def test_rows_have_the_loading_columns_and_the_consuming_step():
    clock, recorder, dataset, collate = scripted()
    recorder.record(collate([dataset[0]])[2], step=0)
    recorder.record(collate([dataset[1], dataset[2]])[2], step=1)
    rows = recorder.rows()
    assert [list(r) for r in rows] == [LOADING_COLUMNS, LOADING_COLUMNS]
    assert [(r["batch"], r["step"], r["samples"]) for r in rows] == [(0, 0, 1), (1, 1, 2)]
    df = pd.DataFrame(rows, columns=LOADING_COLUMNS)
    assert df["fetch_s"].tolist() == pytest.approx([0.010, 0.050])


def test_wrappers_and_records_pickle():
    recorder = LoadingRecorder(t0_s=1.0)
    dataset = pickle.loads(pickle.dumps(recorder.wrap_dataset(SleepyDataset(8))))
    collate = pickle.loads(pickle.dumps(recorder.collate_fn()))
    assert isinstance(dataset, TimedDataset) and isinstance(collate, TimedCollate)
    assert len(dataset) == 8 and dataset.key == collate.key == recorder.key
    record = LoadRecord(0, 1, 0.0, 1.0, 0.5, 0.25, 0.25, 8, 100, 0.1)
    assert pickle.loads(pickle.dumps(record)) == record


def test_pin_memory_passes_records_through():
    # What the DataLoader's pin_memory thread does with a batch; the record is not a tensor.
    record = LoadRecord(0, 1, 0.0, 1.0, 0.5, 0.25, 0.25, 8, 100, 0.1)
    pinned = pin_memory(("not a tensor", 3, record))
    assert isinstance(pinned, tuple) and pinned[2] is record


# -- real DataLoaders -----------------------------------------------------------------

FETCH_SLEEP_S = 0.002
PREP_BURN_S = 0.0005
BATCH = 8


class SleepyDataset(SampleDataset):
    """fetch sleeps 2 ms (storage latency), prep burns 0.5 ms of CPU.

    Each sample carries the read and decode times measured inside them, so a
    test can compare the wrapper's numbers with what the storage itself saw.
    """

    def __init__(self, n: int) -> None:
        super().__init__(np.arange(n) % 10)

    def read(self, index: int) -> tuple[tuple[int, float], int]:
        t = time.perf_counter()
        time.sleep(FETCH_SLEEP_S)
        return (index, time.perf_counter() - t), 3136

    def decode(self, payload: tuple[int, float]) -> torch.Tensor:
        index, read_s = payload
        t = time.perf_counter()
        while time.perf_counter() - t < PREP_BURN_S:
            pass
        return torch.tensor([float(index), read_s, time.perf_counter() - t], dtype=torch.float64)


def load_all(num_workers: int, n: int = 48, recorder: LoadingRecorder | None = None, **kwargs):
    """Iterate one epoch like the training loop; return the records and main-process receipt times."""
    recorder = recorder or LoadingRecorder(t0_s=time.perf_counter())
    loader = DataLoader(recorder.wrap_dataset(SleepyDataset(n)), batch_size=BATCH, num_workers=num_workers,
                        collate_fn=recorder.collate_fn(), **kwargs)
    batches, received_s = [], []
    for step, batch in enumerate(loader):
        received_s.append(time.perf_counter() - recorder.t0_s)
        assert len(batch) == 3
        recorder.record(batch[2], step)
        batches.append(batch)
    return recorder, batches, received_s


# Tolerance for "the parts add up to the batch's production time": the gap is
# the DataLoader's own bookkeeping between samples plus any preemption there.
ADD_UP_REL, ADD_UP_ABS_S = 0.10, 0.001


def check_records(batches, received_s, workers: list[int]) -> None:
    records = [b[2] for b in batches]
    assert [r.worker for r in records] == workers
    for (x, _, record), got_s in zip(batches, received_s):
        assert record.samples == BATCH and record.nbytes == BATCH * 3136
        production_s = record.t_end_s - record.t_start_s
        core_s = record.core_wait_s or 0.0  # None where schedstat cannot be read
        parts_s = record.fetch_s + core_s + record.prep_s + record.collate_s
        assert parts_s <= production_s + 1e-9
        assert production_s - parts_s <= ADD_UP_REL * production_s + ADD_UP_ABS_S
        # The wrapper's times cover what the storage measured inside read and decode, the wait for a core
        # in them included (taken out of fetch first: the run-queue wait is read once a batch); sleep is
        # never short, so fetch is at least samples × 2 ms.
        assert record.fetch_s + core_s >= float(x[:, 1].sum()) >= BATCH * FETCH_SLEEP_S
        assert record.fetch_s + record.prep_s + core_s >= float(x[:, 1:].sum()) - 1e-9
        assert record.prep_s >= 0 and float(x[:, 2].sum()) >= BATCH * PREP_BURN_S
        assert record.fetch_max_s <= record.fetch_s
        assert FETCH_SLEEP_S <= record.fetch_max_s or record.core_wait_s
        # one clock for all processes: made after the recorder started, before it was received
        assert 0 < record.t_start_s < record.t_end_s <= got_s
    # fetch ≈ samples × 2 ms: the storage's own measurement of its sleeps, plus
    # building each Fetched (microseconds; more when the machine is busy).
    read_s = sum(float(b[0][:, 1].sum()) for b in batches)
    assert sum(r.fetch_s + (r.core_wait_s or 0.0) for r in records) - read_s <= ADD_UP_REL * read_s + ADD_UP_ABS_S * len(records)


@pytest.mark.filterwarnings("ignore:.*pin_memory.*:UserWarning")
def test_main_process_loader_records_every_batch():
    recorder, batches, received_s = load_all(0, pin_memory=True)  # pinning is a no-op without CUDA
    assert recorder.batches == 6
    check_records(batches, received_s, [MAIN_PROCESS] * 6)
    assert {b[2].pid for b in batches} == {os.getpid()}
    assert [r["step"] for r in recorder.rows()] == list(range(6))


@pytest.mark.filterwarnings("ignore:.*pin_memory.*:UserWarning")
def test_worker_loader_records_every_batch_with_worker_ids_and_pids():
    recorder = LoadingRecorder(t0_s=time.perf_counter())
    recorder.wrap_dataset(SleepyDataset(8))[0]  # a batch left half-made here must not leak into a forked worker
    recorder, batches, received_s = load_all(2, recorder=recorder, pin_memory=True, multiprocessing_context="fork")
    check_records(batches, received_s, [0, 1] * 3)
    pids = {b[2].worker: b[2].pid for b in batches}
    assert len({b[2].pid for b in batches}) == 2 and os.getpid() not in pids.values()
    assert all(b[2].pid == pids[b[2].worker] for b in batches)


@pytest.mark.integration
def test_spawned_workers_record_too():
    recorder, batches, received_s = load_all(1, n=16, multiprocessing_context="spawn")
    check_records(batches, received_s, [0, 0])
    assert batches[0][2].pid != os.getpid()


# -- analysis -------------------------------------------------------------------------


def make_loading() -> pd.DataFrame:
    """Worker 0 makes batches for steps 0, 2, 4; worker 1 for 1, 3, 5; 4 samples each."""
    rows = []
    for step in range(6):
        worker = step % 2
        start = 0.1 * step
        fetch_s, prep_s, collate_s = (0.04, 0.02, 0.004) if worker == 0 else (0.08, 0.02, 0.008)
        rows.append({"batch": step, "step": step, "worker": worker, "pid": 100 + worker, "t_start_s": start,
                     "t_end_s": start + fetch_s + prep_s + collate_s + 0.001, "fetch_s": fetch_s, "prep_s": prep_s,
                     "collate_s": collate_s, "samples": 4, "nbytes": 4000, "fetch_max_s": fetch_s / 2})
    return pd.DataFrame(rows, columns=LOADING_COLUMNS)


def make_steps(n: int = 6, warmup: int = 2) -> pd.DataFrame:
    return pd.DataFrame([{"step": i, "epoch": 0, "warmup": i < warmup, "t_start_s": 0.1 * i, "data_wait_s": 0.01,
                          "h2d_s": 0.0, "compute_s": 0.08, "step_s": 0.1, "host_wait_s": 0.01, "samples": 4,
                          "loss": 1.0, "correct": 2} for i in range(n)], columns=STEP_COLUMNS)


def test_breakdown_per_worker():
    b = loading_breakdown(make_loading()).set_index("worker")
    assert list(b.reset_index().columns) == BREAKDOWN_COLUMNS
    assert b.loc[0, "batches"] == 3 and b.loc[0, "samples"] == 12 and b.loc[0, "nbytes"] == 12000
    assert b.loc[0, "fetch_s"] == pytest.approx(0.12)
    assert b.loc[0, "fetch_per_sample_s"] == pytest.approx(0.01)
    assert b.loc[1, "prep_per_sample_s"] == pytest.approx(0.005)
    assert b.loc[1, "collate_per_batch_s"] == pytest.approx(0.008)
    assert b.loc[1, "collate_per_sample_s"] == pytest.approx(0.002)
    assert b.loc[0, "batch_s"] == pytest.approx(0.065)
    assert b.loc[0, "fetch_max_s"] == pytest.approx(0.02)
    # worker 0: batches at 0.0, 0.2, 0.4 s, the last ending at 0.465 s
    assert b.loc[0, "span_s"] == pytest.approx(0.465)
    assert b.loc[0, "busy_fraction"] == pytest.approx(3 * 0.065 / 0.465)


def test_breakdown_and_summary_of_nothing():
    assert loading_breakdown(pd.DataFrame(columns=LOADING_COLUMNS)).empty
    assert loading_summary(pd.DataFrame(columns=LOADING_COLUMNS)) is None
    assert loading_summary(None) is None


def test_summary_keys_and_units():
    s = loading_summary(make_loading()).to_json()
    assert set(s) == {"batches", "samples", "workers", "fetch_per_sample_s", "core_wait_per_sample_s",
                      "prep_per_sample_s", "collate_per_batch_s", "collate_per_sample_s", "batch_s", "fractions",
                      "by_worker", "split"}
    assert s["split"] is None  # the transforms' split is the summary's to add (analysis.transforms)
    assert s["batches"] == 6 and s["samples"] == 24 and s["workers"] == 2
    assert s["fetch_per_sample_s"] == pytest.approx((0.12 + 0.24) / 24)
    assert s["prep_per_sample_s"] == pytest.approx(0.12 / 24)
    assert s["collate_per_batch_s"] == pytest.approx(0.036 / 6)
    assert s["collate_per_sample_s"] == pytest.approx(0.036 / 24)
    assert s["batch_s"] == pytest.approx((0.065 + 0.109) / 2)
    # no core_wait_s (a table from before it): unknown, and fetch holds it as it did
    assert s["core_wait_per_sample_s"] is None and s["fractions"]["core_wait"] is None
    assert s["by_worker"]["0"]["core_wait_per_sample_s"] is None
    assert sum(v for v in s["fractions"].values() if v is not None) == pytest.approx(1.0)
    assert s["fractions"]["fetch"] == pytest.approx(0.36 / 0.516)
    assert set(s["by_worker"]) == {"0", "1"}
    assert s["by_worker"]["1"]["fetch_per_sample_s"] == pytest.approx(0.02)
    assert s["by_worker"]["1"]["collate_per_batch_s"] == pytest.approx(0.008)


def test_main_process_counts_as_no_workers():
    df = make_loading().assign(worker=MAIN_PROCESS, pid=100)
    s = loading_summary(df).to_json()
    assert s["workers"] == 0 and list(s["by_worker"]) == ["main"]
    assert s["by_worker"]["main"]["batches"] == 6


def test_summarize_counts_only_batches_of_counted_steps():
    loading = make_loading()
    assert counted_batches(loading, make_steps())["step"].tolist() == [2, 3, 4, 5]
    s = summarize(Run(meta={}, steps=make_steps(), loading=loading))["loading"]
    assert s["batches"] == 4 and s["samples"] == 16
    assert summarize(Run(meta={}, steps=make_steps()))["loading"] is None  # no records: null, not zeros
    assert summarize(Run(meta={}, steps=make_steps(warmup=6), loading=loading))["loading"] is None


# -- waiting for a core: the run-queue wait taken out of fetch ------------------------


class FakeRunQueue:
    """The thread's run-queue wait: ``waits_s[i]`` more seconds each time sample ``i`` is read (the
    dataset's read calls ``during_read``); ``None`` readings where schedstat is absent."""

    def __init__(self, waits_s: list[float], known: bool = True) -> None:
        self.waits_s, self.known, self.total_s = waits_s, known, 1.5

    def during_read(self, index: int) -> None:
        self.total_s += self.waits_s[index]

    def __call__(self) -> float | None:
        return self.total_s if self.known else None


class QueuedDataset(ScriptedDataset):
    def __init__(self, clock: FakeClock, run_queue: FakeRunQueue) -> None:
        super().__init__(clock, FETCH_S, PREP_S)
        self.run_queue = run_queue

    def read(self, index: int) -> tuple[int, int]:
        self.run_queue.during_read(index)
        return super().read(index)


def queued(waits_s: list[float], known: bool = True):
    run_queue = FakeRunQueue(waits_s, known)
    clock = FakeClock(100.0)
    recorder = LoadingRecorder(clock, t0_s=100.0, run_queue=run_queue)
    dataset = recorder.wrap_dataset(QueuedDataset(clock, run_queue))
    return recorder, dataset, recorder.collate_fn(SlowCollate(clock, 0.003))


def test_the_wait_for_a_core_is_taken_out_of_fetch():
    # samples 0-2 fetch 10 + 30 + 20 ms and prep 5 + 1 + 4 ms on the clock; the thread queued 14 ms meanwhile
    recorder, dataset, collate = queued([0.004, 0.0, 0.010, 0.0, 0.0])
    record = collate([dataset[0], dataset[1], dataset[2]])[2]
    assert record.core_wait_s == pytest.approx(0.014)
    assert record.fetch_s == pytest.approx(0.046)  # readings per batch: out of fetch first
    assert record.prep_s == pytest.approx(0.010)
    assert record.fetch_max_s == pytest.approx(0.030)
    assert record.collate_s == pytest.approx(0.003)  # the collate is not touched
    assert record.fetch_s + record.prep_s + record.core_wait_s == pytest.approx(0.070)
    recorder.record(record, step=0)
    assert recorder.rows()[0]["core_wait_s"] == pytest.approx(0.014)
    s = loading_summary(recorder.frame()).to_json()
    assert s["core_wait_per_sample_s"] == pytest.approx(0.014 / 3)
    assert s["fetch_per_sample_s"] == pytest.approx(0.046 / 3)
    measured_s = 0.070 + 0.003
    assert s["fractions"]["core_wait"] == pytest.approx(0.014 / measured_s)
    assert s["fractions"]["fetch"] == pytest.approx(0.046 / measured_s)
    assert sum(s["fractions"].values()) == pytest.approx(1.0)
    assert s["by_worker"]["main"]["core_wait_per_sample_s"] == pytest.approx(0.014 / 3)


def test_a_wait_for_a_core_longer_than_fetch_comes_out_of_prep_and_is_capped_to_the_batch():
    recorder, dataset, collate = queued([0.042, 0.0, 0.0, 0.0, 0.0])
    record = collate([dataset[0], dataset[1]])[2]  # fetch 40 ms, prep 6 ms
    assert record.core_wait_s == pytest.approx(0.042)
    assert record.fetch_s == pytest.approx(0.0) and record.prep_s == pytest.approx(0.004)
    assert record.fetch_max_s == pytest.approx(0.0)
    recorder, dataset, collate = queued([0.5, 0.0, 0.0, 0.0, 0.0])  # readings a moment apart from the clocks
    record = collate([dataset[0], dataset[1]])[2]
    assert record.core_wait_s == pytest.approx(0.046)
    assert record.fetch_s == pytest.approx(0.0) and record.prep_s == pytest.approx(0.0)


def test_without_schedstat_the_split_is_unknown_not_zero():
    recorder, dataset, collate = queued([0.004, 0.0, 0.050, 0.0, 0.0], known=False)
    record = collate([dataset[0], dataset[1]])[2]
    assert record.core_wait_s is None
    assert record.fetch_s == pytest.approx(0.040) and record.prep_s == pytest.approx(0.006)  # as before the split
    recorder.record(record, step=0)
    assert np.isnan(recorder.rows()[0]["core_wait_s"])
    s = loading_summary(recorder.frame()).to_json()
    assert s["core_wait_per_sample_s"] is None and s["fractions"]["core_wait"] is None
    assert s["by_worker"]["main"]["core_wait_per_sample_s"] is None
    assert s["fetch_per_sample_s"] == pytest.approx(0.020)


def test_one_batch_of_unknown_wait_makes_the_whole_split_unknown():
    known = make_loading().assign(core_wait_s=0.001)
    s = loading_summary(known).to_json()
    assert s["core_wait_per_sample_s"] == pytest.approx(0.001 / 4)
    known.loc[3, "core_wait_s"] = np.nan
    s = loading_summary(known).to_json()
    assert s["core_wait_per_sample_s"] is None and s["fractions"]["core_wait"] is None
    b = loading_breakdown(known).set_index("worker")
    assert b.loc[0, "core_wait_per_sample_s"] == pytest.approx(0.001 / 4)  # worker 0's batches all known
    assert np.isnan(b.loc[1, "core_wait_per_sample_s"])


def test_a_loading_table_from_before_core_wait_reads_as_unknown():
    old = make_loading().drop(columns=["core_wait_s"])
    s = loading_summary(old).to_json()
    assert s is not None and s["core_wait_per_sample_s"] is None
    assert loading_breakdown(old)["core_wait_s"].isna().all()


# -- where a user reads it: the report's loading section, the console, the plots --------------------------


def test_the_report_names_waiting_for_a_core_or_says_it_is_unknown():
    from rich.console import Console

    from pipeprof.render import plots
    from pipeprof.render.console import print_summary
    from pipeprof.render.html import render_html

    steps = make_steps()
    for core_s, words in ((0.002, "500 µs"), (np.nan, "unknown")):
        run = Run(meta={}, steps=steps, loading=make_loading().assign(core_wait_s=core_s))
        summary = summarize(run)
        html = render_html(run, summary)
        section = html.split('<h2 id="loading">', 1)[1].split("<h2>", 1)[0]
        headline = section.split('id="loading-headline"', 1)[1].split("</p>", 1)[0]
        table = section.split('id="loading-table"', 1)[1].split("</table>", 1)[0]
        assert "Waiting for a core per sample" in table and f">{words}<" in table
        timeline = plots.loading_timeline_svg(run.loading, (0.0, 1.0))
        split = plots.loading_split_svg(loading_breakdown(counted_batches(run.loading, run.steps)))
        console = Console(record=True, width=120)
        print_summary(summary, "runs/x", console=console)
        text = console.export_text()
        if words == "unknown":
            assert "waiting for a core <i>unknown</i> (in fetch)" in headline
            assert "waiting for a core" not in timeline and "waiting for a core" not in split
            assert "unknown (counted in fetch)" in text.split("waiting for a core per sample", 1)[1].split("\n", 1)[0]
        else:
            assert f"waiting for a core <b>{words}</b>" in headline and "waiting for a core 2.3%," in headline
            assert "waiting for a core" in timeline and "waiting for a core" in split
            assert "500 µs" in text.split("waiting for a core per sample", 1)[1].split("\n", 1)[0]
        assert "fetch (off CPU: storage, sleep)" in timeline and "prep (on CPU: decode, transform)" in split


def test_a_loading_without_any_run_queue_reading_is_recorded_as_an_absence():
    from pipeprof.analysis.loading import CORE_WAIT_UNKNOWN, core_wait_absence

    nan = float("nan")
    assert core_wait_absence(pd.DataFrame({"core_wait_s": [nan, nan]})) == CORE_WAIT_UNKNOWN
    assert core_wait_absence(pd.DataFrame({"core_wait_s": [nan, 0.001]})) is None  # some batches were read
    assert core_wait_absence(pd.DataFrame({"fetch_s": [0.1]})) is None  # an old table: no claim either way
    assert core_wait_absence(pd.DataFrame()) is None
