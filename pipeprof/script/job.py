"""The processes of a profiled command, sorted into one training process or the ranks of a job.

Pure (pandas, no torch). Every instrumented process wrote its own event
file (``pipeprof.script.rank_boot``); each is cut into steps on its own
(``event_steps.script_steps``) and becomes a ``Proc``. Those that ran
training steps are what the run is about:

* none: nothing to attribute (the session says why);
* one, not a rank of a job of several: a single-process run, whichever
  process it was (the script itself, or a child it started);
* otherwise a job: every process that trained, each with its rank (the
  process group's own view, ``R``, else its launcher's environment:
  ``pipeprof.measure.rank_env``), becomes a rank run.

The processes that did not train (the launcher, a helper) are listed with
the reason, and so are the ranks of the world size that never iterated a
DataLoader. A DataLoader worker started with the spawn method arms its own
hooks and writes an event file without steps: it is left out, as the
worker it is.

A rank run's ``samples`` are its own view of the node's sampler: the
machine-wide columns as sampled, ``main_*`` the rank's process and
``workers_*`` its DataLoader workers (``rank_samples``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof.measure.rank_env import rank_identity
from pipeprof.measure.sampler import MAIN, WORKER
from pipeprof.script.event_steps import ScriptSteps

RANK_ROLE = "rank"  # a rank's process in a job's processes.csv (the launcher is "main", the ranks' workers "worker")
NEVER_ITERATED = "never iterated a torch.utils.data.DataLoader"


@dataclass
class Proc:
    """One instrumented process: its steps and how it was started."""

    pid: int
    ppid: int | None
    cut: ScriptSteps
    root: bool  # the process pipeprof profile started (boot), or the command itself when it is a launcher
    unreadable: int = 0

    @property
    def trained(self) -> bool:
        return self.cut.step_source is not None

    @property
    def argv(self) -> list[str]:
        return [str(w) for w in self.cut.start.get("argv") or []]

    def identity(self, hostname: Any = None) -> dict[str, Any]:
        """Rank, local rank, world size, node...: the process group's view over the environment's."""
        env = self.cut.start.get("env") or {}
        ident = rank_identity(env, hostname) if hostname is not None else rank_identity(env)
        view = self.cut.rank or {}
        for key in ("rank", "world_size"):
            if view.get(key) is not None:
                ident[key] = int(view[key])
        ident["backend"] = view.get("backend")
        ident["pid"] = self.pid
        return ident


def is_job(procs: list[Proc]) -> bool:
    """Several processes trained, or one that is a rank of a world of several."""
    trained = [p for p in procs if p.trained]
    return len(trained) > 1 or any((p.identity().get("world_size") or 1) > 1 for p in trained)


def ranks_of(procs: list[Proc]) -> list[tuple[dict[str, Any], Proc]]:
    """The processes that trained, with their identity, in rank order (those without a rank after, by pid);
    a rank claimed twice keeps its first process, the other gets none."""
    out, taken = [], set()
    for p in sorted((p for p in procs if p.trained), key=lambda p: p.pid):
        ident = p.identity()
        if ident.get("rank") in taken:
            ident["rank"] = None
        taken.add(ident.get("rank"))
        out.append((ident, p))
    return sorted(out, key=lambda item: (item[0]["rank"] is None, item[0]["rank"] or 0, item[1].pid))


def spawned_worker(p: Proc, procs: list[Proc]) -> bool:
    """A DataLoader worker started with the spawn method: it did not train, and its parent did."""
    parents = {q.pid for q in procs if q.trained}
    return not p.trained and p.ppid in parents and "--multiprocessing-fork" in " ".join(
        p.cut.start.get("orig_argv") or [])


def untraced(procs: list[Proc], world_size: int | None, ranks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The instrumented processes that did not train (not the ranks' spawned workers), and the ranks of the
    world that no process trained as, each with the reason."""
    out = [{"pid": p.pid, "cmdline": p.cut.start.get("orig_argv") or p.argv, "reason": NEVER_ITERATED}
           for p in procs if not p.trained and not spawned_worker(p, procs)]
    seen = {r.get("rank") for r in ranks}
    for rank in range(world_size or 0):
        if rank not in seen:
            out.append({"pid": None, "cmdline": None, "rank": rank,
                        "reason": f"rank {rank} of {world_size}: no instrumented process trained as it"})
    return out


def tree_of(pid: int, parents: dict[int, int | None]) -> list[int]:
    """``pid`` and every descendant of it in ``parents`` (pid -> ppid)."""
    out, frontier = [pid], [pid]
    while frontier:
        frontier = [c for c, parent in parents.items() if parent in frontier and c not in out]
        out.extend(frontier)
    return out


def rank_samples(samples: pd.DataFrame, processes: pd.DataFrame, pid: int, workers: list[int]) -> pd.DataFrame:
    """The node's samples as one rank sees them: ``main_*`` its process, ``workers_*`` its DataLoader workers
    (``workers``), ``tree_rss_bytes`` both, ``read_bytes_per_s`` their disk reads, ``gpu_proc_*`` their GPU use
    (when a GPU was sampled); machine-wide columns as they are."""
    if samples.empty or processes.empty or "pid" not in processes:
        return samples.copy()
    out = samples.copy()
    mine = processes[processes["pid"].isin([pid, *workers])]
    main = mine[mine["pid"] == pid].groupby("t_s")
    theirs = mine[mine["pid"] != pid].groupby("t_s")
    t = out["t_s"]
    out["main_cpu_pct"] = t.map(main["cpu_pct"].sum())
    out["main_rss_bytes"] = t.map(main["rss_bytes"].sum())
    out["workers_cpu_pct"] = t.map(theirs["cpu_pct"].sum()).fillna(0.0)
    out["workers_rss_bytes"] = t.map(theirs["rss_bytes"].sum()).fillna(0.0)
    out["workers"] = t.map(theirs["pid"].nunique()).fillna(0).astype(int)
    out["tree_rss_bytes"] = out["main_rss_bytes"] + out["workers_rss_bytes"]
    read = pd.to_numeric(mine["read_bytes"], errors="coerce")
    if read.notna().any():
        total = mine.assign(read_bytes=read).groupby("t_s")["read_bytes"].sum().sort_index()
        rate = (total.diff() / pd.Series(total.index, index=total.index).diff()).clip(lower=0.0)
        out["read_bytes_per_s"] = t.map(rate)
    for tree_column, column in (("gpu_proc_util_pct", "gpu_util_pct"), ("gpu_proc_mem_bytes", "gpu_mem_bytes")):
        if column in mine and tree_column in out:  # a GPU was sampled: the rank's share, not the node's
            # min_count=1: a tick whose readings are all NaN (no NVML sample) stays unknown, not 0.
            out[tree_column] = t.map(pd.to_numeric(mine[column], errors="coerce").groupby(mine["t_s"]).sum(min_count=1))
    return out


def rank_processes(processes: pd.DataFrame, pid: int, workers: list[int]) -> pd.DataFrame:
    """A rank's rows of the node's processes table: its process "main", its workers "worker"."""
    if processes.empty or "pid" not in processes:
        return processes.copy()
    mine = processes[processes["pid"].isin([pid, *workers])].copy()
    mine["role"] = [MAIN if p == pid else WORKER for p in mine["pid"]]
    return mine.reset_index(drop=True)


def job_processes(processes: pd.DataFrame, rank_pids: set[int], worker_pids: set[int], root_pid: int | None,
                  child_role: str) -> pd.DataFrame:
    """The node's processes table for the job: the command "main", ranks "rank", their workers "worker", the
    rest ``child_role``."""
    if processes.empty or "pid" not in processes:
        return processes
    out = processes.copy()
    out["role"] = [MAIN if p == root_pid else RANK_ROLE if p in rank_pids else WORKER if p in worker_pids
                   else child_role for p in out["pid"]]
    return out


def event_files(folder: Path) -> list[Path]:
    """The per-process event files the ranks' hooks wrote (``events-<pid>.jsonl``), by pid."""
    def pid(path: Path) -> int:
        digits = path.stem.partition("-")[2]
        return int(digits) if digits.isdigit() else 0
    return sorted(folder.glob("events-*.jsonl"), key=pid)
