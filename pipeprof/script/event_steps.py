"""Steps of a user's own training script, from the events its instrumentation recorded.

Pure (numpy and pandas, no torch). ``pipeprof.script.hooks`` records, in
the script's process, raw events with host times (``time.perf_counter``):

====  =========================================  ==========================================
kind  fields                                     when
====  =========================================  ==========================================
L     loader, settings                           a DataLoader is iterated the first time
I     loader, t0, t1                             ``iter(loader)``: a pass begins
N     loader, t0, t1, samples, record,           ``next()`` returned a batch; ``ready``: batches
      ready|None                                 already waiting in the prefetch queue before it
                                                 (before the DataLoader's ``next()`` calls in it,
                                                 for a loader that fetches ahead: the fewest)
E     loader, t0, t1                             ``next()`` ended the pass (StopIteration)
H     as N, ready null                           a batch a DataLoader handed to another thread than the
                                                 loop's (a prefetch thread): the loader's busy time
C     t0, t1, bytes, device_s|None, overlapped   a batch tensor was copied (``.to``/``.cuda``);
                                                 overlapped 1: on a side stream, beside the compute
O     t                                          an optimizer step ended (global post-hook)
M     t                                          ``prof.step()``
B     t0, t1                                     a backward pass (``torch.autograd.backward``)
K     t0, t1, blocked_s                          blocked in collectives: a backward pass in a process
                                                 group (its off-CPU time less waiting for a core: DDP's
                                                 all-reduce wait) or a synchronous torch.distributed call
G     t, device_s                                on CUDA: an event recorded at host time ``t``
                                                 (that of the I/N/E/O/M/B it marks) completed at
                                                 ``device_s`` on the device's clock (from the first)
Y     t, allocated, reserved, peak_allocated,    on CUDA, at most every half second at a step end:
      peak_reserved (bytes)                      torch.cuda's memory on the training device, its
                                                 own peaks (never reset)
R     t, {rank, world_size, backend}             the process group, at a loader's first pass, the first
                                                 step end and the end
T     t, {at, torch_threads}                     torch's thread count, at the first step end / the end
W     loader                                     ``prof.wrap(loader)``: the training loader
F     loader, [{name, random}] | {absent}        its transform pipelines' leaves, in call order
Q     index, kind, name                          a timed transform / decode call first seen
P     loader, made_t0, index, calls, wall_s,     per batch and part: what the batch's samples spent
      cpu_s                                      in it (``made_t0``: its record's t_start)
S     t, {pid, argv, ...}                        the script started
D     t, {device, refused_in_graph_capture,      on CUDA, at the end: the training device ("cuda:1")
      unresolved}                                and its device events lost
X     t, how, detail                             the script ended (exit code / exception)
====  =========================================  ==========================================

``record`` = ``[worker, pid, t_start, t_end, fetch_s, prep_s, collate_s,
samples, core_wait_s]``, how the process that made the batch timed it (nine
nulls when the batch came without one): ``__getitem__``'s off-CPU time is
``fetch_s`` (storage, sleep) plus ``core_wait_s`` (runnable, waiting for a
core; null when the thread's run-queue wait could not be read). ``pipeprof.script.event_file`` reads the
event file into one table per kind.

**The loop's own batches.** A loop fed by no DataLoader on its thread (a
generator, a queue filled by a thread, a third-party loader: ``script.loop_feed``)
has its batches written as ``N`` events of a loader entry of its own (``feed``
"loop"): the wait from a step's end to the batch's first use, its samples, no
maker's record; evaluation passes seen between its steps are the ``I``/``E``
of another (``feed`` "loop evaluation"). A DataLoader iterated on another
thread (``H``) is listed with ``role`` "background" and its ``busy_s``: it
never counts as the loop's wait.

**Which loader trains.** Loaders given to ``prof.wrap``; otherwise each
step end and each backward pass is credited to the loader whose batch came
last before it, and every loader with credit trains (a loader whose batches
feed backward passes trains, whatever updates the weights: a hand-written
SGD is no ``torch.optim`` optimizer); with neither, the loader with the
most batches. The others are evaluation loaders (validation, test):
their passes, from ``iter()`` to the end of the pass, are taken out of the
steps they fall in and reported per loader, so a validation pass every
epoch does not make one huge training step.

**Where steps begin and end.** ``prof.step()`` marks if there are any, else
optimizer steps (an optimizer step with no training batch since the last
step end extends that step: several optimizers, one step), else the ends of
backward passes (``step_source`` "backward": the weights' update after one
counts in the next step), else training batches (a step from one ``next()``
to the next). Where a script has optimizer steps, a stretch of training
(from one training pass's ``iter()`` to the next) without any has its steps
end at its backward passes (``step_source`` "optimizer and backward": a fit
by hand beside one with ``torch.optim``). Training batches that fall in no
step are counted, with where they fell (``ScriptSteps.uncounted``), so that
the run says so. A step ``[begin, end)``
holds:

* ``data_wait_s``: time blocked in ``iter()`` and ``next()`` of the training
  loaders, begun in the step (a pass's start spawns its workers: a real wait);
* ``h2d_s``: batch copies begun in the step outside evaluation passes (on
  CUDA, the copy's device time), not those issued on a side stream (a
  prefetcher's: they overlap the compute, which keeps its time);
* ``ready_batches``: the fewest batches waiting in the prefetch queue before
  any of the step's training batches (NaN: not observable). A step of one
  batch reads it once, as a scenario run does; a step of several
  (gradient accumulation: the loop asks for them back to back) is judged by
  its emptiest moment, 0 meaning the queue ran dry within the step. The
  training loaders' ``wait_by_position_s`` keeps the mean wait of a step's
  1st, 2nd, ... batch;
* other: from ``begin`` to the step's first wait — the script's work after
  the previous optimizer step (scheduler, logging, checkpoints);
* ``collective_wait_s``: time blocked in collectives (``K``) begun in the
  step outside evaluation passes, at most the step's compute: a rank of a
  data-parallel job waiting in DDP's all-reduce for the slowest rank;
* ``compute_s``: the rest — forward, backward, the optimizer, and whatever
  else the script does between receiving a batch and the optimizer step.

**Which clock.** Steps are cut, and every event is put in its step, on the
host clock. On CUDA the host runs ahead of the device until it synchronizes
(``loss.item()``), so host times would hand a step's compute to the next
step's wait; the hooks mark every ``iter()``/``next()`` and step end with a
device event (``G``), and a step whose times are all marked is timed on the
device's clock: its length is the device's time from the previous step end
to its own, its wait the time the device sat idle while the host was in
``next()`` (zero for a batch that came while the device was still busy),
its copies their device time (``C``), ``host_wait_s`` the host's time in
``next()``. ``ScriptSteps.timing`` says which clock timed each part.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from pipeprof.run_folder import LOADING_COLUMNS, STEP_COLUMNS, TRANSFORM_COLUMNS
from pipeprof.script.event_file import Events, read_events

__all__ = ["BACKGROUND", "EVAL", "OPTIMIZER_AND_BACKWARD", "TRAIN", "ScriptSteps", "Uncounted", "read_events", "script_steps"]

NAN = float("nan")
TRAIN, EVAL = "train", "eval"
BACKGROUND = "background"  # a DataLoader iterated on another thread than the loop's: its own busy time
LOOP = "loop"  # a loader entry's feed: the loop's own batches (script.loaders.LOOP)
OPTIMIZER_AND_BACKWARD = "optimizer and backward"  # step_source: a fit by hand beside one with torch.optim
ITER, END, NEXT = 1, 0, 2  # kinds of wait, in the order ties sort ("E" < "I" < "N")


@dataclass
class ScriptSteps:
    """Steps and loading records (``run.STEP_COLUMNS`` / ``LOADING_COLUMNS``), the loaders, and how steps were cut."""

    steps: pd.DataFrame
    loading: pd.DataFrame
    loaders: list[dict[str, Any]]
    step_source: str | None  # "prof.step", "optimizer", "optimizer and backward", "backward", "loader batches",
    # or None (no training loader)
    start: dict[str, Any] = field(default_factory=dict)  # the S event's fields (pid, argv, ...)
    end: dict[str, Any] | None = None  # the X event: {"how": "exit"|"exception", "detail": ...}
    cuda_copies: int = 0  # batch copies timed on a CUDA device
    threads: list[dict[str, Any]] = field(default_factory=list)  # T events: torch's threads while it trained
    rank: dict[str, Any] | None = None  # R: the process group as the process last saw it
    timing: dict[str, Any] = field(default_factory=lambda: step_timing(0, 0, 0, 0, False))  # run.json's timing
    device_memory: pd.DataFrame = field(default_factory=pd.DataFrame)  # Y: torch.cuda's memory, per window
    # issue 18: per batch taken in a step, its parts (run_folder.TRANSFORM_COLUMNS), and each loader's pipeline
    transforms: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=TRANSFORM_COLUMNS))
    transform_pipelines: dict[str, Any] = field(default_factory=dict)  # run.json's: "<loader>" -> leaves
    what_ifs: dict[str, Any] | None = None  # A: the what-if segments after --steps (script.segments)
    device: str | None = None  # D: the training device ("cuda:1"), when a batch went to CUDA
    worker_starts: list[dict[str, Any]] = field(default_factory=list)  # U: spawned workers' start-up marks
    uncounted: Uncounted | None = None  # training batches in no step, and why (None: every one was counted)


@dataclass(frozen=True)
class Uncounted:
    """Training batches that fall in no counted step: how many of how many, and why (``where``: "before" the
    first step, "between" steps, "after" the last step's end)."""

    batches: int
    of_batches: int
    where: tuple[str, ...]
    step_source: str | None


def uncounted_batches(train_nexts: pd.DataFrame, begins: np.ndarray, ends: np.ndarray,
                      source: str | None) -> Uncounted | None:
    """The training batches whose ``next()`` began in no step (None when there are none)."""
    if train_nexts.empty:
        return None
    t0 = train_nexts["t0_s"].to_numpy()
    outside = _which_step(t0, begins, ends) < 0
    if not outside.any():
        return None
    t = t0[outside]
    where = []
    if not len(begins) or (t < begins[0]).any():
        where.append("before")
    if len(begins) and ((t >= begins[0]) & (t < ends[-1])).any():
        where.append("between")
    if len(begins) and (t >= ends[-1]).any():
        where.append("after")
    return Uncounted(int(outside.sum()), len(t0), tuple(where), source)


def script_steps(events: Events | Iterable[list], t0_s: float, warmup_steps: int = 0) -> ScriptSteps:
    """Turn raw events into steps (see module docstring); times in the result are ``t - t0_s``."""
    ev = events if isinstance(events, Events) else Events.of(events)
    tables = ev.tables
    nexts = _by_start(tables["N"])
    waits = _waits(tables["I"], tables["E"], nexts)
    marks, opts = (np.sort(tables[k]["t_s"].to_numpy()) for k in ("M", "O"))
    backwards = np.sort(tables["B"]["t1_s"].to_numpy())
    source: str | None
    boundaries, source = (marks, "prof.step") if len(marks) else (opts, "optimizer") if len(opts) \
        else (backwards, "backward") if len(backwards) else (np.array([]), "loader batches")
    train = _training_loaders(ev.wrapped, nexts, np.union1d(boundaries, backwards))
    train_nexts, train_waits = _of_loaders(nexts, train), _of_loaders(waits, train)
    if source == "optimizer":  # a fit by hand beside one with torch.optim: its backward passes end its steps
        by_hand = backward_ends_without_optimizer(train_waits, opts, backwards)
        if len(by_hand):
            boundaries, source = np.union1d(opts, by_hand), OPTIMIZER_AND_BACKWARD
    loop_feeds = {n for n, info in ev.loaders.items() if info.get("feed") == LOOP}
    eval_spans = _eval_spans(waits, set(ev.loaders) - train - loop_feeds)
    if train_nexts.empty:
        begins, ends, source = np.array([]), np.array([]), None
    elif len(boundaries):
        begins, ends = _cut_at_ends(train_waits, train_nexts, boundaries,
                                    tables["E"][tables["E"]["loader"].isin(train)]["t1_s"].to_numpy())
    else:
        begins, ends = _cut_at_batches(train_waits, train_nexts, tables["E"])
    train_iters = np.sort(tables["I"]["t0_s"][tables["I"]["loader"].isin(train)].to_numpy())
    steps, timing = _step_rows(begins, ends, train_waits, train_nexts, tables["C"], train_iters, eval_spans,
                               t0_s, warmup_steps, tables["K"], DeviceTimes(tables["G"]))
    loading = _loading_rows(train_nexts, begins, ends, t0_s)
    summary = _loader_summaries(ev.loaders, train, nexts, waits, eval_spans, tables["H"])
    by_position = wait_by_position(train_nexts, begins, ends, warmup_steps) if len(begins) else None
    for loader in summary:  # the burst a step's batches make, on the loaders that trained
        loader["wait_by_position_s"] = by_position if loader["role"] == TRAIN else None
    cuda_copies = int(tables["C"]["device_s"].notna().sum())
    memory = tables["Y"].assign(t_s=tables["Y"]["t_s"] - t0_s)
    transforms = transform_rows(tables["P"], ev.part_names, nexts, begins, ends, train)
    pipelines = {str(n): leaves for n, leaves in sorted(ev.pipelines.items()) if leaves}
    device = None
    if ev.device is not None:
        device = str(ev.device.get("device")) if ev.device.get("device") else None
        lost = {k: int(ev.device.get(k) or 0) for k in ("refused_in_graph_capture", "unresolved")}
        if any(lost.values()):  # said: the steps they belong to were timed on the host clock
            timing = {**timing, "device_events_lost": lost}
    starts = [{k: (v - t0_s if k.endswith("_s") and v is not None else v) for k, v in row.items()}
              for row in ev.worker_starts]  # on the run's time axis, as the steps are
    return ScriptSteps(steps, loading, summary, source, ev.start, ev.end, cuda_copies, ev.threads, ev.rank,
                       timing, memory, transforms, pipelines, ev.what_ifs, device=device, worker_starts=starts,
                       uncounted=uncounted_batches(train_nexts, begins, ends, source))


def transform_rows(parts: pd.DataFrame, names: dict[int, tuple[str, str]], nexts: pd.DataFrame,
                   begins: np.ndarray, ends: np.ndarray, train: set[int] | None = None) -> pd.DataFrame:
    """``transforms.csv`` rows (``TRANSFORM_COLUMNS``): each ``P`` part of a batch taken in a step (a training
    loader's) or taken at all (an evaluation loader's, ``step`` -1 outside every step: a test pass after the
    last step), joined to its ``N`` by loader and maker's start, and one "batch" row per such batch: its
    samples, its ``__getitem__`` wall time (fetch + waiting for a core + prep) and CPU time (prep).
    ``train``: the training loaders (None: every loader counts as one)."""
    made = nexts[nexts["made_t0_s"].notna()]
    made = made.assign(step=_which_step(made["t0_s"].to_numpy(), begins, ends))
    evaluation = ~made["loader"].isin(train) if train is not None else np.zeros(len(made), dtype=bool)
    made = made[(made["step"] >= 0) | evaluation].drop_duplicates(["loader", "made_t0_s"])
    joined = parts.merge(made, on=["loader", "made_t0_s"], how="inner", suffixes=("", "_batch"))
    joined = joined[joined["index"].isin(list(names))]
    if joined.empty:
        return pd.DataFrame(columns=TRANSFORM_COLUMNS)
    kinds = joined["index"].map(lambda i: names[int(i)][0])
    rows = pd.DataFrame({
        "step": joined["step"].astype(int), "loader": joined["loader"].astype(int),
        "worker": joined["worker"].astype(int), "kind": kinds, "name": joined["index"].map(lambda i: names[int(i)][1]),
        "calls": joined["calls"].astype(int), "wall_s": joined["wall_s"],
        "cpu_s": joined["cpu_s"],
    })
    batches = made[made.set_index(["loader", "made_t0_s"]).index.isin(
        joined.set_index(["loader", "made_t0_s"]).index)]
    batch_rows = pd.DataFrame({
        "step": batches["step"].astype(int), "loader": batches["loader"].astype(int),
        "worker": batches["worker"].astype(int), "kind": "batch", "name": "",
        "calls": batches["made_samples"].astype(int),
        "wall_s": batches["fetch_s"] + batches["core_wait_s"].fillna(0.0) + batches["prep_s"],
        "cpu_s": batches["prep_s"],
    })
    out = pd.concat([rows, batch_rows], ignore_index=True)
    return out.sort_values(["step", "loader", "kind"], kind="stable", ignore_index=True)[TRANSFORM_COLUMNS]


def _by_start(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows by start time (as written, mostly: then no copy)."""
    if frame["t0_s"].is_monotonic_increasing:
        return frame
    return frame.sort_values("t0_s", kind="stable", ignore_index=True)


def _of_loaders(frame: pd.DataFrame, loaders: set[int]) -> pd.DataFrame:
    """The rows of these loaders (all of them, mostly: then no copy)."""
    mine = frame["loader"].isin(loaders)
    return frame if mine.all() else frame[mine].reset_index(drop=True)


def _waits(iters: pd.DataFrame, pass_ends: pd.DataFrame, nexts: pd.DataFrame) -> pd.DataFrame:
    """Every ``iter()`` and ``next()`` (loader, t0_s, t1_s, kind), by start time."""
    parts = [frame[["loader", "t0_s", "t1_s"]].assign(kind=kind)
             for frame, kind in ((iters, ITER), (pass_ends, END), (nexts, NEXT))]
    return _by_start(pd.concat(parts, ignore_index=True))


def _training_loaders(wrapped: list[int], nexts: pd.DataFrame, boundaries: np.ndarray) -> set[int]:
    if wrapped:
        return set(wrapped)
    if nexts.empty:
        return set()
    loader = nexts["loader"].to_numpy().astype(int)
    if not len(boundaries):
        numbers, counts = np.unique(loader, return_counts=True)
        return {int(numbers[np.argmax(counts)])}  # the busiest; the lowest number on a tie
    last = np.searchsorted(nexts["t1_s"].to_numpy(), boundaries, side="right") - 1
    return {int(n) for n in np.unique(loader[last[last >= 0]])}


def backward_ends_without_optimizer(train_waits: pd.DataFrame, opts: np.ndarray,
                                    backwards: np.ndarray) -> np.ndarray:
    """The ends of the backward passes that fall in a stretch of training with no optimizer step: a stretch
    runs from one training pass's ``iter()`` to the next one's, so a fit whose weights are updated by hand
    (d2l's ``param -= lr * param.grad`` under ``torch.no_grad()``) has its steps beside a fit with
    ``torch.optim``, while gradient accumulation (backward passes between optimizer steps, in one pass)
    keeps its optimizer steps."""
    iters = np.sort(train_waits["t0_s"][train_waits["kind"] == ITER].to_numpy())
    edges = np.r_[-np.inf, iters, np.inf]
    stretch_of_b = np.searchsorted(edges, backwards, side="right") - 1
    stretch_of_o = np.searchsorted(edges, opts, side="right") - 1
    return backwards[~np.isin(stretch_of_b, stretch_of_o)]


def _eval_spans(waits: pd.DataFrame, evaluation: set[int]) -> list[tuple[float, float, int]]:
    """(start, end, loader) of each pass of an evaluation loader: ``iter()`` to the pass's end or last batch."""
    spans = []
    for n in evaluation:
        mine = waits[waits["loader"] == n]
        order = np.lexsort((mine["t1_s"], mine["kind"], mine["t0_s"]))
        open_s = last_s = None
        for t0, kind, t1 in zip(*(mine[c].to_numpy()[order].tolist() for c in ("t0_s", "kind", "t1_s"))):
            if kind == ITER:
                if open_s is not None:
                    spans.append((open_s, last_s, n))
                open_s, last_s = t0, t1
            else:
                if open_s is None:  # next() on an iterator whose iter() came before profiling
                    open_s = t0
                last_s = t1
                if kind == END:
                    spans.append((open_s, last_s, n))
                    open_s = None
        if open_s is not None:
            spans.append((open_s, last_s, n))
    return sorted(spans)


def _cut_at_ends(train_waits: pd.DataFrame, train_nexts: pd.DataFrame, boundaries: np.ndarray,
                 pass_ends_t1: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Steps end at the boundaries; a boundary with no training batch since the previous one extends it. A
    training pass's end counts as a batch there (``pass_ends_t1``): a wrapper that holds one batch ahead (a
    prefetcher of the user's own) takes the pass's last batch in the step before, and its last step's wait
    holds only the end of the pass; in a plain loop a pass ends in a window that holds a batch anyway."""
    first = float(train_waits["t0_s"].iloc[0])
    batch_t1 = np.sort(np.r_[train_nexts["t1_s"].to_numpy(),
                             pass_ends_t1 if pass_ends_t1 is not None else np.empty(0)])
    kept = boundaries[boundaries >= first]
    batches_by = np.searchsorted(batch_t1, kept, side="right").tolist()  # batches received by each boundary
    ends: list[float] = []
    seen = int(np.searchsorted(batch_t1, first, side="left"))  # none (a first wait of zero counts: the loop's feed)
    for b, received in zip(kept.tolist(), batches_by):
        if received > seen:
            ends.append(b)
        elif ends:
            ends[-1] = b
        seen = received
    begins = [first] + ends[:-1]
    return np.array(begins[:len(ends)]), np.array(ends)


def _cut_at_batches(train_waits: pd.DataFrame, train_nexts: pd.DataFrame,
                    pass_ends: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """No step ends known: a step runs from one training batch's wait to the next one's (its pass's ``iter()``
    when that came right before it)."""
    calls = train_waits[train_waits["kind"] != END]
    kind, t0 = calls["kind"].to_numpy(), calls["t0_s"].to_numpy()
    after_iter = np.r_[False, kind[:-1] == ITER]
    starts = np.where(after_iter, np.r_[NAN, t0[:-1]], t0)[kind == NEXT]
    ends = starts[1:]
    last = train_nexts.iloc[-1]
    after = pass_ends["t0_s"][(pass_ends["loader"] == last["loader"]) & (pass_ends["t0_s"] >= last["t1_s"])]
    if len(after):  # the pass's end closes its last step; without one the last step's end is unknown
        ends = np.r_[ends, after.min()]
    return starts[:len(ends)], ends


def _which_step(t: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Index of the step ``[begin, end)`` holding each time, or -1."""
    if not len(begins) or not len(t):
        return np.full(len(t), -1, dtype=int)
    i = np.searchsorted(begins, t, side="right") - 1
    inside = (i >= 0) & (t < ends[np.clip(i, 0, None)])
    return np.where(inside, i, -1)


def _first_in_step(t: np.ndarray, values: np.ndarray, begins: np.ndarray, ends: np.ndarray,
                   default: np.ndarray) -> np.ndarray:
    """Per step, the value of the first of the (time-ordered) events inside it; ``default`` where none."""
    i = _which_step(t, begins, ends)
    inside = i >= 0
    steps, first = np.unique(i[inside], return_index=True)
    out = default.copy()
    out[steps] = values[inside][first]
    return out


def _least_in_step(t: np.ndarray, values: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per step, the smallest non-NaN value of the events inside it; NaN where none."""
    i = _which_step(t, begins, ends)
    ok = (i >= 0) & ~np.isnan(values)
    out = np.full(len(begins), np.inf)
    np.minimum.at(out, i[ok], values[ok])
    out[np.isinf(out)] = NAN
    return out


def wait_by_position(train_nexts: pd.DataFrame, begins: np.ndarray, ends: np.ndarray,
                     warmup_steps: int = 0) -> list[float] | None:
    """Mean ``next()`` wait, s, of a step's 1st, 2nd, ... training batch, over the counted steps (after
    ``warmup_steps``; all of them if none is left) holding the usual number of batches (the most common);
    None when steps hold one batch. A step of several batches (gradient accumulation) shows whether the
    loader keeps up with them back to back."""
    t0 = train_nexts["t0_s"].to_numpy()
    step = _which_step(t0, begins, ends)
    inside = step >= (warmup_steps if len(begins) > warmup_steps else 0)
    if not inside.any():
        return None
    step, wait = step[inside], (train_nexts["t1_s"].to_numpy() - t0)[inside]
    counts = np.bincount(step)
    sizes, how_often = np.unique(counts[counts > 0], return_counts=True)
    usual = int(sizes[np.argmax(how_often)])  # the smallest on a tie
    if usual < 2:
        return None
    position = np.arange(len(step)) - np.searchsorted(step, step, side="left")  # batches are by start time
    keep = counts[step] == usual
    sums = np.bincount(position[keep], weights=wait[keep], minlength=usual)
    return [float(x) for x in sums / np.bincount(position[keep], minlength=usual)]


def _inside_any(t: np.ndarray, spans: list[tuple[float, float, int]]) -> np.ndarray:
    """Whether each time lies in one of the closed spans."""
    if not spans:
        return np.zeros(len(t), dtype=bool)
    starts = np.array([a for a, _, _ in spans])  # sorted
    reach = np.maximum.accumulate(np.array([b for _, b, _ in spans]))
    i = np.searchsorted(starts, t, side="right") - 1
    return (i >= 0) & (t <= reach[np.clip(i, 0, None)])


class DeviceTimes:
    """Host time -> the device's time, from the ``G`` events: each marks the very host time of the event it
    belongs to, so a lookup is exact (NaN for a host time no device event marks: CUDA not yet initialized, a
    framework's look-ahead wait). perf_counter never reads the same twice; where marks share a host time (a fake
    clock) the first is taken."""

    def __init__(self, marks: pd.DataFrame) -> None:
        order = np.argsort(marks["t_s"].to_numpy(), kind="stable")
        self.host_s = marks["t_s"].to_numpy()[order]
        self.device_s = marks["device_s"].to_numpy()[order]

    def __bool__(self) -> bool:
        return bool(len(self.host_s))

    def at(self, t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=float)
        if not len(self.host_s):
            return np.full(t.shape, NAN)
        i = np.clip(np.searchsorted(self.host_s, t), 0, len(self.host_s) - 1)
        return np.where(self.host_s[i] == t, self.device_s[i], NAN)


@dataclass
class _Clocked:
    """A step's spans on one clock: the wait, what lies outside training (evaluation passes), other."""

    wait_s: np.ndarray
    step_s: np.ndarray
    other_s: np.ndarray


def _spans(at: Any, begins: np.ndarray, ends: np.ndarray, wait_step: np.ndarray, wait_t0: np.ndarray,
           wait_t1: np.ndarray, first_wait: np.ndarray, eval_spans: list[tuple[float, float, int]]) -> _Clocked:
    """The step's wait, length (less evaluation) and other, with every host time ``t`` read as ``at(t)``: the
    identity for the host clock, ``DeviceTimes.at`` for the device's (a span is then the device's time between
    the events that mark its ends). Which step a time falls in is always decided on the host clock."""
    n = len(begins)
    ok = wait_step >= 0
    wait_s = np.bincount(wait_step[ok], weights=(at(wait_t1) - at(wait_t0))[ok], minlength=n)
    excluded, excluded_before = np.zeros(n), np.zeros(n)
    def span_s(lo: float, hi: float) -> float:
        return max(0.0, float(np.diff(at(np.array([lo, hi])))[0])) if hi > lo else 0.0

    for a, b, _ in eval_spans:
        for i in range(max(0, int(np.searchsorted(ends, a, side="right"))), min(n, int(np.searchsorted(begins, b)))):
            lo = max(a, begins[i])
            excluded[i] += span_s(lo, min(b, ends[i]))
            excluded_before[i] += span_s(lo, min(b, first_wait[i]))
    return _Clocked(wait_s, at(ends) - at(begins) - excluded,
                    np.clip(at(first_wait) - at(begins) - excluded_before, 0.0, None))


def _host(t: np.ndarray) -> np.ndarray:
    return np.asarray(t, dtype=float)


def _step_rows(begins: np.ndarray, ends: np.ndarray, train_waits: pd.DataFrame, train_nexts: pd.DataFrame,
               copies: pd.DataFrame, train_iters: np.ndarray, eval_spans: list[tuple[float, float, int]],
               t0_s: float, warmup_steps: int, collectives: pd.DataFrame | None = None,
               device: DeviceTimes | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The steps table, and which clock timed which part (``timing``, see ``step_timing``)."""
    n = len(begins)
    if not n:
        return pd.DataFrame(columns=STEP_COLUMNS), step_timing(0, 0, 0, 0, bool(device))

    def sums(t: np.ndarray, values: np.ndarray) -> np.ndarray:
        i = _which_step(t, begins, ends)
        ok = i >= 0
        return np.bincount(i[ok], weights=values[ok], minlength=n)

    wait_t0, wait_t1 = train_waits["t0_s"].to_numpy(), train_waits["t1_s"].to_numpy()
    wait_step = _which_step(wait_t0, begins, ends)
    batch_t0 = train_nexts["t0_s"].to_numpy()
    samples = sums(batch_t0, train_nexts["samples"].to_numpy())
    first_wait = _first_in_step(wait_t0, wait_t0, begins, ends, begins)
    host = _spans(_host, begins, ends, wait_step, wait_t0, wait_t1, first_wait, eval_spans)
    wait_s, step_s, other_s = host.wait_s, host.step_s, host.other_s
    on_device = np.zeros(n, dtype=bool)
    if device:
        # A step is timed on the device's clock when every time its spans are made of has a device event.
        # (a time without one reads NaN, and so does every sum it is in: its step's wait, length or other)
        dev = _spans(device.at, begins, ends, wait_step, wait_t0, wait_t1, first_wait, eval_spans)
        on_device = np.isfinite(dev.step_s) & np.isfinite(dev.other_s) & np.isfinite(dev.wait_s)
        wait_s = np.where(on_device, dev.wait_s, wait_s)
        step_s = np.where(on_device, np.clip(dev.step_s, 0.0, None), step_s)
        other_s = np.where(on_device, dev.other_s, other_s)
    copy_t0 = copies["t0_s"].to_numpy()
    outside = ~_inside_any(copy_t0, eval_spans)
    device_copy = copies["device_s"].notna().to_numpy()
    copy_s = copies["device_s"].fillna(copies["t1_s"] - copies["t0_s"]).to_numpy()
    # A copy on a side stream (a prefetcher's) runs beside the compute: no part of the step's serial time.
    serial = outside & (copies["overlapped"].fillna(0).to_numpy() == 0)
    h2d_s = sums(copy_t0[serial], copy_s[serial])
    busy_s = np.clip(step_s - wait_s - h2d_s - other_s, 0.0, None)
    if collectives is not None and len(collectives):
        k_t0 = collectives["t0_s"].to_numpy()
        k_outside = ~_inside_any(k_t0, eval_spans)
        collective_s = np.minimum(sums(k_t0[k_outside], collectives["blocked_s"].to_numpy()[k_outside]), busy_s)
    else:
        collective_s = np.zeros(n)
    compute_s = busy_s - collective_s
    # A step's epoch is the pass its first batch came from (its wait may begin with the last pass's end).
    first_batch = _first_in_step(batch_t0, batch_t0, begins, ends, begins)
    # The prefetch queue at its lowest before any of the step's batches: a step of several batches
    # (gradient accumulation) asks for them back to back, and the last ones find what the first left.
    ready = _least_in_step(batch_t0, train_nexts["ready"].to_numpy(dtype=float), begins, ends)
    epoch = np.clip(np.searchsorted(train_iters, first_batch, side="right") - 1, 0, None) \
        if len(train_iters) else np.zeros(n, dtype=int)
    rows = pd.DataFrame({
        "step": np.arange(n),
        "epoch": epoch.astype(int),
        "warmup": np.arange(n) < warmup_steps,
        "t_start_s": begins - t0_s,
        "data_wait_s": wait_s,
        "h2d_s": h2d_s,
        "compute_s": compute_s,
        "step_s": step_s,
        "host_wait_s": host.wait_s,
        "samples": samples.astype(int),
        "loss": NAN,  # the script's loss is its own business
        "correct": NAN,
        "ready_batches": ready,
        "collective_wait_s": collective_s,
    }, columns=STEP_COLUMNS)
    copy_step = _which_step(copy_t0, begins, ends)
    counted = np.arange(n) >= (warmup_steps if n > warmup_steps else 0)
    # the copies of counted steps (the first copy to CUDA, in the warm-up, names the device: no event before it)
    copies_in = serial & (copy_step >= 0) & counted[np.clip(copy_step, 0, None)]
    timing = step_timing(int(counted.sum()), int((on_device & counted).sum()), int(copies_in.sum()),
                         int((copies_in & device_copy).sum()), bool(device))
    return rows, timing


HOST_ONLY = ("no CUDA event was recorded: the script did not initialize CUDA (it trained on the CPU), so the "
             "host clock is the truth")


def step_timing(counted: int, counted_on_device: int, copies: int, copies_on_device: int,
                marks: bool) -> dict[str, Any]:
    """run.json's ``timing``: the clock of each part (``data_wait``, ``h2d``, ``compute``) and of the whole
    (``method``: "cuda-events" when every counted step was timed on the device, "host-clock" when none was,
    "mixed" otherwise), and ``reason``: why not the device's, when not."""
    def clock_of(part_device: int, part_all: int) -> str | None:
        if not part_all:
            return None
        return "cuda-events" if part_device == part_all else "host-clock" if not part_device else "mixed"

    steps = clock_of(counted_on_device, counted) or ("cuda-events" if marks else "host-clock")
    reason = None
    if not marks:
        reason = HOST_ONLY
    elif steps != "cuda-events":
        reason = (f"{counted - counted_on_device} of {counted} counted steps have host times without a device "
                  f"event (CUDA was initialized after they began, or a framework's loader fetched their "
                  f"batches ahead): those are timed on the host clock, which on CUDA can hand the device's "
                  f"compute to the wait")
    return {"method": steps,
            "parts": {"data_wait": steps, "h2d": clock_of(copies_on_device, copies), "compute": steps},
            "reason": reason}


def _loading_rows(train_nexts: pd.DataFrame, begins: np.ndarray, ends: np.ndarray, t0_s: float) -> pd.DataFrame:
    step = _which_step(train_nexts["t0_s"].to_numpy(), begins, ends)
    keep = (train_nexts["made_samples"].notna() & (step >= 0)).to_numpy()
    made = {c: train_nexts[c].to_numpy()[keep] for c in train_nexts.columns}
    return pd.DataFrame({
        "batch": np.flatnonzero(keep),  # the batch's number among the training loader's batches
        "step": step[keep],
        "worker": made["worker"].astype(int),
        "pid": made["pid"].astype(int),
        "t_start_s": made["made_t0_s"] - t0_s,
        "t_end_s": made["made_t1_s"] - t0_s,
        "fetch_s": made["fetch_s"],
        "core_wait_s": made["core_wait_s"],
        "prep_s": made["prep_s"],
        "collate_s": made["collate_s"],
        "samples": made["made_samples"].astype(int),
        "nbytes": NAN,
        "fetch_max_s": NAN,
    }, columns=LOADING_COLUMNS)


def _loader_summaries(loaders: dict[int, dict], train: set[int], nexts: pd.DataFrame, waits: pd.DataFrame,
                      eval_spans: list[tuple[float, float, int]],
                      elsewhere: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """run.json's ``loaders``; ``elsewhere``: the ``H`` batches (taken on another thread than the loop's)."""
    out = []
    elsewhere = elsewhere if elsewhere is not None else nexts.iloc[:0]
    for n in sorted(set(loaders) | set(nexts["loader"].astype(int).tolist())):
        if loaders.get(n, {}).get("feed") == LOOP and n not in train:
            continue  # the loop's own feed that trained no step (a forward pass before training began)
        mine = nexts[nexts["loader"] == n]
        off = elsewhere[elsewhere["loader"] == n]
        if mine.empty and len(off):  # iterated on a thread of its own only: its batches and busy time
            info = dict(loaders.get(n, {"number": n, "name": f"loader{n}"}))
            made = off[off["made_samples"].notna()]
            made_samples = int(made["made_samples"].sum())
            info.update({"role": BACKGROUND, "batches": len(off), "samples": int(off["samples"].sum()),
                         "passes": 0, "wait_s": 0.0, "wait_per_batch_s": None, "eval_s": None,
                         "busy_s": float((off["t1_s"] - off["t0_s"]).sum()),
                         "busy_per_batch_s": float((off["t1_s"] - off["t0_s"]).mean()),
                         **{f"{part}_per_sample_s": (float(made[f"{part}_s"].sum()) / made_samples
                                                     if made_samples else None)
                            for part in ("fetch", "prep", "collate")},
                         "core_wait_per_sample_s": None})
            out.append(info)
            continue
        made = mine[mine["made_samples"].notna()]
        made_samples = int(made["made_samples"].sum())
        my_waits = waits[waits["loader"] == n]
        info = dict(loaders.get(n, {"number": n, "name": f"loader{n}"}))
        info.update({
            "role": TRAIN if n in train else EVAL,
            "batches": len(mine),
            "samples": int(mine["samples"].sum()),
            "passes": int((my_waits["kind"] == ITER).sum()),
            "wait_s": float((my_waits["t1_s"] - my_waits["t0_s"]).sum()),
            "wait_per_batch_s": float((mine["t1_s"] - mine["t0_s"]).mean()) if len(mine) else None,
            "eval_s": sum(b - a for a, b, m in eval_spans if m == n) if n not in train else None,
            **{f"{part}_per_sample_s": (float(made[f"{part}_s"].sum()) / made_samples if made_samples else None)
               for part in ("fetch", "prep", "collate")},
            # waiting for a core: known only if every batch had its run-queue readings (else fetch holds it)
            "core_wait_per_sample_s": (float(made["core_wait_s"].sum()) / made_samples
                                       if made_samples and bool(made["core_wait_s"].notna().all()) else None),
        })
        out.append(info)
    return out
