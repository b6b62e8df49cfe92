"""Shares of sampled time, from an attached run's ``stacks`` table (pure; nothing here samples or renders).

Each row of ``stacks.csv`` is one distinct stack of one thread in one window
with its sample count. Processes are told apart by what their stacks show:

* a **worker**: a stack holds the DataLoader's ``_worker_loop`` (its main
  thread's samples count; its queue-feeder threads' do not);
* a **training process**: not a worker, and its main thread (thread id =
  pid) was seen inside a DataLoader's iterator; where none was, every
  process that is not a worker (a job that iterates no DataLoader);
* the rest (a torchrun agent, a ``mp.spawn`` parent waiting on its ranks,
  helpers) is sampled and kept, but in no share.

A share is ``k / n``: samples of a class over the samples of the training
processes' main threads (a worker's busy share: its samples not idle over its
samples). Its interval is Wilson's score interval at 95 % (``wilson``) on
those counts. Consecutive samples of one thread are correlated (a 40 ms wait
sampled at 100 Hz is four samples of one event), so the interval is the
sampling error of independent samples: a lower bound on the true uncertainty
for short attaches; it narrows as the attach gets longer.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pipeprof.attach.classify import (
    COMPUTE,
    IDLE,
    TRAINING_CLASSES,
    WORKER_CLASSES,
    is_worker,
    iterates_loader,
    training_class,
    worker_class,
)
from pipeprof.attach.stacks import Frame, parse_frames

Z_95 = 1.959963984540054
LEVEL = 0.95
INTERVAL_METHOD = ("Wilson score interval at 95% on the sample counts (samples treated as independent: "
                   "consecutive samples of one thread are correlated, so the true interval is wider)")


def wilson(k: int, n: int, z: float = Z_95) -> tuple[float, float] | None:
    """Wilson's score interval for ``k`` successes in ``n`` trials; None when n is 0."""
    if n <= 0:
        return None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Share:
    samples: int
    of: int

    @property
    def fraction(self) -> float:
        return self.samples / self.of if self.of else math.nan

    def to_json(self) -> dict[str, Any]:
        interval = wilson(self.samples, self.of)
        return {"fraction": self.fraction, "samples": self.samples, "of_samples": self.of,
                "interval": list(interval) if interval else None}


@dataclass(frozen=True)
class WorkerShares:
    pid: int
    parent_pid: int | None
    busy: Share
    parts: dict[str, Share]  # fetch / decode / transform / collate over the worker's busy samples
    names: dict[str, int]  # "transform:Resize", "decode:PIL.Image.open" -> samples


@dataclass(frozen=True)
class SampledShares:
    """The aggregate of a set of windows: the training threads' classes and each worker's busy share."""

    t_start_s: float
    t_end_s: float
    training_pids: tuple[int, ...]
    training: dict[str, Share]  # TRAINING_CLASSES -> share of the training threads' samples
    by_process: dict[int, dict[str, Share]]
    workers: tuple[WorkerShares, ...]
    other_pids: tuple[int, ...]  # sampled, in no share (a launcher, helpers)
    windows: int = 0
    names: dict[str, int] = field(default_factory=dict)

    @property
    def training_samples(self) -> int:
        return sum(s.samples for s in self.training.values())

    def fraction(self, klass: str) -> float:
        share = self.training.get(klass)
        return share.fraction if share is not None else math.nan

    def fractions(self) -> dict[str, float]:
        """summary.json's ``fractions`` keys: device waits count with compute, as the hooks' compute_s holds them."""
        f = {k: self.fraction(k) for k in TRAINING_CLASSES}
        return {"data_wait": f["data_wait"], "h2d": f["h2d"], "collective_wait": f["collective"],
                "compute": f[COMPUTE] + f["device_wait"], "other": f["other"]}

    def to_json(self) -> dict[str, Any]:
        return {
            "t_start_s": self.t_start_s, "t_end_s": self.t_end_s, "windows": self.windows,
            "training_pids": list(self.training_pids), "training_samples": self.training_samples,
            "training": {k: s.to_json() for k, s in self.training.items()},
            "by_process": {str(pid): {k: s.to_json() for k, s in shares.items()}
                           for pid, shares in self.by_process.items()},
            "workers": [{"pid": w.pid, "parent_pid": w.parent_pid, "busy": w.busy.to_json(),
                         "parts": {k: s.to_json() for k, s in w.parts.items()}} for w in self.workers],
            "names": dict(sorted(self.names.items(), key=lambda kv: -kv[1])),
            "other_pids": list(self.other_pids), "interval_method": INTERVAL_METHOD,
        }


def sampled_shares(stacks: pd.DataFrame) -> SampledShares:
    """The shares over every row of ``stacks`` (``run_folder.STACK_COLUMNS``)."""
    rows = _rows(stacks)
    worker_pids = {r.pid for r in rows if is_worker(r.frames)}
    non_workers = {r.pid for r in rows} - worker_pids
    training = {r.pid for r in rows if r.pid in non_workers and r.main and iterates_loader(r.frames)} or non_workers
    counts: dict[int, dict[str, int]] = {pid: dict.fromkeys(TRAINING_CLASSES, 0) for pid in sorted(training)}
    per_worker: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(WORKER_CLASSES, 0))
    parents: dict[int, int | None] = {}
    names: dict[str, int] = defaultdict(int)
    for r in rows:
        if r.pid in worker_pids and r.main:  # a worker's own thread (not its queue feeder)
            klass, name = worker_class(r.frames)
            per_worker[r.pid][klass] += r.samples
            parents[r.pid] = r.ppid
            if name:
                names[f"{klass}:{name}"] += r.samples
        elif r.pid in training and r.main:
            counts[r.pid][training_class(r.frames, r.innermost_line)] += r.samples
    total = {k: sum(c[k] for c in counts.values()) for k in TRAINING_CLASSES}
    n = sum(total.values())
    workers = []
    for pid in sorted(per_worker):
        c = per_worker[pid]
        all_samples = sum(c.values())
        busy = all_samples - c[IDLE]
        workers.append(WorkerShares(pid, parents.get(pid), Share(busy, all_samples),
                                    {k: Share(c[k], busy) for k in WORKER_CLASSES if k != IDLE}, {}))
    t = pd.to_numeric(stacks.get("t_start_s", pd.Series(dtype=float)), errors="coerce")
    t_end = pd.to_numeric(stacks.get("t_end_s", pd.Series(dtype=float)), errors="coerce")
    return SampledShares(
        t_start_s=float(t.min()) if len(t) else math.nan, t_end_s=float(t_end.max()) if len(t_end) else math.nan,
        training_pids=tuple(sorted(training)), training={k: Share(v, n) for k, v in total.items()},
        by_process={pid: {k: Share(v, sum(c.values())) for k, v in c.items()} for pid, c in counts.items()},
        workers=tuple(workers), other_pids=tuple(sorted(non_workers - training)),
        windows=int(t.nunique()) if len(t) else 0, names=dict(names))


def window_shares(stacks: pd.DataFrame) -> list[SampledShares]:
    """One aggregate per window, in time order (the live view's frames, a report's timeline)."""
    if stacks.empty:
        return []
    return [sampled_shares(group) for _, group in stacks.groupby("t_start_s", sort=True)]


@dataclass(frozen=True)
class _Row:
    pid: int
    ppid: int | None
    main: bool
    frames: tuple[Frame, ...]
    innermost_line: str
    samples: int


def _rows(stacks: pd.DataFrame) -> list[_Row]:
    out = []
    for rec in stacks.to_dict("records"):
        pid = int(rec["pid"])
        ppid = rec.get("ppid")
        line = rec.get("innermost_line")
        out.append(_Row(pid, int(ppid) if ppid is not None and not pd.isna(ppid) else None,
                        int(rec["thread_id"]) == pid, parse_frames(str(rec.get("stack") or "")),
                        line if isinstance(line, str) else "", int(rec["samples"])))
    return out
