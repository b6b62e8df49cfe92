"""cProfile in the training process (a window of steps) and in the DataLoader workers (their whole life).

**Training process.** The training loop calls ``CodeProfile.before_step(i)``
before step ``i`` begins (before the step timer's ``begin``). The profiler is
enabled before step ``first_step`` (the first counted step) and disabled
before step ``first_step + steps``, so the window is exactly the steps
``[first_step, first_step + steps)``: enabling lands in the last warm-up
step, disabling in the last step of the window. Only the thread that trains
is profiled (not the sampler thread, not the pin-memory thread). The
profiler's cost is measured in the run itself, from the steps table (median
step inside the window against outside it: ``analysis.hotspots``).

**Workers.** ``WorkerProfiler`` is composed into the DataLoader's
``worker_init_fn`` (after any init function already there). Each worker
enables its own ``cProfile.Profile`` when it starts and dumps its stats into
a private folder when it exits. A DataLoader worker is a ``multiprocessing``
child, which leaves through ``os._exit``: ``atexit`` handlers do not run
there, but ``multiprocessing.util.Finalize`` callbacks with an exit priority
do (``BaseProcess._bootstrap`` runs ``util._exit_function`` on a normal exit,
also after a KeyboardInterrupt, which the worker loop swallows). Workers are
profiled for their whole life — start-up, idle waits and all — so their
profiler's cost is in every step, not only in the window. Each worker also
leaves a marker when it starts, so a worker that was killed or crashed
(and left no dump) is counted and recorded, never a crash.

``CodeProfile.finish`` shuts the workers down first — the DataLoader keeps
persistent workers alive in its iterator — so that every dump is written
before it is read, merges the workers' dumps (non-persistent workers restart
every epoch), and returns the raw records: rows for ``functions.csv`` (one
per function and caller: ``run.FUNCTION_COLUMNS``) and the pstats dumps.
"""

from __future__ import annotations

import cProfile
import marshal
import os
import pstats
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.util import Finalize
from pathlib import Path
from typing import Any

MAIN, WORKERS = "main", "workers"
MAIN_FILE, WORKERS_FILE = "cprofile-main.prof", "cprofile-workers.prof"

# Finalizers with a higher priority run first: dump before the worker's queues are closed and joined.
_EXIT_PRIORITY = 100

# Window profilers enabled in this process. A worker forked while one is on
# inherits it; the child disables its copy at once (on Python 3.12+ an
# inherited, enabled profiler would even refuse the worker's own).
_ENABLED: set[Any] = set()


def _disable_inherited() -> None:
    for profiler in list(_ENABLED):
        profiler.disable()
    _ENABLED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disable_inherited)


Stats = dict  # pstats' raw table: (file, line, function) -> (cc, nc, tt, ct, {caller: (nc, cc, tt, ct)})


@dataclass
class Recorded:
    """What a code profiler leaves for the Run: functions.csv rows, files, run.json metadata, absences."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    absences: dict[str, str] = field(default_factory=dict)


class CProfileWindow:
    """cProfile enabled for steps ``[first_step, first_step + steps)`` of this thread (see module docstring)."""

    def __init__(self, first_step: int, steps: int, profiler_factory: Callable[[], Any] = cProfile.Profile) -> None:
        self.first_step, self.steps = first_step, steps
        self.profiler = profiler_factory()
        self.profiled_steps = 0
        self.refused: str | None = None  # why the profiler could not be enabled (another profiler active)
        self._on = False

    def before_step(self, i: int) -> None:
        if i == self.first_step and self.steps > 0 and self.refused is None:
            try:
                self.profiler.enable()
            except ValueError as e:  # Python 3.12+: "Another profiling tool is already active"
                self.refused = " ".join(str(e).split()) or type(e).__name__
            else:
                self._on = True
                _ENABLED.add(self.profiler)
        elif i == self.first_step + self.steps:
            self.close()
        if self._on:
            self.profiled_steps += 1

    def close(self) -> None:
        if self._on:
            self.profiler.disable()
            _ENABLED.discard(self.profiler)
            self._on = False

    def stats(self) -> Stats:
        self.close()
        self.profiler.create_stats()
        return dict(self.profiler.stats)


class WorkerProfiler:
    """A DataLoader ``worker_init_fn``: profile this worker until it exits, then dump (picklable, for spawn)."""

    def __init__(self, folder: str, previous: Callable[[int], None] | None = None) -> None:
        self.folder = folder
        self.previous = previous

    def __call__(self, worker_id: int) -> None:
        tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        Path(self.folder, f"started-{tag}").touch()
        profiler = cProfile.Profile()
        Finalize(None, _dump, args=(profiler, os.path.join(self.folder, f"worker-{tag}.prof")),
                 exitpriority=_EXIT_PRIORITY)
        profiler.enable()
        if self.previous is not None:
            self.previous(worker_id)


def _dump(profiler: cProfile.Profile, path: str) -> None:
    profiler.disable()
    profiler.create_stats()
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        marshal.dump(profiler.stats, f)
    os.replace(tmp, path)  # a worker killed mid-write leaves no half dump that looks whole


def shutdown_workers(batches: Any) -> None:
    """Stop a DataLoader's persistent workers (kept alive in ``_iterator``), so they exit and dump."""
    iterator = getattr(batches, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        batches._iterator = None
        iterator._shutdown_workers()  # joins the workers (torch gives each 5 s, then terminates it)


def read_worker_dumps(folder: str | Path) -> tuple[Stats, int, int]:
    """The workers' dumps in ``folder`` merged, with how many workers started and how many left a readable dump."""
    folder = Path(folder)
    started = len(list(folder.glob("started-*")))
    merged = pstats.Stats()
    readable = 0
    for path in sorted(folder.glob("worker-*.prof")):
        try:
            merged.add(str(path))
        except (OSError, EOFError, ValueError, TypeError):
            continue  # unreadable: counted as missing below
        readable += 1
    # typeshed's pstats.Stats leaves out the raw table every Stats holds (cProfile.Profile's has it).
    return dict(merged.stats), started, readable  # type: ignore[attr-defined]


def stats_rows(stats: Stats, process: str) -> list[dict[str, Any]]:
    """pstats' raw table as ``run.FUNCTION_COLUMNS`` rows: one per function and caller.

    Calls made when no caller was on the profiler's stack (from a frame
    entered before profiling began) go to one more row with an empty caller,
    so a function's totals are the sums over its rows (``cumtime_s``: over
    rows whose caller is another function; a recursive call's time is
    already in the outer call's).
    """
    rows = []
    for (file, line, name), (cc, nc, tt, ct, callers) in stats.items():
        base = {"process": process, "file": file, "line": line, "function": name}
        edge_calls = edge_primitive = 0
        edge_tt = edge_ct = 0.0
        for (c_file, c_line, c_name), edge in callers.items():
            e_nc, e_cc, e_tt, e_ct = edge if isinstance(edge, tuple) else (edge, edge, 0.0, 0.0)
            recursive = (c_file, c_line, c_name) == (file, line, name)
            rows.append({**base, "caller_file": c_file, "caller_line": c_line, "caller_function": c_name,
                         "calls": e_nc, "primitive_calls": e_cc, "tottime_s": e_tt,
                         "cumtime_s": 0.0 if recursive else e_ct})
            edge_calls, edge_primitive = edge_calls + e_nc, edge_primitive + e_cc
            edge_tt += e_tt
            edge_ct += 0.0 if recursive else e_ct
        rest_calls, rest_tt = nc - edge_calls, tt - edge_tt
        if not callers or rest_calls > 0 or rest_tt > 1e-9:
            rows.append({**base, "caller_file": None, "caller_line": None, "caller_function": None,
                         "calls": max(0, rest_calls), "primitive_calls": max(0, cc - edge_primitive),
                         "tottime_s": max(0.0, rest_tt), "cumtime_s": max(0.0, ct - edge_ct)})
    return rows


def _no_workers_reason(batches: Any) -> str | None:
    from torch.utils.data import DataLoader  # here, not at the top: reading a run folder never imports torch

    if not isinstance(batches, DataLoader):
        return "no DataLoader: batches are taken on the device, so there are no workers to profile"
    if batches.num_workers == 0:
        return ("num_workers = 0: no workers; batches are made in the training process, "
                "so the loading code is in its table")
    return None


class CodeProfile:
    """cProfile for a run: the window in the training process, and the DataLoader's workers."""

    def __init__(self, first_step: int, steps: int, batches: Any = None, *,
                 profiler_factory: Callable[[], Any] = cProfile.Profile) -> None:
        self.window = CProfileWindow(first_step, steps, profiler_factory)
        self.batches = batches
        self.no_workers = _no_workers_reason(batches)
        self._folder: str | None = None
        self._previous_init = None
        if self.no_workers is None:
            self._folder = tempfile.mkdtemp(prefix="pipeprof-cprofile-")
            self._previous_init = batches.worker_init_fn
            batches.worker_init_fn = WorkerProfiler(self._folder, self._previous_init)

    def before_step(self, i: int) -> None:
        self.window.before_step(i)

    def finish(self) -> Recorded:
        """Stop profiling, shut the workers down, and collect everything (call once, after training)."""
        out = Recorded()
        main = self.window.stats()
        window = {"first_step": self.window.first_step, "steps": self.window.steps,
                  "profiled_steps": self.window.profiled_steps}
        out.meta = {"window": window, "files": {}}
        if self.window.refused:
            out.absences["cprofile"] = f"cProfile could not be enabled in the training process: {self.window.refused}"
        elif not main:
            out.absences["cprofile"] = (f"training ended before the profiled window began "
                                        f"(step {self.window.first_step})")
        else:
            out.rows += stats_rows(main, MAIN)
            out.files[MAIN_FILE] = marshal.dumps(main)
            out.meta["files"][MAIN] = MAIN_FILE
        out.meta["workers"] = self._finish_workers(out)
        return out

    def _finish_workers(self, out: Recorded) -> dict[str, Any]:
        if self._folder is None:
            return {"absent": self.no_workers}
        try:
            shutdown_workers(self.batches)
            stats, started, readable = read_worker_dumps(self._folder)
        finally:
            self.batches.worker_init_fn = self._previous_init
            shutil.rmtree(self._folder, ignore_errors=True)
        info: dict[str, Any] = {"profiled": "whole life", "processes_started": started,
                                "processes_profiled": readable}
        if readable < started:
            out.absences["cprofile_workers"] = (f"{started - readable} of {started} worker processes left no "
                                                f"profile (killed or crashed before a normal exit)")
        if not stats:
            info["absent"] = ("no worker process left a profile" if started else
                              "no worker process started while profiling")
            return info
        out.rows += stats_rows(stats, WORKERS)
        out.files[WORKERS_FILE] = marshal.dumps(stats)
        out.meta["files"][WORKERS] = WORKERS_FILE
        return info
