"""Predictions in three tiers: measured, estimated from this run's measurements, or not predicted.

* ``measured``: the change itself ran after the run (a trained probe of ``measure.what_if`` or a segment of a
  script's own loop, run.json ``what_ifs``): ``X = X_run · probe(change) / probe(as run)``, the as-run loop
  measured beside it (``train_as_run``; data on the device: ``device_loop``); without one, the probe as read.
* ``estimated``: ``min(C, supply, S)``, every term a quantity this run measured: ``C`` the run's compute
  ceiling (``n / Σ(compute + h2d)``), ``supply`` ``k`` workers each at the measured production rate ``1/p``
  on the cores actually free for them, ``S`` the probed cold-read ceiling. No fitted constant, and no
  CPU-thread term for a job that computes on a GPU.
* ``not_predicted``: nothing measured carries the change; ``--verify`` or ``tune`` measures it.

Cores: ``avail = N − other``, ``other`` the machine's CPU during the counted steps that the job's own processes
did not use (the sampler's ``cpu_util_pct`` of all cores, less the training process and its workers). A job's
ranks on one node share ``avail``: a change made with ``--loader`` applies to every rank, so each rank's
workers get ``avail / ranks − m`` cores, ``m`` the cores its training process used. Pure: no clock, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeprof.analysis.reasons import Reason
from pipeprof.run_meta import Probe, RankInfo, WhatIfs

MEASURED, ESTIMATED, NOT_PREDICTED = "measured", "estimated", "not_predicted"
TIERS = (MEASURED, ESTIMATED, NOT_PREDICTED)


@dataclass(frozen=True)
class Prediction:
    """Predicted samples/s (None: not predicted), its ``tier`` and the arithmetic (``model``, worded by
    ``render.prediction_text``)."""

    samples_per_s: float | None
    tier: str
    model: Reason


def not_predicted(why: Reason) -> Prediction:
    return Prediction(None, NOT_PREDICTED, Reason("not_predicted", {"why": why}))


@dataclass(frozen=True)
class Cores:
    """The cores a run's training process and workers could use: ``cores`` usable, ``other`` busy with
    processes outside the job (mean, in cores), ``main`` the training process's use outside its waits for data
    and ``workers`` the workers' (mean, in cores), ``busy`` all that one rank of the job kept busy, ``ranks``
    the job's ranks sharing them. ``main_busy``: the training process's cores while it is not waiting for data
    (None: unknown); it trains faster with more workers and takes that much more of the cores, ``main_busy ×
    X / C`` at X samples/s (``Estimate.at``)."""

    cores: float
    other: float
    main: float
    workers: float
    busy: float
    ranks: int = 1
    main_busy: float | None = None

    @property
    def available(self) -> float:
        """The cores one rank's training process and workers can have: ``(N − other) / ranks``."""
        return max(self.cores - self.other, 0.0) / max(self.ranks, 1)

    def for_workers(self, main: float | None = None) -> float:
        """The cores left for one rank's workers beside its training process (``main`` cores, default the
        run's)."""
        return max(self.available - (self.main if main is None else main), 0.0)

    def words(self) -> Reason:
        """The cores in a ``Reason`` (``render.prediction_text``: "N cores available ...")."""
        return Reason("cores", {"available": self.available, "cores": self.cores, "other": self.other, "ranks": self.ranks})


def cores_of(rank: RankInfo | None, cores: float, main_pct: float | None, workers_pct: float | None,
             machine_pct: float | None, wait: float, k: int) -> Cores:
    """``Cores`` from the attribution's CPU means (% of one core for the processes, of all cores for the
    machine). With 0 workers the training process's CPU counts its loading too: ``main`` is its share outside
    the waits. A rank (run.json ``rank``) shares the node with ``local_world_size`` ranks (else
    ``world_size``); the other ranks' CPU is part of the job, not of ``other``."""
    main_all = (main_pct or 0.0) / 100
    workers = (workers_pct or 0.0) / 100
    ranks = (rank.local_world_size or rank.world_size or 1) if rank is not None else 1
    ranks = ranks if ranks >= 1 else 1
    job = (main_all + workers) * ranks
    other = max((machine_pct or 0.0) / 100 * cores - job, 0.0) if machine_pct is not None else 0.0
    main = main_all * (1 - wait) if k == 0 else main_all
    # while not waiting: with 0 workers the training process is never idle (it loads or computes); with workers
    # it is idle in its waits (a fraction ``wait`` of the time)
    main_busy = None if main_pct is None or main_all <= 0 or wait >= 1 else \
        main_all if k == 0 else main_all / (1 - wait)
    return Cores(cores, other, main, workers, main_all + workers, ranks, main_busy)


@dataclass(frozen=True)
class Supply:
    """What making a sample costs, per sample: ``io`` waiting on storage (needs no core), ``cpu`` on a core."""

    io: float
    cpu: float

    @property
    def per_sample_s(self) -> float:
        return self.io + self.cpu

    def without(self, io: float = 0.0, cpu: float = 0.0) -> Supply:
        return Supply(max(self.io - io, 0.0), max(self.cpu - cpu, 0.0))


@dataclass(frozen=True)
class Estimate:
    """``min(C, supply, S)`` for ``k`` workers: ``ceiling`` C, ``storage`` S (inf: none), the cores."""

    ceiling: float
    storage: float
    cores: Cores
    gpu: bool
    notes: tuple[str, ...] = field(default=())

    def at(self, k: int, supply: Supply, *, ceiling: float | None = None, main: float | None = None) -> Prediction:
        """X(k): 0 workers make each sample between steps, ``1/(p + 1/C)``; ``k`` workers on ``W`` free cores
        supply ``k / (io + cpu·k/W)`` (each at ``1/p`` while they have a core each); at most C and S."""
        c = self.ceiling if ceiling is None else ceiling
        p = supply.per_sample_s
        if not math.isfinite(c) or c <= 0:
            return not_predicted(Reason("no_ceiling"))
        if k == 0:
            x = min(1.0 / (p + 1.0 / c), self.storage)
            return Prediction(x, ESTIMATED, Reason("estimate_no_workers", {"p": p, "c": c, "x": x, "storage": self.storage}))
        w = min(float(k), self.cores.for_workers(main))
        if w <= 0:
            return not_predicted(Reason("no_core_left", {"cores": self.cores.words(),
                                                         "main": self.cores.main if main is None else main}))
        busy = self.cores.main_busy if main is None else None
        if busy is not None:  # the training process at X takes busy × X/C of the cores: solve X = supply(X)
            x, w = self._with_main_at(k, supply, c, busy)
            if w <= 0:
                return not_predicted(Reason("no_core_left", {"cores": self.cores.words(), "main": None}))
            rate = k / (supply.io + supply.cpu * k / w) if supply.io + supply.cpu > 0 else math.inf
            main_at: float | None = busy * min(x, c) / c
        else:
            per = supply.io + supply.cpu * k / w
            rate = k / per if per > 0 else math.inf
            main_at = None
        x = min(c, rate, self.storage)
        return Prediction(x, ESTIMATED, Reason("estimate_workers", {
            "c": c, "k": k, "p": p, "w": w, "main_at": main_at, "rate": rate, "storage": self.storage, "x": x,
            "cores": self.cores.words()}))

    def _with_main_at(self, k: int, supply: Supply, c: float, busy: float) -> tuple[float, float]:
        """The pace X at which ``k`` workers supply X samples/s on the cores the training process leaves them at
        X (``busy × min(X, C)/C``), and those cores; at most C and S. Bisection: supply falls as X rises."""
        def free(x: float) -> float:
            return min(float(k), self.cores.for_workers(busy * min(x, c) / c))

        def supplied(x: float) -> float:
            w = free(x)
            per = supply.io + supply.cpu * k / w if w > 0 else math.inf
            return k / per if per > 0 else math.inf

        top = min(c, self.storage, supplied(0.0))
        if supplied(top) >= top:
            return top, free(top)
        low, high = 0.0, top
        for _ in range(60):
            mid = (low + high) / 2
            low, high = (mid, high) if supplied(mid) >= mid else (low, mid)
        return low, free(low)


@dataclass(frozen=True)
class Probes:
    """The changed loops measured after the run (run.json ``what_ifs``): the loop fed by ``k`` workers at
    ``threads`` (``train_workers``, ``train_threads``), over decoded samples in RAM (``train_ram_workers``),
    on the device (``device_loop``), and the run's own loop beside them (``as_run``)."""

    trained: dict[tuple[int, float], float]
    trained_ram: dict[int, float]
    device_loop: float | None
    as_run: float | None
    as_run_source: str | None
    loop_threads: dict[float, float]  # device_loop at its threads and device_loop_threads at theirs
    # the loop's compute (n / Σ(compute + h2d)) beside k workers handing it batches, at the run's threads
    # (train_workers' compute_samples_per_s): receiving batches included, which compute alone does not have
    compute_beside: dict[int, float] = field(default_factory=dict)
    # a worker's CPU seconds per sample with k workers making batches (loader_workers): what a sample costs in a
    # worker process, beside k − 1 others, which the training process's own loading (0 workers) does not show
    worker_cpu: dict[int, float] = field(default_factory=dict)

    def worker_cpu_near(self, k: int) -> tuple[int, float] | None:
        """The workers' measured CPU per sample at the most workers probed up to ``k`` (else the fewest
        probed), and that number of workers; None: none measured."""
        kp = most_probed_up_to(self.worker_cpu, k)
        kp = kp if kp is not None else min(self.worker_cpu, default=None)
        return (kp, self.worker_cpu[kp]) if kp is not None else None

    def read(self, run_samples_per_s: float, probe_samples_per_s: float, what: Reason | None) -> Prediction:
        """``X_run · probe(change) / probe(as run)`` where the as-run loop was measured, else the probe."""
        if self.as_run:
            x = run_samples_per_s * probe_samples_per_s / self.as_run
            return Prediction(x, MEASURED, Reason("probe_beside_run", {
                "run": run_samples_per_s, "probe": probe_samples_per_s, "as_run": self.as_run, "what": what,
                "source": self.as_run_source}))
        return Prediction(probe_samples_per_s, MEASURED, Reason("probe_as_read", {"what": what}))


def most_probed_up_to(probed: Mapping[int, Any], k: int) -> int | None:
    """The most workers a probe measured up to ``k`` (the measurement an estimate of ``k`` workers starts from);
    None where none was measured at ``k`` or fewer."""
    return max((kp for kp in probed if kp <= k), default=None)


def probes_of(what_ifs: WhatIfs, storage: str | None) -> Probes:
    """``Probes`` from run.json ``what_ifs`` (entries absent or malformed left out)."""
    trained: dict[tuple[int, float], float] = {}
    beside = {k: rate for k, entry in what_ifs.family("train_workers").items()
              if k > 0 and entry.absent is None and (rate := _positive(entry.compute_samples_per_s)) is not None}
    for name in ("train_workers", "train_threads"):
        for k, entry in what_ifs.family(name).items():
            rate, threads = entry.rate, _positive(entry.threads)
            if rate is not None and threads is not None:
                trained[(k, threads)] = rate
    ram = {k: rate for k, entry in what_ifs.family("train_ram_workers").items() if (rate := entry.rate) is not None}
    loop = _rate(what_ifs.probe("device_loop"))
    source = "device_loop" if storage == "device" else "train_as_run"
    as_run = _rate(what_ifs.probe(source))
    loop_threads: dict[float, float] = {}
    for name in ("device_loop", "device_loop_threads"):
        probe = what_ifs.probe(name)
        rate, threads = _rate(probe), _positive(probe.threads) if probe is not None else None
        if rate is not None and threads is not None:
            loop_threads[threads] = rate
    worker_cpu = {k: cpu for k, entry in what_ifs.family("loader_workers").items()
                  if k > 0 and entry.absent is None and (cpu := _positive(entry.worker_cpu_s_per_sample)) is not None}
    return Probes(trained, ram, loop, as_run, source if as_run else None, loop_threads, beside, worker_cpu)


def _rate(entry: Probe | None) -> float | None:
    return entry.rate if entry is not None else None


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def ratio(before: Prediction, after: Prediction, current: float, what: Reason) -> Prediction:
    """The run's samples/s moved by the estimate's ratio for a saving: ``X_run · X(after) / X(before)``; the
    tier of the weaker of the two."""
    if before.samples_per_s is None or after.samples_per_s is None or before.samples_per_s <= 0:
        return not_predicted(Reason("ratio_missing", {"what": what,
                                                      "model": after.model if after.samples_per_s is None else before.model}))
    x = current * after.samples_per_s / before.samples_per_s
    tier = MEASURED if before.tier == after.tier == MEASURED else ESTIMATED
    return Prediction(x, tier, Reason("ratio", {"what": what, "before": before.model, "after": after.model}))


def rank_key(tier: str, speedup: float | None) -> tuple[int, float]:
    """Sort key: measured first, then estimated, then not predicted; by predicted speed-up within a tier."""
    return TIERS.index(tier) if tier in TIERS else len(TIERS), -(speedup or 0.0)
