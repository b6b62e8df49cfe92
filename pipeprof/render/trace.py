"""Chrome trace: a run's raw records as Trace Event Format JSON, for Perfetto and chrome://tracing.

What maps to what (the tables' times are seconds since the run started; ``ts`` and ``dur`` are
microseconds on the same origin):

* steps.csv -> the training process (its pid from processes.csv, role "main"; 1 if unknown): thread
  "steps", one "step N" slice per step; thread "phases", the step's "data wait", "host→device",
  "collective wait" (where the step had any) and "compute" laid end to end from its start, and "other"
  for the rest of it.
* loading.csv -> one "batch B" slice per batch, split into "fetch", "waiting for a core" (where it was
  measured), "prep" and "collate" in proportion to their measured times so they fill the batch's span.
  Batches made in the training process (worker -1) go on its thread "loading (main)"; each DataLoader
  worker process is a trace process "DataLoader worker K".
* samples.csv -> counter tracks on the training process: CPU, memory, disk reads, and the GPU's when
  one was sampled. Missing values are left out (a counter holds its last value), never written as 0.

Slices on one thread must not overlap, so a step is drawn no longer than until the next one begins
(on CUDA ``step_s`` is device time, and the host runs ahead) and its phases no longer than the step;
the measured values stay in the step's args.

A job of several ranks (``run.ranks``) is one trace process per rank instead: its pid (run.json ``rank.pid``,
else its processes.csv), named "rank N (node)", sorted by rank, with the same threads, its DataLoader workers as
processes "rank N worker K" after it, and its own counters (machine-wide columns from its node's sampler). The
job's top-level tables repeat the median rank's steps and loading, so only its samples are drawn, as counters on a
process "job (node where pipeprof ran)". Each rank's times are drawn as its tables record them (seconds since the
run started, on the time axis the job's ranks were recorded on). A pid seen
twice (ranks on two nodes can share one) is given a spare number; the rank's pid stays in its process's args.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pipeprof.format import MIB
from pipeprof.numbers import finite
from pipeprof.run_folder import LOADING_PARTS as PARTS
from pipeprof.run_folder import FolderHead, Run
from pipeprof.run_meta import JobInfo, RankInfo
from pipeprof.version import __version__

STEPS_TID, PHASES_TID, LOADING_TID = 1, 2, 3
PHASES = (("data wait", "data_wait_s"), ("host→device", "h2d_s"), ("collective wait", "collective_wait_s"),
          ("compute", "compute_s"))
RANK_SORT = 1000  # a rank's process sorts at RANK_SORT * (rank + 1), its workers just after it
PART_NAMES = {"core_wait": "waiting for a core"}  # a slice's name where it is not the part's own
# track name -> [(series, column, factor)]
COUNTERS = {
    "CPU (% of all cores)": [("machine", "cpu_util_pct", 1.0)],
    "CPU (% of one core)": [("main", "main_cpu_pct", 1.0), ("workers", "workers_cpu_pct", 1.0)],
    "memory (MiB)": [("main", "main_rss_bytes", 1 / MIB), ("workers", "workers_rss_bytes", 1 / MIB),
                     ("tree", "tree_rss_bytes", 1 / MIB)],
    "disk read (MiB/s)": [("read", "read_bytes_per_s", 1 / MIB)],
    "GPU util (%)": [("util", "gpu_util_pct", 1.0)],
    "GPU memory (MiB)": [("used", "gpu_mem_used_bytes", 1 / MIB)],
    "PCIe (MiB/s)": [("rx", "pcie_rx_bytes_per_s", 1 / MIB), ("tx", "pcie_tx_bytes_per_s", 1 / MIB)],
}


def chrome_trace(run: Run) -> dict[str, Any]:
    """The run as a Trace Event Format object: ``{"traceEvents", "displayTimeUnit", "metadata"}``."""
    if run.ranks:
        return _job_trace(run)
    pid = main_pid(run.processes)
    events = [_meta(pid, 0, "process_name", name="training process"), _meta(pid, 0, "process_sort_index", sort_index=0)]
    for tid, name in ((STEPS_TID, "steps"), (PHASES_TID, "phases")):
        events += _thread(pid, tid, name)
    events += step_events(run.steps, pid)
    events += loading_events(run.loading, pid)
    events += counter_events(run.samples, pid)
    return {"traceEvents": events, "displayTimeUnit": "ms", "metadata": _metadata(run)}


def _job_trace(run: Run) -> dict[str, Any]:
    """A job's trace: a process per rank with its steps, phases, loading and counters (see the module docstring)."""
    events: list[dict[str, Any]] = []
    used: set[int] = set()
    spare = 1 + max([main_pid(r.processes) for r in run.ranks] + [rank_pid(r) or 0 for r in run.ranks]
                    + [int(p) for r in run.ranks for p in _pids(r.loading)] + [main_pid(run.processes)])
    for i, rank_run in enumerate(run.ranks):
        info = rank_run.info.rank or RankInfo()
        rank = info.rank if info.rank is not None else i
        pid = rank_pid(rank_run) or main_pid(rank_run.processes)
        if pid in used:
            pid, spare = spare, spare + 1
        used.add(pid)
        node = info.node
        name = f"rank {rank} ({node})" if node else f"rank {rank}"
        sort = RANK_SORT * (rank + 1)
        events += [_meta(pid, 0, "process_name", name=name), _meta(pid, 0, "process_sort_index", sort_index=sort),
                   _meta(pid, 0, "process_labels", labels=_rank_labels(info))]
        for tid, thread in ((STEPS_TID, "steps"), (PHASES_TID, "phases")):
            events += _thread(pid, tid, thread)
        events += step_events(rank_run.steps, pid)
        loading, spare = _loading_events(rank_run.loading, pid, used, spare, f"rank {rank} worker ", sort)
        events += loading
        events += counter_events(rank_run.samples, pid)
    if not run.samples.empty:
        pid = main_pid(run.processes)
        if pid in used:
            pid, spare = spare, spare + 1
        used.add(pid)
        events += [_meta(pid, 0, "process_name", name="job (node where pipeprof ran)"),
                   _meta(pid, 0, "process_sort_index", sort_index=0)]
        events += counter_events(run.samples, pid)
    metadata = _metadata(run)
    metadata["time_origin"] = "seconds since the run started, as each rank's tables record them; ts = microseconds"
    job = run.info.job or JobInfo()
    metadata["world_size"] = job.world_size or len(run.ranks)
    if job.id is not None:
        metadata["job"] = str(job.id)
    return {"traceEvents": events, "displayTimeUnit": "ms", "metadata": metadata}


def rank_pid(run: Run) -> int | None:
    """A rank's process id from its run.json ``rank.pid``; None when not recorded."""
    rank = run.info.rank
    return rank.pid if rank is not None else None


def _rank_labels(info: RankInfo) -> str:
    labels = (("local_rank", info.local_rank), ("world_size", info.world_size), ("node_rank", info.node_rank),
              ("pid", info.pid), ("backend", info.backend), ("status", info.status))
    return ", ".join(f"{k} {v}" for k, v in labels if v is not None)


def _pids(loading: pd.DataFrame) -> list[int]:
    if loading.empty or "pid" not in loading:
        return []
    return [int(p) for p in (finite(v) for v in loading["pid"]) if p is not None]


def _metadata(run: Run) -> dict[str, Any]:
    metadata = {"pipeprof_version": __version__,
                "time_origin": "seconds since the run started; ts = microseconds"}
    name, status = FolderHead.from_json(run.meta).scenario, run.info.status
    if name is not None:
        metadata["run"] = name
    if status is not None:
        metadata["status"] = status
    return metadata


def main_pid(processes: pd.DataFrame) -> int:
    """The training process's pid (the first row with role "main"), or 1 when none was recorded."""
    if processes.empty or "role" not in processes:
        return 1
    values = [finite(p) for p in processes.loc[processes["role"] == "main", "pid"]]
    pids = [int(p) for p in values if p is not None]
    return pids[0] if pids else 1


def step_events(steps: pd.DataFrame, pid: int) -> list[dict[str, Any]]:
    """One "step N" slice per step on the steps thread, its phases end to end on the phases thread."""
    rows = [r for r in _rows(steps, STEP_NUMBERS) if r.t_start_s is not None]
    rows.sort(key=lambda r: r.start_s)
    events = []
    for i, r in enumerate(rows):
        start = r.start_s
        step_s = r.number("step_s")
        if step_s is None or step_s < 0:
            continue
        end = start + step_s
        if i + 1 < len(rows):
            end = min(end, rows[i + 1].start_s)
        flag = r.warmup
        warmup = flag is True or (not isinstance(flag, bool) and bool(finite(flag)))  # NaN (unknown) is not warm-up
        cat = "warmup" if warmup else "step"
        n = r.number("step")
        args = r.args(("epoch", "samples"), ints=True)
        args.update(warmup=warmup, **r.args(("data_wait_s", "h2d_s", "compute_s", "step_s")))
        collective = r.number("collective_wait_s")
        if collective is not None and collective > 0:  # one process never waits in collectives: no arg
            args["collective_wait_s"] = collective
        events.append(_slice(f"step {int(n) if n is not None else i}", cat, pid, STEPS_TID, start, end, args))
        t = start
        for name, column in PHASES:
            width = max(0.0, r.number(column) or 0.0)
            t_next = min(t + width, end)
            if t_next > t:
                events.append(_slice(name, cat, pid, PHASES_TID, t, t_next, {column: width}))
            t = t_next
        if end > t:
            events.append(_slice("other", cat, pid, PHASES_TID, t, end, {"other_s": end - t}))
    return events


def loading_events(loading: pd.DataFrame, main: int) -> list[dict[str, Any]]:
    """Batches with their fetch/prep/collate: worker -1 on the training process, each worker process its own."""
    return _loading_events(loading, main, {main}, 0, "DataLoader worker ", 0)[0]


def _loading_events(loading: pd.DataFrame, main: int, used: set[int], spare: int, worker_name: str,
                    sort: int) -> tuple[list[dict[str, Any]], int]:
    """``loading_events`` with the pids already ``used`` (added to), the next ``spare`` pid (returned), the
    workers' process names ``worker_name + K`` and their sort index after ``sort``."""
    events: list[dict[str, Any]] = []
    rows = [r for r in _rows(loading, BATCH_NUMBERS) if r.t_start_s is not None and r.t_end_s is not None]
    groups: dict[tuple[int, int | None], list[_Row]] = {}
    for r in rows:
        worker, pid = r.number("worker"), r.number("pid")
        worker = int(worker) if worker is not None else -1
        # a worker re-made each epoch (persistent_workers off) is a new process: its own trace process
        key = (worker, int(pid) if pid is not None and worker >= 0 else None)
        groups.setdefault(key, []).append(r)
    spare = max([spare, main + 1] + [p + 1 for _, p in groups if p is not None])  # for a pid not recorded or reused
    for worker, pid in sorted(groups, key=lambda k: (k[0], k[1] if k[1] is not None else -1)):
        batch_rows = sorted(groups[(worker, pid)], key=lambda r: r.start_s)
        if worker < 0:
            proc, tid = main, LOADING_TID
            events += _thread(proc, tid, "loading (main)")
        else:
            if pid is None or pid in used:
                pid, spare = spare, spare + 1
            used.add(pid)
            proc, tid = pid, pid
            events += [_meta(proc, 0, "process_name", name=f"{worker_name}{worker}"),
                       _meta(proc, 0, "process_sort_index", sort_index=sort + worker + 1),
                       *_thread(proc, tid, "batches")]
        for r in batch_rows:
            events += _batch(r, proc, tid)
    return events, spare


STEP_NUMBERS = ("step", "epoch", "samples", "t_start_s", "step_s", "data_wait_s", "h2d_s", "compute_s",
                "collective_wait_s")  # steps.csv's columns the trace reads as numbers
BATCH_NUMBERS = ("batch", "step", "worker", "pid", "samples", "t_start_s", "t_end_s",
                 *(f"{part}_s" for part in PARTS))  # loading.csv's


@dataclass(frozen=True)
class _Row:
    """One row of a run table as the trace reads it: its cells of ``columns`` as finite numbers (None: missing,
    empty or not a number) and steps.csv's ``warmup`` flag as recorded."""

    numbers: Mapping[str, float | None]  # every column the table is read for (``STEP_NUMBERS``, ...)
    warmup: Any = None

    def number(self, column: str) -> float | None:
        return self.numbers[column]

    @property
    def t_start_s(self) -> float | None:
        return self.number("t_start_s")

    @property
    def t_end_s(self) -> float | None:
        return self.number("t_end_s")

    @property
    def start_s(self) -> float:
        return self.t_start_s or 0.0  # only read on rows that have one

    def args(self, columns: tuple[str, ...], ints: bool = False) -> dict[str, Any]:
        """The row's finite values of ``columns`` (a missing value is left out, never written as NaN or 0)."""
        out: dict[str, Any] = {}
        for c in columns:
            v = self.number(c)
            if v is not None:
                out[c] = int(v) if ints else v
        return out


def _rows(df: pd.DataFrame, columns: tuple[str, ...]) -> list[_Row]:
    """``df``'s rows, their ``columns`` read as numbers, column by column (a column the table lacks: None)."""
    cells = [[finite(v) for v in df[c]] if c in df.columns else [None] * len(df) for c in columns]
    flags = df["warmup"].tolist() if "warmup" in df.columns else [None] * len(df)
    return [_Row(dict(zip(columns, values, strict=True)), flag)
            for values, flag in zip(zip(*cells, strict=True) if cells else [() for _ in range(len(df))], flags,
                                    strict=True)]


def _batch(r: _Row, pid: int, tid: int) -> list[dict[str, Any]]:
    start, end = r.start_s, r.t_end_s or 0.0
    if end < start:
        return []
    n = r.number("batch")
    args = r.args(("fetch_s", "core_wait_s", "prep_s", "collate_s"))
    args.update(r.args(("samples", "step"), ints=True))
    events = [_slice(f"batch {int(n) if n is not None else '?'}", "loading", pid, tid, start, end, args)]
    widths = [max(0.0, r.number(f"{part}_s") or 0.0) for part in PARTS]
    total = sum(widths)
    if total <= 0 or end <= start:
        return events
    t = start
    for k, (part, width) in enumerate(zip(PARTS, widths, strict=True)):
        t_next = end if k == len(PARTS) - 1 else t + (end - start) * width / total
        if width > 0:
            events.append(_slice(PART_NAMES.get(part, part), "loading", pid, tid, t, t_next, {f"{part}_s": width}))
        t = t_next
    return events


def counter_events(samples: pd.DataFrame, pid: int) -> list[dict[str, Any]]:
    """One counter event per track and tick, with the series that have a value at that tick."""
    events = []
    columns = ("t_s", *(column for series in COUNTERS.values() for _, column, _ in series))
    rows = _rows(samples, columns)
    for track, series in COUNTERS.items():
        present = [(name, column, factor) for name, column, factor in series if column in samples.columns]
        for r in rows:
            t = r.number("t_s")
            values = {name: v * factor for name, column, factor in present if (v := r.number(column)) is not None}
            if t is not None and values:
                events.append({"name": track, "cat": "system", "ph": "C", "ts": _us(t), "pid": pid, "tid": 0,
                               "args": values})
    return events


def _slice(name: str, cat: str, pid: int, tid: int, start_s: float, end_s: float,
           args: dict[str, Any]) -> dict[str, Any]:
    ts = _us(start_s)
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": max(0.0, round(_us(end_s) - ts, 3)),
            "pid": pid, "tid": tid, "args": args}


def _meta(pid: int, tid: int, kind: str, **args: Any) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}


def _thread(pid: int, tid: int, name: str) -> list[dict[str, Any]]:
    return [_meta(pid, tid, "thread_name", name=name), _meta(pid, tid, "thread_sort_index", sort_index=tid)]


def _us(seconds: float) -> float:
    # nanosecond resolution: more is noise, and the trace stays small
    return round(float(seconds) * 1e6, 3)
