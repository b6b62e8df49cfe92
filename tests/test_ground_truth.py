"""Ground truth: does the profiler tell the truth? Synthetic workloads with injected, known costs.

Each case builds a data set whose ``read()`` sleeps a known time per sample
(waiting on storage: no CPU used) and whose ``decode()`` busy-waits a known
time (preprocessing: a core busy), and a training step that takes a known
time. The true fractions then follow from arithmetic; the case runs through
the real measurement path — a real ``DataLoader`` with a real
``LoadingRecorder``, ``profile_workload`` (``train_loop``, ``StepTimer`` on
the real clock, the system sampler) — and ``summarize`` must find them.

Every injected cost is a wait until a deadline on the wall clock, so a
preemption in the middle of it (this machine is shared) does not stretch
it; only one that straddles the deadline does. ``time.sleep`` alone
overshoots by 70-110 us here (timer slack and wake-up), 14% of a 0.5 ms
fetch, so a "sleep" sleeps all but the last ``SPIN_MARGIN_S`` and spins that.

Not modelled in the expected values, and small next to the injected
milliseconds: collating 16 x 784 floats (~20 us a batch, checked below),
the DataLoader's own bookkeeping and the recorder's clock reads (a few us a
sample), moving a batch from a worker through shared memory (~0.1-0.3 ms a
batch), and the loop's bookkeeping.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from pipeprof.analysis.summary import summarize
from pipeprof.measure.loading import LoadingRecorder
from pipeprof.run import Run
from pipeprof.runner import Workload, profile_workload
from pipeprof.scenario import DataSpec, LoaderSpec, ProfileSpec, Scenario, TrainSpec
from pipeprof.storage.base import SampleDataset
from pipeprof.workload.data import Data

pytestmark = pytest.mark.integration

# Every measured fraction (of step time, of loading time) must be within 5
# percentage points of the arithmetic truth; per-sample and per-batch times
# within 5% of the injected ones.
TOLERANCE = 0.05
RELATIVE_TOLERANCE = 0.05

SPIN_MARGIN_S = 300e-6  # time.sleep overshoots by 70-130 us here (median to p90), more after a deep idle
FEATURES = 784


def burn(seconds: float) -> None:
    """Keep a core busy for ``seconds`` of wall time: CPU work, like decoding."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def hold(seconds: float) -> None:
    """Wait ``seconds`` of wall time asleep, like waiting on storage (spins only the last 150 us)."""
    end = time.perf_counter() + seconds
    if seconds > SPIN_MARGIN_S:
        time.sleep(seconds - SPIN_MARGIN_S)
    while time.perf_counter() < end:
        pass


class InjectedDataset(SampleDataset):
    """Sample i: ``read`` waits ``fetch_s`` asleep, ``decode`` burns ``prep_s``; 784 float32 copies of its label."""

    def __init__(self, samples: int, fetch_s: float, prep_s: float) -> None:
        super().__init__(np.arange(samples) % 10)
        self.fetch_s, self.prep_s = fetch_s, prep_s
        # Made once: building a tensor per sample costs 5-30 us, more than this test wants unaccounted for.
        self.values = [torch.full((FEATURES,), float(label)) for label in range(10)]

    def read(self, index: int) -> tuple[int, int]:
        hold(self.fetch_s)
        return index, FEATURES * 4

    def decode(self, payload: int) -> torch.Tensor:
        burn(self.prep_s)
        return self.values[payload % 10]


def injected_step(compute_s: float, wait: Callable[[float], None]):
    """A training step that takes ``compute_s``; a sample counts as correct when its values carry its label."""

    def step(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wait(compute_s)
        correct = (x[:, 0].long() == y).sum()  # all of them, unless samples and labels were mixed up
        return x.mean(), correct

    return step


@dataclass(frozen=True)
class Case:
    """An injected workload: ``batch`` samples of ``fetch_s`` + ``prep_s`` each, ``compute_s`` a step."""

    name: str
    workers: int
    batch: int
    fetch_s: float  # per sample, asleep
    prep_s: float  # per sample, a core busy
    compute_s: float  # per step
    compute: Callable[[float], None]  # burn or hold
    steps: int
    warmup_steps: int = 10

    @property
    def production_s(self) -> float:
        """Time one process takes to make one batch (collate not counted: ~20 us)."""
        return self.batch * (self.fetch_s + self.prep_s)


def profile_case(case: Case) -> tuple[Run, dict]:
    """Train ``case`` under the real profiler; returns the run and its summary."""
    samples = case.batch * case.steps  # one epoch: no worker restart inside the counted steps
    dataset = InjectedDataset(samples, case.fetch_s, case.prep_s)
    recorder = LoadingRecorder()  # raw clock readings: profile_workload shifts them by its t0, as for a scenario
    batches = DataLoader(recorder.wrap_dataset(dataset), batch_size=case.batch, num_workers=case.workers,
                         collate_fn=recorder.collate_fn())
    scenario = Scenario(
        name=f"ground-truth-{case.name}",
        data=DataSpec(samples=samples),
        loader=LoaderSpec(batch_size=case.batch, num_workers=case.workers, shuffle=False),
        train=TrainSpec(steps=case.steps, warmup_steps=case.warmup_steps, device="cpu"),
        profile=ProfileSpec(sample_hz=10),
    )
    work = Workload(scenario, torch.device("cpu"), Data(dataset, batches),
                    injected_step(case.compute_s, case.compute), torch.get_num_threads())
    run = profile_workload(work, recorder=recorder)
    assert run.meta["status"] == "complete", run.meta["error"]
    return run, summarize(run)


# -- the cases ------------------------------------------------------------------------
#
# Injected costs are milliseconds, not the tenths a real RAM data set costs:
# what is not injected (listed in the module docstring) must stay a few
# percent of each case. A sample is fetched in 2 ms and prepared in 1 ms.
# Compute sleeps in every case: a busy-wait of 8 ms on this shared 2-core
# machine was preempted across its deadline often enough to last 8.6-9.4 ms
# on average (measured), while short burns right after a sleep (prep) are
# rarely preempted; and with workers, a busy-waiting training process and two
# burning workers would take turns on the 2 cores, stretching every injected
# cost by the scheduler's whim. A GPU step looks like a sleep to the host anyway.
FETCH_S, PREP_S = 2e-3, 1e-3

# (1) No workers: the training process makes each batch itself, then computes.
# Nothing overlaps, so a step is P + C with P = 8 x 3 ms = 24 ms and C = 16 ms:
# data wait P / (P + C) = 0.6 (input-bound), compute C / (P + C) = 0.4.
SERIAL = Case("serial", workers=0, batch=8, fetch_s=FETCH_S, prep_s=PREP_S, compute_s=16e-3, compute=hold,
              steps=63, warmup_steps=3)

# (1b) No workers, 2 samples a batch: P = 6 ms against C = 42 ms gives data
# wait 6 / 48 = 0.125, in the middle of the balanced band [0.05, 0.20).
SERIAL_BALANCED = Case("serial-balanced", workers=0, batch=2, fetch_s=FETCH_S, prep_s=PREP_S, compute_s=42e-3,
                       compute=hold, steps=53, warmup_steps=3)

# (2) Two workers, each making a batch of 16 in P = 48 ms while a step
# computes for C = 150 ms: even one worker keeps ahead, so after warm-up every
# batch is already waiting: data wait 0, compute 1 (compute-bound).
# Why so long a step: taking a ready batch from a worker costs the training
# process 2-3.5 ms in next() on this machine (measured with a bare DataLoader,
# no pipeprof: the tensors come through shared memory, each file descriptor
# handed over by the worker on a fresh authenticated connection). That is
# real waiting in next(), rightly counted as data wait; against 150 ms it is
# 2%, and the class stays "compute" below 7.5 ms.
COMPUTE_BOUND = Case("compute-bound", workers=2, batch=16, fetch_s=FETCH_S, prep_s=PREP_S, compute_s=150e-3,
                     compute=hold, steps=23, warmup_steps=3)

# (3) Two workers both busy all the time, together delivering a batch of 16
# every P / 2 = 24 ms, while a step computes for C = 9.6 ms: a step lasts
# P / 2, of which (P / 2 - C) / (P / 2) = 0.6 is waiting for data
# (input-bound) and C / (P / 2) = 0.4 compute. The 2-3.5 ms of taking a batch
# happen while the workers make the next ones, so they do not lengthen the
# step. (The workers finish their batches in pairs, so steps alternate between
# a long wait and almost none: the average is the same.)
INPUT_BOUND = Case("input-bound", workers=2, batch=16, fetch_s=FETCH_S, prep_s=PREP_S, compute_s=9.6e-3,
                   compute=hold, steps=110, warmup_steps=6)

CASES = [SERIAL, SERIAL_BALANCED, COMPUTE_BOUND, INPUT_BOUND]


@pytest.fixture(scope="module")
def profiled():
    """Each case profiled once (on first use), shared by the tests below."""
    runs: dict[str, tuple[Run, dict]] = {}

    def get(case: Case) -> tuple[Run, dict]:
        if case.name not in runs:
            runs[case.name] = profile_case(case)
        return runs[case.name]

    return get


def expected_step_s(case: Case) -> float:
    """The true mean step time of ``case`` (see the cases above)."""
    if case.workers == 0:
        return case.production_s + case.compute_s  # made, then computed: nothing overlaps
    return max(case.compute_s, case.production_s / case.workers)  # the slower of supply and demand sets the pace


def expected_fractions(case: Case) -> dict[str, float]:
    """The arithmetic truth of ``summarize()["fractions"]`` for ``case``: whatever is not compute is waiting."""
    step_s = expected_step_s(case)
    return {"data_wait": (step_s - case.compute_s) / step_s, "h2d": 0.0, "compute": case.compute_s / step_s,
            "other": 0.0}


def assert_close(measured: float, expected: float, tolerance: float, what: str) -> None:
    assert abs(measured - expected) <= tolerance, f"{what}: measured {measured:.4f}, expected {expected:.4f}"


@pytest.mark.parametrize("case, klass", [(SERIAL, "input"), (SERIAL_BALANCED, "balanced"),
                                         (COMPUTE_BOUND, "compute"), (INPUT_BOUND, "input")],
                         ids=lambda v: v.name if isinstance(v, Case) else v)
def test_step_fractions_and_bottleneck_match_the_arithmetic(profiled, case, klass):
    run, summary = profiled(case)
    expected = expected_fractions(case)
    for phase, value in expected.items():
        assert_close(summary["fractions"][phase], value, TOLERANCE, f"{case.name} {phase} fraction")
    assert summary["bottleneck"] == klass, summary["bottleneck_reason"]
    assert summary["steps"] == case.steps - case.warmup_steps
    assert summary["samples"] == summary["steps"] * case.batch
    assert summary["accuracy"] == 1.0  # every batch's values arrived with their own labels


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_step_time_and_throughput_match_the_arithmetic(profiled, case):
    _, summary = profiled(case)
    step_s = expected_step_s(case)
    assert_close(summary["step_time_s"]["mean"] / step_s, 1.0, RELATIVE_TOLERANCE, f"{case.name} mean step / truth")
    assert_close(summary["samples_per_s"] * step_s / case.batch, 1.0, RELATIVE_TOLERANCE,
                 f"{case.name} throughput / truth")


# (4) and (5): the loading split and per-sample times, measured inside the
# process that made the batch: fetch is fetch_s / (fetch_s + prep_s) = 2/3 of
# loading time, prep 1/3, collate ~0; per sample 0.5 ms and 0.25 ms.


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_loading_split_and_per_sample_times_match_the_injected_costs(profiled, case):
    run, summary = profiled(case)
    loading = summary["loading"]
    per_sample_s = case.fetch_s + case.prep_s
    assert_close(loading["fractions"]["fetch"], case.fetch_s / per_sample_s, TOLERANCE, f"{case.name} fetch fraction")
    assert_close(loading["fractions"]["prep"], case.prep_s / per_sample_s, TOLERANCE, f"{case.name} prep fraction")
    assert_close(loading["fractions"]["collate"], 0.0, TOLERANCE, f"{case.name} collate fraction")
    assert_close(loading["fetch_s"] / case.fetch_s, 1.0, RELATIVE_TOLERANCE, f"{case.name} fetch per sample / truth")
    assert_close(loading["prep_s"] / case.prep_s, 1.0, RELATIVE_TOLERANCE, f"{case.name} prep per sample / truth")
    assert_close(loading["batch_s"] / case.production_s, 1.0, RELATIVE_TOLERANCE, f"{case.name} batch time / truth")
    assert loading["workers"] == case.workers
    assert loading["batches"] == case.steps - case.warmup_steps
    assert loading["samples"] == loading["batches"] * case.batch


def test_busy_workers_are_busy_and_idle_ones_idle(profiled):
    # Input-bound: both workers make batches back to back (busy 1). Compute-
    # bound: each makes every other batch, one per 2 C = 40 ms, in P = 12 ms:
    # busy 12 / 40 = 0.3 of the time.
    _, summary = profiled(INPUT_BOUND)
    for worker, stats in summary["loading"]["by_worker"].items():
        assert_close(stats["busy_fraction"], 1.0, TOLERANCE, f"input-bound worker {worker} busy")
    _, summary = profiled(COMPUTE_BOUND)
    for worker, stats in summary["loading"]["by_worker"].items():
        expected = COMPUTE_BOUND.production_s / (COMPUTE_BOUND.workers * COMPUTE_BOUND.compute_s)
        assert_close(stats["busy_fraction"], expected, TOLERANCE, f"compute-bound worker {worker} busy")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_batch_is_made_before_its_step_receives_it(profiled, case):
    """Worker clocks and the step clock share one time axis: a batch ends before next() returns it."""
    run, _ = profiled(case)
    merged = run.loading.merge(run.steps, on="step", suffixes=("", "_step"))
    received_s = merged["t_start_s_step"] + merged["data_wait_s"]
    assert len(merged) == case.steps
    assert (merged["t_end_s"] <= received_s).all()
    if case.workers == 0:  # made inside the step's own wait
        assert (merged["t_start_s"] >= merged["t_start_s_step"]).all()
