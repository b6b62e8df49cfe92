"""``pipeprof profile --cprofile [STEPS] --pyspy [HZ]``: a profiled script's code-level view, the same as a scenario's.

**cProfile.** ``environment()`` hands the setting to the script's processes
(``PIPEPROF_CPROFILE``: the window's first step, its length, a private
folder), where ``pipeprof.script.code_profile`` profiles the window of
steps in each process that trains and every DataLoader worker's whole
life. After the script, ``attach(run)`` reads what the process whose steps
the run shows left (a job's median rank: the same process as ``run.steps``;
each rank's run of a job gets its own) and its workers' dumps, and puts it where a scenario run has it: the
``functions`` table (``run_folder.FUNCTION_COLUMNS``, processes ``main`` and
``workers``), ``cprofile-main.prof`` / ``cprofile-workers.prof`` and run.json's
``code_profile.cprofile`` (``window``, ``files``, ``workers``, and
``process``: the pid and rank profiled). What is missing is said under
``absences`` (``cprofile``, ``cprofile_workers``), as a scenario run says it.

**py-spy.** ``start(pid)`` runs ``measure.pyspy.PySpy`` on the script's
process right after it starts (``--subprocesses``: its DataLoader workers, a
launcher's ranks); ``stop()`` ends it once the script has ended.
"""

from __future__ import annotations

import json
import marshal
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof.measure.codeprofile import (
    MAIN,
    MAIN_FILE,
    WORKERS,
    WORKERS_FILE,
    Recorded,
    read_worker_dumps,
    stats_rows,
)
from pipeprof.measure.pyspy import PySpy
from pipeprof.run_folder import FUNCTION_COLUMNS, Run
from pipeprof.run_meta import RankInfo
from pipeprof.script.code_profile import main_files
from pipeprof.script.protocol import CPROFILE_ENV
from pipeprof.script.worker_profile import workers_folder


class ScriptCodeProfile:
    """cProfile (``cprofile_steps`` steps after ``warmup_steps``; 0: off) and py-spy (``pyspy_hz``; 0: off) for one
    profiled script, their files kept in ``folder`` (a private temporary folder) until ``attach``."""

    def __init__(self, cprofile_steps: int, pyspy_hz: int, warmup_steps: int, folder: Path) -> None:
        self.cprofile_steps, self.pyspy_hz = cprofile_steps, pyspy_hz
        self.first_step = max(1, warmup_steps)  # step 0 begins before the hooks see any boundary
        self.folder = folder
        self.spy: PySpy | None = None
        self.pyspy: Recorded | None = None

    def environment(self) -> dict[str, str]:
        """What the script's processes need in their environment (nothing when cProfile is off)."""
        if not self.cprofile_steps:
            return {}
        self.folder.mkdir(parents=True, exist_ok=True)
        return {CPROFILE_ENV: json.dumps({"first_step": self.first_step, "steps": self.cprofile_steps,
                                          "folder": str(self.folder)})}

    def start(self, pid: int) -> None:
        """py-spy on ``pid`` and its subprocesses, if asked for."""
        if self.pyspy_hz:
            self.spy = PySpy(self.pyspy_hz).start(pid)

    def stop(self) -> None:
        """py-spy stopped (the script has ended); its file or the reason there is none kept for ``attach``."""
        if self.spy is not None:
            self.pyspy, self.spy = self.spy.stop(), None

    def attach(self, run: Run) -> None:
        """The code-level view's raw records put into ``run`` (see module docstring); in a job, each rank's run
        gets its own window and workers, and the job's run (its median rank's records) the median rank's."""
        self.stop()
        if not (self.cprofile_steps or self.pyspy is not None):
            return
        pid = run.info.script.started_pid if run.info.script is not None else None
        for rank_run in run.ranks:
            rank = rank_run.info.rank or RankInfo()
            # py-spy recorded the whole process tree: every rank is in its one file, kept in the job's folder
            _put(rank_run, self._recorded(rank.pid, rank.rank, self.pyspy), files_of=("cprofile",))
        median = run.info.job.median_rank if run.info.job is not None else None
        _put(run, self._recorded(pid, median, self.pyspy), files_of=("cprofile", "pyspy"))
        others = [p for p in other_profiles(self.folder, pid)
                  if p not in {r.info.rank.pid if r.info.rank is not None else None for r in run.ranks}]
        if self.cprofile_steps and others:
            run.meta["notes"].append(
                f"cProfile: the run's steps are pid {pid}'s, and so is its code-level view; {len(others)} other "
                f"process(es) of the command profiled a window too (pids {', '.join(map(str, others))}), not kept")

    def _recorded(self, pid: Any, rank: Any, pyspy: Recorded | None) -> dict[str, Recorded]:
        recorded: dict[str, Recorded] = {}
        if pyspy is not None:
            recorded["pyspy"] = pyspy
        if self.cprofile_steps:
            recorded["cprofile"] = collect(self.folder, int(pid) if pid is not None else None, self.first_step,
                                           self.cprofile_steps, rank)
        return recorded


def _put(run: Run, recorded: dict[str, Recorded], *, files_of: tuple[str, ...]) -> None:
    """``recorded`` as a scenario run holds it: the functions table, run.json's code_profile, absences, and the
    files of the tools in ``files_of`` (a rank's run: its own dumps; py-spy's one file stays the job's)."""
    if not recorded:
        return
    run.functions = pd.DataFrame([row for r in recorded.values() for row in r.rows], columns=FUNCTION_COLUMNS)
    for name, r in recorded.items():
        if name in files_of:
            run.attachments.update(r.files)
        run.meta["absences"].update(r.absences)
    run.meta["code_profile"] = {name: r.meta for name, r in recorded.items()}


def other_profiles(folder: Path, pid: Any) -> list[int]:
    """The pids, besides ``pid``, whose window left a dump in ``folder``."""
    pids = [int(p.stem.split("-", 1)[1]) for p in folder.glob("main-*.prof") if p.stem.split("-", 1)[1].isdigit()]
    return sorted(p for p in pids if p != pid)


def collect(folder: Path, pid: int | None, first_step: int, steps: int, rank: int | None = None) -> Recorded:
    """What process ``pid`` and its DataLoader workers left in ``folder``: ``functions`` rows, dumps, run.json's
    ``code_profile.cprofile`` and absences (the same keys and words as ``measure.codeprofile.CodeProfile``)."""
    out = Recorded()
    window: dict[str, Any] = {"first_step": first_step, "steps": steps, "profiled_steps": 0}
    out.meta = {"window": window, "files": {}, "process": {"pid": pid, "rank": rank}}
    if pid is None:
        out.absences["cprofile"] = "no process of the command trained under the hooks: nothing to profile"
        out.meta["workers"] = {"absent": out.absences["cprofile"]}
        return out
    prof, record_name = main_files(pid)
    record_path = folder / record_name
    record = json.loads(record_path.read_text()) if record_path.is_file() else None
    if record is not None:
        window["profiled_steps"] = int(record.get("profiled_steps") or 0)
    if record is None:
        out.absences["cprofile"] = (f"the training process (pid {pid}) left no profile: it ended without taking "
                                    f"pipeprof's hooks back (killed by a signal, or os._exit)")
    elif record.get("refused"):
        out.absences["cprofile"] = f"cProfile could not be enabled in the training process: {record['refused']}"
    elif not (folder / prof).is_file():
        out.absences["cprofile"] = (f"training ended before the profiled window began (step {first_step}; "
                                    f"{record.get('steps_ended', 0)} steps ended)")
    else:
        content = (folder / prof).read_bytes()
        stats = dict(marshal.loads(content))
        out.rows += stats_rows(stats, MAIN)
        out.files[MAIN_FILE] = content
        out.meta["files"][MAIN] = MAIN_FILE
    out.meta["workers"] = _workers(workers_folder(folder, pid), out)
    return out


def _workers(folder: Path, out: Recorded) -> dict[str, Any]:
    if not folder.is_dir():
        return {"absent": "no DataLoader worker process started (num_workers = 0: batches are made in the training "
                          "process, so the loading code is in its table)"}
    stats, started, readable = read_worker_dumps(folder)
    info: dict[str, Any] = {"profiled": "whole life", "processes_started": started, "processes_profiled": readable}
    if readable < started:
        out.absences["cprofile_workers"] = (f"{started - readable} of {started} worker processes left no "
                                            f"profile (killed or crashed before a normal exit)")
    if not stats:
        info["absent"] = "no worker process left a profile" if started else "no worker process started while profiling"
        return info
    out.rows += stats_rows(stats, WORKERS)
    out.files[WORKERS_FILE] = marshal.dumps(stats)
    out.meta["files"][WORKERS] = WORKERS_FILE
    return info
