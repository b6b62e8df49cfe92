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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof.errors import UsageError

TEXT_COLUMNS = {"role", "process", "file", "function", "caller_file", "caller_function", "kind", "name"}
BOOL_VALUES = {"True": True, "False": False, "true": True, "false": False, "1": True, "0": False}
# Numbers that may be below 0 (a worker id of -1, a loss, an instant read on another process's clock) or not
# finite (a diverged loss).
MAY_BE_NEGATIVE = {"worker", "loss", "t_s", "t_start_s", "t_end_s"}
MAY_BE_INFINITE = {"loss"}
# The tables whose numbers are all measured times and counts (the analysis divides by them): a NaN, an infinity
# or a negative there is impossible. The sampler's and cProfile's tables hold what those tools reported, read
# as numbers only.
STRICT = {"steps", "loading", "transforms", "device_memory"}
# Cells a row cannot do without (an empty cell elsewhere is "not measured", as the writer leaves it).
REQUIRED = {"steps": ("step", "warmup", "t_start_s", "step_s", "samples"), "loading": ("batch", "step")}
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

    def under(self, prefix: str) -> Damage:
        """The same damage, its file named from a folder above (a rank's, seen from its job)."""
        return Damage(f"{prefix}/{self.file}", self.line, self.reason)


def read_table(path: Path, name: str, columns: Sequence[str]) -> tuple[pd.DataFrame | None, list[Damage]]:
    """``path``'s rows that are whole and sound, as pandas reads them, and the damage of the others.

    None where the file is missing. A file that cannot be read at all (no
    permission, not text, no header) raises UsageError naming it.
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
    lines = text.splitlines(keepends=True)
    if not lines or not lines[0].strip():
        raise UsageError(f"{path}: corrupt table (empty: no header line)")
    header = next(csv.reader([lines[0]]))
    damage: list[Damage] = []
    bad: set[int] = set()  # 0-based indexes into lines
    if len(lines) > 1 and not lines[-1].endswith("\n"):
        bad.add(len(lines) - 1)
        damage.append(Damage(path.name, len(lines), "cut off (the file ends inside this row)"))
    elif not lines[0].endswith("\n"):  # the writer ends every line, the header of an empty table too
        damage.append(Damage(path.name, 1, "cut off (the file ends inside its header)"))
    seen: dict[tuple[str, ...], int] = {}
    keys = [header.index(k) for k in ROW_KEYS.get(name, ()) if k in header]
    checked = [(i, c) for i, c in enumerate(header) if c in columns or c.startswith("cpu_core")]
    required = {header.index(c) for c in REQUIRED.get(name, ()) if c in header}
    for index in range(1, len(lines)):
        if index in bad or not lines[index].strip():
            continue
        row = next(csv.reader([lines[index]]), [])
        reason = _row_problem(row, header, checked, required, strict=name in STRICT)
        if reason is None and (keys or name not in ROW_KEYS):
            key = tuple(row[k] for k in keys) if keys else tuple(row)
            if key in seen:
                what = ", ".join(f"{header[k]} {row[k]}" for k in keys) if keys else "the same values"
                reason = f"a second row of {what} (line {seen[key]} is the first)"
            else:
                seen[key] = index + 1
        if reason is not None:
            bad.add(index)
            damage.append(Damage(path.name, index + 1, reason))
    kept = "".join(line for i, line in enumerate(lines) if i not in bad)
    try:
        df = pd.read_csv(io.StringIO(kept))
    except (ValueError, csv.Error) as e:
        raise UsageError(f"{path}: corrupt table ({' '.join(str(e).split())})") from None
    return df, damage


def _row_problem(row: list[str], header: list[str], checked: list[tuple[int, str]], required: set[int], *,
                 strict: bool) -> str | None:
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
        try:
            value = float(cell)
        except ValueError:
            return f"{column} {cell!r} is not a number"
        if not strict:
            continue
        if math.isnan(value) or (math.isinf(value) and column not in MAY_BE_INFINITE):
            return f"{column} {cell} is not a finite number"
        if value < 0 and column not in MAY_BE_NEGATIVE:
            return f"{column} {cell} is negative"
    return None


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
    job = meta.get("job")
    if isinstance(job, dict) and "world_size" in job:
        size = job["world_size"]
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            damage.append(Damage("run.json", None, f"job.world_size {_shown(size)} is not a whole number >= 1"))
            meta["job"] = {k: v for k, v in job.items() if k != "world_size"}
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
