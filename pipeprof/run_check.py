"""Reading a run folder's records as found on disk: each row checked, damage named with its file, line and reason.

A crash, a full disk or a hand edit leaves a run folder damaged: a last row
cut off mid-number, a cell that is not a number, a negative or infinite time,
a row written twice, a table or a rank's folder gone. ``read_table`` sets such
a row aside and names it (``Damage``); the rest is read as it was written.
``check_meta`` does the same for run.json's keys the analysis relies on, and
refuses a format newer than this version reads. Whether what remains can still
be analysed is ``load_run``'s call (``run_folder``); the summary of a damaged
run says so (status ``damaged``, its ``damage`` list), never a healthy look.
"""

from __future__ import annotations

import csv
import io
import json
import marshal
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeprof.errors import UsageError

TEXT_COLUMNS = {"role", "process", "file", "function", "caller_file", "caller_function", "kind", "name",
                "thread_name", "stack", "innermost_line"}
BOOL_VALUES = {"True": True, "False": False, "true": True, "false": False, "1": True, "0": False}
# Numbers that may be below 0 (a worker id of -1, a loss, an instant read on another process's clock) or not
# finite (a diverged loss).
MAY_BE_NEGATIVE = {"worker", "loss", "t_s", "t_start_s", "t_end_s"}
# Numbers that may be -1 and no other negative, per table: a transforms.csv row outside every step (an evaluation
# loader's batch, made after the last training step) has step -1.
MAY_BE_MINUS_ONE = {"transforms": ("step",)}
MAY_BE_INFINITE = {"loss"}
# The tables whose numbers are all measured times and counts (the analysis divides by them): a NaN, an infinity
# or a negative there is impossible. The sampler's and cProfile's tables hold what those tools reported, read
# as numbers only.
STRICT = {"steps", "loading", "transforms", "device_memory"}
# Cells a row cannot do without (an empty cell elsewhere is "not measured", as the writer leaves it).
REQUIRED = {"steps": ("step", "warmup", "t_start_s", "step_s", "samples"), "loading": ("batch", "step")}
# Counts: a cell with a fraction is no count (a batch of 3.5 samples).
WHOLE = {"steps": ("step", "epoch", "samples", "correct"),
         "loading": ("batch", "step", "worker", "pid", "samples", "nbytes"),
         "transforms": ("step", "loader", "worker", "calls")}
NOT_BEFORE_START = {"steps": ("t_start_s",)}  # a step's start is read on the run's own clock, from its start
# A batch's parts that are one call each (its slowest sample's fetch, its collate) lie inside the batch: from its
# first fetch to its collate's end, with the clock's rounding (a microsecond, 1 %). Summed parts may not: a
# dataset's __getitems__ may fetch its samples in threads.
INSIDE_BATCH = ("fetch_max_s", "collate_s")
# What makes a row the same record twice: a second row with these values repeats the first.
ROW_KEYS = {"steps": ("step",), "loading": ("batch",), "samples": ("t_s",), "processes": ("t_s", "pid")}


@dataclass(frozen=True)
class Damage:
    """One damaged thing in a run folder: ``file`` (relative to the folder), its ``line`` (1 = the header;
    None: the whole file or key) and why it was set aside."""

    file: str
    line: int | None
    reason: str

    def text(self) -> str:
        return f"{self.file}{f' line {self.line}' if self.line is not None else ''}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "reason": self.reason}

    @classmethod
    def from_json(cls, data: Any) -> Damage:
        """summary.json's ``damage`` row read back."""
        d = data if isinstance(data, dict) else {}
        line = d.get("line")
        return cls(str(d.get("file") or ""), line if isinstance(line, int) and not isinstance(line, bool) else None,
                   str(d.get("reason") or ""))

    def under(self, prefix: str) -> Damage:
        """The same damage, its file named from a folder above (a rank's, seen from its job)."""
        return Damage(f"{prefix}/{self.file}", self.line, self.reason)


def read_table(path: Path, name: str, columns: Sequence[str]) -> tuple[pd.DataFrame | None, list[Damage]]:
    """``path``'s rows that are whole and sound, as pandas reads them, and the damage of the others.

    None where the file is missing. A file that cannot be read at all (no
    permission, not text, no header) raises UsageError naming it. The checks
    run on pandas' columns (an hour's run has half a million steps); only a
    damaged row is looked at alone, for its reason.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, []
    except IsADirectoryError:
        raise UsageError(f"{path}: not a table (it is a folder)") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read it ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: corrupt table (not UTF-8 text at byte {e.start})") from None
    parts = text.split("\n")  # rows end with "\n" only: a path in functions.csv may hold any other character
    count = len(parts) if parts[-1] else len(parts) - 1  # lines, the last one cut off or not
    if not count or not parts[0].strip():
        raise UsageError(f"{path}: corrupt table (empty: no header line)")
    header = next(csv.reader([parts[0]]))
    bad: dict[int, str] = {}  # line number (1 = the header) -> why its row was set aside
    damage: list[Damage] = []
    if parts[-1] and count > 1:
        bad[count] = "cut off (the file ends inside this row)"
    elif parts[-1]:  # the writer ends every line, the header of an empty table too
        damage.append(Damage(path.name, 1, "cut off (the file ends inside its header)"))
    df = _typed(path, raw, parts, bad, len(header))
    numbers = np.arange(2, count + 1) if len(df) == count - 1 else \
        np.array([n for n in range(2, count + 1) if n not in bad and parts[n - 1].strip()], dtype=int)
    minus_one = MAY_BE_MINUS_ONE.get(name, ())
    wrong = _bad_cells(df, columns, REQUIRED.get(name, ()), strict=name in STRICT, minus_one=minus_one).to_numpy()
    checked = [(i, c) for i, c in enumerate(header) if c in columns or c.startswith("cpu_core")]
    required = {header.index(c) for c in REQUIRED.get(name, ()) if c in header}
    for i in np.flatnonzero(wrong):
        row = next(csv.reader([parts[numbers[i] - 1]]), [])
        reason = _row_problem(row, header, checked, required, strict=name in STRICT, minus_one=minus_one)
        bad[int(numbers[i])] = reason or "a cell pandas cannot read as its column's type"
    for row_index, why in _contradictions(df, name, wrong):
        bad[int(numbers[row_index])] = why
    keys = [k for k in ROW_KEYS.get(name, ()) if k in df.columns] if name in ROW_KEYS else list(df.columns)
    repeated = df.duplicated(subset=keys).to_numpy() & ~wrong if keys and len(df) else np.zeros(0, dtype=bool)
    if repeated.any():
        first: dict[tuple[Any, ...], int] = {}
        for j in np.flatnonzero(repeated | df.duplicated(subset=keys, keep=False).to_numpy()):
            key = tuple(df[keys].iloc[j].tolist())
            if not repeated[j]:
                first.setdefault(key, int(numbers[j]))
            elif key in first:
                what = ", ".join(f"{k} {v}" for k, v in zip(keys, key)) if name in ROW_KEYS else "the same values"
                bad[int(numbers[j])] = f"a second row of {what} (line {first[key]} is the first)"
    damage += [Damage(path.name, n, bad[n]) for n in sorted(bad)]
    if bad:  # read again without them: the columns' types as a sound table gives them
        df = _typed(path, raw, parts, bad, len(header))
    return df, damage


def _contradictions(df: pd.DataFrame, name: str, wrong: np.ndarray) -> list[tuple[int, str]]:
    """Rows (index, why) whose cells each read but cannot all be true: a count with a fraction, a step before
    the run's start, a step lasting past the next step's start, a batch's one-call part longer than the batch."""
    if df.empty:
        return []
    found: dict[int, str] = {}

    def number(column: str) -> np.ndarray:
        return pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)

    for column in (c for c in WHOLE.get(name, ()) if c in df.columns):
        value = number(column)
        for i in np.flatnonzero(np.isfinite(value) & (value != np.round(value)) & ~wrong):
            found.setdefault(int(i), f"{column} {value[i]:g} is not a whole number")
    for column in (c for c in NOT_BEFORE_START.get(name, ()) if c in df.columns):
        value = number(column)
        for i in np.flatnonzero((value < 0) & ~wrong):
            found.setdefault(int(i), f"{column} {value[i]:g} is before the run began")
    if name == "steps" and {"t_start_s", "step_s"} <= set(df.columns):  # a step ends by the next one's start
        start, step_s = number("t_start_s"), number("step_s")
        order = np.argsort(start, kind="stable")
        gap = np.full(len(start), np.inf)
        gap[order[:-1]] = np.diff(start[order])
        for i in np.flatnonzero((step_s > gap * 1.01 + 1e-3) & ~wrong):
            found.setdefault(int(i), f"step_s {step_s[i]:.6g} s is longer than the time to the next step's start "
                                     f"({gap[i]:.6g} s)")
    if name == "loading" and {"t_start_s", "t_end_s"} <= set(df.columns):
        span = number("t_end_s") - number("t_start_s")
        for column in (c for c in INSIDE_BATCH if c in df.columns):
            value = number(column)
            for i in np.flatnonzero((value > span * 1.01 + 1e-6) & ~wrong):
                found.setdefault(int(i), f"{column} {value[i]:.6g} s is longer than its batch "
                                         f"({span[i]:.6g} s from t_start_s to t_end_s)")
    return sorted(found.items())


_TOO_MANY = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def _typed(path: Path, raw: bytes, parts: list[str], bad: dict[int, str], width: int) -> pd.DataFrame:
    """The table as pandas reads it, the lines in ``bad`` left out (blank, so pandas' line numbers stay the
    file's); a row with more cells than the header is added to ``bad`` and the table read again."""
    while True:
        data = "\n".join("" if n in bad else p for n, p in enumerate(parts, start=1)).encode() if bad else raw
        try:
            return pd.read_csv(io.BytesIO(data), keep_default_na=False, na_values=[""])
        except (ValueError, csv.Error) as e:
            message = " ".join(str(e).split())
            match = _TOO_MANY.search(message)
            if match is None or int(match.group(2)) in bad or len(bad) > len(parts):
                raise UsageError(f"{path}: corrupt table ({message})") from None
            bad[int(match.group(2))] = f"{match.group(3)} cells where the header has {width}"


_NAN_WORDS = ["nan", "+nan", "-nan"]


def _bad_cells(df: pd.DataFrame, columns: Sequence[str], required: Sequence[str], *, strict: bool,
               minus_one: Sequence[str] = ()) -> pd.Series:
    """Rows with a cell that is empty where required, not True/False for ``warmup``, not a number, or
    (``strict``) NaN, infinite or negative where that is impossible (-1 in a ``minus_one`` column is not). A
    column pandas read as numbers is checked as such; one it could not (a cell of text in it) is checked cell
    by cell as text."""
    bad = pd.Series(False, index=df.index)
    for column in df.columns:
        if (column not in columns and not str(column).startswith("cpu_core")) or column in TEXT_COLUMNS:
            continue
        series = df[column]
        empty = series.isna().to_numpy()
        if column in required:
            bad |= empty
        if column == "warmup":
            if not pd.api.types.is_bool_dtype(series):
                bad |= ~empty & ~series.astype(str).str.strip().isin(list(BOOL_VALUES)).to_numpy()
            continue
        if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
            value = series.astype(float)
        else:
            cell = series.astype(str).str.strip()
            said_nan = cell.str.lower().isin(_NAN_WORDS).to_numpy()
            value = pd.to_numeric(cell.where(~empty), errors="coerce")
            bad |= ~empty & value.isna().to_numpy() & ~said_nan
            if strict:
                bad |= said_nan
        if strict:
            finite = value.fillna(0.0).to_numpy()
            if column not in MAY_BE_INFINITE:
                bad |= np.isinf(finite)
            if column not in MAY_BE_NEGATIVE:
                bad |= (finite < 0) & ~((finite == -1) & (column in minus_one))
    return bad


def _number(cell: str) -> float | None:
    """``cell`` as pandas reads a number (None: not one; NaN for the words pandas reads as NaN)."""
    if cell.lower() in _NAN_WORDS:
        return math.nan
    value = pd.to_numeric(pd.Series([cell]), errors="coerce").iloc[0]
    return None if pd.isna(value) else float(value)


def _row_problem(row: list[str], header: list[str], checked: list[tuple[int, str]], required: set[int], *,
                 strict: bool, minus_one: Sequence[str] = ()) -> str | None:
    if len(row) != len(header):
        return f"{len(row)} cells where the header has {len(header)}"
    for i, column in checked:
        cell = row[i].strip()
        if cell == "":
            if i in required:
                return f"{column} is empty"
            continue
        if column in TEXT_COLUMNS:
            continue
        if column == "warmup":
            if cell not in BOOL_VALUES:
                return f"warmup {cell!r} is not True or False"
            continue
        value = _number(cell)
        if value is None:
            return f"{column} {cell!r} is not a number"
        if not strict:
            continue
        if math.isnan(value) or (math.isinf(value) and column not in MAY_BE_INFINITE):
            return f"{column} {cell} is not a finite number"
        if value < 0 and column not in MAY_BE_NEGATIVE and not (value == -1 and column in minus_one):
            return f"{column} {cell} is negative"
    return None


# run.json's keys of a fixed shape (None: not recorded); one of another type is set aside, not read as something
# else (``overrides``: a scenario's list of settings, a script's object).
META_TYPES: dict[str, type | tuple[type, ...]] = {
    **dict.fromkeys(("loaders", "notes", "worker_starts"), list),
    **dict.fromkeys(("script", "scenario", "absences", "gpu", "environment", "timing", "job", "rank", "light",
                     "what_ifs", "cache", "rows", "compute_ceiling", "code_profile", "transform_pipelines", "merge",
                     "diagnose", "steady", "track_record"), dict),
    "overrides": (list, dict)}


def check_meta(meta: dict[str, Any], newest_format: int, where: Path) -> list[Damage]:
    """Damage of run.json's keys the analysis reads (their wrong-typed values are removed from ``meta``);
    a format newer than ``newest_format`` raises UsageError (its records may mean something else)."""
    version = meta.get("format_version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise UsageError(f"{where}: format_version {version!r} is not a format pipeprof writes "
                         f"(whole numbers 1 to {newest_format})")
    if isinstance(version, int) and version > newest_format:
        raise UsageError(f"{where}: format_version {version} is newer than this pipeprof reads (1 to "
                         f"{newest_format}): read it with the pipeprof that wrote it, or upgrade")
    damage = []
    for key in ("device", "kind", "status", "error"):
        if key in meta and meta[key] is not None and not isinstance(meta[key], str):
            damage.append(Damage("run.json", None, f"{key} {_shown(meta.pop(key))} is not a string"))
    if "status" in meta and meta["status"] not in (None, "complete", "interrupted", "failed"):
        damage.append(Damage("run.json", None, f"status {_shown(meta.pop('status'))} is not complete, interrupted "
                                               "or failed"))
    for key, kind in META_TYPES.items():
        if meta.get(key) is not None and not isinstance(meta[key], kind):
            shape = {list: "a list", dict: "an object"}.get(kind, "a list or an object")  # type: ignore[call-overload]
            damage.append(Damage("run.json", None, f"{key} {_shown(meta.pop(key))} is not {shape}"))
    job = meta.get("job")
    if isinstance(job, dict) and "world_size" in job:
        size = job["world_size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            damage.append(Damage("run.json", None, f"job.world_size {_shown(size)} is not a whole number >= 1"))
            meta["job"] = {k: v for k, v in job.items() if k != "world_size"}
    return damage


def fewer_rows(meta: dict[str, Any], found: dict[str, int]) -> list[Damage]:
    """Tables with another number of rows than run.json's ``rows`` says were written (``found``: the rows read,
    damaged ones included): a table cut at a row's end, or emptied to its header, reads as whole otherwise."""
    rows = meta.get("rows")
    if not isinstance(rows, dict):
        return []  # a folder from before format 1's row counts
    damage = []
    for name, count in found.items():
        written = rows.get(name)
        if isinstance(written, int) and not isinstance(written, bool) and count != written:
            what = "the rest is missing (cut short)" if count < written else "rows were added since"
            damage.append(Damage(f"{name}.csv", None, f"{count} rows where run.json says {written} were written: "
                                                      f"{what}"))
    return damage


def missing_ranks(meta: dict[str, Any], found: Sequence[int | None]) -> list[Damage]:
    """The ranks run.json's ``job.ranks`` says this folder holds (the ranks recorded here: a part of a job of
    several nodes holds its node's) that have no folder."""
    job = meta.get("job")
    if not isinstance(job, dict) or not isinstance(job.get("ranks"), list):
        return []
    listed = [r for r in job["ranks"] if isinstance(r, int) and not isinstance(r, bool)]
    return [Damage(f"ranks/rank-{r}", None, f"missing (run.json's job lists it among the {len(listed)} ranks "
                                            "recorded here): the job's figures lack this rank")
            for r in sorted(set(listed) - set(found))]


def check_attachment(name: str, content: bytes) -> Damage | None:
    """Damage of a recorded file kept as it was (a cut pstats dump or speedscope JSON), None when it reads."""
    try:
        if name.endswith(".prof"):
            stats = marshal.loads(content)
            if not isinstance(stats, dict):
                raise ValueError("not a pstats dump")
        elif name.endswith(".jsonl"):  # light windows: one JSON object a line
            for line in content.decode("utf-8").splitlines():
                json.loads(line)
        else:
            json.loads(content)
    except (ValueError, EOFError, TypeError, UnicodeDecodeError) as e:
        return Damage(name, None, f"unreadable ({type(e).__name__}: {' '.join(str(e).split())[:80]})")
    return None


def refuse_damaged(folder: Path, damage: Sequence[Damage], what: str) -> None:
    """Raise UsageError (one line) where ``folder`` is damaged: ``what`` needs a sound run folder."""
    if damage:
        more = f" (and {len(damage) - 1} more)" if len(damage) > 1 else ""
        raise UsageError(f"{folder}: damaged run folder: {damage[0].text()}{more}; {what} needs a sound one "
                         f"(pipeprof report {folder} names every damaged row)")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
