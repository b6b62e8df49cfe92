"""Chrome trace: a run's raw records as Trace Event Format JSON, for Perfetto and chrome://tracing.

What maps to what (the tables' times are seconds since the run started; ``ts`` and ``dur`` are
microseconds on the same origin):

* steps.csv -> the training process (its pid from processes.csv, role "main"; 1 if unknown): thread
  "steps", one "step N" slice per step; thread "phases", the step's "data wait", "host→device" and
  "compute" laid end to end from its start, and "other" for the rest of it.
* loading.csv -> one "batch B" slice per batch, split into "fetch", "waiting for a core" (where it was
  measured), "prep" and "collate" in proportion to their measured times so they fill the batch's span.
  Batches made in the training process (worker -1) go on its thread "loading (main)"; each DataLoader
  worker process is a trace process "DataLoader worker K".
* samples.csv -> counter tracks on the training process: CPU, memory, disk reads, and the GPU's when
  one was sampled. Missing values are left out (a counter holds its last value), never written as 0.

Slices on one thread must not overlap, so a step is drawn no longer than until the next one begins
(on CUDA ``step_s`` is device time, and the host runs ahead) and its phases no longer than the step;
the measured values stay in the step's args.
"""

from __future__ import annotations

from typing import Any, cast

import pandas as pd

from pipeprof import __version__
from pipeprof.format import MIB
from pipeprof.numbers import finite
from pipeprof.run_folder import Run

STEPS_TID, PHASES_TID, LOADING_TID = 1, 2, 3
PHASES = (("data wait", "data_wait_s"), ("host→device", "h2d_s"), ("compute", "compute_s"))
PARTS = ("fetch", "core_wait", "prep", "collate")
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
    pid = main_pid(run.processes)
    events = [_meta(pid, 0, "process_name", name="training process"), _meta(pid, 0, "process_sort_index", sort_index=0)]
    for tid, name in ((STEPS_TID, "steps"), (PHASES_TID, "phases")):
        events += _thread(pid, tid, name)
    events += step_events(run.steps, pid)
    events += loading_events(run.loading, pid)
    events += counter_events(run.samples, pid)
    metadata = {"pipeprof_version": __version__,
                "time_origin": "seconds since the run started; ts = microseconds"}
    scenario = run.meta.get("scenario")
    if isinstance(scenario, dict) and scenario.get("name") is not None:
        metadata["run"] = str(scenario["name"])
    if run.meta.get("status") is not None:
        metadata["status"] = str(run.meta["status"])
    return {"traceEvents": events, "displayTimeUnit": "ms", "metadata": metadata}


def main_pid(processes: pd.DataFrame) -> int:
    """The training process's pid (the first row with role "main"), or 1 when none was recorded."""
    if processes.empty or "role" not in processes:
        return 1
    values = [finite(p) for p in processes.loc[processes["role"] == "main", "pid"]]
    pids = [int(p) for p in values if p is not None]
    return pids[0] if pids else 1


def step_events(steps: pd.DataFrame, pid: int) -> list[dict[str, Any]]:
    """One "step N" slice per step on the steps thread, its phases end to end on the phases thread."""
    rows = [r for r in _records(steps) if finite(r.get("t_start_s")) is not None]
    rows.sort(key=lambda r: float(r["t_start_s"]))
    events = []
    for i, r in enumerate(rows):
        start = float(r["t_start_s"])
        step_s = finite(r.get("step_s"))
        if step_s is None or step_s < 0:
            continue
        end = start + step_s
        if i + 1 < len(rows):
            end = min(end, float(rows[i + 1]["t_start_s"]))
        flag = r.get("warmup")
        warmup = flag is True or (not isinstance(flag, bool) and bool(finite(flag)))  # NaN (unknown) is not warm-up
        cat = "warmup" if warmup else "step"
        n = finite(r.get("step"))
        args = _args(r, ("epoch", "samples"), ints=True)
        args.update(warmup=warmup, **_args(r, ("data_wait_s", "h2d_s", "compute_s", "step_s")))
        events.append(_slice(f"step {int(n) if n is not None else i}", cat, pid, STEPS_TID, start, end, args))
        t = start
        for name, column in PHASES:
            width = max(0.0, finite(r.get(column)) or 0.0)
            t_next = min(t + width, end)
            if t_next > t:
                events.append(_slice(name, cat, pid, PHASES_TID, t, t_next, {column: width}))
            t = t_next
        if end > t:
            events.append(_slice("other", cat, pid, PHASES_TID, t, end, {"other_s": end - t}))
    return events


def loading_events(loading: pd.DataFrame, main: int) -> list[dict[str, Any]]:
    """Batches with their fetch/prep/collate: worker -1 on the training process, each worker process its own."""
    events: list[dict[str, Any]] = []
    rows = [r for r in _records(loading)
            if finite(r.get("t_start_s")) is not None and finite(r.get("t_end_s")) is not None]
    groups: dict[tuple[int, int | None], list[dict[str, Any]]] = {}
    for r in rows:
        worker, pid = finite(r.get("worker")), finite(r.get("pid"))
        worker = int(worker) if worker is not None else -1
        # a worker re-made each epoch (persistent_workers off) is a new process: its own trace process
        key = (worker, int(pid) if pid is not None and worker >= 0 else None)
        groups.setdefault(key, []).append(r)
    used = {main}
    spare = max([main] + [p for _, p in groups if p is not None]) + 1  # for a pid not recorded or reused
    for worker, pid in sorted(groups, key=lambda k: (k[0], k[1] if k[1] is not None else -1)):
        batch_rows = sorted(groups[(worker, pid)], key=lambda r: float(r["t_start_s"]))
        if worker < 0:
            proc, tid = main, LOADING_TID
            events += _thread(proc, tid, "loading (main)")
        else:
            if pid is None or pid in used:
                pid, spare = spare, spare + 1
            used.add(pid)
            proc, tid = pid, pid
            events += [_meta(proc, 0, "process_name", name=f"DataLoader worker {worker}"),
                       _meta(proc, 0, "process_sort_index", sort_index=worker + 1), *_thread(proc, tid, "batches")]
        for r in batch_rows:
            events += _batch(r, proc, tid)
    return events


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """``df``'s rows as dicts; the run tables' column names are strings (pandas types them Hashable)."""
    return cast("list[dict[str, Any]]", df.to_dict("records"))


def _batch(r: dict[str, Any], pid: int, tid: int) -> list[dict[str, Any]]:
    start, end = float(r["t_start_s"]), float(r["t_end_s"])
    if end < start:
        return []
    n = finite(r.get("batch"))
    args = _args(r, ("fetch_s", "core_wait_s", "prep_s", "collate_s"))
    args.update(_args(r, ("samples", "step"), ints=True))
    events = [_slice(f"batch {int(n) if n is not None else '?'}", "loading", pid, tid, start, end, args)]
    widths = [max(0.0, finite(r.get(f"{part}_s")) or 0.0) for part in PARTS]
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
    rows = _records(samples)
    for track, series in COUNTERS.items():
        present = [(name, column, factor) for name, column, factor in series if column in samples.columns]
        for r in rows:
            t = finite(r.get("t_s"))
            values = {name: v * factor for name, column, factor in present
                      if (v := finite(r.get(column))) is not None}
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


def _args(r: dict[str, Any], columns: tuple[str, ...], ints: bool = False) -> dict[str, Any]:
    """The row's finite values of ``columns`` (a missing value is left out, never written as NaN or 0)."""
    out = {}
    for c in columns:
        v = finite(r.get(c))
        if v is not None:
            out[c] = int(v) if ints else v
    return out
