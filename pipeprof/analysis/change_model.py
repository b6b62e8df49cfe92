"""The prediction of one change from one run: the numbers it needs, read once, and the tier each change gets.

``ChangeModel(run, attribution).predict(change)`` -> ``Prediction`` (``analysis.prediction``: measured, estimated
or not predicted). ``analysis.recommend`` proposes the candidates and words them. Pure: no clock, no torch.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import pandas as pd

from pipeprof.analysis.attribution import Attribution
from pipeprof.analysis.prediction import (
    ESTIMATED,
    MEASURED,
    Estimate,
    Prediction,
    Supply,
    cores_of,
    most_probed_up_to,
    not_predicted,
    probes_of,
)
from pipeprof.analysis.reasons import Reason
from pipeprof.analysis.steps import counted_steps
from pipeprof.analysis.thresholds import SLOW_EPOCH_START_STEPS
from pipeprof.analysis.transforms import LoaderTransforms, training_transforms
from pipeprof.loader_rules import pins_memory, prefetch_factor
from pipeprof.run_folder import Run
from pipeprof.scenario import ON_DISK, SAMPLE_BYTES

# predict_change's key for the code change of taking whole batches (its recommendation's change is empty).
WHOLE_BATCHES = "code.whole_batches"
PREDICTABLE_KEYS = frozenset({"loader.num_workers", "train.threads", "loader.prefetch_factor",
                              "loader.persistent_workers", "loader.pin_memory", "data.storage", "data.cache",
                              WHOLE_BATCHES})

# A change to the run's settings: scenario keys as ``--set`` takes them (``{"loader.num_workers": 2}``), each to
# its new value; ``WHOLE_BATCHES`` is the code change of taking whole batches. Empty: no setting changes.
SettingValue = bool | int | float | str
Change = dict[str, SettingValue]


@dataclass(frozen=True)
class WorkerCost:
    """The workers' CPU seconds per sample a probe measured (``cpu_s``) with ``k_probed`` workers, the nearest
    number probed (what_ifs.loader_workers): what a ``worker_cost`` model states."""

    cpu_s: float
    k_probed: int


@dataclass(frozen=True)
class ModelCheck:
    """What this run measured of the model's own error (``ChangeModel.self_check``): ``estimate_errors``, ln of the
    estimate over the measurement at each worker count both cover; ``remeasured``, |ln| of the as-run loop
    measured again after the run over the run (None: not measured again)."""

    estimate_errors: tuple[float, ...] = ()
    remeasured: float | None = None

    @property
    def estimate_error(self) -> float | None:
        """The largest |ln(estimate / measured)|: how far an estimate missed a measurement of this run; None where
        nothing checked one."""
        return max((abs(e) for e in self.estimate_errors), default=None)


class ChangeModel:
    """The numbers the predictions need, read once from the run and its attribution."""

    def __init__(self, run: Run, attr: Attribution) -> None:
        self.attr, self.run = attr, run
        meta = run.info
        settings = run.settings
        self.data, self.loader, self.device = settings.data, settings.loader, settings.device
        self.all_steps = run.steps
        steps = self.counted = counted_steps(run.steps)
        n = float(steps["samples"].sum()) if len(steps) else 0.0
        total_s = float(steps["step_s"].sum()) if len(steps) else 0.0
        busy_s = float((steps["compute_s"] + steps["h2d_s"]).sum()) if len(steps) else 0.0
        self.samples, self.total_s = n, total_s
        self.h2d_s = float(steps["h2d_s"].sum()) if len(steps) else 0.0
        self.current = n / total_s if n and total_s > 0 else None
        self.ceiling = n / busy_s if n and busy_s > 0 else math.inf
        alone = meta.compute_ceiling.samples_per_s if meta.compute_ceiling is not None else None
        self.ceiling_alone = alone if alone is not None and alone > 0 else None
        self.script = settings.kind == "script"  # advice is then Python in the script, not --set
        self.storage = self.data.storage or "script"  # a script's storage is unknown
        self.probes = probes_of(meta.what_ifs, self.data.storage)
        cpu, loading = attr.cpu, attr.loading
        self.cpu, self.loading = cpu, loading
        self.wait = attr.step.data_wait_fraction or 0.0
        self.h2d = attr.step.h2d_fraction or 0.0
        self.k = int(cpu.num_workers or 0)
        self.threads = float(cpu.torch_threads or cpu.cores_usable or 1)
        self.gpu = str(self.device or "").startswith("cuda")
        self.cores = cores_of(meta.rank, float(cpu.cores_usable or 1), cpu.main_cpu_mean_pct, cpu.workers_cpu_mean_pct,
                              cpu.machine_cpu_mean_pct, self.wait, self.k)
        self.parts: tuple[float, float, float] | None = None
        if loading.absent is None and loading.fetch_per_sample_s is not None:
            self.parts = (loading.fetch_per_sample_s or 0.0, loading.prep_per_sample_s or 0.0,
                          loading.collate_per_sample_s or 0.0)
        self.cold = self.storage in ON_DISK and self.data.cache == "cold"
        self.throttled = self.data.throttle not in (None, False, "")
        storage_ceiling, self.storage_words = self._storage_ceiling()
        self.estimate = Estimate(self.ceiling, storage_ceiling, self.cores, self.gpu)
        self.train_loaders = [d for d in meta.loaders if d.get("role") == "train"]

    @functools.cached_property
    def transforms(self) -> LoaderTransforms | None:
        """The training loader's measured transforms and decode calls (None where none were timed)."""
        return training_transforms(self.run)

    def current_settings(self) -> Change:
        """The run's current value of each key a change can hold, where it is known (for ``is_no_op``)."""
        current: Change = {"loader.num_workers": self.k,
                           "loader.persistent_workers": bool(self.loader.persistent_workers),
                           "loader.pin_memory": bool(self.loader.pin_memory)}
        if self.cpu.torch_threads is not None:
            current["train.threads"] = int(self.cpu.torch_threads)
        factor = prefetch_factor(self.k, self.attr.prefetch.prefetch_factor or self.loader.prefetch_factor)
        if factor is not None:
            current["loader.prefetch_factor"] = factor
        if self.data.storage is not None:
            current["data.storage"] = self.data.storage
        if self.data.cache is not None:
            current["data.cache"] = self.data.cache
        return current

    def _storage_ceiling(self) -> tuple[float, Reason]:
        if not self.cold:
            return math.inf, Reason("storage_ceiling", {"case": "not_cold"})
        ceiling = self.attr.disk.ceiling
        if ceiling is None or ceiling.absent is not None:
            why = ceiling.absent if ceiling is not None else self.attr.disk.absent
            return math.inf, Reason("storage_ceiling", {"case": "absent", "absent": why})
        limits = [v for v in (ceiling.random_4k_cold_reads_per_s,
                              (ceiling.sequential_cold_bytes_per_s or 0) / self._bytes_per_sample() or None) if v]
        if not limits:
            return math.inf, Reason("storage_ceiling", {"case": "no_rates"})
        return min(limits), Reason("storage_ceiling", {"case": "probe", "rate": min(limits)})

    def _bytes_per_sample(self) -> float:
        loading = self.run.loading
        if loading is None or loading.empty or "nbytes" not in loading:
            return float(SAMPLE_BYTES)
        nbytes = pd.to_numeric(loading["nbytes"], errors="coerce").sum()
        samples = pd.to_numeric(loading["samples"], errors="coerce").sum()
        return float(nbytes / samples) if samples and nbytes else float(SAMPLE_BYTES)

    def _io(self, fetch: float) -> float:
        """The part of fetch that waits on storage, not a core: a script's fetch is measured as exactly that
        (off-CPU time); a scenario's where the data is read cold or throttled."""
        return fetch if self.storage == "script" or ((self.cold or self.throttled)
                                                     and self.storage in ON_DISK + ("ram",)) else 0.0

    def supply(self, fetch: float, prep: float, collate: float) -> Supply:
        io = self._io(fetch)
        return Supply(io, fetch - io + prep + collate)

    def worker_supply(self, k: int) -> tuple[Supply, WorkerCost | None]:
        """What a sample costs ``k`` workers: the run's storage wait, and on a core the workers' CPU per sample
        measured with the nearest number of workers probed (what_ifs.loader_workers: a worker process's cost,
        with its neighbours', which the run's own loading at 0 workers does not show), with the numbers a
        ``worker_cost`` model states; else the run's own, and None."""
        assert self.parts is not None
        supply = self.supply(*self.parts)
        near = self.probes.worker_cpu_near(k) if k > 0 else None
        if near is None:
            return supply, None
        k_probed, cpu_s = near
        return Supply(supply.io, cpu_s), WorkerCost(cpu_s, k_probed)

    # -- any change's prediction (predict_change; every candidate's number comes from here) ------

    def predict(self, change: Change) -> Prediction:
        """The prediction for ``change``, in its tier (``analysis.prediction``)."""
        if not set(change) <= PREDICTABLE_KEYS:
            return not_predicted(Reason("not_a_setting", {"keys": sorted(set(change) - PREDICTABLE_KEYS)}))
        if self.current is None:
            return not_predicted(Reason("no_counted_steps"))
        storage = change.get("data.storage", self.data.storage)
        k = int(change.get("loader.num_workers", self.k))
        threads = change.get("train.threads")
        threads = None if threads is None or threads == self.cpu.torch_threads else float(threads)
        placement = {"data.storage", "data.cache", "loader.num_workers", "loader.persistent_workers"}
        if change.get(WHOLE_BATCHES):
            return self._batch_x() if set(change) == {WHOLE_BATCHES} else not_predicted(Reason("combined"))
        if storage == "device" and self.storage != "device":
            return self._device_x() if set(change) <= placement else not_predicted(Reason("combined"))
        if storage != self.data.storage:
            if storage == "ram" and self.storage in ON_DISK and threads is None and set(change) <= placement:
                return self._ram_x(k)
            return not_predicted(Reason("storage_change", {"to": storage, "from": self.storage}))
        if change.get("data.cache", self.data.cache) != self.data.cache:
            return not_predicted(Reason("warm_and_cold"))
        if "loader.pin_memory" in change:
            if len(change) == 1 and change["loader.pin_memory"] and \
                    (not self.gpu or pins_memory(self.loader.pin_memory, self.device)):
                return Prediction(self.current, MEASURED, Reason("pin_memory_unchanged"))
            return not_predicted(Reason("pin_memory_unmeasured"))
        if "loader.persistent_workers" in change and k == self.k and len(change) == 1:
            if bool(change["loader.persistent_workers"]) == bool(self.loader.persistent_workers):
                return Prediction(self.current, MEASURED, Reason("as_measured"))
            return self._persistent_x() if change["loader.persistent_workers"] else \
                not_predicted(Reason("persistent_off"))
        if "loader.prefetch_factor" in change:
            if not k or k != self.k or len(change) > 1:
                return not_predicted(Reason("prefetch_other_workers"))
            return self._prefetch_x()
        return self._workers_x(k, threads)

    def _workers_x(self, k: int, threads: float | None) -> Prediction:
        """``k`` workers at ``threads`` torch threads (None: the run's)."""
        assert self.current is not None
        if k == self.k and threads is None:
            return Prediction(self.current, MEASURED, Reason("as_measured"))
        probe = self.probes.trained.get((k, threads if threads is not None else self.threads))
        if probe is not None:
            return self.probes.read(self.current, probe, Reason("loop_fed_by", {"k": k, "threads": threads}))
        if self.parts is None or self.storage == "device":
            return not_predicted(Reason("no_loading_records_workers"))
        if k < self.k:
            return not_predicted(Reason("fewer_workers", {"k": self.k}))
        supply, cost = self.worker_supply(k)
        if threads is None:
            beside = self._compute_beside_workers(k)
            if beside is None:
                return _with_cost(self.estimate.at(k, supply), cost)
            c, k_probed = beside
            p = _with_cost(self.estimate.at(k, supply, ceiling=min(self.ceiling, c)), cost)
            probe = self.probes.trained.get((k_probed, self.threads))
            measured = self.probes.read(self.current, probe, None).samples_per_s if probe is not None else None
            capped = anchored = None
            if measured is not None and p.samples_per_s is not None:
                # read against the loop measured with k' workers: X(k') measured × the estimate's X(k) / X(k'),
                # within the ceilings (an estimate that ran high or low at k' runs so at k)
                at_probed = self.estimate.at(k_probed, self.worker_supply(k_probed)[0],
                                             ceiling=min(self.ceiling, c)).samples_per_s
                if at_probed:
                    anchored = min(measured * p.samples_per_s / at_probed, self.ceiling, c, self.estimate.storage)
                    p = dataclasses.replace(p, samples_per_s=anchored)
                cap = measured * k / k_probed  # k workers supply at most k/k' × k' workers'
                if cap < float(p.samples_per_s or 0.0):
                    p = dataclasses.replace(p, samples_per_s=cap)
                    capped = cap
            return dataclasses.replace(p, model=Reason("beside_workers", {
                "model": p.model, "c": c, "k": k, "k_probed": k_probed, "cap": capped, "anchored": anchored,
                "measured": measured}))
        if self.gpu:
            return not_predicted(Reason("gpu_threads"))
        loop = self.probes.loop_threads
        if threads not in loop or self.threads not in loop:
            return not_predicted(Reason("threads_unmeasured", {"threads": threads}))
        c = self.ceiling * loop[threads] / loop[self.threads]
        p = self.estimate.at(k, supply, ceiling=c, main=min(threads, self.cores.main))
        return dataclasses.replace(p, model=Reason("threads_ceiling", {"model": _with_cost(p, cost).model,
                                                                       "threads": threads, "run_threads": self.threads}))

    def self_check(self) -> ModelCheck:
        """The model against what this run measured itself (``ModelCheck``): the estimate ``min(C, supply, S)`` at
        the run's own number of workers against the run, and at each number of workers a trained probe ran at
        the run's threads against that probe (read at the run's pace); and the as-run loop measured again after
        the run against the run. Nothing fitted: the errors an estimate or a re-measurement made in this run."""
        checks: list[float] = []
        if self.current is not None and self.parts is not None and self.storage != "device":
            # the run itself tests the supply model only with workers: at 0 it is 1/(p + 1/C), the run's own sum
            measured = {self.k: self.current} if self.k else {}
            for (k, threads), rate in self.probes.trained.items():
                if threads == self.threads and k > self.k:
                    value = self.probes.read(self.current, rate, None).samples_per_s
                    if value:
                        measured[k] = value
            for k, value in sorted(measured.items()):
                estimate = self.estimate.at(k, self.worker_supply(k)[0]).samples_per_s
                if estimate and estimate > 0 and math.isfinite(estimate):
                    checks.append(math.log(estimate / value))
        again = (abs(math.log(self.probes.as_run / self.current))
                 if self.probes.as_run and self.current else None)
        return ModelCheck(tuple(checks), again)

    def _compute_beside_workers(self, k: int) -> tuple[float, int] | None:
        """The loop's compute rate measured beside the most workers probed up to ``k`` (read at the run's pace
        where the as-run loop was measured beside the probes), and that number of workers; None: no probe."""
        kp = most_probed_up_to(self.probes.compute_beside, k)
        if kp is None:
            return None
        c = self.probes.compute_beside[kp]
        if self.probes.as_run and self.current:
            c *= self.current / self.probes.as_run
        return c, kp

    def _batch_x(self) -> Prediction:
        """Whole batches at once with 0 workers: the loop taking batches by one index is the device loop
        (measured), plus the run's host -> device copy. With workers: not predicted."""
        loop = self.probes.device_loop
        if self.k or loop is None or not self.samples:
            return not_predicted(Reason("batches_unmeasured", {"workers": bool(self.k)}))
        x = 1.0 / (1.0 / loop + self.h2d_s / self.samples)
        return Prediction(x, ESTIMATED, Reason("whole_batches"))

    def _device_x(self) -> Prediction:
        assert self.current is not None
        if self.probes.device_loop:
            return self.probes.read(self.current, self.probes.device_loop, Reason("device_loop"))
        c = self.ceiling_alone or self.ceiling
        if not math.isfinite(c):
            return not_predicted(Reason("no_ceiling"))
        return Prediction(c, ESTIMATED, Reason("device_ceiling", {"c": c, "alone": bool(self.ceiling_alone)}))

    def _ram_x(self, k: int) -> Prediction:
        """Decoded samples cached in RAM: the loop fed by ``k`` workers over them where measured; else the
        supply with fetch (and the measured decode) removed, or a 0-worker loader over them measured."""
        assert self.current is not None
        if k in self.probes.trained_ram and k:
            return self.probes.read(self.current, self.probes.trained_ram[k],
                                    Reason("loop_fed_by_ram", {"k": k}))
        est = dataclasses.replace(self.estimate, storage=math.inf)
        ram = self.run.info.what_ifs.probe("ram_loader")
        rate = ram.samples_per_s if ram is not None and ram.absent is None else None
        if rate is not None and rate > 0:
            p = est.at(k, Supply(0.0, 1.0 / rate))
            return dataclasses.replace(p, model=Reason("ram_loader", {"model": p.model}))
        if self.parts is None:
            return not_predicted(Reason("no_loading_records"))
        fetch, prep, collate = self.parts
        decode = self.transforms.decode if self.transforms is not None else None
        if decode is not None:
            return est.at(k, Supply(0.0, max(prep - decode.per_sample_s, 0.0) + collate))
        if self.storage == "images" and self.data.transform != "augment":
            return not_predicted(Reason("decode_share_unmeasured"))
        return est.at(k, Supply(0.0, prep + collate))

    def _persistent_x(self) -> Prediction:
        """Persistent workers: the run without the excess wait of re-iterated passes' first steps."""
        firsts = self._pass_firsts
        if not self.k or firsts is None:
            return not_predicted(Reason("no_passes"))
        assert self.current is not None
        if firsts.empty:
            return Prediction(self.current, ESTIMATED, Reason("persistent_model", {"case": "no_start"}))
        slow = self._slow_starts(self._pass_starts(firsts)[0], float(self.counted["data_wait_s"].median()),
                                 float(self.counted["step_s"].median()), threshold=False)
        return Prediction(slow[1] if slow is not None else self.current, ESTIMATED,
                          Reason("persistent_model", {"case": "saved" if slow is not None else "none_longer"}))

    def _pass_starts(self, firsts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The counted first steps of re-iterated passes, and of new loaders' first passes (not the first's)."""
        first_passes = self._first_pass_epochs()
        return (firsts[~firsts["epoch"].isin(first_passes)],
                firsts[firsts["epoch"].isin(first_passes - {0})])  # the first loader's first pass: nothing to save

    def _slow_starts(self, firsts: pd.DataFrame, median_wait: float,
                     median_step: float, threshold: bool = True) -> tuple[float, float] | None:
        """(saved s, predicted samples/s) when these first steps waited SLOW_EPOCH_START_STEPS median steps
        longer than the median wait, on average (any excess at all without ``threshold``); else None."""
        if firsts.empty:
            return None
        excess = (firsts["data_wait_s"].astype(float) - median_wait).clip(lower=0.0)
        if float(excess.mean()) <= (SLOW_EPOCH_START_STEPS * median_step if threshold else 0.0):
            return None
        saved = float(excess.sum())
        return saved, self.samples / max(self.total_s - saved, 1e-12)

    def _first_pass_epochs(self) -> set[int]:
        """The epochs (passes over the training loaders, in order) that are a loader's first pass.

        A scenario iterates one loader: epoch 0. A script's training loaders, in the order they were built,
        take their passes one after another (run.json's ``loaders``: ``passes`` each), so loader i's first
        pass is the sum of the passes before it. Loaders iterated in turn are not told apart (none seen)."""
        if not self.train_loaders:
            return {0}
        out, epoch = set(), 0
        for loader in sorted(self.train_loaders, key=lambda d: d.get("number") or 0):
            out.add(epoch)
            epoch += max(int(loader.get("passes") or 1), 1)
        return out

    def _recreated(self) -> tuple[str | None, int] | None:
        """(name, count) of training loaders built again with the same name and settings (name None: the loader
        had none), else None."""
        groups: dict[tuple, int] = {}
        for d in self.train_loaders:
            key = (d.get("name"), d.get("dataset"), d.get("batch_size"), d.get("num_workers"))
            groups[key] = groups.get(key, 0) + 1
        key, count = max(groups.items(), key=lambda kv: kv[1], default=((None,), 0))
        return (str(key[0]) if key[0] else None, count) if count >= 2 else None

    @functools.cached_property
    def _pass_firsts(self) -> pd.DataFrame | None:
        """Each pass's first step where it is counted (not warm-up); None without epochs to tell passes by."""
        steps = self.all_steps
        if steps.empty or "epoch" not in steps:
            return None
        firsts = steps.loc[steps.groupby("epoch")["step"].idxmin()]
        return firsts[~firsts["warmup"].astype(bool)]

    def _prefetch_x(self) -> Prediction:
        """A deeper queue absorbs bursts, not a supply short of the loop nor a pass's start: it saves the waits
        beyond the median wait of the steps that do not begin a pass (``Σ max(wait − median, 0)``), and gives at
        most what the workers make busy all the time (the run's samples/s over their busy share, measured)."""
        assert self.current is not None
        steps = self.counted
        if "epoch" in steps and len(steps):
            steps = steps[steps["step"] != steps.groupby("epoch")["step"].transform("min")]
        waits = steps["data_wait_s"].astype(float)
        saved = float((waits - float(waits.median())).clip(lower=0.0).sum()) if len(waits) else 0.0
        busy = self.loading.worker_busy_mean_fraction
        cap = self.current / min(busy, 1.0) if busy and busy > 0 else math.inf
        x = max(self.current, min(self.samples / max(self.total_s - saved, 1e-12), cap))
        return Prediction(x, ESTIMATED, Reason("prefetch_model", {"busy": min(busy, 1.0) if busy else None}))


def _with_cost(p: Prediction, cost: WorkerCost | None) -> Prediction:
    """An estimate whose workers' cost per sample was measured (``worker_supply``) says so in its model."""
    if cost is None or p.samples_per_s is None:
        return p
    return dataclasses.replace(p, model=Reason("worker_cost", {"model": p.model, "cpu_s": cost.cpu_s,
                                                               "k_probed": cost.k_probed}))
