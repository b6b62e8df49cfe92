"""The code-level view: where the profiled processes spent their time, by function and by kind of work.

Pure functions over a run's ``functions`` table (``run.FUNCTION_COLUMNS``: one
row per function and caller, from cProfile) and its steps; nothing here
profiles or renders. ``code_profile(run)`` is ``summary.json``'s
``code_profile`` as its typed records (``analysis.code_view``).

**Groups.** Self time (``tottime_s``: time in a function itself, not in the
functions it called, so the groups are disjoint and add up to the profiled
time) is put in one of five groups:

* ``loading`` — making and receiving batches: ``torch/utils/data`` (the
  DataLoader, fetchers, collate), ``torch/multiprocessing`` and
  ``torch/serialization.py`` (rebuilding batches sent by workers),
  ``pipeprof/storage`` and the timed dataset wrapper
  (``pipeprof/measure/loading.py``), ``torchvision/transforms``, ``/io``,
  ``/datasets``, PIL, numpy's file I/O (``npyio``, ``format``, ``memmap``);
* ``transfer`` — moving batches: ``torch/utils/data/_utils/pin_memory.py``,
  ``torch/cuda``, and the built-in tensor methods ``to``, ``copy_``,
  ``pin_memory``, ``cuda``;
* ``compute`` — ``pipeprof/workload`` (the model and the training step),
  ``torch/nn``, ``torch/autograd``, ``torch/optim``, ``torch/_dynamo``,
  ``torch/_inductor``, ``torch/_functorch``, and the rest of ``torch``
  (operator wrappers such as ``torch/functional.py``, ``torch/_ops.py``);
* ``waiting`` — blocked, not working: the built-ins that wait (a lock's
  ``acquire``, ``select``/``poll``, ``time.sleep``) when no code above
  decides otherwise. In the training process it is mostly the wait for the
  next batch; in a worker, idle time (its prefetch slots are full);
* ``other`` — everything else: the profiler's own bookkeeping
  (``pipeprof/`` outside the above), and code reached from nowhere known.

A function in none of the files above (a built-in such as
``{built-in method torch.stack}``, the standard library, numpy, your own
code) is *neutral*: its self time goes where it was called from. Row by row
(a row is one caller), the first rule that applies decides:

1. a built-in tensor-moving method (``to``, ``copy_``, ...) is ``transfer``;
2. a caller in one of the files above gives its group (``torch.stack``
   called by ``collate.py`` is loading, ``torch._C._nn.linear`` called by
   ``torch/nn`` is compute, ``time.sleep`` in the emulated slow storage is
   loading);
3. a waiting built-in is ``waiting``;
4. a neutral caller passes on its own mix of groups, found the same way from
   its callers and weighted by the cumulative time of each call edge (so
   ``posix.read`` under ``multiprocessing/connection.py`` under
   ``queues.py`` under the DataLoader is loading);
5. with no caller recorded (called from a frame entered before profiling
   began), in a cycle, or more than 200 callers up: in a worker that frame is the DataLoader's worker
   loop, so ``loading``; in the training process it is the training loop:
   ``next()`` (on the loader) is ``loading``, a built-in ``torch`` operation
   ``compute``, anything else ``other``.

In a DataLoader worker, which runs no model, what these rules call
``compute`` is ``loading``: an ``nn.Module`` transform in a dataset
(``torch/nn``) or a tensor operation in ``__getitem__`` is making a sample.

A function shown in a top list carries the group that got most of its self time.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipeprof.analysis.code_view import CodeView, CProfileView, ProfiledProcess, PySpyView, StepCost, TopFunction
from pipeprof.analysis.thresholds import MIN_STEPS_TO_COMPARE
from pipeprof.numbers import finite
from pipeprof.run_folder import Run
from pipeprof.run_meta import JsonObject, as_object

LOADING, TRANSFER, COMPUTE, WAITING, OTHER = "loading", "transfer", "compute", "waiting", "other"
GROUPS = (LOADING, TRANSFER, COMPUTE, WAITING, OTHER)
PROCESSES = ("main", "workers")
TOP_FUNCTIONS = 15

NEUTRAL = None  # a file rule that sends a function's time to its callers

# (path fragment, group), first match wins; paths are compared with "/" separators.
FILE_RULES: tuple[tuple[str, str | None], ...] = (
    ("torch/utils/data/_utils/pin_memory.py", TRANSFER),
    ("torch/cuda/", TRANSFER),
    ("torch/utils/data/", LOADING),
    ("torch/multiprocessing/", LOADING),
    ("torch/serialization.py", LOADING),
    ("pipeprof/storage/", LOADING),
    ("pipeprof/measure/loading.py", LOADING),
    ("torchvision/transforms/", LOADING),
    ("torchvision/io/", LOADING),
    ("torchvision/datasets/", LOADING),
    ("/PIL/", LOADING),
    ("numpy/lib/npyio.py", LOADING),
    ("numpy/lib/_npyio_impl.py", LOADING),
    ("numpy/lib/format.py", LOADING),
    ("numpy/lib/_format_impl.py", LOADING),
    ("numpy/core/memmap.py", LOADING),
    ("numpy/_core/memmap.py", LOADING),
    ("pipeprof/workload/", COMPUTE),
    ("torch/nn/", COMPUTE),
    ("torch/autograd/", COMPUTE),
    ("torch/optim/", COMPUTE),
    ("torch/_dynamo/", COMPUTE),
    ("torch/_inductor/", COMPUTE),
    ("torch/_functorch/", COMPUTE),
    # Shared by both sides (Tensor.backward, and pickling tensors for workers): by caller.
    ("torch/_tensor.py", NEUTRAL),
    ("torch/storage.py", NEUTRAL),
    ("torch/_utils.py", NEUTRAL),
    ("torch/", COMPUTE),
    ("pipeprof/", OTHER),
)

_TRANSFER_BUILTIN = re.compile(r"^<method '(to|copy_|pin_memory|cuda|_to_copy)' of 'torch\._C\.|torch\._C\._cuda|"
                               r"torch\.cuda\.")
_WAITING_BUILTIN = re.compile(r"'acquire' of '_thread\.|time\.sleep>|select\.select>|of 'select\.|posix\.waitpid>")
_TORCH_BUILTIN = re.compile(r"torch\.|TensorBase|_VariableFunctions|_EngineBase")

Key = tuple[str, int, str]
_MAX_DEPTH = 200  # callers followed up a chain before giving up (each level is two Python frames)

# What a run cannot measure about itself (py-spy samples all of it; the workers'
# profiler runs in every step), measured side by side by benchmarks/codeprofile.py
# (docs/code-level.md): throughput with the profiler over without it.
_BENCH = "scenarios/quick.toml with 2 workers on 2 cores, 470 steps, medians of 5-6 repeats"
CPROFILE_OVERHEAD_NOTE = (f"--cprofile 50 as a whole, the workers' profiler included: 0.83-0.90 of the throughput "
                          f"without it ({_BENCH}; benchmarks/codeprofile.py)")
PYSPY_OVERHEAD_NOTE = (f"20 Hz: 0.91-0.92 of the throughput without it, 100 Hz: 0.75-0.83 ({_BENCH}; "
                       f"benchmarks/codeprofile.py)")


def _is_builtin(file: str) -> bool:
    return file == "~" or file.startswith("<")


def file_group(file: Any) -> str | None:
    """The group a source file decides by itself, or None (neutral or unknown)."""
    if not isinstance(file, str) or _is_builtin(file):
        return None
    path = file.replace("\\", "/")
    for fragment, group in FILE_RULES:
        if fragment in path:
            return group
    return None


def _fallback(key: Key, process: str) -> str:
    if process == "workers":
        return LOADING
    if _is_builtin(key[0]):
        if key[2] == "<built-in method builtins.next>":
            return LOADING
        if _TORCH_BUILTIN.search(key[2]):
            return COMPUTE
    return OTHER


@dataclass(frozen=True)
class _Edge:
    """One row of the functions table: a function (``key``: file, line, name) as called from one caller (None:
    none recorded), with its calls and seconds (self and cumulative)."""

    key: Key
    caller: Key | None
    calls: float
    tottime_s: float
    cumtime_s: float


class _Resolver:
    """The group mix of every function of one process's rows (rules in the module docstring)."""

    def __init__(self, rows: list[_Edge], process: str) -> None:
        self.process = process
        self.edges: dict[Key, list[_Edge]] = defaultdict(list)
        for row in rows:
            self.edges[row.key].append(row)
        self.memo: dict[Key, dict[str, float]] = {}
        self.active: set[Key] = set()

    def row_mix(self, row: _Edge) -> dict[str, float]:
        mix = self._row_mix(row)
        if self.process == "workers" and COMPUTE in mix:  # a DataLoader worker runs no model: all is loading
            mix = dict(mix)
            mix[LOADING] = mix.get(LOADING, 0.0) + mix.pop(COMPUTE)
        return mix

    def _row_mix(self, row: _Edge) -> dict[str, float]:
        key = row.key
        own = file_group(key[0])
        if own is not None:
            return {own: 1.0}
        builtin = _is_builtin(key[0])
        if builtin and _TRANSFER_BUILTIN.search(key[2]):
            return {TRANSFER: 1.0}
        caller = row.caller
        by_caller = file_group(caller[0]) if caller else None
        if by_caller is not None:
            return {by_caller: 1.0}
        if builtin and _WAITING_BUILTIN.search(key[2]):
            return {WAITING: 1.0}
        if caller is None:
            return {_fallback(key, self.process): 1.0}
        return self.mix(caller)

    def mix(self, key: Key) -> dict[str, float]:
        """How ``key``'s time divides among the groups, over all its callers."""
        own = file_group(key[0])
        if own is not None:
            return {LOADING if own == COMPUTE and self.process == "workers" else own: 1.0}
        if key in self.memo:
            return self.memo[key]
        rows = self.edges.get(key)
        if not rows or key in self.active or len(self.active) > _MAX_DEPTH:
            return {_fallback(key, self.process): 1.0}
        self.active.add(key)
        weights = [max(r.cumtime_s, r.tottime_s, 0.0) for r in rows]
        if sum(weights) <= 0:
            weights = [1.0] * len(rows)
        total: dict[str, float] = defaultdict(float)
        for row, weight in zip(rows, weights):
            for group, share in self.row_mix(row).items():
                total[group] += weight * share
        self.active.discard(key)
        norm = sum(total.values())
        result = {g: v / norm for g, v in total.items()}
        self.memo[key] = result
        return result


def _clean(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _edge(row: Mapping[Hashable, Any]) -> _Edge:
    """A functions table row (``run_folder.FUNCTION_COLUMNS``) as an edge."""
    file = _clean(row.get("caller_file"))
    caller = None if file is None else (str(file), int(row["caller_line"]), str(row["caller_function"]))
    return _Edge(key=(str(row["file"]), int(row["line"]), str(row["function"])), caller=caller,
                 calls=float(row["calls"]), tottime_s=float(row["tottime_s"]), cumtime_s=float(row["cumtime_s"]))


def grouped_functions(functions: pd.DataFrame, process: str) -> pd.DataFrame:
    """One process's functions with their totals and self time per group, most self time first.

    Columns: ``file``, ``line``, ``function``, ``calls``, ``tottime_s``,
    ``cumtime_s``, one ``<group>_s`` per group (summing to ``tottime_s``) and
    ``group`` (the one with most of its self time).
    """
    columns = ["file", "line", "function", "calls", "tottime_s", "cumtime_s", *(f"{g}_s" for g in GROUPS), "group"]
    if functions is None or functions.empty:
        return pd.DataFrame(columns=columns)
    rows = [_edge(row) for row in functions.loc[functions["process"] == process].to_dict("records")]
    if not rows:
        return pd.DataFrame(columns=columns)
    resolver = _Resolver(rows, process)
    totals: dict[Key, dict[str, float]] = {}
    decided: dict[Key, dict[str, float]] = {}
    for row in rows:
        key = row.key
        t = totals.setdefault(key, {"calls": 0.0, "tottime_s": 0.0, "cumtime_s": 0.0,
                                    **{f"{g}_s": 0.0 for g in GROUPS}})
        votes = decided.setdefault(key, defaultdict(float))
        tottime_s = row.tottime_s
        t["calls"] += row.calls
        t["tottime_s"] += tottime_s
        t["cumtime_s"] += row.cumtime_s
        for group, share in resolver.row_mix(row).items():
            t[f"{group}_s"] += tottime_s * share
            votes[group] += share * (tottime_s + 1e-12)  # a function with no self time still gets a group
    df = pd.DataFrame([{"file": k[0], "line": k[1], "function": k[2], **v,
                        "group": max(decided[k].items(), key=lambda gv: gv[1])[0]} for k, v in totals.items()])
    df["calls"] = df["calls"].astype(int)
    return df.sort_values("tottime_s", ascending=False, kind="stable").reset_index(drop=True)[columns]


def group_fractions(grouped: pd.DataFrame) -> dict[str, float]:
    """Share of a process's profiled self time in each group (sums to 1; NaN when nothing was profiled)."""
    total_s = float(grouped["tottime_s"].sum()) if not grouped.empty else 0.0
    if total_s <= 0:
        return {g: math.nan for g in GROUPS}
    return {g: float(grouped[f"{g}_s"].sum()) / total_s for g in GROUPS}


def function_label(file: str, line: int, function: str) -> str:
    """pstats' name for a function, the path cut to its package: ``torch/nn/modules/linear.py:124(forward)``."""
    if file == "~":
        return "{" + function[1:-1] + "}" if function.startswith("<") and function.endswith(">") else function
    return f"{short_path(file)}:{line}({function})"


def short_path(file: str) -> str:
    """A source path from its package on (after site-packages, or from ``pipeprof/``), else the file name."""
    path = file.replace("\\", "/")
    if path.startswith("<"):  # generated code, e.g. a dataclass's __init__ in "<string>"
        return path
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    if "/pipeprof/" in path:
        return "pipeprof/" + path.rsplit("/pipeprof/", 1)[1]
    match = re.search(r"/lib/python\d+\.\d+/(.+)$", path)
    return match.group(1) if match else path.rsplit("/", 1)[-1]


def top_functions(grouped: pd.DataFrame, n: int = TOP_FUNCTIONS) -> list[TopFunction]:
    """The ``n`` functions with most self time, with their group and share of the process's self time."""
    total_s = float(grouped["tottime_s"].sum()) if not grouped.empty else 0.0
    return [TopFunction(function=function_label(r["file"], int(r["line"]), r["function"]), file=str(r["file"]),
                        line=int(r["line"]), name=str(r["function"]), group=str(r["group"]),
                        self_s=float(r["tottime_s"]), cum_s=float(r["cumtime_s"]), calls=int(r["calls"]),
                        share=float(r["tottime_s"]) / total_s if total_s > 0 else math.nan)
            for r in grouped.head(n).to_dict("records")]


def window_overhead(steps: pd.DataFrame, first_step: int, window_steps: int) -> StepCost:
    """cProfile's cost in the training process: median counted step inside the window over outside it.

    ``ratio`` > 1 means profiled steps were slower; ``slowdown_fraction`` =
    ratio - 1 (None where the steps outside took no time). Workers, profiled for their whole life, slow every
    step alike and are not in this ratio.
    """
    if steps is None or steps.empty:
        return StepCost(absent="no steps recorded")
    counted = steps.loc[~steps["warmup"].astype(bool)]
    inside = counted["step"].between(first_step, first_step + window_steps - 1)
    in_s = counted.loc[inside, "step_s"].to_numpy(dtype=float)
    out_s = counted.loc[~inside, "step_s"].to_numpy(dtype=float)
    if len(in_s) == 0:
        return StepCost(absent="no counted step fell inside the profiled window")
    if len(out_s) == 0:
        return StepCost(absent="every counted step was profiled: no unprofiled steps to compare with "
                               "(use fewer cprofile_steps than the run's counted steps)")
    if len(out_s) < MIN_STEPS_TO_COMPARE:
        return StepCost(absent=f"too few steps outside the window to compare: {len(out_s)} counted step(s) were not "
                               f"profiled (at least {MIN_STEPS_TO_COMPARE} needed; use fewer cprofile_steps, or more "
                               f"steps)", steps_in_window=int(len(in_s)), steps_outside=int(len(out_s)))
    median_in, median_out = float(np.median(in_s)), float(np.median(out_s))
    ratio = median_in / median_out if median_out > 0 else math.nan
    return StepCost(median_step_in_window_s=finite(median_in), median_step_outside_s=finite(median_out),
                    steps_in_window=int(len(in_s)), steps_outside=int(len(out_s)), ratio=finite(ratio),
                    slowdown_fraction=finite(ratio - 1))


def _process(grouped: pd.DataFrame, scope: str, workers: JsonObject | None = None) -> ProfiledProcess:
    """One process kind's record: its self time by group (a group with no share left out), in ``scope``; the
    workers' counts as run.json's ``workers`` recorded them."""
    recorded = workers or {}
    return ProfiledProcess(profiled_s=finite(float(grouped["tottime_s"].sum())), functions=int(len(grouped)),
                           groups={g: v for g, v in group_fractions(grouped).items() if finite(v) is not None},
                           scope=scope, processes_started=recorded.get("processes_started"),
                           processes_profiled=recorded.get("processes_profiled"))


def _cprofile(run: Run, recorded: JsonObject) -> CProfileView:
    """``code_profile.cprofile`` from the functions table and run.json's record of the window (``recorded``)."""
    window = as_object(recorded.get("window"))
    first, n = int(window.get("first_step") or 0), int(window.get("steps") or 0)
    absences = run.info.absences
    workers = as_object(recorded.get("workers"))
    processes: dict[str, ProfiledProcess] = {}
    top: dict[str, tuple[TopFunction, ...]] = {}
    for process in PROCESSES:
        grouped = grouped_functions(run.functions, process)
        if grouped.empty:
            reason = absences.get("cprofile") if process == "main" else workers.get("absent")
            processes[process] = ProfiledProcess(absent=str(reason or f"no {process} rows in functions.csv"))
            continue
        if process == "main":
            last = first + int(window.get("profiled_steps") or n) - 1
            scope = f"steps {first}-{last} of the training process (its training thread)"
            processes[process] = _process(grouped, scope)
        else:
            processes[process] = _process(grouped, "DataLoader workers, whole life, all merged", workers)
        top[process] = tuple(top_functions(grouped))
    if all(p.absent is not None for p in processes.values()):
        return CProfileView(absent=str(absences.get("cprofile") or "cProfile recorded nothing"), window=window)
    return CProfileView(window=window, overhead=window_overhead(run.steps, first, n), processes=processes, top=top,
                        files={str(k): str(v) for k, v in as_object(recorded.get("files")).items()},
                        overhead_note=CPROFILE_OVERHEAD_NOTE)


def _pyspy(recorded: JsonObject) -> PySpyView:
    """``code_profile.pyspy``: run.json's record of py-spy (``recorded``) as summary.json has it."""
    keys = ("rate_hz", "started", "file", "bytes", "samples", "profiles", "command", "cpu_s", "elapsed_s")
    out = {k: recorded[k] for k in keys if recorded.get(k) is not None}
    if out.get("cpu_s") is not None and out.get("elapsed_s"):
        out["cpu_fraction"] = out["cpu_s"] / out["elapsed_s"]  # share of one core py-spy itself kept busy
    out["overhead_note"] = PYSPY_OVERHEAD_NOTE
    if recorded.get("absent"):
        out = {"absent": str(recorded["absent"]), **{k: out[k] for k in ("rate_hz",) if k in out}}
    return PySpyView(recorded=out, file=out.get("file"), absent=out.get("absent"))


def code_profile(run: Run) -> CodeView:
    """summary.json's ``code_profile``: ``cprofile`` and ``pyspy``, each its results or its ``absent`` reason."""
    recorded = run.info.code_profile
    cprofile, pyspy = recorded.get("cprofile"), recorded.get("pyspy")
    return CodeView(
        cprofile=_cprofile(run, cprofile) if isinstance(cprofile, dict) else CProfileView(absent=_off(run, "cprofile")),
        pyspy=_pyspy(pyspy) if isinstance(pyspy, dict) else PySpyView(recorded={"absent": _off(run, "pyspy")},
                                                                     absent=_off(run, "pyspy")),
    )


def _off(run: Run, tool: str) -> str:
    """Why the code-level view of ``tool`` (``"cprofile"``, ``"pyspy"``) is absent, in words for the command that
    made the run: ``pipeprof profile --cprofile`` for a script, the scenario key for a scenario run."""
    if run.settings.kind == "script":
        flag = "--cprofile [STEPS]" if tool == "cprofile" else "--pyspy [HZ]"
        return f"off (pipeprof profile {flag} -- python train.py turns it on)"
    key = "profile.cprofile_steps" if tool == "cprofile" else "profile.pyspy_hz"
    return f"off ({key} = 0; pipeprof run --{tool} turns it on)"
