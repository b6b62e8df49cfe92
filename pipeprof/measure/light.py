"""Always-on, light: a long job's window aggregates, every ``window_s`` seconds, in a file bounded in size.

``pipeprof profile --light N`` runs the script under the same hooks (their cost
per step is the profile's); what changes is what is kept. Every ``window_s``
the profiling process reads the events the script wrote since the last window
(``EventTail``: by offset, whole lines only; the disk under the lines read
is given back in place past ``trim_bytes``, so the disk it takes stays
bounded while the hooks keep appending to the same file),
cuts them into steps with the events that give them context (the loaders'
and the script's records, the current pass of each loader, and the events
of the step still running at the last cut, carried over), and writes one
aggregate per window (``window_aggregate``): step-time quantiles, shares of
step time, the prefetch queue, each worker's busy share, GPU use.

``RotatingWindows`` writes them as JSON lines to ``windows.jsonl``; past half
of ``max_bytes`` the file becomes ``windows.1.jsonl`` (the older one
dropped) and a new one starts, so the record is at most ``max_bytes``
(64 MiB: at one window in 10 s, about 900 bytes each, some 400 days).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeprof.measure.file_holes import punch_hole
from pipeprof.run_folder import finite_json
from pipeprof.script.event_file import ROWS
from pipeprof.script.event_steps import script_steps

MAX_BYTES = 64 * 2**20
WINDOWS_FILE, OLDER_WINDOWS_FILE = "windows.jsonl", "windows.1.jsonl"
TRIM_EVENTS_BYTES = 8 * 2**20

# The event index of each numeric kind's time (its first t*_s column), to carry a running step's events.
_TIME_INDEX = {kind: 1 + next(i for i, c in enumerate(columns) if c.endswith("t_s") or c.endswith("t0_s"))
               for kind, (columns, _, _) in ROWS.items()}


class RotatingWindows:
    """Window aggregates as JSON lines, at most ``max_bytes`` on disk (see module docstring)."""

    def __init__(self, folder: Path, max_bytes: int = MAX_BYTES) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.path = self.folder / WINDOWS_FILE
        self._size = self.path.stat().st_size if self.path.exists() else 0

    def write(self, window: Mapping[str, Any]) -> None:
        line = json.dumps(finite_json(dict(window)), sort_keys=True, allow_nan=False) + "\n"
        data = line.encode()
        if self._size + len(data) > self.max_bytes // 2 and self._size:
            os.replace(self.path, self.folder / OLDER_WINDOWS_FILE)
            self._size = 0
        with open(self.path, "ab") as f:
            f.write(data)
        self._size += len(data)


def read_windows(folder: Path) -> tuple[list[dict[str, Any]], int]:
    """The windows kept in ``folder``, oldest first, and how many lines could not be read (a cut-off last one)."""
    out: list[dict[str, Any]] = []
    bad = 0
    for name in (OLDER_WINDOWS_FILE, WINDOWS_FILE):
        path = Path(folder) / name
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(value, dict):
                out.append(value)
            else:
                bad += 1
    return out, bad


class EventTail:
    """The whole lines appended to an event file since the last read; the disk under the lines read given back.

    The script's hooks append through a descriptor they keep open, so the file is never renamed or cut: past
    ``trim_bytes`` read since the last trim, the blocks under the lines read are freed in place
    (``file_holes.punch_hole``), and the file's disk stays bounded while its offsets run on. Where the file
    system cannot, ``untrimmable`` says why (the file then grows with the job: about 200 bytes a step)."""

    def __init__(self, path: Path, trim_bytes: int = TRIM_EVENTS_BYTES) -> None:
        self.path = Path(path)
        self.trim_bytes = trim_bytes
        self._offset = 0
        self._trimmed_to = 0
        self.untrimmable: str | None = None
        self.unreadable = 0

    def read_new(self) -> list[list[Any]]:
        lines, self._offset = self._read(self.path, self._offset)
        if self.untrimmable is None and self._offset - self._trimmed_to >= self.trim_bytes:
            try:
                self._trimmed_to = max(self._trimmed_to, punch_hole(self.path, self._offset))
            except OSError as e:
                self.untrimmable = f"{self.path.name} could not be trimmed as it was read ({e.strerror or e})"
        events = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                self.unreadable += 1
                continue
            if isinstance(event, list) and event and isinstance(event[0], str):
                events.append(event)
            else:
                self.unreadable += 1
        return events

    @property
    def trimmed(self) -> bool:
        """Whether part of the file has been given back (its first lines read as zeros since)."""
        return self._trimmed_to > 0

    @staticmethod
    def _read(path: Path, offset: int) -> tuple[list[str], int]:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return [], offset
        cut = data.rfind(b"\n") + 1
        text = data[:cut].decode("utf-8", errors="replace")
        return [line for line in text.split("\n") if line.strip()], offset + cut


class LightWindows:
    """Cuts each window's new events into steps, with their context (see module docstring)."""

    def __init__(self, t0_s: float, warmup_steps: int) -> None:
        self.t0_s = t0_s
        self.warmup_steps = warmup_steps
        self.context: list[list[Any]] = []  # the loaders', the script's records: every kind that is not numeric
        self._passes: dict[Any, list[Any]] = {}  # each loader's current pass (its last I event)
        self._carry: list[list[Any]] = []  # the events of the step still running at the last cut
        self._first = True
        self.loaders: list[dict[str, Any]] = []  # as the last cut with steps saw them (roles, settings)
        self.step_source: str | None = None
        self._reported_until_s = -math.inf  # the start of the last step reported (absolute clock)

    def steps(self, new: Sequence[list[Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The steps that ended in this window and their batches (``STEP_COLUMNS`` / ``LOADING_COLUMNS``)."""
        for e in new:
            if e[0] not in ROWS:
                self.context.append(e)
        events = [*self.context, *self._passes.values(), *self._carry, *(e for e in new if e[0] in ROWS)]
        for e in new:
            if e[0] == "I":
                self._passes[e[1]] = e
        cut = script_steps(events, self.t0_s, self.warmup_steps if self._first else 0)
        steps, loading = cut.steps, cut.loading
        starts = steps["t_start_s"].to_numpy(dtype=float) + self.t0_s
        # Report the steps not reported yet, but the last (it may still be running). Carry from the start of the
        # last step reported: its end marker is what begins the next one (a step cut without the boundary
        # before it would begin at its pass's start).
        fresh = [i for i in range(len(steps) - 1) if starts[i] > self._reported_until_s]
        if fresh:
            self._first = False
            self.loaders, self.step_source = cut.loaders, cut.step_source
            self._reported_until_s = float(starts[fresh[-1]])
        keep_from = self._reported_until_s
        self._carry = [e for e in events if e[0] in ROWS and e[0] != "I" and _time(e) >= keep_from]
        done = steps.iloc[fresh]
        return done, loading[loading["step"].isin(done["step"])]


def _time(event: list[Any]) -> float:
    try:
        return float(event[_TIME_INDEX[event[0]]])
    except (IndexError, TypeError, ValueError):
        return -math.inf


def window_aggregate(steps: pd.DataFrame, loading: pd.DataFrame, *, t_start_s: float, t_end_s: float,
                     gpu_rows: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One window's aggregate: counted steps only (warm-up left out), times in seconds since the run began."""
    counted = steps[~steps["warmup"].astype(bool)] if not steps.empty else steps
    span_s = t_end_s - t_start_s
    step_s = pd.to_numeric(counted["step_s"], errors="coerce").dropna().to_numpy() if len(counted) else np.array([])
    total = float(step_s.sum())

    def share(column: str) -> float | None:
        return float(pd.to_numeric(counted[column], errors="coerce").sum()) / total if total else None

    ready = pd.to_numeric(counted["ready_batches"], errors="coerce").dropna() if len(counted) else pd.Series(dtype=float)
    busy: dict[str, float] = {}
    made = loading[loading["worker"] >= 0] if not loading.empty else loading
    for worker, rows in made.groupby("worker") if len(made) else ():
        work = rows[["fetch_s", "prep_s", "collate_s"]].apply(pd.to_numeric, errors="coerce").sum().sum()
        busy[str(worker).split(".")[0]] = min(1.0, float(work) / span_s) if span_s > 0 else math.nan
    util = [float(r["gpu_util_pct"]) for r in gpu_rows
            if isinstance(r.get("gpu_util_pct"), (int, float)) and math.isfinite(r["gpu_util_pct"])]
    q = (lambda p: float(np.quantile(step_s, p)) if len(step_s) else None)
    return {
        "t_start_s": t_start_s, "t_end_s": t_end_s, "steps": int(len(counted)),
        "samples": float(pd.to_numeric(counted["samples"], errors="coerce").sum()) if len(counted) else 0.0,
        "step_s": {"p10": q(0.1), "median": q(0.5), "p90": q(0.9), "mean": float(step_s.mean()) if len(step_s) else None},
        "fractions": {"data_wait": share("data_wait_s"), "h2d": share("h2d_s"), "compute": share("compute_s"),
                      "collective_wait": share("collective_wait_s")},
        "ready_batches_mean": float(ready.mean()) if not ready.empty else None,
        "worker_busy_fraction": busy,
        "gpu_util_pct_mean": sum(util) / len(util) if util else None,
    }
