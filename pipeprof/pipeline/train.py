"""The runner: builds storage, dataset, DataLoader and model from a Scenario and drives the loop.

``profile_scenario`` returns a ``Run`` of raw records; it never analyzes or
renders. The training loop is the same function with and without the
profiler (``train_loop`` takes any timer with the StepTimer interface).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from pipeprof.analysis.loading import core_wait_absence
from pipeprof.errors import UsageError, interrupt_reason, one_line, raise_if_terminated
from pipeprof.measure import gpu as gpu_mod
from pipeprof.measure.clock import Clock, monotonic_clock
from pipeprof.measure.codeprofile import CodeProfile
from pipeprof.measure.cuda_device import cuda_events, device_sync
from pipeprof.measure.cuda_memory import CudaMemoryWindows
from pipeprof.measure.environment import describe_environment
from pipeprof.measure.loading import SCENARIO_LOADER, LoadingRecorder
from pipeprof.measure.prefetch import NAN, ready_batches
from pipeprof.measure.probe_plan import workers_wanted
from pipeprof.measure.pyspy import PySpy
from pipeprof.measure.sampler import SystemSampler
from pipeprof.measure.spool import CHUNK_ROWS, Spool
from pipeprof.measure.steady import SteadyState
from pipeprof.measure.steps import StepTimer, ThroughputTimer
from pipeprof.measure.what_if import measure_what_ifs
from pipeprof.measure.windows import probes_budget
from pipeprof.pipeline.recording import RecordTo
from pipeprof.run_folder import (
    DEVICE_MEMORY_COLUMNS,
    FUNCTION_COLUMNS,
    LOADING_COLUMNS,
    STEP_COLUMNS,
    TRANSFORM_COLUMNS,
    Run,
    sample_tables,
)
from pipeprof.scenario import Scenario
from pipeprof.storage.base import Progress
from pipeprof.storage.pagecache import drop
from pipeprof.version import __version__
from pipeprof.workload.data import Data, build_data
from pipeprof.workload.distributed import DistributedParts
from pipeprof.workload.model import build_model
from pipeprof.workload.step import StepFn, make_train_step

OnStep = Callable[[int, int], None]  # (steps done, total steps)



def resolve_device(spec: str, cuda_available: bool | None = None) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; an unavailable CUDA device is a usage error. A CUDA device
    always has its ordinal (``cuda`` is torch's current device, ``cuda:0`` in a fresh process): the run records
    ``cuda:1``, not ``cuda``, and every event, synchronize and memory read names it."""
    available = torch.cuda.is_available() if cuda_available is None else cuda_available
    if spec == "auto":
        spec = "cuda" if available else "cpu"
    device = torch.device(spec)
    if device.type == "cuda":
        if not available:
            raise UsageError(f"train.device = {spec!r}: no CUDA device is available on this machine; "
                             f"use 'auto' or 'cpu'")
        if device.index is None:
            return torch.device("cuda", torch.cuda.current_device() if cuda_available is None else 0)
        count = torch.cuda.device_count()
        if device.index >= count:
            raise UsageError(f"train.device = {spec!r}: this machine has {count} CUDA device(s); "
                             f"allowed: cuda:0 .. cuda:{count - 1}")
    return device


@dataclass
class Workload:
    """Everything built from a scenario, ready to train."""

    scenario: Scenario
    device: torch.device
    data: Data
    step_fn: StepFn
    threads: int
    notes: list[str] = field(default_factory=list)
    rank: DistributedParts | None = None  # one rank of a DDP job (pipeline/ranks_run.py); None: one process

    @property
    def non_blocking(self) -> bool:
        # An async copy only overlaps with compute from pinned memory.
        return self.device.type == "cuda" and self.data.pin_memory


def build_workload(scenario: Scenario, cache_root: Path | None = None, *, recorder: LoadingRecorder | None = None,
                   progress: Progress | None = None, rank: DistributedParts | None = None) -> Workload:
    """Generate (or reuse) the data, and build dataset, batches, model and training step.

    With ``rank`` (its process group joined) the batches are the rank's shard and the model trains
    under DistributedDataParallel, its backward passes timed for their collective wait.
    """
    if rank is None and scenario.train.ranks > 1:
        raise UsageError(f"train.ranks = {scenario.train.ranks}: a job of several ranks runs with pipeprof run "
                         f"or sweep; this command trains one process (--set train.ranks=1)")
    device = resolve_device(scenario.train.device)
    if scenario.train.threads:
        torch.set_num_threads(scenario.train.threads)
    data = build_data(scenario, device, cache_root, recorder=recorder, progress=progress, rank=rank)
    model = build_model(scenario.model, device)
    if rank is not None:
        assert isinstance(model, torch.nn.Module)  # validation: no scratch model with ranks
        ddp = rank.wrap(model, device)
        meter = rank.collective
        step_fn = make_train_step(model, scenario.model, forward=ddp,
                                  backward=meter.backward if meter is not None else None)
    else:
        step_fn = make_train_step(model, scenario.model)
    return Workload(scenario, device, data, step_fn, torch.get_num_threads(), list(data.notes), rank)


BeforeEpoch = Callable[[int], None]
BeforeStep = Callable[[int], None]
StopAfter = Callable[[int, int], bool]


def train_loop(work: Workload, total_steps: int, timer: StepTimer | ThroughputTimer,
               on_step: OnStep | None = None, *, before_epoch: BeforeEpoch | None = None,
               recorder: LoadingRecorder | None = None, before_step: BeforeStep | None = None,
               stop_after: StopAfter | None = None) -> None:
    """Train ``total_steps`` steps, a new epoch (a new pass over the batches) whenever one is used up.

    ``before_epoch(epoch)`` runs inside the first step's wait for data, after
    the previous epoch's iterator (and its non-persistent workers) is gone and
    before the next one is created, with the step timer paused.
    ``before_step(i)`` runs before step ``i`` begins, outside the step timer's
    marks (its time falls in the previous step's "other"): the cProfile window
    turns on and off there.
    ``stop_after(i, samples)`` runs after step ``i``; True ends training there
    (steady-state measurement).
    """
    device, non_blocking, step_fn = work.device, work.non_blocking, work.step_fn
    batches, per_epoch = work.data.batches, work.data.steps_per_epoch()
    iterator = None
    epoch, left = -1, 0
    fetching = False
    try:
        for i in range(total_steps):
            raise_if_terminated()  # a SIGTERM lost where it was raised still ends the loop, at the next step
            if before_step is not None:
                before_step(i)
            timer.begin(ready_batches(iterator) if left else NAN)
            if left == 0:
                # Ending an epoch's iterator (joining its workers) and starting the
                # next (spawning workers) are real waits of a training loop: timed.
                _end_workers(iterator, batches)
                iterator = None
                epoch, left = epoch + 1, per_epoch
                if before_epoch is not None:
                    timer.pause()
                    before_epoch(epoch)
                    timer.resume()
                iterator = iter(batches)
            assert iterator is not None  # made when the first epoch began (left was 0), never dropped since
            fetching = True
            batch = next(iterator)
            fetching = False
            left -= 1
            if recorder is not None and len(batch) > 2:  # device batches carry no loading record
                recorder.record(batch[2], i)
            timer.waited()
            x = batch[0].to(device, non_blocking=non_blocking)
            y = batch[1].to(device, non_blocking=non_blocking)
            timer.copied()
            loss, correct = step_fn(x, y)
            timer.computed(len(y), loss, correct, epoch)
            if on_step:
                on_step(i + 1, total_steps)
            if stop_after is not None and stop_after(i, len(y)):
                break
        timer.finish()
    except Exception as e:
        # Fetching, the training process may have seen only a symptom of a worker's death (a reset connection,
        # a shared-memory file gone): say the cause. A worker's own exception says it ("in DataLoader worker").
        symptom = fetching and "DataLoader worker" not in str(e)
        died = dead_workers(iterator, wait_s=1.0) if symptom else None
        if died:
            raise WorkerDied(f"{died} (the training process saw {one_line(e)})") from e
        raise
    finally:
        # Interrupted or failed too: end the workers now, while they are alive, not whenever the
        # traceback lets go of the iterator (a worker outliving its parent prints tracebacks).
        _end_workers(iterator, batches)


class WorkerDied(RuntimeError):
    """A DataLoader worker process ended by a signal or a non-zero exit while the loop ran."""


def dead_workers(iterator: Any, wait_s: float = 0.0, poll_s: float = 0.01) -> str | None:
    """Which of a multi-process iterator's workers have died, as torch words it ("DataLoader worker (pid N)
    is killed by signal: Killed."), or None. A worker killed while handing over a batch reaches the training
    process as whatever broke first (a reset connection, a shared-memory file gone, a timeout): the worker's
    own exit status says what happened. That symptom can come before the worker's exit is reported (its sockets
    close as it dies): up to ``wait_s`` is given for one to be.
    """
    workers = list(getattr(iterator, "_workers", None) or ())
    deadline_s = time.monotonic() + wait_s
    while wait_s and workers and all(w.exitcode is None for w in workers) and time.monotonic() < deadline_s:
        time.sleep(poll_s)
    said = []
    for worker in workers:
        code = getattr(worker, "exitcode", None)
        if code is None or code == 0:
            continue
        if code < 0:
            how = f"is killed by signal: {signal.strsignal(-code) or -code}"
        else:
            how = f"exited with status {code}"
        said.append(f"DataLoader worker (pid {worker.pid}) {how}")
    return "; ".join(said) or None


def _end_workers(iterator: Any, batches: Any) -> None:
    """End a finished pass's DataLoader workers explicitly (persistent ones stay for the next pass).

    Dropping the iterator would end them in its ``__del__``, where a Ctrl-C or
    SIGTERM arriving meanwhile is "ignored" with a printed traceback and lost;
    called here, it propagates like anywhere else in the loop.
    """
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None and not getattr(batches, "persistent_workers", False):
        shutdown()


def profile_scenario(scenario: Scenario, *, cache_root: Path | None = None, clock: Clock = monotonic_clock,
                     on_step: OnStep | None = None, context: dict[str, Any] | None = None) -> Run:
    """Build ``scenario``'s workload with worker-side timing and profile it (see ``profile_workload``)."""
    recorder = LoadingRecorder(clock) if scenario.profile.loading else None
    work = build_workload(scenario, cache_root, recorder=recorder)
    return profile_workload(work, recorder=recorder, clock=clock, on_step=on_step, context=context)


class ColdCache:
    """Drops the data set's files from the page cache before each epoch, and keeps what happened."""

    def __init__(self, work: Workload, clock: Clock, t0_s: float) -> None:
        self.dataset = work.data.dataset
        self.paths = self.dataset.paths()
        self.clock, self.t0_s = clock, t0_s
        self.drops: list[dict[str, Any]] = []

    def before_epoch(self, epoch: int) -> None:
        self.dataset.close()  # a page still mapped by this process cannot be evicted
        t_s = self.clock() - self.t0_s
        result = drop(self.paths)
        self.drops.append({"epoch": epoch, "t_s": t_s, "took_s": self.clock() - self.t0_s - t_s,
                           **dataclasses.asdict(result)})


class DeviceMemoryRows:
    """torch.cuda's memory windows read at the loop's step ends (after ``then``'s own step-end work: the
    progress line), on the run's time axis: rows of DEVICE_MEMORY_COLUMNS. A host-side read, no synchronize."""

    def __init__(self, windows: CudaMemoryWindows, clock: Clock, t0_s: float, then: OnStep | None = None) -> None:
        self.windows, self.clock, self.t0_s, self.then = windows, clock, t0_s, then
        self.rows: list[tuple[float, int, int, int, int]] = []

    def __call__(self, done: int, total: int) -> None:
        row = self.windows.read(self.clock() - self.t0_s)
        if row is not None:
            self.rows.append(row)
        if self.then is not None:
            self.then(done, total)

    def frame(self) -> pd.DataFrame:
        """Every row, the last window's (cut short by the run's end) included."""
        last = self.windows.final(self.clock() - self.t0_s)
        return pd.DataFrame(self.rows + ([last] if last is not None else []), columns=DEVICE_MEMORY_COLUMNS)


class WritingAsItGoes:
    """At every ``every`` steps' end (after the step's parts, before the next step), the steps held back and the
    loading records go to their spool files (``pipeline.recording``); then ``then``, the step end's own work."""

    def __init__(self, timer: StepTimer, recorder: LoadingRecorder | None, every: int,
                 then: OnStep | None = None) -> None:
        self.timer, self.recorder, self.every, self.then = timer, recorder, every, then

    def __call__(self, done: int, total: int) -> None:
        if done % self.every == 0:
            self.timer.settle()
            self.timer.spool.flush()
            if self.recorder is not None:
                self.recorder.flush()
        if self.then is not None:
            self.then(done, total)


def profile_workload(work: Workload, *, recorder: LoadingRecorder | None = None, clock: Clock = monotonic_clock,
                     on_step: OnStep | None = None, context: dict[str, Any] | None = None,
                     t0_s: float | None = None, what_ifs: bool = True, record_to: RecordTo | None = None) -> Run:
    """Train ``work`` under the profiler and return the raw records.

    ``t0_s``: the clock reading times count from (default: now); the ranks of a job share their
    parent's, so that every rank's records and the job's lie on one time axis.
    A failure or Ctrl-C during training still returns the steps measured so
    far, with ``status`` "failed" or "interrupted" (and the error) in the metadata.
    After a complete run the compute ceiling and the what-if probes (``measure.what_if``, ~1.2 s) are
    measured; ``what_ifs=False`` leaves the probes out (run.json says so): a workload whose dataset and step
    count their own calls (the ground-truth test) is then called by the training loop only.
    ``record_to``: the raw records stream into that folder as the run goes (a killed pipeprof leaves them).
    """
    scenario = work.scenario
    on_cuda = work.device.type == "cuda"
    gpu = gpu_mod.open_gpu((work.device.index or 0) if on_cuda else None)
    absences: dict[str, str] = {}
    if isinstance(gpu, gpu_mod.Absent):
        absences["gpu"] = gpu.reason
        monitor = None
    else:
        monitor = gpu
    # Steps, samples and loading records stream to files here: a run of hours stays small (measure.spool).
    spool: tempfile.TemporaryDirectory[str] | None = None
    if record_to is None:
        spool = tempfile.TemporaryDirectory(prefix="pipeprof-spool-")
        spool_dir, tick_rows = Path(spool.name), CHUNK_ROWS
    else:
        spool_dir, tick_rows = record_to.folder, record_to.tick_rows
    t0_s = clock() if t0_s is None else t0_s
    rank = work.rank
    collective = rank.collective if rank is not None else None
    if rank is not None and collective is None:
        absences["collective_wait"] = collective_wait_absence(rank.backend)
    timer = StepTimer(clock, t0_s, scenario.train.warmup_steps, cuda_events(work.device) if on_cuda else None,
                      collective.take if collective is not None else None,
                      spool=Spool(STEP_COLUMNS, spool_dir, "steps"))
    if recorder is not None and not recorder.batches:
        recorder.spool_to(spool_dir)
    cold = ColdCache(work, clock, t0_s) if scenario.data.cache == "cold" else None
    sampler = SystemSampler(os.getpid(), scenario.profile.sample_hz, clock=clock, t0_s=t0_s, gpu=monitor,
                            tree_refresh_s=scenario.profile.tree_refresh_s,
                            uss_interval_s=scenario.profile.uss_interval_s, spool_dir=spool_dir,
                            spool_rows=tick_rows)
    profile = scenario.profile
    code = CodeProfile(scenario.train.warmup_steps, profile.cprofile_steps, work.data.batches) \
        if profile.cprofile_steps else None
    spy = PySpy(profile.pyspy_hz) if profile.pyspy_hz else None
    train = scenario.train
    steady = SteadyState(clock, train.warmup_steps, train.steady, train.steady_cv, train.steady_windows,
                         train.steady_window_s, train.max_seconds) if train.steady or train.max_seconds else None
    stop_after: StopAfter | None = steady.after_step if steady else None
    if stop_after is not None and rank is not None:
        stop_after = rank.agreeing(stop_after)  # every rank trains the same steps
    memory = DeviceMemoryRows(CudaMemoryWindows(torch.cuda, device=work.device), clock, t0_s, on_step) \
        if on_cuda else None
    status, error = "complete", None
    if record_to is not None:  # what a rebuild needs that the rows do not say (pipeline.recording)
        record_to.note_start({"t0_s": t0_s, "meta": {
            "pipeprof_version": __version__,
            "created_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "scenario": scenario.to_dict(), "device": str(work.device), "timing": timer.timing(),
            "environment": describe_environment(work.threads),
            "gpu": {"available": False, "reason": absences["gpu"]} if monitor is None else
                   {"available": True, **monitor.info()},
            "absences": {**absences, **(context or {}).get("absences", {})}, "notes": work.notes,
            "cache": {"mode": scenario.data.cache, "dataset_bytes": work.data.nbytes_on_disk(), "drops": []},
            **{k: v for k, v in (context or {}).items() if k != "absences"}}})
    sampler.start()
    if steady is not None:
        steady.begin()
    if spy is not None:
        spy.start(os.getpid())
    try:
        step_end = memory or on_step
        if record_to is not None:
            step_end = WritingAsItGoes(timer, recorder, record_to.step_rows, step_end)
        train_loop(work, scenario.total_steps(), timer, step_end, recorder=recorder,
                   before_epoch=cold.before_epoch if cold else None,
                   before_step=code.before_step if code else None,
                   stop_after=stop_after)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (errors.Terminated)
        status, error = "interrupted", interrupt_reason(e)
    except Exception as e:  # noqa: BLE001 - recorded in the run, shown as one line by the CLI
        status, error = "failed", one_line(e)
    finally:
        device_memory = memory.frame() if memory is not None else pd.DataFrame(columns=DEVICE_MEMORY_COLUMNS)
        sampler.stop()
        # After training, untimed: py-spy writes its file, the workers exit and dump their profiles.
        finished = {"pyspy": spy.stop() if spy else None, "cprofile": code.finish() if code else None}
    if record_to is not None:  # the rows still in memory to the recording: a save that then fails keeps them all
        timer.flush()
        sampler.flush()
        if recorder is not None:
            recorder.flush()
    compute_ceiling = None
    trained_s = clock() - t0_s  # the run's own training time: the probes' budget follows it
    probes = what_ifs and work.scenario.profile.what_ifs
    what_ifs_meta: dict[str, Any] = {"absent": f"the run is {status}: no probe after it" if probes else
                                     "off (profile.what_ifs = false)" if what_ifs else
                                     "not asked for (profile_workload(what_ifs=False))"}
    try:  # after the training, untimed; an interrupt here keeps every step (the run is then interrupted)
        if status == "complete":
            try:
                compute_ceiling = measure_compute_ceiling(work, clock)
            except Exception as e:  # noqa: BLE001 - a missing ceiling is recorded, never a failed run
                absences["compute_ceiling"] = one_line(e)
        if status == "complete" and probes:
            try:  # the pieces a changed setting runs (measure.what_if), for the recommendations' predictions
                done = timer.frame()  # the steps so far (the table is read again for the run below)
                counted = done[~done["warmup"].astype(bool)]["step_s"] if len(done) else done
                after_warmup = done[~done["warmup"].astype(bool)] if len(done) else done
                step_s = float(counted.median()) if len(counted) else None
                budget = probes_budget(float(done["step_s"].sum()) if len(done) else trained_s, step_s,
                                       work.scenario.profile.what_ifs_s or None)
                wanted = workers_wanted(int(work.scenario.loader.num_workers or 0), step_s,
                                        float(after_warmup["data_wait_s"].median()) if len(after_warmup) else None)
                what_ifs_meta = {**measure_what_ifs(work, train_loop, clock, wanted=wanted, **budget),
                                 "budget": budget, "workers_wanted": wanted}
            except Exception as e:  # noqa: BLE001 - a missing probe is recorded, never a failed run
                what_ifs_meta = {"absent": one_line(e)}
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM during the ceiling or the probes
        status, error = "interrupted", interrupt_reason(e)
        what_ifs_meta = {"absent": f"interrupted during the probes after the run ({error})"}
    absences.update(sampler.absences)  # includes the GPU monitor's missing metrics
    recorded = {name: r for name, r in finished.items() if r is not None}
    for r in recorded.values():
        absences.update(r.absences)
    gpu_meta: dict[str, Any] = {"available": monitor is not None}
    if monitor is not None:
        gpu_meta.update(monitor.info())
        monitor.close()  # after sampler.stop(): the sampler's last tick still reads NVML
    else:
        gpu_meta["reason"] = absences["gpu"]
    meta = {
        "pipeprof_version": __version__,
        "created_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "scenario": scenario.to_dict(),
        "device": str(work.device),
        "timing": timer.timing(),
        "environment": describe_environment(work.threads),
        "gpu": gpu_meta,
        "absences": absences,
        "notes": work.notes,
        "cache": {"mode": scenario.data.cache, "dataset_bytes": work.data.nbytes_on_disk(),
                  "drops": cold.drops if cold else []},
        "status": status,
        "error": error,
        "compute_ceiling": compute_ceiling,
        "what_ifs": what_ifs_meta,
    }
    if recorded:
        meta["code_profile"] = {name: r.meta for name, r in recorded.items()}
    context = dict(context or {})
    absences.update(context.pop("absences", {}))
    meta.update(context)
    steps = timer.frame()
    if steady is not None:
        meta["steady"] = steady.meta()
        first = steady.counted_from()
        if first is not None:  # the unsteady start is warm-up too
            steps["warmup"] = steps["warmup"].astype(bool) | (steps["step"] < first)
    samples, processes = sample_tables(*sampler.frames(), monitor is not None)
    loading = recorder.frame() if recorder else pd.DataFrame(columns=LOADING_COLUMNS)
    loading[["t_start_s", "t_end_s"]] -= t0_s  # the recorder keeps raw clock readings
    no_core_wait = core_wait_absence(loading)
    if no_core_wait:
        absences["core_wait"] = no_core_wait
    transforms = recorder.transforms_frame() if recorder else pd.DataFrame(columns=TRANSFORM_COLUMNS)
    if recorder is not None and recorder.pipeline:
        meta["transform_pipelines"] = {str(SCENARIO_LOADER): recorder.pipeline}
    if transforms.empty:
        absences["transforms"] = nothing_timed_inside(scenario, recorder.batches if recorder else None)
    if spool is not None:
        spool.cleanup()
    functions = pd.DataFrame([row for r in recorded.values() for row in r.rows], columns=FUNCTION_COLUMNS)
    attachments = {name: content for r in recorded.values() for name, content in r.files.items()}
    return Run(meta=meta, steps=steps, samples=samples, processes=processes, loading=loading,
               functions=functions, attachments=attachments, device_memory=device_memory, transforms=transforms)


def collective_wait_absence(backend: str) -> str:
    """Why a rank on CUDA has no collective wait, whichever backend reduces (NCCL, or gloo where ranks share a GPU)."""
    return (f"not measured on CUDA ({backend}): the all-reduce of CUDA tensors is queued on the device and the "
            f"host does not block in it; it stays in compute")


def nothing_timed_inside(scenario: Scenario, batches: int | None) -> str:
    """Why a scenario run has no transforms.csv (run.json ``absences.transforms``); ``batches``: the loading
    records kept (None: loading not recorded)."""
    if scenario.data.storage == "device":
        return "data.storage = 'device': batches are taken on the device by index, no sample is prepared alone"
    if batches is None:
        return "profile.loading = false: nothing was timed where the samples were made"
    if batches == 0:
        return "no batch reached a training step"
    return (f"nothing inside the samples to time: data.transform = {scenario.data.transform!r} and the "
            f"{scenario.data.storage} storage uses its values as stored (no decode call)")


COMPUTE_PROBE_STEPS = 20
COMPUTE_PROBE_WARMUP = 3


def measure_compute_ceiling(work: Workload, clock: Clock = monotonic_clock,
                            steps: int = COMPUTE_PROBE_STEPS) -> dict[str, Any]:
    """The uncontended compute ceiling: training steps on one batch already on the device, after the run.

    No loader, no data wait, the DataLoader workers gone (or idle): what the
    model trains at when nothing else competes for the cores. The run's own
    compute time is measured under its contention (workers decoding beside
    torch's threads slow both), so predictions that remove the loading use
    this instead. Costs ``steps`` + 3 steps after the measured ones; they
    change the weights, not any statistic.
    """
    batch = work.scenario.loader.batch_size
    x = torch.randn(batch, 784, device=work.device)
    y = torch.randint(0, 10, (batch,), device=work.device)
    sync = device_sync(work.device) or (lambda: None)
    # A rank of a DDP job: its own compute, without the all-reduce (no rank waits for another here).
    with work.rank.solo() if work.rank is not None else contextlib.nullcontext():
        for _ in range(COMPUTE_PROBE_WARMUP):
            work.step_fn(x, y)
        sync()
        start_s = clock()
        for _ in range(steps):
            work.step_fn(x, y)
        sync()
        took_s = clock() - start_s
    return {"samples_per_s": steps * batch / took_s if took_s > 0 else None, "steps": steps,
            "batch_size": batch, "took_s": took_s}


def measure_unprofiled(scenario: Scenario, *, cache_root: Path | None = None,
                       clock: Clock = monotonic_clock) -> float:
    """Samples/s after warm-up with no profiler at all: the overhead benchmark's baseline."""
    work = build_workload(scenario, cache_root)
    sync = device_sync(work.device)
    timer = ThroughputTimer(clock, scenario.train.warmup_steps, sync)
    cold = ColdCache(work, clock, clock()) if scenario.data.cache == "cold" else None
    train_loop(work, scenario.total_steps(), timer, before_epoch=cold.before_epoch if cold else None)
    return timer.samples_per_s
