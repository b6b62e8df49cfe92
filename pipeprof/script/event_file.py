"""A profiled script's events as columns: one numpy table per kind, read from the event file in chunks.

Pure (numpy and pandas, no torch). The event kinds and their fields are
described in ``pipeprof.script.event_steps``. An hour of a fast script
is millions of events: as Python lists they would take gigabytes and
seconds to build, so the file is read ``CHUNK_BYTES`` at a time, its lines
sorted by kind, and the lines of each numeric kind, whose fields are all
numbers (``null`` for an absent one), parsed as CSV in one call; what stays
in memory is 8 bytes per number (``nan`` for an absent one). Lines of the
other kinds (a loader's settings, the script's start and end: a few) and
any line the fast path cannot take are parsed as JSON one by one. A line
that does not parse (cut short by a kill) or an event with fields of the
wrong shape is counted in ``unreadable``, not raised.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

CHUNK_BYTES = 4 * 2**20
NAN = float("nan")
SPAN_COLUMNS = ["loader", "t0_s", "t1_s"]  # I (iter) and E (end of a pass)
BATCH_COLUMNS = ["loader", "t0_s", "t1_s", "samples",  # N, in the order written; the maker's record (nan if none)
                 "worker", "pid", "made_t0_s", "made_t1_s", "fetch_s", "prep_s", "collate_s", "made_samples",
                 "core_wait_s", "ready"]
# C; device_s nan when timed on the host; overlapped 1 when issued on another stream than the step's marks
COPY_COLUMNS = ["t0_s", "t1_s", "nbytes", "device_s", "overlapped"]
# P: per batch, what its samples spent in one timed transform or decode call (its name: the Q event of index)
PART_COLUMNS = ["loader", "made_t0_s", "index", "calls", "wall_s", "cpu_s"]
NO_RECORD = [None] * 9  # a batch that came without its maker's record (the hooks write it so: fixed width)
_OLD_RECORD = 8  # a record from before core_wait_s (issue 14): its core wait is unknown
# The columns of each numeric kind, the ones that must be numbers, and how an event becomes a row.
ROWS = {
    "I": (SPAN_COLUMNS, 3, lambda e: e[1:4]),
    "E": (SPAN_COLUMNS, 3, lambda e: e[1:4]),
    "N": (BATCH_COLUMNS, 4, lambda e: [*e[1:5], *_record(e[5]), e[6] if len(e) > 6 else None]),
    # H: a batch a loader handed to another thread than the training loop's (its own busy time, never the wait)
    "H": (BATCH_COLUMNS, 4, lambda e: [*e[1:5], *_record(e[5]), e[6] if len(e) > 6 else None]),
    "C": (COPY_COLUMNS, 3, lambda e: [*e[1:5], e[5] if len(e) > 5 else 0]),
    "P": (PART_COLUMNS, 6, lambda e: e[1:7]),
    "O": (["t_s"], 1, lambda e: e[1:2]),
    "M": (["t_s"], 1, lambda e: e[1:2]),
    "B": (["t0_s", "t1_s"], 2, lambda e: e[1:3]),
    "K": (["t0_s", "t1_s", "blocked_s"], 3, lambda e: e[1:4]),
    "G": (["t_s", "device_s"], 2, lambda e: e[1:3]),
    "Y": (["t_s", "allocated_bytes", "reserved_bytes", "peak_allocated_bytes", "peak_reserved_bytes"], 5,
          lambda e: e[1:6]),
}


def _record(record: list | None) -> list:
    """A batch's maker's record at today's width (an older one's core wait unknown)."""
    if not record:
        return NO_RECORD
    return [*record, None] if len(record) == _OLD_RECORD else record


@dataclass
class Events:
    """Every event of a script: tables of the numeric kinds, the few others as read."""

    tables: dict[str, pd.DataFrame]  # kind -> rows (see ROWS), in the order they were written
    loaders: dict[int, dict[str, Any]] = field(default_factory=dict)  # L: number -> settings
    wrapped: list[int] = field(default_factory=list)  # W: loaders given to prof.wrap
    start: dict[str, Any] = field(default_factory=dict)  # S: pid, argv, ...
    end: dict[str, Any] | None = None  # X: {"how", "detail"}
    threads: list[dict[str, Any]] = field(default_factory=list)  # T: {"t_s", "at", "torch_threads"}, in order
    rank: dict[str, Any] | None = None  # R: the process group as the process last saw it {rank, world_size, backend}
    part_names: dict[int, tuple[str, str]] = field(default_factory=dict)  # Q: index -> (kind, name) of P rows
    pipelines: dict[int, Any] = field(default_factory=dict)  # F: loader -> [{"name", "random"}] or {"absent"}
    what_ifs: dict[str, Any] | None = None  # A: the what-if segments after --steps (script.segments)
    device: dict[str, Any] | None = None  # D: the training device and its device events lost
    # U: a spawned worker's start-up marks {"loader", "worker", "pid", "process_start_s", ...} (script.worker_start)
    worker_starts: list[dict[str, Any]] = field(default_factory=list)
    unreadable: int = 0  # lines or events that could not be read

    @classmethod
    def of(cls, events: Iterable[list]) -> Events:
        """Events from event lists as the hooks write them (tests, a block in this process)."""
        reader = EventReader()
        reader.add(list(events))
        return reader.finish()


class EventReader:
    """Collects events chunk by chunk into float arrays per kind."""

    def __init__(self) -> None:
        self._chunks: dict[str, list[np.ndarray]] = {kind: [] for kind in ROWS}
        self.events = Events(tables={})

    def add_text(self, text: str) -> None:
        """Whole lines of an event file."""
        lines: dict[str, list[str]] = {kind: [] for kind in ROWS}
        others: list[str] = []
        for line in text.split("\n"):
            lines.get(line[2:3], others).append(line)  # '["N", ...]': the kind is the third character
        for kind, (columns, _, _) in ROWS.items():
            values = _numbers(kind, lines[kind], len(columns))
            if values is None:  # some line of another shape: one by one, to keep the good ones
                self.add_lines(lines[kind])
            else:
                self._keep(kind, values)
        self.add_lines(line for line in others if line.strip())

    def add_lines(self, lines: Iterable[str]) -> None:
        parsed = []
        for line in lines:
            try:
                parsed.append(json.loads(line))
            except ValueError:  # cut short when the script was killed
                self.events.unreadable += 1
        self.add(parsed)

    def add(self, events: list[Any]) -> None:
        groups: dict[str, list[list]] = {}
        for e in events:
            if isinstance(e, list) and e and isinstance(e[0], str):
                groups.setdefault(e[0], []).append(e)
            else:
                self.events.unreadable += 1
        for kind, group in groups.items():
            if kind in ROWS:
                self._add_numeric(kind, group)
            else:
                self._add_other(kind, group)

    def _add_numeric(self, kind: str, group: list[list]) -> None:
        columns, required, row = ROWS[kind]
        try:
            values = np.array([row(e) for e in group], dtype=float)
            ok = values.ndim == 2 and values.shape[1] == len(columns)
        except (ValueError, TypeError, IndexError):
            ok = False
        if not ok:  # some event of the wrong shape: keep the good ones
            rows = [r for r in (_row_or_none(row, e, len(columns)) for e in group) if r is not None]
            self.events.unreadable += len(group) - len(rows)
            values = np.array(rows, dtype=float).reshape(len(rows), len(columns))
        self._keep(kind, values)

    def _keep(self, kind: str, values: np.ndarray) -> None:
        good = ~np.isnan(values[:, :ROWS[kind][1]]).any(axis=1)  # the required fields are numbers
        self.events.unreadable += int((~good).sum())
        self._chunks[kind].append(values[good])

    def _add_other(self, kind: str, group: list[list]) -> None:
        ev = self.events
        for e in group:
            try:
                if kind == "L":
                    ev.loaders[int(e[1])] = dict(e[2])
                elif kind == "W":
                    ev.wrapped.append(int(e[1]))
                elif kind == "S":
                    ev.start = ev.start or dict(e[2])  # the first one
                elif kind == "X":
                    ev.end = {"how": e[2], "detail": e[3]}  # the last one
                elif kind == "R":
                    ev.rank = dict(e[2])  # the last one
                elif kind == "Q":
                    ev.part_names[int(e[1])] = (str(e[2]), str(e[3]))
                elif kind == "F":
                    ev.pipelines[int(e[1])] = e[2] if isinstance(e[2], (list, dict)) else []
                elif kind == "D":
                    ev.device = dict(e[2])  # the last one
                elif kind == "A":
                    ev.what_ifs = dict(e[2])  # the last one
                elif kind == "U":
                    ev.worker_starts.append({"loader": int(e[1]), "worker": int(e[2]), "pid": int(e[3]),
                                             **{k: None if v is None else float(v) for k, v in dict(e[4]).items()}})
                elif kind == "T":
                    ev.threads.append({"t_s": float(e[1]), "at": str(e[2]["at"]),
                                       "torch_threads": int(e[2]["torch_threads"])})
            except (ValueError, TypeError, IndexError, KeyError, OverflowError):
                ev.unreadable += 1

    def finish(self) -> Events:
        for kind, (columns, _, _) in ROWS.items():
            chunks = self._chunks.pop(kind, [])
            values = np.concatenate(chunks) if chunks else np.empty((0, len(columns)))
            del chunks  # one copy at a time
            self.events.tables[kind] = pd.DataFrame(values, columns=columns, copy=False)
        return self.events


def _row_or_none(row: Any, event: list, width: int) -> list[float] | None:
    try:
        values = np.array(row(event), dtype=float)
    except (ValueError, TypeError, IndexError):
        return None
    return values.tolist() if values.shape == (width,) else None


def _numbers(kind: str, lines: list[str], width: int) -> np.ndarray | None:
    """The numbers of each line ``["K", n, ...]`` of one kind (a nested record flattened, null as nan), or
    None unless every line is whole and holds ``width`` numbers."""
    if not lines:
        return np.empty((0, width))
    text = "\n".join(lines)
    head, nested = f'["{kind}", ', 2 if kind in "NH" else 1  # an N (H) event holds its maker's record: [[...]]
    whole = text.count(head) == len(lines) and text.count("[") == text.count("]") == nested * len(lines)
    text = text.replace(head, "").replace("[", "").replace("]", "")
    if not whole or text.count(",") != (width - 1) * len(lines):
        return None  # a line cut short, of another kind, or with another number of fields
    try:  # pandas' C parser: a few times faster than numpy's
        values = pd.read_csv(io.StringIO(text), header=None, skipinitialspace=True, dtype=float).to_numpy()
    except ValueError:  # something else than numbers
        return None
    return values if values.shape == (len(lines), width) else None


def read_events(path: Path, chunk_bytes: int = CHUNK_BYTES, before: Sequence[list] = ()) -> Events:
    """The events of an event file (none if it is missing), ``chunk_bytes`` of whole lines at a time; ``before``:
    events read ahead of the file's (a long --light job's records whose part of the file was given back)."""
    reader = EventReader()
    if before:
        reader.add(list(before))
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return reader.finish()
    with f:
        rest, freed = "", "zeros"
        while block := f.read(chunk_bytes):
            if freed != "done":  # a long --light job's file begins with the part given back as it was read
                block, freed = _after_freed(block, freed)
            block = rest + block
            cut = block.rfind("\n") + 1
            reader.add_text(block[:cut])
            rest = block[cut:]
        reader.add_text(rest)  # a last line without its newline (cut short?)
    return reader.finish()


def _after_freed(block: str, state: str) -> tuple[str, str]:
    """``block`` past a freed start (``measure.file_holes``: zeros, then the end of a line read before it was
    freed, neither an event) and the state for the next block: "zeros", "line" (that line goes on) or "done"."""
    if state == "zeros":
        if not block.startswith("\0"):
            return block, "done"
        block = block.lstrip("\0")
        if not block:
            return "", "zeros"
    cut = block.find("\n")
    return (block[cut + 1:], "done") if cut >= 0 else ("", "line")
