"""RunMeta: run.json read once into typed, frozen records.

run.json is written by many hands (a scenario's runner, a script's hooks, a job's ranks, ``attach``,
``--light``) over several versions: a key may be missing, null, or of another type in an older or damaged
folder. ``RunMeta.parse`` is the one place that reads its keys: a missing or wrong-typed value reads as None
(or an empty tuple / mapping), never an error. What the analysis copies into summary.json as recorded (the
script's record, its loaders, the scenario's settings) stays a JSON object (``JsonObject``), as run.json holds
it; the raw dict itself is ``Run.meta``, which is what run.json is written back from, unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeprof.numbers import finite
from pipeprof.scenario import DataSpec

JsonObject = dict[str, Any]  # a JSON object as run.json holds it (copied into summary.json as recorded)

# run.json ``kind``: how the run was made (a scenario run records none)
SCRIPT = "script"


def as_object(value: Any) -> JsonObject:
    """``value`` where it is a JSON object, else ``{}`` (a key missing in an older file, or written as
    something else)."""
    return value if isinstance(value, dict) else {}


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_number(value: Any) -> int | float | None:
    """A finite int or float as recorded (an int stays an int); None for anything else, booleans included."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def as_int(value: Any) -> int | None:
    number = as_number(value)
    return None if number is None else int(number)


def _floats(value: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in value if as_number(v) is not None) if isinstance(value, list) else ()


@dataclass(frozen=True)
class Timing:
    """run.json ``timing`` and summary.json's: which clock timed the steps (``method``: "host-clock",
    "cuda-events", "sampled"), per part where recorded, and why."""

    method: str | None = None
    parts: Mapping[str, Any] | None = None  # part ("data_wait", "h2d", "compute") -> its method; None: older run
    reason: str | None = None

    def with_parts(self) -> Timing:
        """Every part named: an older run's method alone says its parts took that clock."""
        if self.parts is not None:
            return self
        return Timing(self.method, dict.fromkeys(("data_wait", "h2d", "compute"), self.method), self.reason)

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "parts": dict(self.parts) if self.parts is not None else None,
                "reason": self.reason}

    @classmethod
    def parse(cls, value: Any) -> Timing:
        timing = as_object(value)
        parts = timing.get("parts")
        return cls(method=timing.get("method"), parts=parts if isinstance(parts, dict) else None,
                   reason=timing.get("reason"))


@dataclass(frozen=True)
class GpuInfo:
    """run.json ``gpu``: whether a GPU was in use, why not, and what it was (``recorded``: the whole record)."""

    available: bool = False
    reason: str | None = None
    cuda_index: int | None = None
    recorded: JsonObject = field(default_factory=dict)
    sm_clock_max_mhz: float | None = None  # the device's limits, where NVML gave them
    power_limit_w: float | None = None

    @classmethod
    def parse(cls, value: Any) -> GpuInfo:
        gpu = as_object(value)
        return cls(available=bool(gpu.get("available")), reason=gpu.get("reason"),
                   cuda_index=as_int(gpu.get("cuda_index")), recorded=gpu,
                   sm_clock_max_mhz=finite(gpu.get("sm_clock_max_mhz")), power_limit_w=finite(gpu.get("power_limit_w")))


@dataclass(frozen=True)
class Environment:
    """run.json ``environment``: the machine as the run saw it (``recorded``: every key, for the report)."""

    cpu_cores: int | None = None  # usable cores (affinity, cgroup quota)
    torch_threads: int | None = None
    recorded: JsonObject = field(default_factory=dict)

    @classmethod
    def parse(cls, value: Any) -> Environment:
        env = as_object(value)
        cores, threads = env.get("cpu_cores"), env.get("torch_threads")
        return cls(cpu_cores=cores if as_number(cores) is not None else None,
                   torch_threads=threads if as_number(threads) is not None else None, recorded=env)


@dataclass(frozen=True)
class RankInfo:
    """run.json ``rank``: which process of a distributed job this run is, and how it ended."""

    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    node: Any = None  # the node's name as recorded (shown as text)
    pid: int | None = None
    status: str | None = None
    error: str | None = None
    recorded: JsonObject = field(default_factory=dict)
    node_rank: int | None = None
    backend: str | None = None  # torch.distributed's, where recorded

    @classmethod
    def parse(cls, value: Any) -> RankInfo | None:
        if not isinstance(value, dict):
            return None
        return cls(rank=as_int(value.get("rank")), local_rank=as_int(value.get("local_rank")),
                   world_size=as_int(value.get("world_size")), local_world_size=as_int(value.get("local_world_size")),
                   node=value.get("node"), pid=as_int(value.get("pid")), status=as_str(value.get("status")),
                   error=as_str(value.get("error")), recorded=value, node_rank=as_int(value.get("node_rank")),
                   backend=as_str(value.get("backend")))


@dataclass(frozen=True)
class UntracedProcess:
    """One of run.json's ``job.untraced``: a process of the job pipeprof did not trace (or a rank no process
    trained as), its pid and command line, and why, as recorded (None: not recorded). ``recorded`` is the entry
    itself (None where it is not a JSON object)."""

    pid: Any = None
    cmdline: Any = None
    reason: Any = None
    recorded: JsonObject | None = None

    @classmethod
    def parse(cls, value: Any) -> UntracedProcess:
        if not isinstance(value, dict):
            return cls()
        return cls(pid=value.get("pid"), cmdline=value.get("cmdline"), reason=value.get("reason"), recorded=value)


@dataclass(frozen=True)
class JobInfo:
    """run.json ``job``: a distributed job's identity, its ranks and its median rank."""

    id: Any = None
    world_size: int | None = None
    nodes: tuple[Any, ...] = ()
    launcher: Any = None
    median_rank: int | None = None
    untraced: tuple[UntracedProcess, ...] = ()  # processes of the job pipeprof did not trace
    ranks: tuple[int, ...] | None = None  # the ranks this folder holds; None: not listed

    @classmethod
    def parse(cls, value: Any) -> JobInfo | None:
        if not isinstance(value, dict):
            return None
        ranks = value.get("ranks")
        return cls(id=value.get("id"), world_size=as_int(value.get("world_size")),
                   nodes=tuple(value.get("nodes") or ()), launcher=value.get("launcher"),
                   median_rank=as_int(value.get("median_rank")),
                   untraced=tuple(UntracedProcess.parse(u) for u in value.get("untraced") or ()),
                   ranks=tuple(r for r in ranks if isinstance(r, int) and not isinstance(r, bool))
                   if isinstance(ranks, list) else None)


@dataclass(frozen=True)
class ScriptInfo:
    """run.json ``script`` (a profiled script's run): its command, how it ended, its wall time."""

    wall_s: float | None = None
    started_pid: int | None = None  # the process the hooks started in
    recorded: JsonObject = field(default_factory=dict)  # every key, copied into summary.json
    # what ran, where, and how it ended, as recorded (None: not recorded)
    command_line: Any = None
    cwd: Any = None
    python: Any = None
    returncode: int | None = None
    exit_status: Any = None
    ended_how: Any = None  # exit, exception, interrupted, stopped
    ended_detail: Any = None  # the exit status, the exception, the steps --steps stopped it after

    @classmethod
    def parse(cls, value: Any) -> ScriptInfo | None:
        if not isinstance(value, dict):
            return None
        ended = as_object(value.get("ended"))
        return cls(wall_s=finite(value.get("wall_s")),
                   started_pid=as_int(as_object(value.get("started")).get("pid")), recorded=value,
                   command_line=value.get("command_line"), cwd=value.get("cwd"), python=value.get("python"),
                   returncode=as_int(value.get("returncode")), exit_status=value.get("exit_status"),
                   ended_how=ended.get("how"), ended_detail=ended.get("detail"))


# What a DataLoader was built with: loaders equal in all of these (and in name and role) fold together.
LOADER_SETTINGS = ("dataset", "batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers",
                   "drop_last", "multiprocessing_context")
LIGHTNING_BUILT_IN = "train_dataloader"  # the LightningModule method that builds the training loader


@dataclass(frozen=True)
class LoaderInfo:
    """One of a script's DataLoaders as the hooks recorded it (run.json's ``loaders``; summary.json's, which add
    its ``transforms`` and ``decode``): its name, role and number as recorded, its settings (``LOADER_SETTINGS``),
    its counts and times (seconds; None: not recorded) and the data-wait by batch position in a step; the
    ``framework`` that built it (``transformers``, ``lightning``; None: the script's own code) and the function
    it was ``built_in`` (Lightning's; a run before ``built_in`` was recorded: ``train_dataloader``)."""

    name: Any = None
    role: Any = None
    number: Any = None
    settings: tuple[tuple[str, Any], ...] = ()  # (key, value as recorded) in LOADER_SETTINGS order
    batches: float | None = None
    samples: float | None = None
    passes: float | None = None
    wait_s: float | None = None
    eval_s: float | None = None  # an evaluation loader's passes
    wait_per_batch_s: float | None = None
    fetch_per_sample_s: float | None = None
    prep_per_sample_s: float | None = None
    wait_by_position_s: Any = None  # as recorded: seconds per batch position in a step of several batches
    transforms: Any = None  # summary.json's, as written (analysis.transforms reads them)
    decode: Any = None
    framework: Any = None  # as recorded
    built_in: Any = LIGHTNING_BUILT_IN  # as recorded

    def setting(self, key: str) -> Any:
        return dict(self.settings).get(key)

    @classmethod
    def parse(cls, value: Any) -> LoaderInfo | None:
        """One loader's record; None where it is not a JSON object."""
        if not isinstance(value, dict):
            return None
        return cls(name=value.get("name"), role=value.get("role"), number=value.get("number"),
                   settings=tuple((k, value.get(k)) for k in LOADER_SETTINGS), framework=value.get("framework"),
                   built_in=value.get("built_in", LIGHTNING_BUILT_IN),
                   batches=as_number(value.get("batches")), samples=as_number(value.get("samples")),
                   passes=as_number(value.get("passes")), wait_s=as_number(value.get("wait_s")),
                   eval_s=as_number(value.get("eval_s")), wait_per_batch_s=as_number(value.get("wait_per_batch_s")),
                   fetch_per_sample_s=as_number(value.get("fetch_per_sample_s")),
                   prep_per_sample_s=as_number(value.get("prep_per_sample_s")),
                   wait_by_position_s=value.get("wait_by_position_s"), transforms=value.get("transforms"),
                   decode=value.get("decode"))

    @classmethod
    def parse_all(cls, values: Any) -> tuple[LoaderInfo, ...]:
        """A ``loaders`` list read once; entries that are not JSON objects are left out."""
        if not isinstance(values, (list, tuple)):
            return ()
        return tuple(x for x in (cls.parse(v) for v in values) if x is not None)


@dataclass(frozen=True)
class Probe:
    """One probe after the run (run.json ``what_ifs`` entry, ``compute_ceiling``): a loop measured in windows,
    or ``absent`` with the reason it was not measured."""

    samples_per_s: float | None = None
    samples_per_s_per_window: tuple[float, ...] = ()
    compute_samples_per_s: float | None = None  # the loop's own compute beside the workers feeding it
    worker_cpu_s_per_sample: float | None = None  # loader_workers: the workers' CPU seconds per sample
    num_workers: int | None = None
    threads: float | None = None  # torch threads the loop ran at
    startup_s: float | None = None
    took_s: float | None = None
    absent: str | None = None

    @classmethod
    def parse(cls, value: Any) -> Probe:
        entry = as_object(value)
        absent = entry.get("absent")

        def number(key: str) -> float | None:
            return finite(entry.get(key)) if as_number(entry.get(key)) is not None else None

        return cls(samples_per_s=number("samples_per_s"),
                   samples_per_s_per_window=_floats(entry.get("samples_per_s_per_window")),
                   compute_samples_per_s=number("compute_samples_per_s"),
                   worker_cpu_s_per_sample=number("worker_cpu_s_per_sample"), num_workers=as_int(entry.get("num_workers")),
                   threads=number("threads"), startup_s=number("startup_s"), took_s=number("took_s"),
                   absent=None if absent is None else str(absent))

    @property
    def rate(self) -> float | None:
        """samples/s where measured and positive; None where absent or not a rate."""
        return self.samples_per_s if self.absent is None and self.samples_per_s and self.samples_per_s > 0 else None


# what_ifs keys holding one probe each, and those holding a probe per number of workers ("2": {...})
SINGLE_PROBES = ("device_loop", "device_loop_threads", "loader_alone", "ram_loader", "train_as_run")
PROBE_FAMILIES = ("train_workers", "train_threads", "train_ram_workers", "loader_workers")


@dataclass(frozen=True)
class WhatIfs:
    """run.json ``what_ifs``: the changed loops measured after the run (``measure.what_if``, a script's
    ``script.segments``), or why none were."""

    single: Mapping[str, Probe] = field(default_factory=dict)  # SINGLE_PROBES key -> its probe (recorded ones)
    by_workers: Mapping[str, Mapping[int, Probe]] = field(default_factory=dict)  # PROBE_FAMILIES -> k -> probe
    absent: str | None = None
    budget: JsonObject | None = None
    took_s: float | None = None
    workers_wanted: int | None = None

    @classmethod
    def parse(cls, value: Any) -> WhatIfs:
        what_ifs = as_object(value)
        single = {k: Probe.parse(what_ifs[k]) for k in SINGLE_PROBES if isinstance(what_ifs.get(k), dict)}
        families = {name: {int(k): Probe.parse(v) for k, v in as_object(what_ifs.get(name)).items()
                           if str(k).isdigit()} for name in PROBE_FAMILIES}
        absent, took = what_ifs.get("absent"), as_number(what_ifs.get("took_s"))
        budget = what_ifs.get("budget")
        return cls(single=single, by_workers=families, absent=None if absent is None else str(absent),
                   budget=budget if isinstance(budget, dict) else None, took_s=None if took is None else float(took),
                   workers_wanted=as_int(what_ifs.get("workers_wanted")))

    def probe(self, key: str) -> Probe | None:
        """The probe recorded under a SINGLE_PROBES key, None where none was."""
        return self.single.get(key)

    def family(self, name: str) -> Mapping[int, Probe]:
        """The probes of a PROBE_FAMILIES key by number of workers (empty where none)."""
        return self.by_workers.get(name, {})


@dataclass(frozen=True)
class LoaderSettings:
    """The DataLoader settings a run used; None where run.json does not say (older runs, scripts)."""

    batch_size: int | None = None
    num_workers: int | None = None
    prefetch_factor: int | None = None  # as set: None is the DataLoader's default (loader_rules)
    pin_memory: bool = False  # as asked: whether it pinned is loader_rules.pins_memory(pin_memory, device)
    persistent_workers: bool = False

    def settings_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DataSettings:
    """Where a run's data lived. ``storage`` is None for a profiled script (its data is its own)."""

    storage: str | None = None
    samples: int | None = None
    cache: str | None = None  # "warm" or "cold"
    transform: str | None = None
    throttle: Any = None  # None, a preset's name, or the throttle table as recorded (latency_ms, bandwidth_mb_s, ...)


@dataclass(frozen=True)
class RunSettings:
    """The settings of one run as run.json recorded them, for a scenario and for a profiled script alike.

    run.json's ``scenario`` is ``Scenario.to_dict()`` for a scenario run and the
    settings the hooks saw for a script (its name, command line and DataLoader).
    Read leniently: run folders of older versions lack keys, which read as
    None (or the scenario's own default, for a scenario run's storage); a value
    of the wrong type reads as absent. The one reader of that dict for analysis.
    """

    name: str = "run"
    description: str | None = None
    kind: str = "scenario"  # "scenario" or "script"
    device: str = "cpu"
    loader: LoaderSettings = field(default_factory=LoaderSettings)
    data: DataSettings = field(default_factory=DataSettings)

    @classmethod
    def from_meta(cls, meta: Any) -> RunSettings:
        meta = meta if isinstance(meta, dict) else {}
        scenario = as_object(meta.get("scenario"))
        loader, data = as_object(scenario.get("loader")), as_object(scenario.get("data"))
        kind = "script" if meta.get("kind") == "script" else "scenario"
        storage = as_str(data.get("storage"))
        if storage is None and kind == "scenario":
            storage = _DEFAULT_STORAGE  # every scenario has one; DataSpec's default when not recorded
        name = scenario.get("name", "run")
        return cls(
            name=str(name) if name is not None else "run",
            description=as_str(scenario.get("description")),
            kind=kind,
            device=as_str(meta.get("device")) or "cpu",
            loader=LoaderSettings(batch_size=as_int(loader.get("batch_size")),
                                  num_workers=as_int(loader.get("num_workers")),
                                  prefetch_factor=as_int(loader.get("prefetch_factor")),
                                  pin_memory=loader.get("pin_memory") is True,
                                  persistent_workers=loader.get("persistent_workers") is True),
            data=DataSettings(storage=storage, samples=as_int(data.get("samples")), cache=as_str(data.get("cache")),
                              transform=as_str(data.get("transform")), throttle=data.get("throttle")),
        )


_DEFAULT_STORAGE = DataSpec.storage


@dataclass(frozen=True)
class RunMeta:
    """run.json, typed: what the analysis, the renderers and the commands read of it.

    Missing keys (older folders) read as None or empty. ``kind`` is None for a scenario run, "script" for a
    profiled script; ``is_script`` says which the analysis treats it as.
    """

    status: str | None = None  # "complete", "interrupted", "failed"
    error: str | None = None
    kind: str | None = None
    device: str | None = None
    created_utc: str | None = None
    scenario_file: str | None = None
    pipeprof_version: str | None = None
    scenario: JsonObject | None = None  # the settings as recorded
    settings: RunSettings = field(default_factory=RunSettings)  # the settings, typed (Run.settings)
    rank: RankInfo | None = None
    job: JobInfo | None = None
    timing: Timing = field(default_factory=Timing)
    absences: Mapping[str, Any] = field(default_factory=dict)  # what was not measured -> why
    notes: tuple[str, ...] = ()
    overrides: Any = None  # a scenario's --set list, or a script's --loader / --threads record
    loaders: tuple[JsonObject, ...] = ()  # a script's DataLoaders as the hooks recorded them
    loaders_recorded: Any = None  # run.json ``loaders`` as it is (copied into a script run's summary)
    step_source: str | None = None  # what cut a script's steps ("optimizer", "prof.step", ...)
    loading_split: str | None = None  # how fetch and prep were told apart (None: timed around them)
    script: ScriptInfo | None = None
    environment: Environment = field(default_factory=Environment)
    gpu: GpuInfo = field(default_factory=GpuInfo)
    compute_ceiling: Probe | None = None
    what_ifs: WhatIfs = field(default_factory=WhatIfs)
    steady: Any = None  # the steady-state record, as recorded
    probe: JsonObject | None = None  # the machine probe the run found cached
    verification: JsonObject | None = None  # a --verify re-run's record
    track_record: JsonObject | None = None  # this machine's track record when the run began (pipeprof.track_record)
    cache: JsonObject | None = None  # the page-cache record
    code_profile: JsonObject = field(default_factory=dict)  # profiler name -> its record
    transform_pipelines: JsonObject = field(default_factory=dict)  # loader number -> its transforms
    worker_starts: Any = None  # spawned workers' start-ups, as recorded
    light: JsonObject | None = None  # profile --light: its windows' record
    attach: JsonObject = field(default_factory=dict)  # pipeprof attach: its record
    cut_short: bool = False  # the run was rebuilt from the records kept while it ran

    @property
    def is_script(self) -> bool:
        return self.kind == SCRIPT

    @classmethod
    def parse(cls, meta: Any) -> RunMeta:
        """The typed view of run.json's object ``meta`` (anything else reads as an empty run.json)."""
        meta = as_object(meta)
        loaders = meta.get("loaders")
        ceiling = meta.get("compute_ceiling")
        return cls(
            status=as_str(meta.get("status")), error=as_str(meta.get("error")), kind=as_str(meta.get("kind")),
            device=as_str(meta.get("device")), created_utc=as_str(meta.get("created_utc")),
            scenario_file=as_str(meta.get("scenario_file")), pipeprof_version=as_str(meta.get("pipeprof_version")),
            scenario=meta["scenario"] if isinstance(meta.get("scenario"), dict) else None,
            settings=RunSettings.from_meta(meta),
            rank=RankInfo.parse(meta.get("rank")), job=JobInfo.parse(meta.get("job")),
            timing=Timing.parse(meta.get("timing")),
            absences=as_object(meta.get("absences")),
            notes=tuple(str(n) for n in meta.get("notes") or ()) if isinstance(meta.get("notes"), list) else (),
            overrides=meta.get("overrides"),
            loaders=tuple(d for d in loaders if isinstance(d, dict)) if isinstance(loaders, list) else (),
            loaders_recorded=loaders, step_source=as_str(meta.get("step_source")),
            loading_split=meta.get("loading_split"), script=ScriptInfo.parse(meta.get("script")),
            environment=Environment.parse(meta.get("environment")), gpu=GpuInfo.parse(meta.get("gpu")),
            compute_ceiling=Probe.parse(ceiling) if isinstance(ceiling, dict) else None,
            what_ifs=WhatIfs.parse(meta.get("what_ifs")), steady=meta.get("steady"),
            probe=meta["probe"] if isinstance(meta.get("probe"), dict) else None,
            verification=meta["verification"] if isinstance(meta.get("verification"), dict) else None,
            track_record=meta["track_record"] if isinstance(meta.get("track_record"), dict) else None,
            cache=meta["cache"] if isinstance(meta.get("cache"), dict) else None,
            code_profile=as_object(meta.get("code_profile")),
            transform_pipelines=as_object(meta.get("transform_pipelines")), worker_starts=meta.get("worker_starts"),
            light=meta["light"] if isinstance(meta.get("light"), dict) else None, attach=as_object(meta.get("attach")),
            cut_short=bool(meta.get("cut_short")))
