"""The direct attribution: the evidence of what one run's time went into, every number with its unit.

Pure functions over a Run's tables and metadata (no torch). ``attribution``
gathers, from the counted steps only: the step split (data wait, h2d,
compute), the loading split measured inside the process that made each
batch (fetch / prep / collate, per-worker busy fraction), CPU use against
the usable cores (oversubscription: workers + torch threads > cores), disk
reads against the probed cold-read ceilings, GPU idle time, and the
prefetch queue's occupancy (``ready_batches``). It returns an ``Attribution``:
one typed record per section (``pipeprof.analysis.evidence``), which the
verdict and the recommendations read field by field; ``to_json()`` is
summary.json's ``attribution``; ``pipeprof.analysis.verdict`` turns it into one
class. What was not measured is the section's ``absent`` reason (``{"absent":
reason}`` in JSON), never a zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pipeprof.analysis.cache import CacheCheck, cache_check
from pipeprof.analysis.evidence import (
    CacheEvidence,
    CpuEvidence,
    DataEvidence,
    DiskCeiling,
    DiskEvidence,
    GpuEvidence,
    LoadingEvidence,
    PrefetchEvidence,
    StepShares,
)
from pipeprof.analysis.loading import LoadingSummary, counted_batches, loading_summary
from pipeprof.analysis.steps import counted_steps, counted_window_s, fractions
from pipeprof.loader_rules import pins_memory, prefetch_factor, queue_capacity_batches
from pipeprof.measure.probe_record import Measurement, ProbeDisk
from pipeprof.numbers import finite as _finite
from pipeprof.run_folder import Run
from pipeprof.run_meta import JsonObject, RunMeta, RunSettings, as_object

RANDOM_READ_BYTES = 4096  # the probe's random reads are 4 KiB
NO_PROBE = "no machine probe: run pipeprof probe"


@dataclass(frozen=True)
class Attribution:
    """What ``attribution`` hands the verdict, the recommendations and the summary.

    One typed record per section of summary.json's ``attribution`` (``evidence``;
    see ``attribution``); ``to_json()`` is that section. ``fractions``,
    ``loading_summary`` and ``cache_check`` are the step split, the loading summary
    and the cache check it was derived from, which the summary reports as they are
    (computed once, here).
    """

    step: StepShares
    loading: LoadingEvidence
    cpu: CpuEvidence
    disk: DiskEvidence
    gpu: GpuEvidence
    prefetch: PrefetchEvidence
    data: DataEvidence
    cache: CacheEvidence
    fractions: dict[str, float] = field(default_factory=dict)
    loading_summary: LoadingSummary | None = None
    cache_check: CacheCheck | None = None
    # The run's settings as run.json recorded them (a scenario's or a script's: ``kind``), for words that fit
    # the command that made the run; not in summary.json's ``attribution`` (None when read back from it).
    settings: RunSettings | None = None

    def to_json(self) -> JsonObject:
        return {"step": self.step.to_json(), "loading": self.loading.to_json(), "cpu": self.cpu.to_json(),
                "disk": self.disk.to_json(), "gpu": self.gpu.to_json(), "prefetch": self.prefetch.to_json(),
                "data": self.data.to_json(), "cache": self.cache.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> Attribution:
        """The inverse of ``to_json`` (lenient: a missing section at its defaults), for a summary read back.

        ``fractions`` come from ``step`` (NaN where null); ``loading_summary`` and ``cache_check``
        are not in summary.json's ``attribution``: None."""
        data = as_object(data)
        step = StepShares.from_json(data.get("step"))
        fracs = {"data_wait": step.data_wait_fraction, "h2d": step.h2d_fraction,
                 "collective_wait": step.collective_wait_fraction, "compute": step.compute_fraction, "other": step.other_fraction}
        return cls(step, LoadingEvidence.from_json(data.get("loading")), CpuEvidence.from_json(data.get("cpu")),
                   DiskEvidence.from_json(data.get("disk")), GpuEvidence.from_json(data.get("gpu")),
                   PrefetchEvidence.from_json(data.get("prefetch")), DataEvidence.from_json(data.get("data")),
                   CacheEvidence.from_json(data.get("cache")),
                   fractions={p: math.nan if v is None else float(v) for p, v in fracs.items()})


def attribution(run: Run, probe: JsonObject | None = None) -> Attribution:
    """The direct attribution evidence of one run; every number carries its unit in its name.

    Sections, each a field of the ``Attribution`` and a record of ``evidence`` (``absent``
    and, in JSON, ``{"absent": reason}`` where something was not measured, never a zero):

    * ``step``: ``data_wait_fraction``, ``h2d_fraction``, ``compute_fraction``,
      ``other_fraction`` of counted step time; ``steps``; ``step_mean_s``, ``data_wait_mean_s``.
    * ``loading``: ``workers`` (0: the training process made the batches);
      ``fetch_per_sample_s``, ``prep_per_sample_s``, ``collate_per_sample_s``,
      ``collate_per_batch_s``, ``batch_s`` (mean production time per batch);
      ``fetch_fraction``, ``prep_fraction``, ``collate_fraction`` of production time;
      ``core_wait_per_sample_s`` and ``core_wait_fraction``: waiting for a core, taken out of fetch (null:
      unknown, fetch holds it);
      ``busy_fraction_by_worker`` (``"main"``, ``"0"``, …) and ``worker_busy_mean_fraction``
      (DataLoader workers only); ``production_over_wait_fraction``: ``batch_s`` over the
      mean data wait per step.
    * ``cpu``: ``cores_usable`` (affinity and cgroup quota), ``torch_threads``,
      ``num_workers``, ``threads_wanted`` (workers + torch threads), ``oversubscribed``;
      ``main_cpu_mean_pct`` and ``workers_cpu_mean_pct`` (% of one core),
      ``machine_cpu_mean_pct`` and ``machine_cpu_peak_pct`` (% of all cores),
      ``busy_cores`` (training process + workers, in cores) and ``busy_over_usable_fraction``.
    * ``disk``: ``mean_read_bytes_per_s``, ``peak_read_bytes_per_s`` (process tree, real
      reads, counted steps) and ``ceiling``: ``sequential_cold_bytes_per_s``,
      ``random_4k_cold_reads_per_s`` and ``random_4k_cold_bytes_per_s`` from the probe, with
      ``mean_over_sequential_fraction``, ``peak_over_sequential_fraction``,
      ``peak_over_random_4k_fraction`` — or ``{"absent": reason}`` without a probe.
    * ``gpu``: ``mean_util_pct`` and ``idle_pct`` (100 - utilization).
    * ``prefetch``: ``num_workers``, ``prefetch_factor``, ``capacity_batches``
      (workers × prefetch factor), ``steps_observed``, ``mean_ready_batches``,
      ``mean_occupancy_fraction`` (ready / capacity), ``empty_step_fraction`` and
      ``full_step_fraction`` (share of observed counted steps that found no batch / a
      full queue), ``ready_wait_fraction`` (share of their data wait on steps that found
      at least one batch ready), ``wait_when_ready_mean_s``, ``wait_when_empty_mean_s``.
    * ``data``: ``storage`` kind, ``throttle`` (emulated slow storage or None),
      ``pin_memory`` (whether batches were pinned: asked for, and on a CUDA device —
      ``loader_rules.pins_memory``); ``cache``: ``{"cache", "verified", "reason"}`` or absent.
    """
    meta = run.info
    settings = run.settings
    steps = counted_steps(run.steps)
    frac = fractions(run.steps)
    loading = loading_summary(counted_batches(run.loading, run.steps))
    cache = cache_check(run)
    wait_mean_s = _mean(steps.get("data_wait_s"))
    num_workers = _num_workers(settings, loading)
    fin = {p: _finite(v) for p, v in frac.items()}
    return Attribution(
        step=StepShares(steps=int(len(steps)), data_wait_fraction=fin["data_wait"], h2d_fraction=fin["h2d"],
                        collective_wait_fraction=fin["collective_wait"], compute_fraction=fin["compute"],
                        other_fraction=fin["other"],
                        step_mean_s=_mean(steps.get("step_s")), data_wait_mean_s=wait_mean_s),
        loading=_loading(loading, wait_mean_s, meta),
        cpu=_cpu(run, meta, num_workers),
        disk=_disk(run, probe),
        gpu=_gpu(run, meta),
        prefetch=_prefetch(steps, settings.loader.prefetch_factor, num_workers),
        data=DataEvidence(storage=settings.data.storage, throttle=settings.data.throttle,
                          pin_memory=pins_memory(settings.loader.pin_memory, settings.device)),
        cache=(CacheEvidence(cache=cache.cache, verified=cache.verified, reason=cache.reason)
               if cache else CacheEvidence(absent="this run has no page-cache record (recorded before page-cache "
                                                  "control)")),
        fractions=frac, loading_summary=loading, cache_check=cache, settings=settings)


def _loading(loading: LoadingSummary | None, wait_mean_s: float | None, meta: RunMeta) -> LoadingEvidence:
    if loading is None:
        return LoadingEvidence(absent=str(meta.absences.get("loading")
                                          or "no loading records for counted steps (recorded without worker-side "
                                             "timing?)"))
    busy = {w: v.busy_fraction for w, v in loading.by_worker.items()}
    workers_busy = [b for w, b in busy.items() if w != "main" and b is not None]
    part = loading.fractions
    return LoadingEvidence(
        workers=loading.workers,
        fetch_per_sample_s=loading.fetch_per_sample_s, prep_per_sample_s=loading.prep_per_sample_s,
        core_wait_per_sample_s=loading.core_wait_per_sample_s, core_wait_fraction=part.get("core_wait"),
        collate_per_sample_s=loading.collate_per_sample_s, collate_per_batch_s=loading.collate_per_batch_s,
        batch_s=loading.batch_s,
        fetch_fraction=part.get("fetch"), prep_fraction=part.get("prep"), collate_fraction=part.get("collate"),
        busy_fraction_by_worker=busy,
        worker_busy_mean_fraction=sum(workers_busy) / len(workers_busy) if workers_busy else None,
        production_over_wait_fraction=(loading.batch_s / wait_mean_s
                                       if wait_mean_s and loading.batch_s is not None else None),
        # How fetch and prep were told apart: null = timed around the storage's own fetch() and prep();
        # "thread-cpu-time" = a script's __getitem__, off-CPU time as fetch and on-CPU time as prep.
        split=meta.loading_split,
        samples_per_call=_samples_per_call(loading, meta),
    )


def _samples_per_call(loading: LoadingSummary, meta: RunMeta) -> float | None:
    """The samples of one ``__getitem__`` call where the training loader hands over ready-made batches
    (``batch_size=None``, recorded as such) of more than one sample: each batch is one call. None otherwise."""
    train = next((d for d in meta.loaders if d.get("role") == "train"), None)
    if train is None or "batch_size" not in train or train["batch_size"] is not None or not loading.batches:
        return None
    per_call = loading.samples / loading.batches
    return per_call if per_call > 1 else None


def _cpu(run: Run, meta: RunMeta, num_workers: int | None) -> CpuEvidence:
    cores, threads = meta.environment.cpu_cores, meta.environment.torch_threads
    during = _during(run)
    main, workers = _mean(during.get("main_cpu_pct")), _mean(during.get("workers_cpu_pct"))
    busy = None if main is None else (main + (workers or 0.0)) / 100
    wanted = None if threads is None or num_workers is None else num_workers + threads
    return CpuEvidence(
        cores_usable=cores,
        torch_threads=threads,
        num_workers=num_workers,
        threads_wanted=wanted,
        oversubscribed=None if wanted is None or not cores else wanted > cores,
        main_cpu_mean_pct=main,
        workers_cpu_mean_pct=workers,
        machine_cpu_mean_pct=_mean(during.get("cpu_util_pct")),
        machine_cpu_peak_pct=_max(during.get("cpu_util_pct")),
        busy_cores=busy,
        busy_over_usable_fraction=busy / cores if busy is not None and cores else None,
    )


def _disk(run: Run, probe: JsonObject | None) -> DiskEvidence:
    reads = _during(run).get("read_bytes_per_s")
    mean_bps, peak_bps = _mean(reads), _max(reads)
    if mean_bps is None:
        reason = run.info.absences.get("io_counters")
        return DiskEvidence(absent=str(reason or "no disk read samples during counted steps"))
    return DiskEvidence(mean_read_bytes_per_s=mean_bps, peak_read_bytes_per_s=peak_bps,
                        ceiling=_disk_ceiling(probe, mean_bps, peak_bps))


def _disk_ceiling(probe: JsonObject | None, mean_bps: float, peak_bps: float | None) -> DiskCeiling:
    if not probe:
        return DiskCeiling(absent=NO_PROBE)
    disk = ProbeDisk.from_json(probe.get("disk"))
    seq, rnd = disk.sequential_read_cold or Measurement(), disk.random_read_cold or Measurement()
    seq_bps, rnd_iops = seq.median, rnd.median
    if not seq_bps and not rnd_iops:
        why = seq.absent or rnd.absent or disk.absent or "the probe has no cold disk numbers"
        return DiskCeiling(absent=f"machine probe: {why}")
    rnd_bps = rnd_iops * RANDOM_READ_BYTES if rnd_iops else None
    return DiskCeiling(
        sequential_cold_bytes_per_s=seq_bps,
        random_4k_cold_reads_per_s=rnd_iops,
        random_4k_cold_bytes_per_s=rnd_bps,
        mean_over_sequential_fraction=mean_bps / seq_bps if seq_bps else None,
        peak_over_sequential_fraction=peak_bps / seq_bps if seq_bps and peak_bps is not None else None,
        peak_over_random_4k_fraction=peak_bps / rnd_bps if rnd_bps and peak_bps is not None else None,
    )


def _gpu(run: Run, meta: RunMeta) -> GpuEvidence:
    gpu, absences = meta.gpu, meta.absences
    if not gpu.available:
        return GpuEvidence(absent=str(gpu.reason or absences.get("gpu") or "no GPU was recorded for this run"))
    util = _mean(_during(run).get("gpu_util_pct"))
    if util is None:
        return GpuEvidence(absent=str(absences.get("gpu_util_pct")
                                      or "a GPU was in use, but no utilization was sampled"))
    return GpuEvidence(mean_util_pct=util, idle_pct=100.0 - util)


def _prefetch(steps: pd.DataFrame, factor: int | None, num_workers: int | None) -> PrefetchEvidence:
    if num_workers == 0:
        return PrefetchEvidence(absent="no prefetch queue: num_workers = 0 (the training process makes each batch "
                                       "when asked)")
    ready = pd.to_numeric(steps.get("ready_batches", pd.Series(dtype=float)), errors="coerce")
    seen = steps.assign(ready=ready).dropna(subset=["ready"])
    if seen.empty:
        return PrefetchEvidence(absent="the queue was not observed (no ready_batches readings: a run from before "
                                       "they were recorded, or a loader whose internals do not show them)")
    capacity = queue_capacity_batches(num_workers or 0, factor)
    wait = pd.to_numeric(seen["data_wait_s"], errors="coerce").fillna(0.0)
    has_ready = seen["ready"] >= 1
    total_wait = float(wait.sum())
    return PrefetchEvidence(
        num_workers=num_workers,
        prefetch_factor=prefetch_factor(num_workers or 1, factor),  # workers (count unknown: None) use it
        capacity_batches=capacity,
        steps_observed=int(len(seen)),
        mean_ready_batches=float(seen["ready"].mean()),
        mean_occupancy_fraction=float(seen["ready"].mean()) / capacity if capacity else None,
        empty_step_fraction=float((~has_ready).mean()),
        full_step_fraction=float((seen["ready"] >= capacity).mean()) if capacity else None,
        ready_wait_fraction=float(wait[has_ready].sum()) / total_wait if total_wait > 0 else None,
        wait_when_ready_mean_s=float(wait[has_ready].mean()) if has_ready.any() else None,
        wait_when_empty_mean_s=float(wait[~has_ready].mean()) if (~has_ready).any() else None,
    )


# ---- helpers ----------------------------------------------------------------------------


def _num_workers(settings: RunSettings, loading: LoadingSummary | None) -> int | None:
    """num_workers from the settings as run; else from who made the batches; else unknown."""
    if settings.loader.num_workers is not None:
        return settings.loader.num_workers
    return loading.workers if loading is not None else None


def _during(run: Run) -> pd.DataFrame:
    """System samples inside the counted-steps window."""
    samples = run.samples
    start_s, end_s = counted_window_s(run.steps)
    if samples is None or samples.empty or "t_s" not in samples or math.isnan(start_s):
        return pd.DataFrame()
    t = pd.to_numeric(samples["t_s"], errors="coerce")
    return samples.loc[(t >= start_s) & (t <= end_s)]


def _mean(series: pd.Series | None) -> float | None:
    values = pd.to_numeric(series, errors="coerce").dropna() if series is not None else None
    return None if values is None or values.empty else float(values.mean())


def _max(series: pd.Series | None) -> float | None:
    values = pd.to_numeric(series, errors="coerce").dropna() if series is not None else None
    return None if values is None or values.empty else float(values.max())
