"""Run: the raw records of one profiled run, and the run folder on disk.

A run folder holds only what was measured (``run.json`` for metadata, CSV
tables for records, and the profilers' own files); everything in
``summary.json`` and ``report.html`` can be re-derived from it with
``pipeprof report``.

Tables (CSV, one header line, times in seconds since the run started):

* ``steps.csv`` — one row per training step, columns ``STEP_COLUMNS``.
* ``samples.csv`` — one row per system-sampler tick, columns
  ``SAMPLE_COLUMNS`` plus ``cpu_core<N>_pct`` for each core and the GPU
  columns when a GPU was sampled.
* ``processes.csv`` — one row per tick per process of the training process
  tree, columns ``PROCESS_COLUMNS``.
* ``loading.csv`` — one row per batch consumed by a training step, as the
  process that made it (a DataLoader worker, or the training process when
  ``num_workers = 0``) timed it: columns ``LOADING_COLUMNS``. ``fetch_s`` is
  reading the samples' bytes from storage (emulated slowness included),
  ``prep_s`` decoding and transforming them, ``collate_s`` stacking them
  into the batch; ``core_wait_s`` is the time the batch's maker was runnable
  but waiting for a core (its thread's run-queue wait, Linux), taken out of
  ``fetch_s`` (a script's off-CPU time) or out of ``fetch_s`` and ``prep_s``
  in proportion (a scenario's worker) — empty where it could not be read and
  in older folders (unknown, not 0). Runs from before worker-side timing have no such file and
  load with an empty table.
* ``device_memory.csv`` — CUDA runs only (``DEVICE_MEMORY_COLUMNS``): what
  torch.cuda's caching allocator held at the end of each window of about
  0.5 s, and its peaks during the window. Absent (an empty table) on the CPU
  and in older folders.
* ``transforms.csv`` — issue 18: per batch consumed by a training step,
  the time its samples spent in each leaf transform of the loader's
  pipeline and in the common decode calls, as the process that made it
  timed them (``TRANSFORM_COLUMNS``; ``kind`` says which). Only when
  something was timed; older folders load with an empty table. The
  pipelines themselves (their leaves in call order, random or not) are in
  run.json ``transform_pipelines``.
* ``stacks.csv`` — ``pipeprof attach`` only: py-spy's stacks of the
  attached process tree, one row per distinct stack per window with its
  sample count (``STACK_COLUMNS``); run.json ``timing.method`` is
  ``"sampled"`` and ``steps.csv`` is empty (steps cannot be cut from outside).
* ``functions.csv`` — the code-level view (``profile.cprofile_steps``): what
  cProfile recorded in the training process (``process`` "main", the
  profiled window of steps) and in the DataLoader workers ("workers", their
  whole life, all workers merged), one row per function and caller, columns
  ``FUNCTION_COLUMNS``. A function's totals are the sums over its rows.
  Runs without code profiling have an empty table.

Files kept as they were recorded (``ATTACHMENTS``, only when recorded):
``cprofile-main.prof`` and ``cprofile-workers.prof`` (pstats dumps, for
``pstats`` / snakeviz) and ``pyspy.speedscope.json`` (py-spy's samples, for
speedscope).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof.errors import UsageError, one_line
from pipeprof.run_check import (
    BOOL_VALUES,
    Damage,
    check_attachment,
    check_meta,
    fewer_rows,
    missing_ranks,
    read_table,
)
from pipeprof.run_meta import RankInfo, RunMeta, RunSettings, as_object

RUN_FORMAT_VERSION = 1

STEP_COLUMNS = [
    "step",  # 0-based index over the whole run, warm-up included
    "epoch",  # 0-based
    "warmup",  # True for warm-up steps (kept, but excluded from statistics)
    "t_start_s",  # host time the step began (before next() on the loader)
    "data_wait_s",  # blocked in next() on the loader (on CUDA: the GPU idle gap it caused)
    "h2d_s",  # moving the batch to the device
    "compute_s",  # forward + backward + optimizer step
    "step_s",  # whole step, start to start of the next one
    "host_wait_s",  # host time blocked in next() (equals data_wait_s on CPU)
    "samples",  # samples in the step's batch
    "loss",  # training loss of the batch
    "correct",  # correctly classified samples in the batch
    "ready_batches",  # prefetched batches already waiting when the step asked (NaN: not observable)
    "collective_wait_s",  # blocked in collectives (DDP's all-reduce, torch.distributed calls), out of compute_s
]

# Columns added after format 1 shipped: older run folders load without them (as NaN).
_ADDED_LATER = {"ready_batches", "core_wait_s", "collective_wait_s"}
# ... and the value they load with: unknown, except collectives: a run from before them had one process, none.
_LOADED_AS = {"collective_wait_s": 0.0}

SAMPLE_COLUMNS = [
    "t_s",  # host time of the tick
    "cpu_util_pct",  # whole machine, % of all cores (100 = every core busy)
    "main_cpu_pct",  # training process, % of one core (200 = two cores busy)
    "workers_cpu_pct",  # all DataLoader workers together, % of one core
    "main_rss_bytes",
    "workers_rss_bytes",
    "tree_rss_bytes",  # main + workers
    "workers",  # number of live worker processes
    "read_bytes_per_s",  # real disk reads by the process tree
]

GPU_DEVICE_COLUMNS = [  # the whole GPU, every process on it
    "gpu_util_pct",  # % of the sample period a kernel ran
    "gpu_mem_used_bytes",
    "pcie_rx_bytes_per_s",  # host to device
    "pcie_tx_bytes_per_s",  # device to host
    "gpu_sm_clock_mhz",  # SM clock now
    "gpu_power_w",  # board power draw
]
GPU_SAMPLE_COLUMNS = GPU_DEVICE_COLUMNS + [
    "gpu_proc_util_pct",  # the training process tree's SM utilization, sum over its processes (NVML per-process)
    "gpu_proc_mem_bytes",  # device memory the tree's processes hold (NVML usedGpuMemory)
]

PROCESS_COLUMNS = [
    "t_s",
    "pid",
    "role",  # "main" or "worker"
    "cpu_pct",  # % of one core since the previous tick
    "rss_bytes",
    "read_bytes",  # cumulative real disk reads of this process
    "uss_bytes",  # memory not shared with other processes; empty except on rare snapshots
]

GPU_PROCESS_COLUMNS = [  # processes.csv, only when a GPU was sampled (older folders and CPU runs have none)
    "gpu_util_pct",  # this process's SM utilization, NVML per-process samples; empty: no reading that tick
    "gpu_mem_bytes",  # device memory this process holds (0: no context on the GPU)
]

DEVICE_MEMORY_COLUMNS = [  # device_memory.csv: torch.cuda's allocator, one row per window (CUDA runs only)
    "t_s",  # end of the window
    "allocated_bytes",  # held by tensors now
    "reserved_bytes",  # held by the caching allocator now
    "peak_allocated_bytes",  # torch's peak (since the start or the script's own reset: pipeprof never resets it)
    "peak_reserved_bytes",
]

# The parts of making a batch, each timed in loading.csv's ``{part}_s`` column; MAIN_PROCESS is its ``worker`` of a
# batch made in the training process (num_workers = 0).
LOADING_PARTS = ("fetch", "core_wait", "prep", "collate")
MAIN_PROCESS = -1

LOADING_COLUMNS = [
    "batch",  # 0-based, in the order the training loop received the batches
    "step",  # the training step that consumed the batch (joins steps.csv)
    "worker",  # DataLoader worker id; -1 = made in the training process (num_workers = 0)
    "pid",  # process that made the batch
    "t_start_s",  # the batch's first fetch began
    "t_end_s",  # its collate ended
    "fetch_s",  # reading bytes from storage, summed over the batch's samples (waiting for a core excluded)
    "core_wait_s",  # runnable but waiting for a core (run-queue wait), out of fetch (and prep); empty: unknown
    "prep_s",  # decode + transform, summed over the batch's samples
    "collate_s",  # stacking the samples into the batch
    "samples",  # samples in the batch
    "nbytes",  # bytes read from storage for the batch
    "fetch_max_s",  # the slowest single sample's fetch
]

TRANSFORM_COLUMNS = [  # transforms.csv (issue 18): what each batch's samples spent in each transform and decode call
    "step",  # the training step that consumed the batch (joins steps.csv and loading.csv's step)
    "loader",  # loader number (a script's, as in run.json's loaders; 0 for a scenario's one loader)
    "worker",  # DataLoader worker id; -1 = made in the training process (num_workers = 0)
    "kind",  # "transform" (one leaf transform of the pipeline), "decode" (PIL / torchvision.io / numpy reads), or
    #          "batch": the batch's whole __getitem__ (every sample's fetch and prep, collate excluded): calls = its
    #          samples, the denominators of a loader's per-sample costs (one such row per batch timed)
    "name",  # a transform's name, unique in its loader's pipeline ("RandomResizedCrop(size=224)", "Normalize #2");
    #          a decode's how ("PIL.Image.open+convert", "torchvision.io.decode_jpeg", "numpy.load"); "" for "batch"
    "calls",  # calls over the batch's samples (a randomly skipped transform: fewer than the samples)
    "wall_s",  # wall seconds in those calls, summed
    "cpu_s",  # the calling thread's CPU seconds in those calls, summed
]

FUNCTION_COLUMNS = [
    "process",  # "main" (the training process, the profiled window) or "workers" (all workers, their whole life)
    "file",  # source file; "~" for built-in (C) functions
    "line",  # first line of the function; 0 for built-ins
    "function",  # name; built-ins as cProfile names them, e.g. "<built-in method torch._C._nn.linear>"
    "caller_file",  # the function that made these calls; empty: called from a frame entered before
    "caller_line",  #   profiling began (the training loop itself, a worker's loop)
    "caller_function",
    "calls",  # calls along this edge
    "primitive_calls",  # calls that were not recursive
    "tottime_s",  # time in the function itself (not in functions it called)
    "cumtime_s",  # time in the function and everything it called
]

STACK_COLUMNS = [  # stacks.csv: ``pipeprof attach`` only (sampled from outside with py-spy; pipeprof.attach)
    "t_start_s",  # the window the stack was sampled in: its start ...
    "t_end_s",  # ... and end, seconds since the attach began
    "pid",  # the process the thread belongs to
    "ppid",  # its parent in py-spy's process chain; empty for the attached process
    "thread_id",  # OS thread id (equal to pid: the process's main thread)
    "thread_name",
    "stack",  # frames outermost first, "function (file:line)" joined by ";" (py-spy's raw format)
    "innermost_line",  # the source text of the innermost frame's line, read when sampled ("" unreadable)
    "samples",  # samples of this stack in the window
]

TABLES = {"steps": STEP_COLUMNS, "samples": SAMPLE_COLUMNS, "processes": PROCESS_COLUMNS,
          "loading": LOADING_COLUMNS, "functions": FUNCTION_COLUMNS, "device_memory": DEVICE_MEMORY_COLUMNS,
          "transforms": TRANSFORM_COLUMNS, "stacks": STACK_COLUMNS}
_SAVED_WHEN_EMPTY = {"steps", "samples", "processes", "loading", "functions"}  # the others only when recorded
_ALWAYS_WRITTEN = {"samples", "processes"}  # since format 1: missing means lost (loading.csv: since ready_batches)

# Recorded files stored in the run folder as they are (bytes), when a run made them.
ATTACHMENTS = ("cprofile-main.prof", "cprofile-workers.prof", "pyspy.speedscope.json",
               "windows.jsonl", "windows.1.jsonl")  # profile --light: the window aggregates (measure.light)


@dataclass
class Run:
    """Raw records of one run. ``meta`` is run.json's object as recorded (what run.json is written back from);
    ``info`` reads it typed. Tables are DataFrames."""

    meta: dict[str, Any]
    steps: pd.DataFrame
    samples: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SAMPLE_COLUMNS))
    processes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PROCESS_COLUMNS))
    loading: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=LOADING_COLUMNS))
    functions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=FUNCTION_COLUMNS))
    # torch.cuda memory per window (CUDA runs); empty on the CPU and in older folders.
    device_memory: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=DEVICE_MEMORY_COLUMNS))
    # per batch, per transform and decode call (issue 18); empty where none was timed and in older folders.
    transforms: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=TRANSFORM_COLUMNS))
    # py-spy's stacks per window (``pipeprof attach``); empty for every run pipeprof timed itself.
    stacks: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STACK_COLUMNS))
    attachments: dict[str, bytes] = field(default_factory=dict)  # file name (one of ATTACHMENTS) -> content
    # A multi-process job's ranks, each a whole run of its own (meta["rank"] says which), in rank order;
    # saved as ``ranks/rank-<N>/`` beside the job's own records. Empty for one process.
    ranks: list[Run] = field(default_factory=list)
    # What load_run found damaged and set aside (rows, files, run.json keys, a job's missing ranks); empty: sound.
    damage: tuple[Damage, ...] = ()
    # ``info``'s parse and the copy of ``meta`` it was parsed from: ``meta`` is written to while a run is
    # assembled (a parse of an older ``meta`` would be a silent wrong answer), and what ``info`` holds is not
    # ``meta``'s own objects (a reader cannot change what run.json is written from)
    _parsed: tuple[dict[str, Any], RunMeta] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def info(self) -> RunMeta:
        """run.json typed (``RunMeta``): parsed once, and again only after ``meta`` changed."""
        parsed = self._parsed
        if parsed is None or not _same(parsed[0], self.meta):
            recorded = copy.deepcopy(self.meta)
            parsed = self._parsed = (recorded, RunMeta.parse(recorded))
        return parsed[1]

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def settings(self) -> RunSettings:
        """The run's settings, read back from run.json (``RunSettings.from_meta``, parsed with ``info``)."""
        return self.info.settings


@dataclass(frozen=True)
class FolderHead:
    """What a pipeprof folder's document (run.json, diagnosis.json, compare.json, sweep.json, tune.json) says of
    itself at its top, each as text (None: it says nothing): when it was made (``created_utc``, an ISO time;
    only a string counts), its scenario's name (run.json's ``scenario`` is the whole table: its ``name``) and its
    status."""

    created_utc: str | None = None
    scenario: str | None = None
    status: str | None = None

    @classmethod
    def from_json(cls, data: Any) -> FolderHead:
        d = as_object(data)
        created, scenario, status = d.get("created_utc"), d.get("scenario"), d.get("status")
        if isinstance(scenario, dict):
            scenario = scenario.get("name")
        return cls(created_utc=created if isinstance(created, str) else None,
                   scenario=None if scenario is None else str(scenario), status=None if status is None else str(status))


def _same(recorded: dict[str, Any], meta: dict[str, Any]) -> bool:
    try:
        return recorded == meta
    except ValueError:  # an array's ambiguous truth: not known to be the same
        return False


def sample_tables(samples: pd.DataFrame, processes: pd.DataFrame, gpu: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The sampler's frames with the run folder's columns: GPU columns (both tables) when a GPU was sampled, then
    ``cpu_core<N>_pct`` in core order (cpu_core10 after cpu_core9)."""
    extra = set(samples.columns) - set(SAMPLE_COLUMNS) - set(GPU_SAMPLE_COLUMNS)
    columns = SAMPLE_COLUMNS + (GPU_SAMPLE_COLUMNS if gpu else []) + sorted(extra, key=lambda c: (len(c), c))
    return (samples.reindex(columns=columns),
            processes.reindex(columns=PROCESS_COLUMNS + (GPU_PROCESS_COLUMNS if gpu else [])))


def new_run_folder(root: Path, scenario: str, now: dt.datetime | None = None) -> Path:
    """``<root>/<UTC timestamp>-<scenario>``, with a ``-2``, ``-3`` suffix if taken."""
    now = now or dt.datetime.now(dt.timezone.utc)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", scenario).strip("._") or "run"
    base = Path(root) / f"{now.strftime('%Y%m%dT%H%M%SZ')}-{safe}"
    folder, n = base, 1
    while os.path.lexists(folder):  # a name taken by anything, a dangling symlink included, is skipped
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    return folder


def ensure_out_folder(out: Path) -> None:
    """Create ``--out`` (and its parents) and check that a file can be written in it, before anything runs:
    a file in the way, no permission or a read-only file system is a usage error, not a run lost at its end."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create the folder ({e.strerror or e})") from None
    why = unwritable(out)
    if why is not None:
        raise UsageError(f"--out {out}: cannot write in the folder ({why}); give a folder you can write to")


def unwritable(folder: Path) -> str | None:
    """Why a file cannot be written in ``folder`` (a read-only file system, no permission), or None: tried
    with a hidden file, removed at once."""
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".pipeprof-write-check.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return str(e.strerror or e)
    return None


@dataclass
class Staged:
    """A folder being written: ``tmp`` (hidden, in the same parent) and the ``folder`` it will become."""

    tmp: Path
    folder: Path


@contextlib.contextmanager
def staged_folder(root: Path, name: str, now: dt.datetime | None = None) -> Iterator[Staged]:
    """Write into a hidden temp folder, renamed to ``<root>/<UTC>-<name>`` when the block ends without error.

    The final name is chosen at the start (so pages can name it) and chosen
    again if another process took it meanwhile; on any error, Ctrl-C included,
    the temp folder is removed, so a half-written folder never looks whole.
    """
    stage = Staged(Path(tempfile.mkdtemp(dir=root, prefix=".staged.", suffix=".tmp")), new_run_folder(root, name, now))
    try:
        os.chmod(stage.tmp, 0o755)
        yield stage
        if stage.folder.exists():  # taken while we worked
            stage.folder = new_run_folder(root, name)
        os.replace(stage.tmp, stage.folder)
    except BaseException:
        shutil.rmtree(stage.tmp, ignore_errors=True)
        raise


def to_json(data: Any) -> str:
    """Sorted-key JSON; NaN and infinities become null (JSON has no NaN)."""
    return json.dumps(finite_json(data), indent=2, sort_keys=True, default=_json_default, allow_nan=False) + "\n"


def finite_json(data: Any) -> Any:
    """``data`` with NaN and infinities as None, numpy scalars as Python ones (what JSON can hold)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite_json(v) for v in data]
    if hasattr(data, "item") and not isinstance(data, (str, bytes)):
        return finite_json(data.item())
    return data


def write_json(path: Path, data: Any) -> None:
    """Write JSON with sorted keys, atomically (temp file + rename)."""
    write_text(path, to_json(data))


def write_output(path: Path, text: str) -> None:
    """Write a file the user named (``-o``): a device or a pipe there (``/dev/stdout``, ``/dev/null``) is written
    into, never replaced by a file; anything else as ``write_text``."""
    if Path(path).exists() and not Path(path).is_file():
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    write_text(path, text)


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically (temp file + rename): a link in its place is replaced, never followed.

    An OSError that names no file (write(2) on a full disk says only "No space left on device") is raised
    again naming ``path``, so the one line the user reads says where."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; reports are meant to be shared
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        if e.filename is None:
            raise OSError(e.errno, e.strerror or str(e), str(path)) from e
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_default(obj: Any) -> Any:
    # numpy scalars and paths show up in metadata; everything else is a bug.
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def save_run(run: Run, folder: Path, extra_files: dict[str, str] | None = None) -> Path:
    """Write ``run`` to ``folder`` atomically: a hidden temp folder renamed when complete.

    ``extra_files`` maps file names to text (summary.json, report.html) written
    into the same temp folder, so a crash never leaves a half run that looks whole.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".tmp"))
    try:
        os.chmod(tmp, 0o755)
        saved = {name: getattr(run, name) for name in TABLES
                 if name in _SAVED_WHEN_EMPTY or not getattr(run, name).empty}
        # each table's rows as written: a table cut later at a row's end is told from a short run (run_check)
        meta = dict(run.meta, format_version=RUN_FORMAT_VERSION, rows={n: len(t) for n, t in saved.items()})
        write_json(tmp / "run.json", meta)
        for name, table in saved.items():
            table.to_csv(tmp / f"{name}.csv", index=False)
        for name, content in run.attachments.items():
            if name not in ATTACHMENTS:
                raise ValueError(f"unknown attachment {name!r}; known: {', '.join(ATTACHMENTS)}")
            (tmp / name).write_bytes(content)
            os.chmod(tmp / name, 0o644)
        for name, text in (extra_files or {}).items():
            write_text(tmp / name, text)
        for rank_run in run.ranks:
            save_run(rank_run, tmp / RANKS_FOLDER / rank_folder_name(rank_run.info))
        _replace_folder(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def _replace_folder(new: Path, folder: Path) -> None:
    """Rename ``new`` to ``folder``; a ``folder`` that exists (the raw records a run kept there while it ran:
    ``pipeline.recording``) is moved aside first and removed once ``new`` has its name."""
    if not os.path.lexists(folder):
        os.replace(new, folder)
        return
    old = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.replaced.", suffix=".tmp"))
    os.replace(folder, old / folder.name)
    try:
        os.replace(new, folder)
    except BaseException:
        os.replace(old / folder.name, folder)  # the raw records stay where they were
        raise
    shutil.rmtree(old, ignore_errors=True)


def load_run(folder: Path) -> Run:
    """Read a run folder; a missing, unreadable or unsound one raises UsageError (one line).

    Damaged rows and files (``run_check``) are set aside and listed in
    ``Run.damage``; the rest is analysed only while it is still sound: a
    steps.csv with no counted step left after its damaged rows is refused.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder}: not a run folder (it is a file; give the folder that holds run.json)")
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a run folder (no such directory)")
    meta_path = folder / "run.json"
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{folder}: not a run folder (run.json is missing)") from None
    except PermissionError as e:
        raise UsageError(f"{meta_path}: cannot read it ({e.strerror or e})") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"{meta_path}: corrupt run metadata ({one_line(e)})") from None
    if not isinstance(meta, dict):
        raise UsageError(f"{meta_path}: corrupt run metadata (expected a JSON object)")
    damage = check_meta(meta, RUN_FORMAT_VERSION, meta_path)
    tables: dict[str, pd.DataFrame] = {}
    for name, columns in TABLES.items():
        path = folder / f"{name}.csv"
        df, found = read_table(path, name, columns)
        damage += found
        if df is None:
            if name == "steps":
                raise UsageError(f"{folder}: not a run folder ({path.name} is missing)")
            if name in _ALWAYS_WRITTEN or (name == "loading" and "ready_batches" in tables["steps"].columns) or (
                    name == "functions" and any((folder / f).is_file() for f in ATTACHMENTS if f.endswith(".prof"))):
                damage.append(Damage(path.name, None, "missing (every run of this format writes it)"))
            df = pd.DataFrame(columns=columns)  # older or partial runs: empty table
        missing = [c for c in columns if c not in df.columns and c not in _ADDED_LATER]
        if missing and not df.empty:
            raise UsageError(f"{path}: corrupt table (missing columns: {', '.join(missing)})")
        for c in columns:
            if c not in df.columns:
                df[c] = _LOADED_AS[c] if c in _LOADED_AS and not df.empty else pd.Series(dtype="float64")
        tables[name] = df
    damage += fewer_rows(meta, {name: len(df) + sum(d.file == f"{name}.csv" and d.line is not None for d in damage)
                                for name, df in tables.items() if (folder / f"{name}.csv").is_file()})
    if "warmup" in tables["steps"]:
        tables["steps"]["warmup"] = tables["steps"]["warmup"].map(
            lambda v: BOOL_VALUES.get(str(v), bool(v))).astype(bool)
    if any(d.file == "steps.csv" for d in damage) and not (~tables["steps"]["warmup"]).any():
        first = next((d for d in damage if d.file == "steps.csv"), damage[0])
        raise UsageError(f"{folder}: damaged beyond analysis: no counted step is left ({first.text()}; "
                         f"{len(damage)} damaged in all)")
    attachments = {name: (folder / name).read_bytes() for name in ATTACHMENTS if (folder / name).is_file()}
    damage += [d for d in (check_attachment(n, c) for n, c in attachments.items()) if d is not None]
    profiled = set(tables["functions"]["process"].dropna().astype(str))  # each process's dump is kept beside it
    damage += [Damage(f"cprofile-{p}.prof", None, f"missing (functions.csv has the {p!r} rows it was read from)")
               for p in sorted(profiled & {"main", "workers"}) if f"cprofile-{p}.prof" not in attachments]
    ranks_folder = folder / RANKS_FOLDER
    ranks = [load_run(f) for f in sorted(ranks_folder.iterdir(), key=_rank_order)
             if f.is_dir() and not f.name.startswith(".")] if ranks_folder.is_dir() else []
    for rank_run in ranks:
        damage += [d.under(f"{RANKS_FOLDER}/{rank_folder_name(rank_run.info)}") for d in rank_run.damage]
    damage += missing_ranks(meta, [r.info.rank.rank if r.info.rank is not None else None for r in ranks])
    return Run(meta=meta, attachments=attachments, ranks=ranks, damage=tuple(damage), **tables)


RANKS_FOLDER = "ranks"


def rank_folder_name(meta: RunMeta) -> str:
    """``rank-<N>`` for a rank's run (run.json ``rank.rank``), ``pid-<P>`` for a process without a rank."""
    rank = meta.rank or RankInfo()
    if rank.rank is not None:
        return f"rank-{rank.rank}"
    return f"pid-{rank.pid or 0}"


def _rank_order(folder: Path) -> tuple[int, int, str]:
    kind, _, number = folder.name.partition("-")
    return (0 if kind == "rank" else 1, int(number) if number.isdigit() else 0, folder.name)
