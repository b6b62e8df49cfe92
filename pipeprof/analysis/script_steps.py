"""Steps of a user's own training script, from the events its instrumentation recorded.

Pure (numpy and pandas, no torch). ``pipeprof.script.hooks`` records, in
the script's process, raw events with host times (``time.perf_counter``):

====  =========================================  ==========================================
kind  fields                                     when
====  =========================================  ==========================================
L     loader, settings                           a DataLoader is iterated the first time
I     loader, t0, t1                             ``iter(loader)``: a pass begins
N     loader, t0, t1, samples, record|None,      ``next()`` returned a batch; ``ready``: batches
      ready|None                                 already waiting in the prefetch queue before it
E     loader, t0, t1                             ``next()`` ended the pass (StopIteration)
C     t0, t1, bytes, device_s|None               a batch tensor was copied (``.to``/``.cuda``)
O     t                                          an optimizer step ended (global post-hook)
M     t                                          ``prof.step()``
W     loader                                     ``prof.wrap(loader)``: the training loader
S     t, {pid, argv, ...}                        the script started
X     t, how, detail                             the script ended (exit code / exception)
====  =========================================  ==========================================

``record`` = ``[worker, pid, t_start, t_end, fetch_s, prep_s, collate_s,
samples]``, how the process that made the batch timed it.

**Which loader trains.** Loaders given to ``prof.wrap``; otherwise each
step end is credited to the loader whose batch came last before it, and
every loader with credit trains; with no step ends at all, the loader with
the most batches. The others are evaluation loaders (validation, test):
their passes, from ``iter()`` to the end of the pass, are taken out of the
steps they fall in and reported per loader, so a validation pass every
epoch does not make one huge training step.

**Where steps begin and end.** ``prof.step()`` marks if there are any, else
optimizer steps (an optimizer step with no training batch since the last
step end extends that step: several optimizers, one step), else training
batches (a step from one ``next()`` to the next). A step ``[begin, end)``
holds:

* ``data_wait_s``: time blocked in ``iter()`` and ``next()`` of the training
  loaders, begun in the step (a pass's start spawns its workers: a real wait);
* ``h2d_s``: batch copies begun in the step outside evaluation passes (on
  CUDA, the copy's device time);
* other: from ``begin`` to the step's first wait — the script's work after
  the previous optimizer step (scheduler, logging, checkpoints);
* ``compute_s``: the rest — forward, backward, the optimizer, and whatever
  else the script does between receiving a batch and the optimizer step.

Times are host times; on CUDA the host can run ahead of the device until
it synchronizes (``loss.item()``), so a step's compute can land in the next
step's wait, as PyTorch's own profiler would show without device events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from pipeprof.run import LOADING_COLUMNS, STEP_COLUMNS

NAN = float("nan")
TRAIN, EVAL = "train", "eval"


@dataclass
class ScriptSteps:
    """Steps and loading records (``run.STEP_COLUMNS`` / ``LOADING_COLUMNS``), the loaders, and how steps were cut."""

    steps: pd.DataFrame
    loading: pd.DataFrame
    loaders: list[dict[str, Any]]
    step_source: str | None  # "prof.step", "optimizer", "loader batches", or None (no training loader)
    start: dict[str, Any] = field(default_factory=dict)  # the S event's fields (pid, argv, ...)
    end: dict[str, Any] | None = None  # the X event: {"how": "exit"|"exception", "detail": ...}
    cuda_copies: int = 0  # batch copies timed on a CUDA device


def read_events(path: Path) -> tuple[list[list], int]:
    """The events of an event file, and how many lines could not be read (a line cut by a kill)."""
    events, bad = [], 0
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [], 0
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(event, list) and event and isinstance(event[0], str):
            events.append(event)
        else:
            bad += 1
    return events, bad


def script_steps(events: Iterable[list], t0_s: float, warmup_steps: int = 0) -> ScriptSteps:
    """Turn raw events into steps (see module docstring); times in the result are ``t - t0_s``."""
    by_kind: dict[str, list[list]] = {}
    for e in events:
        by_kind.setdefault(e[0], []).append(e)
    loaders = {int(e[1]): dict(e[2]) for e in by_kind.get("L", [])}
    nexts = sorted(by_kind.get("N", []), key=lambda e: e[2])
    waits = sorted(by_kind.get("I", []) + by_kind.get("E", []) + nexts, key=lambda e: e[2])
    marks = sorted(float(e[1]) for e in by_kind.get("M", []))
    opts = sorted(float(e[1]) for e in by_kind.get("O", []))
    start = dict(by_kind["S"][0][2]) if by_kind.get("S") else {}
    end = ({"how": by_kind["X"][-1][2], "detail": by_kind["X"][-1][3]} if by_kind.get("X") else None)

    boundaries, source = (marks, "prof.step") if marks else (opts, "optimizer") if opts else ([], "loader batches")
    train = _training_loaders(by_kind.get("W", []), nexts, boundaries)
    train_nexts = [e for e in nexts if e[1] in train]
    train_waits = [e for e in waits if e[1] in train]
    eval_spans = _eval_spans(by_kind, set(loaders) - train)
    if not train_nexts:
        begins, ends, source = np.array([]), np.array([]), None
    elif boundaries:
        begins, ends = _cut_at_ends(train_waits, train_nexts, boundaries)
    else:
        begins, ends = _cut_at_batches(train_waits, train_nexts, by_kind.get("E", []))
    steps = _step_rows(begins, ends, train_waits, train_nexts, by_kind.get("C", []), by_kind.get("I", []),
                       train, eval_spans, t0_s, warmup_steps)
    loading = _loading_rows(train_nexts, begins, ends, t0_s)
    summary = _loader_summaries(loaders, train, nexts, waits, eval_spans)
    cuda_copies = sum(1 for c in by_kind.get("C", []) if c[4] is not None)
    return ScriptSteps(steps, loading, summary, source, start, end, cuda_copies)


def _training_loaders(wrapped: list[list], nexts: list[list], boundaries: list[float]) -> set[int]:
    if wrapped:
        return {int(e[1]) for e in wrapped}
    if not nexts:
        return set()
    if not boundaries:
        counts: dict[int, int] = {}
        for e in nexts:
            counts[e[1]] = counts.get(e[1], 0) + 1
        return {max(counts, key=lambda n: (counts[n], -n))}
    t1 = np.array([e[3] for e in nexts])
    last = np.searchsorted(t1, np.asarray(boundaries), side="right") - 1
    return {int(nexts[i][1]) for i in last if i >= 0}


def _eval_spans(by_kind: dict[str, list[list]], evaluation: set[int]) -> list[tuple[float, float, int]]:
    """(start, end, loader) of each pass of an evaluation loader: ``iter()`` to the pass's end or last batch."""
    spans = []
    for n in evaluation:
        marks = sorted([(e[2], "I", e[3]) for e in by_kind.get("I", []) if e[1] == n]
                       + [(e[2], "N", e[3]) for e in by_kind.get("N", []) if e[1] == n]
                       + [(e[2], "E", e[3]) for e in by_kind.get("E", []) if e[1] == n])
        open_s = last_s = None
        for t0, kind, t1 in marks:
            if kind == "I":
                if open_s is not None:
                    spans.append((open_s, last_s, n))
                open_s, last_s = t0, t1
            else:
                if open_s is None:  # next() on an iterator whose iter() came before profiling
                    open_s = t0
                last_s = t1
                if kind == "E":
                    spans.append((open_s, last_s, n))
                    open_s = None
        if open_s is not None:
            spans.append((open_s, last_s, n))
    return sorted(spans)


def _cut_at_ends(train_waits: list[list], train_nexts: list[list],
                 boundaries: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Steps end at the boundaries; a boundary with no training batch since the previous one extends it."""
    first = train_waits[0][2]
    batch_t1 = np.array([e[3] for e in train_nexts])
    ends: list[float] = []
    for b in boundaries:
        if b < first:
            continue
        since = ends[-1] if ends else first
        got_batch = np.searchsorted(batch_t1, b, side="right") > np.searchsorted(batch_t1, since, side="right")
        if ends and not got_batch:
            ends[-1] = b
        elif got_batch:
            ends.append(b)
    begins = [first] + ends[:-1]
    return np.array(begins[:len(ends)]), np.array(ends)


def _cut_at_batches(train_waits: list[list], train_nexts: list[list],
                    pass_ends: list[list]) -> tuple[np.ndarray, np.ndarray]:
    """No step ends known: a step runs from one training batch's wait to the next one's."""
    starts: list[float] = []
    pending_iter = None
    for e in train_waits:
        if e[0] == "I":
            pending_iter = e[2]
        elif e[0] == "N":
            starts.append(pending_iter if pending_iter is not None else e[2])
            pending_iter = None
    ends = starts[1:]
    last = train_nexts[-1]
    after = [e[2] for e in pass_ends if e[1] == last[1] and e[2] >= last[3]]
    if after:  # the pass's end closes its last step; without one the last step's end is unknown
        ends.append(min(after))
    return np.array(starts[:len(ends)]), np.array(ends)


def _which_step(t: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Index of the step ``[begin, end)`` holding each time, or -1."""
    if not len(begins) or not len(t):
        return np.full(len(t), -1, dtype=int)
    i = np.searchsorted(begins, t, side="right") - 1
    inside = (i >= 0) & (t < ends[np.clip(i, 0, None)])
    return np.where(inside, i, -1)


def _step_rows(begins: np.ndarray, ends: np.ndarray, train_waits: list[list], train_nexts: list[list],
               copies: list[list], iters: list[list], train: set[int], eval_spans: list[tuple[float, float, int]],
               t0_s: float, warmup_steps: int) -> pd.DataFrame:
    n = len(begins)
    if not n:
        return pd.DataFrame(columns=STEP_COLUMNS)

    def sums(t: list[float], values: list[float]) -> np.ndarray:
        i = _which_step(np.asarray(t, dtype=float), begins, ends)
        ok = i >= 0
        return np.bincount(i[ok], weights=np.asarray(values, dtype=float)[ok], minlength=n)

    wait_s = sums([e[2] for e in train_waits], [e[3] - e[2] for e in train_waits])
    samples = sums([e[2] for e in train_nexts], [e[4] for e in train_nexts])
    first_wait = np.full(n, np.inf)
    iw = _which_step(np.array([e[2] for e in train_waits]), begins, ends)
    for i, e in zip(iw, train_waits):
        if i >= 0 and e[2] < first_wait[i]:
            first_wait[i] = e[2]
    first_wait = np.where(np.isfinite(first_wait), first_wait, begins)
    excluded, excluded_before = np.zeros(n), np.zeros(n)
    for a, b, _ in eval_spans:
        for i in range(max(0, np.searchsorted(ends, a, side="right")), min(n, np.searchsorted(begins, b))):
            excluded[i] += max(0.0, min(b, ends[i]) - max(a, begins[i]))
            excluded_before[i] += max(0.0, min(b, first_wait[i]) - max(a, begins[i]))
    outside = [c for c in copies if not _inside(c[1], eval_spans)]
    h2d_s = sums([c[1] for c in outside], [c[4] if c[4] is not None else c[2] - c[1] for c in outside])
    step_s = ends - begins - excluded
    other_s = np.clip(first_wait - begins - excluded_before, 0.0, None)
    compute_s = np.clip(step_s - wait_s - h2d_s - other_s, 0.0, None)
    # A step's epoch is the pass its first batch came from (its wait may begin with the last pass's end).
    first_batch = begins.copy()
    ib = _which_step(np.array([e[2] for e in train_nexts]), begins, ends)
    for i in range(len(ib) - 1, -1, -1):
        if ib[i] >= 0:
            first_batch[ib[i]] = train_nexts[i][2]
    ready = np.full(n, NAN)  # the prefetch queue when the step asked for its first batch, as in a scenario run
    for i in range(len(ib) - 1, -1, -1):
        if ib[i] >= 0 and len(train_nexts[i]) > 6 and train_nexts[i][6] is not None:
            ready[ib[i]] = train_nexts[i][6]
        elif ib[i] >= 0:
            ready[ib[i]] = NAN
    train_iters = sorted(e[2] for e in iters if e[1] in train)
    epoch = np.clip(np.searchsorted(np.array(train_iters), first_batch, side="right") - 1, 0, None) \
        if train_iters else np.zeros(n, dtype=int)
    return pd.DataFrame({
        "step": np.arange(n),
        "epoch": epoch.astype(int),
        "warmup": np.arange(n) < warmup_steps,
        "t_start_s": begins - t0_s,
        "data_wait_s": wait_s,
        "h2d_s": h2d_s,
        "compute_s": compute_s,
        "step_s": step_s,
        "host_wait_s": wait_s,
        "samples": samples.astype(int),
        "loss": NAN,  # the script's loss is its own business
        "correct": NAN,
        "ready_batches": ready,
    }, columns=STEP_COLUMNS)


def _inside(t: float, spans: list[tuple[float, float, int]]) -> bool:
    return any(a <= t <= b for a, b, _ in spans)


def _loading_rows(train_nexts: list[list], begins: np.ndarray, ends: np.ndarray, t0_s: float) -> pd.DataFrame:
    step = _which_step(np.array([e[2] for e in train_nexts], dtype=float), begins, ends)
    rows = []
    for batch, (e, s) in enumerate(zip(train_nexts, step)):
        record = e[5]
        if record is None or s < 0:
            continue
        worker, pid, start, stop, fetch_s, prep_s, collate_s, count = record
        rows.append({"batch": batch, "step": int(s), "worker": worker, "pid": pid, "t_start_s": start - t0_s,
                     "t_end_s": stop - t0_s, "fetch_s": fetch_s, "prep_s": prep_s, "collate_s": collate_s,
                     "samples": count, "nbytes": NAN, "fetch_max_s": NAN})
    return pd.DataFrame(rows, columns=LOADING_COLUMNS)


def _loader_summaries(loaders: dict[int, dict], train: set[int], nexts: list[list], waits: list[list],
                      eval_spans: list[tuple[float, float, int]]) -> list[dict[str, Any]]:
    out = []
    for n in sorted(set(loaders) | {e[1] for e in nexts}):
        mine = [e for e in nexts if e[1] == n]
        records = [e[5] for e in mine if e[5] is not None]
        samples = sum(e[4] for e in mine)
        made = sum(r[7] for r in records)
        info = dict(loaders.get(n, {"number": n, "name": f"loader{n}"}))
        info.update({
            "role": TRAIN if n in train else EVAL,
            "batches": len(mine),
            "samples": samples,
            "passes": sum(1 for e in waits if e[1] == n and e[0] == "I"),
            "wait_s": sum(e[3] - e[2] for e in waits if e[1] == n),
            "wait_per_batch_s": (sum(e[3] - e[2] for e in mine) / len(mine)) if mine else None,
            "eval_s": sum(b - a for a, b, m in eval_spans if m == n) if n not in train else None,
            **{f"{part}_per_sample_s": (sum(r[i] for r in records) / made if made else None)
               for part, i in (("fetch", 4), ("prep", 5), ("collate", 6))},
        })
        out.append(info)
    return out
